"""Greedy search: the most probable token at every step (quick dev BLEU during training).

A :class:`~gnmt_tf.decoding.sampling.Sampler` of the one decoding loop,
:func:`gnmt_tf.decoding.search.decode`, which bans PAD and BOS, allows only EOS at
the length limit (so every output ends with EOS) and removes finished sentences.
Beam search with the paper's scoring (section 7) is
:class:`gnmt_tf.decoding.beam.BeamSearch`.
"""

from __future__ import annotations

import functools

import tensorflow as tf

from gnmt_tf.decoding.sampling import Sampler
from gnmt_tf.decoding.search import decode
from gnmt_tf.layers.weights import FLOAT_READER, WeightReader


class GreedySearch(Sampler):
    """The most probable allowed token each step, until EOS (the only token allowed at the
    length limit). Output: int32 ids [batch, steps] ending with EOS, PAD after it."""

    def choose(self, log_probs):
        return tf.argmax(log_probs, axis=-1, output_type=tf.int32)


def greedy_decode(model, source_ids, max_length_ratio: float = 2.0,
                  weights: WeightReader = FLOAT_READER) -> tf.Tensor:
    """Greedy translations of source ids [batch, S] with a :class:`~gnmt_tf.models.gnmt.GNMT` and ``weights``.

    Returns int32 ids [batch, max_steps] that end with EOS, padded with PAD after it;
    an output has at most ``ceil(max_length_ratio * source length)`` tokens.
    """
    memory = model.encode(tf.convert_to_tensor(source_ids, tf.int32), weights, training=False)
    step = functools.partial(model.step, weights=weights)
    return decode(step, model.initial_state(memory), memory.mask, GreedySearch(), max_length_ratio)
