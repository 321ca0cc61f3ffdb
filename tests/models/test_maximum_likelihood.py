"""MaximumLikelihood computes a mean-reducing Keras loss inside a distribution strategy without
changing the loss object its caller gave it."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from gnmt_tf.models.gnmt import GNMT
from gnmt_tf.models.losses import SequenceCrossEntropy
from gnmt_tf.models.objectives import Batch, MaximumLikelihood
from helpers import copy_task, tiny_model_config


@pytest.mark.parametrize("make_loss, weighted", [
    (SequenceCrossEntropy, False),  # SUM_OVER_BATCH_SIZE; its call is already a mean (no per-token weights)
    (lambda: SequenceCrossEntropy(label_smoothing=0.1), False),  # its copy must keep the smoothing
    (lambda: keras.losses.SparseCategoricalCrossentropy(from_logits=True), True),  # AUTO, per-token values
])
def test_a_mean_reducing_loss_inside_a_strategy_is_the_callers_loss_left_unchanged(rng, make_loss, weighted):
    config = tiny_model_config()
    model = GNMT(config)
    model.build()
    source, target_in, target_out = copy_task(rng, 5, config.vocab_size)
    sample_weight = None
    if weighted:  # one weight per target token
        sample_weight = tf.constant(rng.uniform(0.5, 2.0, size=target_out.shape), tf.float32)
    batch = Batch(tf.constant(source), tf.constant(target_in), tf.constant(target_out), sample_weight)
    given = make_loss()
    objective = MaximumLikelihood(given)
    assert objective.loss_function is given

    # Independent of the objective: the caller's loss on the model's logits, outside any strategy.
    logits, _ = model.forward(source, target_in)
    expected = given(target_out, logits, sample_weight=sample_weight).numpy()
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    loss, _ = strategy.run(lambda: objective.loss(model, batch, training=False))
    assert float(loss) == float(expected)
    np.testing.assert_array_equal(objective.loss(model, batch)[0].numpy(), expected)  # and outside one

    # The caller's loss is as Keras made it: inside a strategy it still refuses to reduce by a mean.
    with strategy.scope(), pytest.raises(ValueError, match="loss reduction"):
        given(target_out, logits)
