"""Greedy search: the most probable token at every step (quick dev BLEU during training).

A :class:`~gnmt_tf.decoding.sampling.Sampler` of the one decoding loop,
:func:`gnmt_tf.decoding.search.decode`, which bans PAD and BOS, allows only EOS at
the length limit (so every output ends with EOS) and removes finished sentences::

    memory = model.encode(source_ids)
    ids = decode(model.step, model.initial_state(memory), memory.mask, GreedySearch())

:meth:`gnmt_tf.inference.translator.Translator.greedy` translates text this way.
Beam search with the paper's scoring (section 7) is
:class:`gnmt_tf.decoding.beam.BeamSearch`.
"""

from __future__ import annotations

import tensorflow as tf

from gnmt_tf.decoding.sampling import Sampler


class GreedySearch(Sampler):
    """The most probable allowed token each step, until EOS (the only token allowed at the
    length limit). Output: int32 ids [batch, steps] ending with EOS, PAD after it."""

    def choose(self, log_probs):
        return tf.argmax(log_probs, axis=-1, output_type=tf.int32)
