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
    ``call`` already returns the mean, so the SUM_OVER_BATCH_SIZE reduction
    leaves it as it is; under a distribution strategy ``GNMT.train_step`` divides
    it by the replica count, as Keras does with a compiled loss.
    """

    def __init__(
        self, name: str = "sequence_cross_entropy", reduction=keras.losses.Reduction.SUM_OVER_BATCH_SIZE, **kwargs
    ):  # reduction: as get_config records it, so that a saved compiled model loads
        super().__init__(name=name, reduction=reduction, **kwargs)

    def call(self, y_true, y_pred):
        y_true = tf.cast(y_true, tf.int32)
        mask = tf.cast(tf.not_equal(y_true, PAD_ID), y_pred.dtype)
        token_nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y_true, logits=y_pred)
        return tf.reduce_sum(token_nll * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)
