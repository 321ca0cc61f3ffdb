"""The two clips of the paper: cell states and residual sums to [-delta, delta] (eq. 10), logits to [-gamma, gamma] (eq. 13)."""

from __future__ import annotations

import tensorflow as tf


def clip(values: tf.Tensor, delta) -> tf.Tensor:
    """Eq. 10: max(-delta, min(delta, values))."""
    delta = tf.cast(delta, values.dtype)
    return tf.clip_by_value(values, -delta, delta)


def clip_logits(logits: tf.Tensor, gamma: float) -> tf.Tensor:
    """Eq. 13: the softmax logits clipped to [-gamma, gamma]."""
    gamma = tf.cast(gamma, logits.dtype)
    return tf.clip_by_value(logits, -gamma, gamma)
