"""Greedy decoding in the graph: the simplest search over ``GNMT.step``.

Used for quick dev BLEU during training. Beam search with the paper's scoring
(section 7) lives in :mod:`gnmt_tf.decoding.beam`.
"""

from __future__ import annotations

import tensorflow as tf

from gnmt_tf.vocab import BOS_ID, EOS_ID, PAD_ID


def source_lengths(source_ids: tf.Tensor) -> tf.Tensor:
    """Real (non-padding) tokens per sentence [batch]."""
    return tf.reduce_sum(tf.cast(tf.not_equal(source_ids, PAD_ID), tf.int32), axis=1)


def greedy_decode(model, source_ids, max_length_ratio: float = 2.0) -> tf.Tensor:
    """Most probable next token at every step, until EOS or ``max_length_ratio`` x source length.

    Returns int32 ids [batch, max_steps] that end with EOS where the sentence
    finished, padded with PAD after it.
    """
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    batch = tf.shape(source_ids)[0]
    limits = tf.cast(tf.math.ceil(tf.cast(source_lengths(source_ids), tf.float32) * max_length_ratio), tf.int32)
    limits = tf.maximum(limits, 1)
    max_steps = tf.reduce_max(limits)
    state = model.initial_state(model.encode(source_ids, training=False))
    tokens = tf.fill([batch], BOS_ID)
    finished = tf.zeros([batch], tf.bool)
    outputs = tf.TensorArray(tf.int32, size=0, dynamic_size=True)

    def condition(t, tokens, finished, state, outputs):
        return tf.logical_and(t < max_steps, tf.logical_not(tf.reduce_all(finished)))

    def body(t, tokens, finished, state, outputs):
        logits, _, state = model.step(state, tokens)
        next_tokens = tf.argmax(logits, axis=-1, output_type=tf.int32)
        next_tokens = tf.where(finished, PAD_ID, next_tokens)
        # A sentence that reaches its length limit ends with EOS.
        next_tokens = tf.where(tf.logical_and(~finished, t + 1 >= limits), EOS_ID, next_tokens)
        outputs = outputs.write(t, next_tokens)
        finished = tf.logical_or(finished, tf.equal(next_tokens, EOS_ID))
        return t + 1, next_tokens, finished, state, outputs

    _, _, _, _, outputs = tf.while_loop(condition, body, (0, tokens, finished, state, outputs))
    return tf.transpose(outputs.stack())
