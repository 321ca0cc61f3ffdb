"""Text in, text out: wordpieces, batching by length, and a search over ``GNMT.step``.

    translator = Translator(model, tokenizer)
    translator.translate(["Open the file", "Save as..."])          # best translations
    translator.translate_nbest(["Open the file"], n_best=4)         # Translation records

Defined behaviour at the edges:

* an empty (or all-whitespace) sentence translates to "" without running the model;
* a sentence longer than ``max_input_length`` wordpieces is truncated to that
  many (``truncate_long_inputs=True``, the default) or rejected with a
  ValueError naming it (``False``); :attr:`Translator.truncated` counts the
  truncations of the last call;
* every output is at most ``max_length_ratio`` x the source length (section 7).
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from gnmt_tf.decoding.beam import beam_search
from gnmt_tf.config import DecodingConfig
from gnmt_tf.decoding.greedy import greedy_decode
from gnmt_tf.vocab import EOS_ID, PAD_ID


class Translation(NamedTuple):
    """One hypothesis of an n-best list."""

    text: str
    score: float  # eq. 14: log P / lp + cp
    log_prob: float  # log P(Y|X)
    target_pieces: List[str]  # the wordpieces produced, EOS excluded (paper form)
    source_pieces: List[str]  # the source wordpieces the model saw, EOS included
    attention: Optional[np.ndarray]  # [target pieces + EOS, source pieces] when requested


class Translator:
    """Translate raw sentences with a trained :class:`~gnmt_tf.models.gnmt.GNMT` and its tokenizer.

    Args:
        model, tokenizer: a trained model and its wordpiece tokenizer.
        decoding: beam search defaults (width, alpha, beta, beamsize, n-best, length ratio);
            every one can be overridden per call.
        batch_size: sentences decoded together (sorted by length first, as section 7 does).
        max_input_length: wordpieces per source sentence, EOS excluded.
        truncate_long_inputs: truncate longer sentences (True) or raise ValueError (False).
    """

    def __init__(
        self,
        model,
        tokenizer,
        decoding: Optional[DecodingConfig] = None,
        batch_size: int = 32,
        max_input_length: int = 250,
        truncate_long_inputs: bool = True,
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.decoding = decoding or DecodingConfig()
        self.batch_size = batch_size
        self.max_input_length = max_input_length
        self.truncate_long_inputs = truncate_long_inputs
        self.truncated = 0
        self._searches: Dict[Tuple, tf.types.experimental.GenericFunction] = {}
        self._greedy = tf.function(self._greedy_graph, input_signature=[tf.TensorSpec([None, None], tf.int32)])

    # ------------------------------------------------------------------ graph functions
    def _greedy_graph(self, source_ids):
        return greedy_decode(self.model, source_ids, self.decoding.max_length_ratio)

    def search_function(self, beam_width: int, n_best: int, return_attention: bool):
        """The traced beam search for these static settings (alpha, beta, beamsize are inputs)."""
        key = (beam_width, n_best, return_attention)
        if key not in self._searches:
            ratio = self.decoding.max_length_ratio

            def search(source_ids, alpha, beta, beamsize):
                memory = self.model.encode(source_ids, training=False)
                return beam_search(
                    self.model.step, self.model.initial_state(memory), memory.mask, beam_width,
                    alpha=alpha, beta=beta, beamsize=beamsize, max_length_ratio=ratio, n_best=n_best,
                    return_attention=return_attention, eos_rule=self.decoding.eos_rule,
                )

            self._searches[key] = tf.function(
                search,
                input_signature=[
                    tf.TensorSpec([None, None], tf.int32),
                    tf.TensorSpec([], tf.float32),
                    tf.TensorSpec([], tf.float32),
                    tf.TensorSpec([], tf.float32),
                ],
            )
        return self._searches[key]

    # ------------------------------------------------------------------ text
    def encode(self, sentences: Sequence[str]) -> List[List[int]]:
        """Wordpiece ids of each sentence plus EOS, truncated (or rejected) as configured."""
        self.truncated = 0
        if not sentences:
            return []
        ragged = self.tokenizer.tokenize(tf.constant(list(sentences), tf.string)).to_list()
        encoded = []
        for index, ids in enumerate(ragged):
            if len(ids) > self.max_input_length:
                if not self.truncate_long_inputs:
                    raise ValueError(
                        f"sentence {index} has {len(ids)} wordpieces, more than max_input_length "
                        f"({self.max_input_length})"
                    )
                ids = ids[: self.max_input_length]
                self.truncated += 1
            encoded.append(ids + [EOS_ID] if ids else [])
        return encoded

    def _batches(self, encoded: List[List[int]]):
        """Non-empty sentences sorted by length, in padded batches: (indices, ids [n, width])."""
        order = sorted((i for i, ids in enumerate(encoded) if ids), key=lambda i: len(encoded[i]))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            width = max(len(encoded[i]) for i in chunk)
            batch = np.full((len(chunk), width), PAD_ID, np.int32)
            for row, i in enumerate(chunk):
                batch[row, : len(encoded[i])] = encoded[i]
            yield chunk, batch

    def translate(self, sentences: Sequence[str], **overrides) -> List[str]:
        """The best translation of each sentence (beam search with eq. 14), in input order.

        Keyword overrides: beam_width, alpha, beta, beamsize (``float("inf")``: no pruning).
        """
        return [nbest[0].text if nbest else "" for nbest in self.translate_nbest(sentences, n_best=1, **overrides)]

    def translate_nbest(
        self,
        sentences: Sequence[str],
        n_best: Optional[int] = None,
        return_attention: bool = False,
        beam_width: Optional[int] = None,
        alpha: Optional[float] = None,
        beta: Optional[float] = None,
        beamsize: Optional[float] = None,
    ) -> List[List[Translation]]:
        """n-best lists (best first) of :class:`Translation`; an empty sentence gets ``[]``."""
        d = self.decoding
        beam_width = beam_width or d.beam_width
        n_best = n_best or d.n_best
        if n_best > beam_width:
            raise ValueError(f"n_best ({n_best}) must not exceed beam_width ({beam_width})")
        search = self.search_function(beam_width, n_best, return_attention)
        settings = [
            tf.constant(d.alpha if alpha is None else alpha, tf.float32),
            tf.constant(d.beta if beta is None else beta, tf.float32),
            tf.constant(d.beamsize if beamsize is None else beamsize, tf.float32),
        ]
        encoded = self.encode(sentences)
        results: List[List[Translation]] = [[] for _ in sentences]
        for chunk, batch in self._batches(encoded):
            output = search(tf.constant(batch), *settings)
            ids = output.ids.numpy()
            texts = self.tokenizer.detokenize(tf.reshape(output.ids, [-1, tf.shape(output.ids)[-1]])).numpy()
            texts = texts.reshape(ids.shape[:2])
            for row, i in enumerate(chunk):
                source_pieces = self.tokenizer.piece_strings(encoded[i][:-1]) + ["</s>"]
                for rank in range(n_best):
                    length = int(output.lengths[row, rank])
                    if length == 0:  # fewer finished hypotheses than n_best
                        continue
                    attention = None
                    if return_attention:
                        attention = output.attention[row, rank, :length, : len(encoded[i])].numpy()
                    results[i].append(
                        Translation(
                            text=texts[row, rank].decode("utf-8"),
                            score=float(output.scores[row, rank]),
                            log_prob=float(output.log_probs[row, rank]),
                            target_pieces=self.tokenizer.piece_strings(ids[row, rank, : length - 1]),
                            source_pieces=source_pieces,
                            attention=attention,
                        )
                    )
        return results

    def greedy(self, sentences: Sequence[str]) -> List[str]:
        """Greedy translations (fast; used for dev BLEU during training)."""
        encoded = self.encode(sentences)
        results = [""] * len(sentences)
        for chunk, batch in self._batches(encoded):
            texts = self.tokenizer.detokenize(self._greedy(tf.constant(batch))).numpy()
            for row, i in enumerate(chunk):
                results[i] = texts[row].decode("utf-8")
        return results
