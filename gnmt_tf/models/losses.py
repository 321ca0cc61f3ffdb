"""The maximum-likelihood objective (eq. 7) as a Keras loss."""

from __future__ import annotations

import tensorflow as tf
import tf_keras as keras

from gnmt_tf.vocab import PAD_ID


@keras.saving.register_keras_serializable(package="gnmt_tf")
class SequenceCrossEntropy(keras.losses.Loss):
    """Mean negative log-likelihood per real target token (padding, id 0, is ignored).

    Its exponential is the per-token perplexity. ``y_true`` holds target
    output ids [batch, tgt]; ``y_pred`` the logits [batch, tgt, vocab].
    With ``label_smoothing`` epsilon > 0 each token's loss is
    ``(1 - epsilon) * nll + epsilon * mean_v(-log p_v)``: the cross entropy with a target
    distribution that puts epsilon of its mass uniformly on the vocabulary (Szegedy et al. 2016).
    ``call`` already returns the mean, so the SUM_OVER_BATCH_SIZE reduction
    leaves it as it is; under a distribution strategy ``GNMT.train_step`` divides
    it by the replica count, as Keras does with a compiled loss.
    """

    def __init__(
        self, label_smoothing: float = 0.0, name: str = "sequence_cross_entropy",
        reduction=keras.losses.Reduction.SUM_OVER_BATCH_SIZE, **kwargs
    ):  # reduction: as get_config records it, so that a saved compiled model loads
        super().__init__(name=name, reduction=reduction, **kwargs)
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        self.label_smoothing = float(label_smoothing)

    def call(self, y_true, y_pred):
        return mean_token_loss(y_true, y_pred, self.label_smoothing)

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing}


def mean_token_loss(target_ids, logits, label_smoothing: float = 0.0) -> tf.Tensor:
    """The (label-smoothed) negative log-likelihood averaged over the real tokens of ``target_ids``."""
    target_ids = tf.cast(target_ids, tf.int32)
    mask = tf.cast(tf.not_equal(target_ids, PAD_ID), logits.dtype)
    token_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=target_ids, logits=logits)
    if label_smoothing:
        uniform = -tf.reduce_mean(tf.nn.log_softmax(logits), axis=-1)
        token_loss = (1.0 - label_smoothing) * token_loss + label_smoothing * uniform
    return tf.reduce_sum(token_loss * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)
