"""Placeholder masking and restoring inside the TensorFlow graph, as :mod:`gnmt_tf.localization.placeholders` does it.

The exported translator (SavedModel through TF Serving, TFLite) masks each source's placeholders
before tokenizing it and restores them in the translation, with no client code: the same
:func:`~gnmt_tf.localization.placeholders.mask` and :func:`~gnmt_tf.localization.placeholders.restore`,
written with tensor ops. TFLite has no string or regex ops, so everything works on the UTF-8 bytes
of the strings with the tensorflow-text ops that have TFLite kernels and TF Serving links:
``ByteSplitWithOffsets`` (string -> bytes) and ``FastWordpieceDetokenize`` over a vocabulary of the
256 bytes (bytes -> string); substrings and replacements are gathers of bytes in between.

Finding (:meth:`PlaceholderMasking.mask`): the pattern set is compiled once into one byte automaton
(:func:`gnmt_tf.localization.automaton.compile_patterns`). One ``while`` loop runs it from every
byte of every string at once (a gather into its table per step, the loop ending when every run is
dead), which gives, per start, the longest match and its class; a second loop, over the starts that
have a match, takes them left to right without overlap (leftmost-longest). Guards' matches stay
text; the first :data:`MAX_SLOTS` placeholders become slot tokens, with the same spaces mask adds.

Restoring (:meth:`PlaceholderMasking.restore`): every slot token of a translation (4 UTF-8 bytes,
``F3 B0 80 91..A0``) is replaced by its placeholder's bytes and the spaces next to it are removed
as :func:`~gnmt_tf.localization.placeholders.restore` removes them.

Words (:meth:`PlaceholderMasking.restored_words`): where each word of a masked text lies among the words of
the text the user sees (the sentence as given, the restored translation), for word alignments
(:mod:`gnmt_tf.inference.alignment`). A slot word spans its placeholder's words (``<a href="x">`` is two);
a slot glued before is one word with the word before it, and the word after a slot glued after is one with
the slot's, as restore removes the spaces mask added. :data:`VERBATIM`'s words are the user's.

One difference from the Python ``mask``, which refuses a text holding a slot token's character: in
the graph (which cannot raise in TFLite) each such character becomes "⁇" before masking, so it can
neither pose as a slot nor be restored. A NUL byte (U+0000) in a string turns into "⁇" too, and
U+0011 into "⁇⁇": the byte vocabulary cannot hold those two bytes (FastWordpiece's trie); neither is
in any tokenizer's alphabet, so the model sees the same unknown word either way.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from gnmt_tf.data.tokenizer import WORD_MARK, row_ids
from gnmt_tf.decoding.constraints import UNCONSTRAINED, TokenCounts
from gnmt_tf.localization.automaton import Automaton, compile_patterns
from gnmt_tf.localization.placeholders import (DEFAULT_PATTERNS, MAX_SLOTS, SLOT_BASE, SLOT_TOKENS, WHITESPACE,
                                               PatternSet, missing_slot_tokens, pattern_set)

_SPACE = 0x20
_SLOT_PREFIX = tuple(chr(SLOT_BASE + 1).encode("utf-8")[:3])  # F3 B0 80: the first 3 bytes of every slot
_FIRST_SLOT_BYTE = chr(SLOT_BASE + 1).encode("utf-8")[3]  # 0x91: the last byte of slot 1
_UNKNOWN = "\u2047".encode("utf-8")  # "⁇", what the tokenizer makes of an unknown word
# Unicode White_Space (what the tokenizer splits on) as UTF-8 byte sequences.
_WHITESPACE_SEQUENCES = tuple(sorted(c.encode("utf-8") for c in WHITESPACE))
_CONTINUATION = "\U000f0000"  # FastWordpiece's suffix indicator (the tokenizer's own private-use mark)


class MaskedBatch(NamedTuple):
    """Masked sentences and what restoring needs; slot k of sentence i is ``placeholders[i, k - 1]``."""

    text: tf.Tensor  # string [N]: the masked sentences
    placeholders: tf.Tensor  # string [N, MAX_SLOTS]: each slot's text ("" past ``count``)
    glued_before: tf.Tensor  # bool [N, MAX_SLOTS]: mask added a space before the slot token
    glued_after: tf.Tensor  # bool [N, MAX_SLOTS]: ... after it
    count: tf.Tensor  # int32 [N]: the slots used

    @staticmethod
    def spec() -> "MaskedBatch":
        """The TensorSpecs of a batch (a traced restore's input signature)."""
        texts, flags = tf.TensorSpec([None, MAX_SLOTS], tf.string), tf.TensorSpec([None, MAX_SLOTS], tf.bool)
        return MaskedBatch(tf.TensorSpec([None], tf.string), texts, flags, flags, tf.TensorSpec([None], tf.int32))

    def repeated(self, times: int) -> "MaskedBatch":
        """Each sentence's entry ``times`` times in a row (for an n-best list's translations)."""
        return MaskedBatch(*(tf.repeat(part, times, axis=0) for part in self))


class Glossary(NamedTuple):
    """Required translations of terms, per sentence: source term ``sources[i, g]`` is translated as
    ``targets[i, g]`` in sentence i (string [N, G]; an empty source term is no entry)."""

    sources: tf.Tensor
    targets: tf.Tensor

    @staticmethod
    def none(sentences: tf.Tensor) -> "Glossary":
        """No terms for any of ``sentences`` [N]."""
        empty = tf.fill(tf.stack([tf.shape(sentences)[0], 0]), "")
        return Glossary(empty, empty)

    @staticmethod
    def of(entries: Sequence[Tuple[str, str]], sentences: tf.Tensor) -> "Glossary":
        """The same (source term, target term) entries for every one of ``sentences`` [N]."""
        if not entries:
            return Glossary.none(sentences)
        rows = tf.shape(sentences)[0]
        sources, targets = (tf.tile(tf.constant([[entry[side] for entry in entries]]), tf.stack([rows, 1]))
                            for side in (0, 1))
        return Glossary(sources, targets)

    def followed_by(self, other: "Glossary") -> "Glossary":
        """This glossary's entries, then ``other``'s (of two entries for one source term, the first counts)."""
        return Glossary(tf.concat([self.sources, other.sources], axis=1),
                        tf.concat([self.targets, other.targets], axis=1))


class MaskedWords(NamedTuple):
    """The words of masked texts (sources or translations) as the tokenizer splits them, from their wordpiece
    ids: a row per text (:func:`gnmt_tf.inference.alignment.piece_words`)."""

    first_ids: tf.Tensor  # int32 [N, W]: each word's first wordpiece (PAD past ``count``)
    single_piece: tf.Tensor  # bool [N, W]: the word is that one wordpiece
    count: tf.Tensor  # int32 [N]: the words of each text


class RestoredWords(NamedTuple):
    """Where each word of masked texts lies in the texts the user sees (the sentences as given, the restored
    translations): in the restored words ``first`` to ``last``. A slot whose text holds white space spans
    several; two masked words that restore joins lie in one. Empty (``last < first``) past a row's words."""

    first: tf.Tensor  # int32 [N, W]
    last: tf.Tensor  # int32 [N, W]
    count: tf.Tensor  # int32 [N]: the words of each restored text


def restored_spans(spans: tf.Tensor, joins: tf.Tensor) -> RestoredWords:
    """Each masked word's restored words from how many its text holds (``spans``, int32 [N, W]; 0 past a row's
    words) and whether its first one is the previous word's last (``joins``, bool [N, W])."""
    joined = tf.cast(joins, tf.int32)
    first = tf.cumsum(spans, axis=1, exclusive=True) - tf.cumsum(joined, axis=1)
    count = tf.reduce_sum(spans, axis=1) - tf.reduce_sum(joined, axis=1)
    return RestoredWords(first, first + spans - 1, count)


def _real_words(words: MaskedWords) -> tf.Tensor:
    """bool [N, W]: the word is one of its row's (not padding)."""
    return tf.expand_dims(tf.range(tf.shape(words.first_ids)[1]), 0) < tf.expand_dims(words.count, 1)


class Unmasked(NamedTuple):
    """Sentences translated as they are."""

    text: tf.Tensor  # string [N]

    @staticmethod
    def spec() -> "Unmasked":
        return Unmasked(tf.TensorSpec([None], tf.string))

    def repeated(self, times: int) -> "Unmasked":
        return self


class VerbatimText:
    """What a translator does to text without placeholder masking: nothing (the model's config says
    ``localization.placeholders: false``); its searches are unconstrained. It takes no glossary: a term
    is masked as a slot token, which such a model cannot read."""

    takes_glossary = False
    glossary = ()  # no terms of its own

    masked_spec = staticmethod(Unmasked.spec)  # what mask returns, as TensorSpecs

    def mask(self, sentences: tf.Tensor, glossary: Optional[Glossary] = None) -> Unmasked:
        return Unmasked(sentences)

    def restore(self, translations: tf.Tensor, masked: Unmasked) -> tf.Tensor:
        return translations

    def constraint(self, source_ids: tf.Tensor):
        return UNCONSTRAINED

    def restored_words(self, words: MaskedWords, masked: Unmasked) -> RestoredWords:
        """The texts are the user's: each word is itself."""
        return restored_spans(tf.cast(_real_words(words), tf.int32), tf.zeros_like(words.single_piece))


VERBATIM = VerbatimText()


class SlotIds(NamedTuple):
    """The wordpiece ids of the slot tokens' characters, in slot order."""

    words: Tuple[int, ...]  # the word-initial pieces: what a masked text holds (mask makes each a word)
    continuations: Tuple[int, ...]  # the continuation pieces (every alphabet character has one): never written


def slot_ids(tokenizer) -> SlotIds:
    """The slot tokens' wordpiece ids in ``tokenizer``'s vocabulary.

    Raises ValueError for a vocabulary without them: the model was not trained on masked text."""
    missing = missing_slot_tokens(tokenizer.pieces)
    if missing:
        raise ValueError(
            f"the vocabulary has no piece for {len(missing)} of the {MAX_SLOTS} placeholder slot tokens: the model "
            f"was trained without localization.placeholders, so it cannot translate masked text (train it with "
            f"--set localization.placeholders=true)")
    index = {piece: piece_id for piece_id, piece in enumerate(tokenizer.pieces)}
    return SlotIds(tuple(index[WORD_MARK + token] for token in SLOT_TOKENS), tuple(index[t] for t in SLOT_TOKENS))


class PlaceholderMasking(tf.Module):
    """:func:`~gnmt_tf.localization.placeholders.mask` and ``restore`` for batches of strings, in the graph.

    Args:
        slot_token_ids: the slot tokens' wordpiece ids (:func:`slot_ids` of the model's tokenizer).
        patterns: the pattern set (the config's: ``pattern_set(localization.extra_placeholder_patterns)``).
        glossary: the model's own (source term, target term) entries, applied to every sentence after
            those of a request (a model directory's ``glossary.tsv``; an export holds them).

    A search of a masked source is constrained to write each slot token of the source exactly as often
    as the source holds it, as a word of its own (:meth:`constraint`;
    :class:`gnmt_tf.decoding.constraints.TokenCounts`).
    """

    takes_glossary = True  # terms are masked as slots too (gnmt_tf.localization.glossary)

    def __init__(self, slot_token_ids: SlotIds, patterns: PatternSet = DEFAULT_PATTERNS,
                 glossary: Sequence[Tuple[str, str]] = (), name: str = "placeholder_masking"):
        super().__init__(name=name)
        if not len(slot_token_ids.words) == len(slot_token_ids.continuations) == MAX_SLOTS:
            raise ValueError(f"{MAX_SLOTS} slot token ids of each form are needed, got {slot_token_ids}")
        self.slot_token_ids = slot_token_ids
        self.patterns = patterns
        self.glossary = tuple((str(source), str(target)) for source, target in glossary)
        self._automaton = compile_patterns(patterns)
        # Indexed by class + 1: "no match" (-1) is not a placeholder, nor is a guard's match.
        self._is_placeholder = np.array([False] + [c.is_placeholder for c in patterns.classes], dtype=bool)
        self._to_text = _byte_detokenizer()

    masked_spec = staticmethod(MaskedBatch.spec)  # what mask returns, as TensorSpecs

    def mask(self, sentences: tf.Tensor, glossary: Optional[Glossary] = None) -> MaskedBatch:
        """``mask`` of every sentence (string [N]), with the request's ``glossary`` terms (none by default)
        and then the model's."""
        with tf.name_scope("mask_placeholders"):
            own = Glossary.of(self.glossary, sentences)
            glossary = own if glossary is None else glossary.followed_by(own)
            data, lengths = _dense(*_byte_parts(sentences))
            data, lengths = _dense(*_without_slot_characters(data, lengths))
            ends, classes = _longest_matches(data, lengths, self._automaton)
            terms = _term_matches(data, lengths, glossary.sources)
            is_term = terms.ends > ends  # after the placeholders: a term wins only when it is longer
            ends = tf.where(is_term, terms.ends, ends)
            chosen = _leftmost_longest(ends)
            placeholder = chosen & (is_term | tf.gather(tf.constant(self._is_placeholder), classes + 1))
            slots = _slots(placeholder, ends)
            glue = _glue(data, lengths, slots)
            text = self._to_text.text(*_masked_bytes(data, lengths, slots, glue))
            texts = self._to_text.text(*_slot_bytes(data, slots, is_term, terms.index, glossary.targets))
            texts = tf.reshape(texts, [-1, MAX_SLOTS])
            return MaskedBatch(text, texts, glue.before, glue.after, slots.count)

    def constraint(self, source_ids: tf.Tensor) -> TokenCounts:
        """Every slot token of ``source_ids`` [batch, source] as often in the translation as in the source,
        each a word of its own: a slot character's continuation piece (glued to the word before) never."""
        words = tf.constant(self.slot_token_ids.words, tf.int32)
        found = tf.equal(tf.expand_dims(source_ids, 2), tf.reshape(words, [1, 1, -1]))
        counts = tf.reduce_sum(tf.cast(found, tf.int32), axis=1)
        required = tf.concat([counts, tf.zeros_like(counts)], axis=1)
        return TokenCounts(self.slot_token_ids.words + self.slot_token_ids.continuations, required)

    def restore(self, translations: tf.Tensor, masked: MaskedBatch) -> tf.Tensor:
        """``restore`` of every translation (string [N]) with the placeholders of its source (``masked``, [N, ...])."""
        with tf.name_scope("restore_placeholders"):
            data, lengths = _dense(*_byte_parts(translations))
            return self._to_text.text(*_restored_bytes(data, lengths, masked, *_byte_parts(
                tf.reshape(masked.placeholders, [-1]))))

    def restored_words(self, words: MaskedWords, masked: MaskedBatch) -> RestoredWords:
        """Where each word of masked texts lies in the restored ones: masked sources and their sentences as
        given, or translations and their restored texts (``masked``: a row each).

        Restore writes each slot's text in its token's place, so a slot word spans that text's words, and it
        removes the space mask added on each side the source glued: a slot glued before joins the word before
        it, and the word after a slot glued after joins the slot's (when the token is the whole word, as mask
        and the constrained search write it). Not where the slot's text begins or ends with white space.
        """
        with tf.name_scope("restored_words"):
            real = _real_words(words)
            slot = _slot_numbers(words.first_ids, self.slot_token_ids.words)
            known = real & (slot > 0) & (slot <= tf.expand_dims(masked.count, 1))
            index = tf.maximum(slot - 1, 0)

            def of_slot(part):
                return known & tf.gather(part, index, batch_dims=1)

            text = _text_words(masked.placeholders)
            spans = tf.where(known, tf.gather(text.words, index, batch_dims=1), tf.cast(real, tf.int32))
            ends_with_token = known & words.single_piece

            def after(part):  # the previous word's slot's, where the token ends that word
                return _shifted(ends_with_token & of_slot(part), -1)

            space_removed = of_slot(masked.glued_before) | after(masked.glued_after)
            space_kept = of_slot(text.leading_space) | after(text.trailing_space)
            follows_a_word = real & (tf.expand_dims(tf.range(tf.shape(real)[1]), 0) > 0)  # a slot may be first
            return restored_spans(spans, follows_a_word & space_removed & ~space_kept)


TextMasking = Union[VerbatimText, PlaceholderMasking]


def text_masking(localization, tokenizer, glossary: Sequence[Tuple[str, str]] = ()) -> TextMasking:
    """What a translator of a model with this config section (``localization``) does to text:
    :class:`PlaceholderMasking` with the config's patterns and the model's ``glossary``, or :data:`VERBATIM`
    (ValueError with a glossary: its terms need slots)."""
    if not localization.placeholders:
        if glossary:
            raise ValueError("a model's glossary needs a model trained with localization.placeholders: its terms "
                             "are masked as placeholder slots, which this model has not learned")
        return VERBATIM
    return PlaceholderMasking(slot_ids(tokenizer), pattern_set(localization.extra_placeholder_patterns), glossary)


# --------------------------------------------------------------------------------- bytes
class _ByteDetokenizer:
    """Bytes -> strings: FastWordpiece's detokenize over a vocabulary of the 256 bytes, each once as a
    word start (ids 0-255) and once as a continuation (ids 256-511), so a row's pieces join with no space."""

    def __init__(self):
        entries = [_byte_entry(b) for b in range(256)]
        vocab = entries + [_CONTINUATION.encode("utf-8") + entry for entry in entries]
        self._op = tf_text.FastWordpieceTokenizer(
            vocab=vocab, suffix_indicator=_CONTINUATION, token_out_type=tf.int32,
            unknown_token=_UNKNOWN.decode("utf-8"), no_pretokenization=True, support_detokenization=True,
        )

    def text(self, values: tf.Tensor, splits: tf.Tensor) -> tf.Tensor:
        """The strings of ragged bytes given as values (int32) and row splits (int64)."""
        count = tf.size(values, out_type=tf.int64)
        is_first = tf.equal(tf.range(count), tf.gather(splits, row_ids(splits, count)))
        ids = tf.where(is_first, values, values + 256)
        return self._op.detokenize(tf.RaggedTensor.from_row_splits(ids, splits, validate=False))


def _byte_entry(value: int) -> bytes:
    """The vocabulary string of one byte. FastWordpiece's trie cannot hold NUL nor U+0011 (module
    docstring), and entries must differ: those two become "⁇" and "⁇⁇"."""
    return {0x00: _UNKNOWN, 0x11: _UNKNOWN * 2}.get(value, bytes([value]))


_DETOKENIZERS = {}


def _byte_detokenizer() -> _ByteDetokenizer:
    """One per process: its op holds the vocabulary's tables."""
    if "bytes" not in _DETOKENIZERS:
        _DETOKENIZERS["bytes"] = _ByteDetokenizer()
    return _DETOKENIZERS["bytes"]


def _byte_parts(strings: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """The UTF-8 bytes of ``strings`` [N] as ragged values (int32) and row splits (int64)."""
    pieces = tf_text.ByteSplitter().split(strings)
    return tf.cast(pieces.values, tf.int32), tf.cast(pieces.row_splits, tf.int64)


def _dense(values: tf.Tensor, splits: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """Ragged bytes as a matrix [N, W] (0 after each row; W = the longest + 4, room for looking 4 bytes
    ahead) and the lengths [N] (int32). With gathers: TFLite has no kernels for the ragged ops."""
    values = tf.concat([values, tf.zeros([1], tf.int32)], axis=0)
    splits = tf.cast(splits, tf.int32)
    lengths = splits[1:] - splits[:-1]
    width = tf.reduce_max(tf.concat([lengths, tf.zeros([1], tf.int32)], axis=0)) + 4
    position = tf.expand_dims(tf.range(width), 0)
    index = tf.where(position < tf.expand_dims(lengths, 1), tf.expand_dims(splits[:-1], 1) + position,
                     tf.shape(values)[0] - 1)
    return tf.gather(values, index), lengths


def _compact(rows: tf.Tensor, keep: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """The values of ``rows`` [N, ...] where ``keep``, row by row: ragged values and int64 row splits."""
    kept = tf.reshape(tf.reduce_sum(tf.reshape(tf.cast(keep, tf.int64), [tf.shape(keep)[0], -1]), 1), [-1])
    splits = tf.concat([tf.zeros([1], tf.int64), tf.cumsum(kept)], axis=0)
    return tf.boolean_mask(rows, keep), splits


def _in_row(data: tf.Tensor, lengths: tf.Tensor) -> tf.Tensor:
    return tf.expand_dims(tf.range(tf.shape(data)[1]), 0) < tf.expand_dims(lengths, 1)


def _shifted(data: tf.Tensor, offset: int) -> tf.Tensor:
    """``data[:, p + offset]`` at every p, 0 (False) outside the matrix; ``offset`` may be negative."""
    width = tf.shape(data)[1]
    padded = tf.pad(data, [[0, 0], [max(-offset, 0), max(offset, 0)]])
    return tf.slice(padded, [0, max(offset, 0)], tf.stack([-1, width]))


def _sequence_at(data: tf.Tensor, sequence: Sequence[int], offset: int = 0) -> tf.Tensor:
    """bool [N, W]: the bytes from p + offset on are ``sequence``."""
    found = tf.equal(_shifted(data, offset), sequence[0])
    for index, value in enumerate(sequence[1:], start=1):
        found &= tf.equal(_shifted(data, offset + index), value)
    return found


def _slot_character_at(data: tf.Tensor) -> tf.Tensor:
    """bool [N, W]: a slot token's character (U+F0011..U+F0020, 4 bytes) starts at p."""
    last = _shifted(data, 3)
    return _sequence_at(data, _SLOT_PREFIX) & (last >= _FIRST_SLOT_BYTE) & (last < _FIRST_SLOT_BYTE + MAX_SLOTS)


def _without_slot_characters(data: tf.Tensor, lengths: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """The bytes with every slot character replaced by "⁇" (module docstring): its first 3 bytes
    rewritten as those of "⁇", its 4th dropped."""
    is_slot = _slot_character_at(data)
    for index, value in enumerate(_UNKNOWN):
        data = tf.where(_shifted(is_slot, -index), value, data)
    return _compact(data, _in_row(data, lengths) & ~_shifted(is_slot, -3))


def _whitespace_starts(data: tf.Tensor) -> tf.Tensor:
    """bool [N, W]: a White_Space character starts at p."""
    return tf.reduce_any(tf.stack([_sequence_at(data, s) for s in _WHITESPACE_SEQUENCES]), axis=0)


def _whitespace_ends(data: tf.Tensor) -> tf.Tensor:
    """bool [N, W]: a White_Space character ends right before p (valid UTF-8: a lead byte starts each
    sequence, so a match is that character)."""
    return tf.reduce_any(tf.stack([_sequence_at(data, s, -len(s)) for s in _WHITESPACE_SEQUENCES]), axis=0)


def _slot_numbers(ids: tf.Tensor, slot_word_ids: Sequence[int]) -> tf.Tensor:
    """int32 [N, W]: the slot (1-based) whose token's word-initial piece ``ids`` is, 0 for another piece."""
    found = tf.equal(tf.expand_dims(ids, 2), tf.reshape(tf.constant(slot_word_ids, tf.int32), [1, 1, -1]))
    numbers = tf.reshape(tf.range(1, len(slot_word_ids) + 1), [1, 1, -1])
    return tf.reduce_sum(tf.where(found, numbers, 0), axis=2)


class _TextWords(NamedTuple):
    words: tf.Tensor  # int32: the White_Space-separated words of each text
    leading_space: tf.Tensor  # bool: the text starts with White_Space
    trailing_space: tf.Tensor  # bool: ... ends with it


def _text_words(texts: tf.Tensor) -> _TextWords:
    """The words of strings of any shape, as the tokenizer (and ``str.split``) splits them."""
    data, lengths = _dense(*_byte_parts(tf.reshape(texts, [-1])))
    space_starts, space_ends = _whitespace_starts(data), _whitespace_ends(data)
    is_lead_byte = (data < 0x80) | (data >= 0xC0)  # UTF-8: a character starts here
    first = tf.equal(tf.expand_dims(tf.range(tf.shape(data)[1]), 0), 0)
    word_starts = _in_row(data, lengths) & is_lead_byte & ~space_starts & (first | space_ends)
    present = lengths > 0
    words = _TextWords(tf.reduce_sum(tf.cast(word_starts, tf.int32), axis=1), present & space_starts[:, 0],
                       present & tf.gather(space_ends, lengths, batch_dims=1))
    return _TextWords(*(tf.reshape(part, tf.shape(texts)) for part in words))


# --------------------------------------------------------------------------------- finding
def _longest_matches(data: tf.Tensor, lengths: tf.Tensor, automaton: Automaton) -> Tuple[tf.Tensor, tf.Tensor]:
    """Per start p: the end of the longest match there (int32 [N, W], 0 if none) and its class (-1 if
    none): the automaton run from every start at once, until every run is dead."""
    states, columns = automaton.transitions.shape
    dead_column = columns  # past a string's end: the dead state from any state
    table = np.concatenate([automaton.transitions, np.zeros([states, 1], np.int32)], axis=1)
    flat_table = tf.constant(table.reshape(-1).astype(np.int32))
    accepting = tf.constant(automaton.accepting.astype(np.int32))
    position = tf.expand_dims(tf.range(tf.shape(data)[1]), 0)
    byte_columns = tf.where(_in_row(data, lengths),
                            tf.gather(tf.constant(automaton.byte_classes.astype(np.int32)), data), dead_column)
    # The run started at p reads byte p + t at step t: the columns, then as many dead ones.
    read = tf.concat([byte_columns, tf.fill(tf.shape(byte_columns), dead_column)], axis=1)
    limit = tf.shape(data)[1]
    if automaton.longest_match >= 0:
        limit = tf.minimum(limit, automaton.longest_match)

    def step(t, state, ends, classes):
        column = tf.slice(read, tf.stack([0, t]), tf.shape(byte_columns))
        state = tf.gather(flat_table, state * (columns + 1) + column)
        accepted = tf.gather(accepting, state)
        hit = accepted >= 0
        return t + 1, state, tf.where(hit, position + t + 1, ends), tf.where(hit, accepted, classes)

    def running(t, state, ends, classes):
        return (t < limit) & tf.reduce_any(state > 0)

    start = (tf.ones_like(data), tf.zeros_like(data), tf.fill(tf.shape(data), -1))
    _, _, ends, classes = tf.while_loop(running, step, (tf.constant(0),) + start)
    return ends, classes


def _leftmost_longest(ends: tf.Tensor) -> tf.Tensor:
    """bool [N, W]: the matches taken left to right, each only after the previous one's end."""
    position = tf.expand_dims(tf.range(tf.shape(ends)[1]), 0)
    has_match = ends > 0
    starts = tf.cast(tf.reshape(tf.where(tf.reduce_any(has_match, axis=0)), [-1]), tf.int32)  # ascending

    def take(index, free, chosen):
        p = starts[index]
        taken = tf.gather(has_match, p, axis=1) & (p >= free)
        free = tf.where(taken, tf.gather(ends, p, axis=1), free)
        return index + 1, free, chosen | (tf.expand_dims(taken, 1) & tf.equal(position, p))

    _, _, chosen = tf.while_loop(lambda index, free, chosen: index < tf.shape(starts)[0], take,
                                 (tf.constant(0), tf.zeros_like(ends[:, 0]), tf.zeros_like(has_match)))
    return chosen


class _TermMatches(NamedTuple):
    ends: tf.Tensor  # int32 [N, W]: the end of the longest term starting at p, 0 if none
    index: tf.Tensor  # int32 [N, W]: which of the row's terms (the first of equally long ones)


def _term_matches(data: tf.Tensor, lengths: tf.Tensor, terms: tf.Tensor) -> _TermMatches:
    """Where the source terms (string [N, G]) occur in each row as words: no word byte (ASCII letter,
    digit, underscore, or any byte of a non-ASCII character) right before or after."""
    rows, count = tf.shape(terms)[0], tf.shape(terms)[1]
    term_bytes, term_lengths = _dense(*_byte_parts(tf.reshape(terms, [-1])))
    term_bytes = tf.reshape(term_bytes, tf.stack([rows, count, tf.shape(term_bytes)[1]]))  # [N, G, T]
    term_lengths = tf.reshape(term_lengths, tf.stack([rows, count]))
    width = tf.shape(data)[1]
    longest = tf.reduce_max(tf.concat([tf.reshape(term_lengths, [-1]), tf.zeros([1], tf.int32)], axis=0))
    padded = tf.pad(data, tf.stack([[0, 0], [0, longest + 1]]))

    def compare(i, matched):
        window = tf.expand_dims(tf.slice(padded, tf.stack([0, i]), tf.stack([rows, width])), 1)  # [N, 1, W]
        wanted = tf.expand_dims(tf.gather(term_bytes, i, axis=2), 2)  # [N, G, 1]
        beyond = tf.expand_dims(i >= term_lengths, 2)
        return i + 1, matched & (tf.equal(window, wanted) | beyond)

    matched = tf.broadcast_to(tf.expand_dims(term_lengths > 0, 2), tf.stack([rows, count, width]))
    _, matched = tf.while_loop(lambda i, matched: i < longest, compare, (tf.constant(0), matched))
    position = tf.reshape(tf.range(width), [1, 1, -1])
    ends = position + tf.expand_dims(term_lengths, 2)  # [N, G, W]
    after = tf.gather(padded, tf.reshape(ends, tf.stack([rows, -1])), batch_dims=1)
    matched &= ~tf.reshape(_is_word_byte(after), tf.shape(ends))
    matched &= ~tf.expand_dims(_is_word_byte(_shifted(data, -1)), 1)
    matched &= tf.expand_dims(_in_row(data, lengths), 1)
    # A column of zeros first: with no term (G = 0, or none matching) the longest end is 0.
    ends = tf.concat([tf.zeros_like(position + tf.zeros([rows, 1, 1], tf.int32)), tf.where(matched, ends, 0)], 1)
    index = tf.maximum(tf.cast(tf.argmax(ends, axis=1), tf.int32) - 1, 0)
    return _TermMatches(tf.reduce_max(ends, axis=1), index)


def _is_word_byte(data: tf.Tensor) -> tf.Tensor:
    """ASCII letters, digits and underscore, and every byte of a non-ASCII character (0x80 and above)."""
    def within(low: str, high: str):
        return (data >= ord(low)) & (data <= ord(high))

    return within("a", "z") | within("A", "Z") | within("0", "9") | tf.equal(data, ord("_")) | (data >= 0x80)


class _Slots(NamedTuple):
    starts: tf.Tensor  # int32 [N, MAX_SLOTS]: byte offsets (0 for an unused slot)
    ends: tf.Tensor  # int32 [N, MAX_SLOTS]
    used: tf.Tensor  # bool [N, MAX_SLOTS]
    count: tf.Tensor  # int32 [N]


def _slots(placeholder: tf.Tensor, ends: tf.Tensor) -> _Slots:
    """The first MAX_SLOTS placeholders of each row, in order."""
    rank = tf.cumsum(tf.cast(placeholder, tf.int32), axis=1)
    number = tf.reshape(tf.range(1, MAX_SLOTS + 1), [1, 1, MAX_SLOTS])
    is_slot = tf.expand_dims(placeholder, 2) & tf.equal(tf.expand_dims(rank, 2), number)  # [N, W, slots]
    position = tf.reshape(tf.range(tf.shape(ends)[1]), [1, -1, 1])
    starts = tf.reduce_sum(tf.where(is_slot, position, 0), axis=1)
    slot_ends = tf.reduce_sum(tf.where(is_slot, tf.expand_dims(ends, 2), 0), axis=1)
    used = tf.reduce_any(is_slot, axis=1)
    return _Slots(starts, slot_ends, used, tf.reduce_sum(tf.cast(used, tf.int32), axis=1))


class _Glue(NamedTuple):
    before: tf.Tensor  # bool [N, MAX_SLOTS]: Placeholder.glued_before
    after: tf.Tensor  # bool [N, MAX_SLOTS]: Placeholder.glued_after
    space_before: tf.Tensor  # bool [N, MAX_SLOTS]: mask writes a space before the token (not when the
    # previous token's space is there already)


def _glue(data: tf.Tensor, lengths: tf.Tensor, slots: _Slots) -> _Glue:
    """Which sides of each slot touch a character that is not white space, as ``mask`` decides."""
    previous_end = tf.concat([tf.fill([tf.shape(data)[0], 1], -1), slots.ends[:, :-1]], axis=1)
    next_used = tf.concat([slots.used[:, 1:], tf.zeros_like(slots.used[:, :1])], axis=1)
    next_start = tf.where(next_used, tf.concat([slots.starts[:, 1:], slots.starts[:, :1]], axis=1), -1)
    after_previous = tf.equal(slots.starts, previous_end)
    before = slots.used & (slots.starts > 0) & (
        after_previous | ~tf.gather(_whitespace_ends(data), slots.starts, batch_dims=1))
    after = slots.used & (slots.ends < tf.expand_dims(lengths, 1)) & (
        tf.equal(slots.ends, next_start) | ~tf.gather(_whitespace_starts(data), slots.ends, batch_dims=1))
    return _Glue(before, after, before & ~after_previous)


# --------------------------------------------------------------------------------- writing
_SLOT_WIDTH = 6  # what one byte of a source can become: a space, a slot token's 4 bytes, a space


def _slot_of_bytes(data: tf.Tensor, slots: _Slots) -> Tuple[tf.Tensor, tf.Tensor]:
    """Per byte: the slot (1-based) whose placeholder covers it, 0 if none; and whether it is its first."""
    position = tf.reshape(tf.range(tf.shape(data)[1]), [1, -1, 1])
    covers = (tf.expand_dims(slots.starts, 1) <= position) & (position < tf.expand_dims(slots.ends, 1))
    covers &= tf.expand_dims(slots.used, 1)  # [N, W, slots]
    number = tf.reshape(tf.range(1, MAX_SLOTS + 1), [1, 1, MAX_SLOTS])
    slot = tf.reduce_sum(tf.where(covers, number, 0), axis=2)
    first = tf.reduce_any(covers & tf.equal(position, tf.expand_dims(slots.starts, 1)), axis=2)
    return slot, first


def _masked_bytes(data, lengths, slots: _Slots, glue: _Glue) -> Tuple[tf.Tensor, tf.Tensor]:
    """The masked strings' bytes: each byte of a placeholder's first one becomes [space] + slot token +
    [space], the placeholder's other bytes nothing, every other byte itself."""
    slot, first = _slot_of_bytes(data, slots)
    index = tf.maximum(slot - 1, 0)
    space_before = first & tf.gather(glue.space_before, index, batch_dims=1)
    space_after = first & tf.gather(glue.after, index, batch_dims=1)
    last_byte = _FIRST_SLOT_BYTE - 1 + slot
    written = [tf.where(first, _SPACE, data)] + [tf.fill(tf.shape(data), b) for b in _SLOT_PREFIX]
    written += [last_byte, tf.fill(tf.shape(data), _SPACE)]
    kept = [tf.where(first, space_before, _in_row(data, lengths) & tf.equal(slot, 0))]
    kept += [first] * 4 + [space_after]
    return _compact(tf.stack(written, axis=2), tf.stack(kept, axis=2))


def _slot_bytes(data, slots: _Slots, is_term, term_index, term_targets) -> Tuple[tf.Tensor, tf.Tensor]:
    """The bytes of every slot's text, a row per (sentence, slot): the bytes a placeholder covers, or its
    target term's for a term (``is_term``, ``term_index`` [N, W] at the term's first byte)."""
    target_values, target_splits = _byte_parts(tf.reshape(term_targets, [-1]))
    # One split more at the end, so that entry 0 of a row without terms (G = 0) still has a start and an end.
    target_splits = tf.cast(tf.concat([target_splits, target_splits[-1:]], axis=0), tf.int32)
    rows, width = tf.shape(data)[0], tf.shape(data)[1]
    terms_per_row = tf.shape(term_targets)[1]
    term = tf.gather(is_term, slots.starts, batch_dims=1) & slots.used  # [N, slots]
    entry = tf.expand_dims(tf.range(rows), 1) * terms_per_row + tf.gather(term_index, slots.starts, batch_dims=1)
    entry = tf.where(term, entry, 0)
    target_starts = tf.gather(target_splits, entry)
    target_lengths = tf.gather(target_splits, entry + 1) - target_starts
    own_starts = tf.expand_dims(tf.range(rows), 1) * width + slots.starts
    starts = tf.where(term, tf.size(data) + target_starts, own_starts)
    lengths = tf.where(term, target_lengths, slots.ends - slots.starts)
    pool = tf.concat([tf.reshape(data, [-1]), target_values], axis=0)
    return _segments(pool, tf.reshape(starts, [-1]), tf.reshape(tf.where(slots.used, lengths, 0), [-1]))


def _segments(pool: tf.Tensor, starts: tf.Tensor, lengths: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """Ragged rows of ``pool``'s values: row r is ``pool[starts[r]:starts[r] + lengths[r]]`` (int32 [R] each)."""
    splits = tf.concat([tf.zeros([1], tf.int64), tf.cumsum(tf.cast(lengths, tf.int64))], axis=0)
    total = splits[-1]
    row = row_ids(splits, total)
    within = tf.cast(tf.range(total) - tf.gather(splits, row), tf.int32)
    return tf.gather(pool, tf.gather(starts, row) + within), splits


def _restored_bytes(data, lengths, masked: MaskedBatch, placeholder_values, placeholder_splits):
    """The restored strings' bytes: each known slot token's 4 bytes become its placeholder's bytes,
    an unknown one's nothing, and the spaces ``restore`` removes are removed."""
    is_token = _slot_character_at(data)
    slot = tf.where(is_token, _shifted(data, 3) - (_FIRST_SLOT_BYTE - 1), 0)
    index = tf.maximum(slot - 1, 0)
    known = is_token & (slot <= tf.expand_dims(masked.count, 1))
    glued_before = tf.gather(masked.glued_before, index, batch_dims=1)
    glued_after = tf.gather(masked.glued_after, index, batch_dims=1)
    space_before = tf.equal(_shifted(data, -1), _SPACE)
    space_after = tf.equal(_shifted(data, 4), _SPACE)
    # restore: a known token takes the spaces on its glued sides; an unknown one the space after it,
    # else the one before it.
    drop_before = is_token & space_before & ((known & glued_before) | (~known & ~space_after))
    drop_after = is_token & space_after & (glued_after | ~known)
    removed = _shifted(drop_before, 1) | _shifted(drop_after, -4)
    inside = _shifted(is_token, -1) | _shifted(is_token, -2) | _shifted(is_token, -3)
    text_lengths = tf.reshape(tf.cast(placeholder_splits[1:] - placeholder_splits[:-1], tf.int32),
                              [-1, MAX_SLOTS])
    text_starts = tf.reshape(tf.cast(placeholder_splits[:-1], tf.int32), [-1, MAX_SLOTS])
    written = tf.where(known, tf.gather(text_lengths, index, batch_dims=1), 0)
    written = tf.where(is_token, written, tf.cast(_in_row(data, lengths) & ~inside & ~removed, tf.int32))
    # Every output byte: which input byte wrote it (row_ids over the written counts) and how far into
    # what that byte writes; a token's bytes come from the placeholders' bytes, after the data's.
    flat_written = tf.cast(tf.reshape(written, [-1]), tf.int64)
    offsets = tf.concat([tf.zeros([1], tf.int64), tf.cumsum(flat_written)], axis=0)
    total = offsets[-1]
    writer = row_ids(offsets, total)
    within = tf.cast(tf.range(total) - tf.gather(offsets, writer), tf.int32)
    from_text = tf.gather(tf.reshape(tf.gather(text_starts, index, batch_dims=1), [-1]), writer)
    pool_index = tf.where(tf.gather(tf.reshape(is_token, [-1]), writer),
                          tf.size(data) + from_text + within, tf.cast(writer, tf.int32))
    pool = tf.concat([tf.reshape(data, [-1]), placeholder_values], axis=0)
    width = tf.shape(data)[1]
    splits = tf.gather(offsets, tf.range(tf.shape(data)[0] + 1, dtype=tf.int64) * tf.cast(width, tf.int64))
    return tf.gather(pool, pool_index), splits
