"""The pairs a model learns from when its config says ``localization.placeholders: true``: masked.

Such a model reads and writes masked text: the placeholders of a message (``%s``, ``{0}``, ``<b>``, ...)
replaced by reserved slot tokens (:mod:`gnmt_tf.localization.placeholders`). So it learns from pairs
masked the same way: the source by ``mask``, its reference translation by ``mask_pair``, which gives
each placeholder of the target the slot of its counterpart in the source; and its vocabulary is
learned from those masked pairs with the 16 slot tokens reserved (in the alphabet however rare they
are: :meth:`~gnmt_tf.data.tokenizer.WordpieceTokenizer.learn`).

What is masked: the training pairs (:class:`~gnmt_tf.training.batches.TrainingBatches`) and the dev
pairs of the dev loss (teacher forcing reads and predicts text as training does). What is not: the
dev and test splits kept in the model directory, and the dev BLEU, which translates the raw dev
sources through the translator as ``translate`` and ``evaluate`` do.

A pair holding a slot token's character (U+F0011..U+F0020, which no catalog text holds) cannot be
masked: it is left out and counted, not an error. Pure Python: no TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from gnmt_tf.localization.placeholders import MAX_SLOTS, SLOT_TOKENS, mask_pair, missing_slot_tokens, pattern_set

Pair = Tuple[str, str]

FIELD = "localization.placeholders"  # the config field that asks for all this


@dataclass(frozen=True)
class PairsAsTrained:
    """Pairs as a model learns from them, and what masking did to them.

    ``masked``: whether they were masked (the config's ``localization.placeholders``);
    ``with_placeholders``: how many of ``pairs`` hold a slot token (their source has a placeholder);
    ``left_out``: how many given pairs held a slot token's character and are not in ``pairs``."""

    pairs: List[Pair]
    masked: bool = False
    with_placeholders: int = 0
    left_out: int = 0

    def note(self, what: str = "training pairs") -> str:
        """One line on the masking, for the run's log; "" when nothing was masked."""
        if not self.masked:
            return ""
        total = len(self.pairs) + self.left_out
        line = (f"placeholders: {self.with_placeholders:,} of {total:,} {what} hold placeholders, masked as "
                f"slot tokens ({FIELD})")
        if self.left_out:
            line += (f"; {self.left_out:,} holding a character reserved for the slot tokens "
                     f"(U+F0011..U+F0020) are left out")
        return line


def pairs_as_trained(localization, pairs: Sequence[Pair]) -> PairsAsTrained:
    """``pairs`` as a model with this config section (``localization``) learns from them: each masked by
    ``mask_pair`` with the config's pattern set when ``localization.placeholders``, else as they are."""
    if not localization.placeholders:
        return PairsAsTrained(list(pairs))
    patterns = pattern_set(localization.extra_placeholder_patterns)
    masked: List[Pair] = []
    with_placeholders = left_out = 0
    for source, target in pairs:
        try:
            masked_source, masked_target = mask_pair(source, target, patterns)
        except ValueError:  # a slot token's character in the text: it cannot pose as a slot
            left_out += 1
            continue
        masked.append((masked_source.text, masked_target.text))
        with_placeholders += bool(masked_source.placeholders)
    return PairsAsTrained(masked, True, with_placeholders, left_out)


def reserved_characters(localization) -> Tuple[str, ...]:
    """The characters a vocabulary for this config section must hold whatever the corpus holds: the slot
    tokens when ``localization.placeholders``, else none."""
    return SLOT_TOKENS if localization.placeholders else ()


def slot_vocabulary_problem(localization, pieces: Sequence[str]) -> Optional[str]:
    """Why a vocabulary (its paper-form ``pieces``) cannot serve a model with this config section, or None:
    with ``localization.placeholders`` it must have both pieces of every slot token."""
    if not localization.placeholders:
        return None
    missing = len(missing_slot_tokens(pieces))
    if not missing:
        return None
    return (f"the vocabulary has no wordpiece for {missing} of the {MAX_SLOTS} placeholder slot tokens, but "
            f"{FIELD} is true: it was learned from unmasked text (with {FIELD}: false), and a model trained "
            f"on masked pairs needs every slot token")
