"""The two clips of the paper: cell states and residual sums to [-delta, delta] (eq. 10), logits to [-gamma, gamma] (eq. 13)."""

from __future__ import annotations

import tensorflow as tf


def clip(values: tf.Tensor, delta) -> tf.Tensor:
    """Eq. 10: max(-delta, min(delta, values))."""
    delta = tf.cast(delta, values.dtype)
    return tf.clip_by_value(values, -delta, delta)


def clip_logits(logits: tf.Tensor, gamma: float) -> tf.Tensor:
    """Eq. 13: the softmax logits clipped to [-gamma, gamma].

    Its gradient is ``tf.clip_by_value``'s (passed where the logit lies in [-gamma, gamma]) in one
    comparison and one select: derived op by op through minimum and maximum it takes two of each
    over the [tokens, vocabulary] logits, the largest tensor of a training step.
    """
    gamma = tf.cast(gamma, logits.dtype)

    @tf.custom_gradient
    def clipped_logits(values):
        clipped = tf.clip_by_value(values, -gamma, gamma)

        def gradient(upstream):
            return tf.where(tf.equal(clipped, values), upstream, tf.zeros([], upstream.dtype))

        return clipped, gradient

    return clipped_logits(logits)
