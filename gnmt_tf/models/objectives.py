"""Training objectives: what ``GNMT.train_step`` minimises, passed in through ``compile``.

    model.compile(optimizer=..., objective=MixedObjective(...))
    model.compile(optimizer=..., loss=SequenceCrossEntropy())   # maximum likelihood (eq. 7)

An objective supplies one method::

    loss(model, batch, training, weights) -> (loss, logs)

``weights`` is the :class:`~gnmt_tf.layers.weights.WeightReader` the model computes with: the
training step passes the one of the ``weight_transform`` the model was compiled with (e.g.
quantization-aware training); an objective passes it on to every model method it calls.

``loss`` is a scalar: the objective on this replica's share of the :class:`Batch`, a mean
(per sentence or per token), not yet divided among replicas. ``GNMT.train_step`` does
the rest, the same for every objective: the gradient tape, the division by the replica
count (synchronous replicas add their gradients up, so each contributes its share of the
mean), the optimizer's update, and the logs every objective shares (loss, perplexity,
gradient norm, learning rate, delta, token counts). ``logs`` holds the objective's own
scalars, and :data:`REFERENCE_NLL`, from which the step reports perplexity.

* :class:`MaximumLikelihood`: eq. 7 through a Keras loss (:class:`SequenceCrossEntropy`).
* :class:`gnmt_tf.training.reinforce.MixedObjective`: eq. 9, maximum likelihood mixed with
  the expected GLEU reward of eq. 8 (RL refinement, section 5).
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Tuple

import tensorflow as tf
import tf_keras as keras

from gnmt_tf.layers.weights import FLOAT_READER, WeightReader
from gnmt_tf.models.losses import SequenceCrossEntropy, mean_token_loss

REFERENCE_NLL = "reference_nll"
"""The key of an objective's logs holding the per-token negative log-likelihood of the
reference targets (eq. 7 per token); the training step reports its exponential as perplexity."""


class Batch(NamedTuple):
    """One batch as the training and evaluation steps unpack it; int32 ids [batch, time], 0-padded."""

    source_ids: tf.Tensor
    target_input_ids: tf.Tensor  # BOS, then the target but its last token
    target_output_ids: tf.Tensor  # the target, then EOS
    sample_weight: Optional[tf.Tensor] = None

    @property
    def inputs(self) -> Tuple[tf.Tensor, tf.Tensor]:
        """What the model is called on for teacher forcing."""
        return self.source_ids, self.target_input_ids


class MaximumLikelihood:
    """Eq. 7: the log-likelihood of the reference targets under teacher forcing.

    Args:
        loss: a Keras loss of ``(target_output_ids, logits)``; :class:`SequenceCrossEntropy`
            (the mean negative log-likelihood per real target token) by default.
    """

    def __init__(self, loss: Optional[keras.losses.Loss] = None):
        if loss is None:
            loss = SequenceCrossEntropy()
        if not isinstance(loss, keras.losses.Loss):
            raise TypeError(
                f"GNMT's loss must be a keras.losses.Loss of (target_output_ids, logits), such as "
                f"gnmt_tf.SequenceCrossEntropy(); got {loss!r}"
            )
        self.loss_function = loss
        # Keras refuses a loss that reduces by a mean (SUM_OVER_BATCH_SIZE, or AUTO) inside a
        # distribution strategy, unless a training loop divides it by the replica count, as
        # GNMT.train_step does. Such a loss is computed here through a copy of it that does not
        # reduce (public config, reduction NONE), and the same mean is taken of its values: the
        # caller's loss is left as it is.
        self._unreduced = None
        if loss.reduction in (keras.losses.Reduction.AUTO, keras.losses.Reduction.SUM_OVER_BATCH_SIZE):
            config = dict(loss.get_config(), reduction=keras.losses.Reduction.NONE)
            self._unreduced = type(loss).from_config(config)

    def loss(self, model, batch: Batch, training=None,
             weights: WeightReader = FLOAT_READER) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
        logits, _ = model.forward(*batch.inputs, weights=weights, training=training)
        loss = self._reduced_loss(batch.target_output_ids, logits, batch.sample_weight)
        if not getattr(self.loss_function, "label_smoothing", 0.0):
            return loss, {REFERENCE_NLL: loss}
        # A smoothed loss is not the references' likelihood: perplexity is reported from the plain one.
        return loss, {REFERENCE_NLL: mean_token_loss(batch.target_output_ids, logits)}

    def _reduced_loss(self, targets, logits, sample_weight) -> tf.Tensor:
        """``loss_function(targets, logits, sample_weight)``, the mean taken here for a mean-reducing loss."""
        if self._unreduced is None:
            return self.loss_function(targets, logits, sample_weight=sample_weight)
        values = self._unreduced(targets, logits, sample_weight=sample_weight)
        # SUM_OVER_BATCH_SIZE as Keras computes it: the sum over the number of values.
        return tf.math.divide_no_nan(tf.reduce_sum(values), tf.cast(tf.size(values), values.dtype))
