"""Text in, text out: wordpieces, batching by length and a search over ``GNMT.step``.

    translator = Translator(model, tokenizer)
    translator.translate(["Open the file", "Save as..."])
"""

from __future__ import annotations

from typing import List, Sequence

import numpy as np
import tensorflow as tf

from gnmt_tf.decoding import greedy_decode
from gnmt_tf.vocab import EOS_ID, PAD_ID


class Translator:
    """Translate raw sentences with a trained :class:`~gnmt_tf.model.GNMT` and its tokenizer.

    Sentences are tokenized in the graph, sorted by length into batches of
    ``batch_size`` (so little of a batch is padding), decoded, and returned in
    the input order. An empty (or all-whitespace) sentence translates to "".
    """

    def __init__(self, model, tokenizer, batch_size: int = 64, max_length_ratio: float = 2.0):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length_ratio = max_length_ratio
        self._greedy = tf.function(
            self._greedy_graph, input_signature=[tf.TensorSpec([None, None], tf.int32)]
        )

    def _greedy_graph(self, source_ids):
        return greedy_decode(self.model, source_ids, self.max_length_ratio)

    def encode(self, sentences: Sequence[str]) -> List[List[int]]:
        """Wordpiece ids of each sentence, with the EOS the model was trained with."""
        if not sentences:
            return []
        ragged = self.tokenizer.tokenize(tf.constant(list(sentences), tf.string))
        return [ids + [EOS_ID] for ids in ragged.to_list()]

    def translate(self, sentences: Sequence[str]) -> List[str]:
        """Greedy translations of ``sentences``, in order."""
        sentences = list(sentences)
        encoded = self.encode(sentences)
        results = [""] * len(sentences)
        order = sorted((i for i, ids in enumerate(encoded) if len(ids) > 1), key=lambda i: len(encoded[i]))
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            width = max(len(encoded[i]) for i in chunk)
            batch = np.full((len(chunk), width), PAD_ID, np.int32)
            for row, i in enumerate(chunk):
                batch[row, : len(encoded[i])] = encoded[i]
            outputs = self._greedy(tf.constant(batch))
            texts = self.tokenizer.detokenize(outputs).numpy()
            for row, i in enumerate(chunk):
                results[i] = texts[row].decode("utf-8")
        return results
