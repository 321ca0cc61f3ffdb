"""BLEU of a translator on sentence pairs: the one path behind ``evaluate``, the trainer's dev figures and the benchmarks.

``python -m gnmt_tf.evaluate``, the dev BLEU a training run prints and chooses ``best/`` on, and
the quality benchmark all call :func:`evaluate` (and load a model directory's translator with
:func:`load_translator`), so that one model, one split and one search give one figure, and
every figure says which search made it (:attr:`Evaluation.search`).
"""

from __future__ import annotations

import time
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from gnmt_tf.inference.results import Translation, count_truncated, texts
from gnmt_tf.metrics.bleu import BleuResult, corpus_bleu

Pair = Tuple[str, str]


class Evaluation(NamedTuple):
    """What :func:`evaluate` measured."""

    bleu: BleuResult  # sacrebleu's corpus BLEU against the references, whitespace folded
    translations: List[Translation]  # in input order
    seconds: float  # decoding time, after a warm-up batch (graph tracing not counted)
    search: str  # how they were decoded, e.g. "beam 4, alpha 0.6, beta 0.2, beamsize 3" or "greedy"

    @property
    def hypotheses(self) -> List[str]:
        """The translations' texts, in input order (what BLEU scored)."""
        return texts(self.translations)

    @property
    def truncated(self) -> int:
        """Sources longer than the translator's max_input_length, translated truncated."""
        return count_truncated(self.translations)

    def __str__(self) -> str:
        return f"{self.bleu.text} ({self.search})"


def search_description(decoding, overrides: Optional[Dict] = None, greedy: bool = False) -> str:
    """How a translator with the config section ``decoding`` and these per-call ``overrides`` decodes."""
    if greedy:
        return "greedy"
    given = {**{name: getattr(decoding, name) for name in ("beam_width", "alpha", "beta", "beamsize")},
             **(overrides or {})}
    text = f"beam {given['beam_width']}, alpha {given['alpha']:g}, beta {given['beta']:g}, beamsize {given['beamsize']:g}"
    return text + (", shortlist" if given.get("use_shortlist") else "")


def evaluate(translator, pairs: Sequence[Pair], overrides: Optional[Dict] = None, greedy: bool = False,
             warm_up: bool = True) -> Evaluation:
    """Translate the sources of ``pairs`` with ``translator`` and score them against their targets.

    ``overrides``: per-call beam search options (``Translator.translate``'s keywords); ``greedy``:
    greedy search instead. With ``warm_up`` the first batch is translated once before timing.
    """
    overrides = dict(overrides or {})
    sources = [source for source, _ in pairs]
    references = [" ".join(target.split()) for _, target in pairs]

    def decode(sentences):
        return translator.greedy(sentences) if greedy else translator.translate(sentences, **overrides)

    if warm_up and sources:
        decode(sources[: translator.batch_size])
    started = time.monotonic()
    translations = decode(sources)
    seconds = time.monotonic() - started
    return Evaluation(corpus_bleu(texts(translations), references), translations, seconds,
                      search_description(translator.decoding, overrides, greedy))


def load_translator(model_dir: Union[str, Sequence[str]], checkpoint: Union[str, Sequence[str]] = "best",
                    batch_size: int = 32, max_input_length: Optional[int] = None,
                    concurrent_batches: int = 2, use_shortlist: Optional[bool] = None,
                    combination: str = "mean_log_probs"):
    """A model directory's translator as the command lines use it: (translator, config, checkpoint).

    ``checkpoint``: "best", "latest" or "averaged" (:func:`gnmt_tf.model_files.find_checkpoint`), or
    a checkpoint path. Several model directories (with one checkpoint each, or one for all; a
    directory may be given once per checkpoint) translate as one :class:`gnmt_tf.models.Ensemble`
    (section 8.6) combining their steps by the rule ``combination`` names
    (:func:`gnmt_tf.models.ensemble.combination_named`: "mean_log_probs" or "mean_probs");
    the config, tokenizer and shortlist are the first directory's, and ``checkpoint`` in the result
    lists every member's, joined by " + ".
    The first directory's vocabulary shortlist is loaded when it has one; ``use_shortlist=True`` without
    one raises :class:`gnmt_tf.model_files.ModelDirError`.
    """
    from gnmt_tf import model_files
    from gnmt_tf.inference.translator import Translator
    from gnmt_tf.localization.in_graph import text_masking

    model_dirs = [model_dir] if isinstance(model_dir, str) else list(model_dir)
    checkpoints = [checkpoint] * len(model_dirs) if isinstance(checkpoint, str) else list(checkpoint)
    loaded = model_files.load_as_one_model(model_dirs, checkpoints, combination)
    model, tokenizer, config = loaded.model, loaded.tokenizer, loaded.config
    shortlist = model_files.read_shortlist(model_dirs[0], vocab_size=tokenizer.vocab_size)
    if use_shortlist and shortlist is None:
        raise model_files.ModelDirError(
            f"--shortlist: {model_dirs[0]} has no vocabulary shortlist ({model_files.shortlist_path(model_dirs[0])}); "
            f"python -m gnmt_tf.shortlist --model-dir {model_dirs[0]} builds one")
    translator = Translator(  # the checkpoints' weights stay as loaded: precompute what only they decide
        model, tokenizer, config.decoding, batch_size=batch_size, max_input_length=max_input_length,
        shortlist=shortlist, precompute_target_inputs=True, concurrent_batches=concurrent_batches,
        text=text_masking(config.localization, tokenizer, model_files.read_model_glossary(model_dirs[0])),
    )
    return translator, config, loaded.checkpoint
