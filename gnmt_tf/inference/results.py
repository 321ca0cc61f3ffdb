"""What every translator returns: one :class:`Translation` per hypothesis.

The Python API (:class:`gnmt_tf.inference.translator.Translator`: ``translate``,
``translate_nbest``, ``greedy``, ``score``), the TFLite runner
(:class:`export.tflite.TFLiteTranslator`) and the serving client
(:class:`serving.client.ServingClient`) all return this type; each fills the fields its
artifact computes and leaves the others None. No TensorFlow here: the serving client
imports it on machines that only send requests.
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Tuple


class Translation(NamedTuple):
    """One translation of one source sentence, found by a search or given and scored.

    ``truncated`` says the source was longer than the translator's ``max_input_length``
    wordpieces and only its first ``max_input_length`` were translated.
    """

    text: str
    score: Optional[float] = None  # eq. 14: log P(Y|X) / lp(Y) + cp(X; Y); None for greedy search
    log_prob: Optional[float] = None  # log P(Y|X), the EOS included
    length: Optional[int] = None  # target wordpieces + EOS
    target_pieces: Optional[List[str]] = None  # the wordpieces produced (or scored), EOS excluded
    source_pieces: Optional[List[str]] = None  # the source wordpieces the model saw, EOS included
    attention: Optional[Any] = None  # NumPy [target pieces + EOS, source pieces], when requested
    truncated: bool = False
    # (source word, target word) pairs, 0-based indices of the words (split on white space) of the sentence
    # and of ``text``: each target word once, with the source word it attends to most (a hard alignment, as
    # Marian's and OpenNMT's "src-tgt" pairs), when requested; the Python API computes it, the runners of the
    # exports (TFLite, the serving client) leave it None
    alignment: Optional[List[Tuple[int, int]]] = None


def texts(translations: List[Translation]) -> List[str]:
    """The texts of ``translations``, in order."""
    return [translation.text for translation in translations]


def count_truncated(translations) -> int:
    """How many of ``translations`` (a list, or a list of n-best lists) came from truncated sources."""
    return sum(bool(t[0].truncated if isinstance(t, list) and t else getattr(t, "truncated", False))
               for t in translations)
