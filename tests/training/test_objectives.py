"""The one training step (GNMT.train_step) and the objectives passed to it through compile.

The references are independent of the step: the maximum-likelihood loss re-derived from the
logits (log-softmax, the picked reference tokens, the mean over real tokens), and the RL
objective's own loss differentiated alone. With plain SGD at rate 1 the update the step
applies is minus the gradient, so comparing weights before and after compares gradients.
"""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from gnmt_tf.config import RLConfig
from gnmt_tf.models.gnmt import GNMT
from gnmt_tf.models.losses import SequenceCrossEntropy
from gnmt_tf.models.objectives import Batch, MaximumLikelihood
from gnmt_tf.training.reinforce import MixedObjective
from gnmt_tf.vocab import PAD_ID
from helpers import SHALLOW_MODEL, copy_task, tiny_model_config


def _model(**overrides):
    # The tiny config at the least depth (helpers.SHALLOW): the subject is the step, not the layers.
    model = GNMT(tiny_model_config(dropout=0.0, **SHALLOW_MODEL, **overrides))
    model.build()
    return model


def _weights(model):
    return [v.numpy().copy() for v in model.trainable_variables]


def _dense(gradients):
    return [tf.convert_to_tensor(g).numpy() for g in gradients]


def _hand_ml_loss(logits, target_out):
    """Eq. 7 per real target token, from the logits with NumPy."""
    logits = np.asarray(logits, np.float64)
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, target_out[..., None], -1)[..., 0]
    real = target_out != PAD_ID
    return -(picked * real).sum() / real.sum()


def test_the_step_minimises_the_hand_computed_maximum_likelihood_loss(rng):
    model = _model()
    source, target_in, target_out = copy_task(rng, 6, model.model_config.vocab_size)
    with tf.GradientTape() as tape:  # the same loss written with TensorFlow ops, for its gradient
        logits = model((source, target_in), training=True)
        picked = tf.gather(tf.nn.log_softmax(logits), target_out, batch_dims=2)
        real = tf.cast(target_out != PAD_ID, tf.float32)
        reference_loss = -tf.reduce_sum(picked * real) / tf.reduce_sum(real)
    gradients = _dense(tape.gradient(reference_loss, model.trainable_variables))
    expected_loss = _hand_ml_loss(logits.numpy(), target_out)
    np.testing.assert_allclose(reference_loss.numpy(), expected_loss, rtol=1e-5)

    before = _weights(model)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=1.0), loss=SequenceCrossEntropy())
    assert isinstance(model.objective, MaximumLikelihood)  # a compiled loss means eq. 7
    logs = model.train_step(((source, target_in), target_out))
    for old, new, gradient in zip(before, _weights(model), gradients):
        np.testing.assert_allclose(old - new, gradient, rtol=1e-4, atol=1e-7)
    assert sum(float(np.abs(g).sum()) for g in gradients) > 0
    np.testing.assert_allclose(float(logs["loss"]), expected_loss, rtol=1e-5)
    np.testing.assert_allclose(float(logs["perplexity"]), np.exp(expected_loss), rtol=1e-5)
    np.testing.assert_allclose(float(logs["gradient_norm"]), np.sqrt(sum((g ** 2).sum() for g in gradients)),
                               rtol=1e-5)
    assert float(logs["learning_rate"]) == 1.0 and float(logs["delta"]) == float(model.clip_delta.numpy())
    assert float(logs["target_tokens"]) == (target_out != PAD_ID).sum()
    assert float(logs["source_tokens"]) == (source != PAD_ID).sum()


def test_the_step_compiled_with_xla_trains_as_the_step_without(rng):
    # training.jit_compile: the same updates, fused by XLA (sums taken in another order).
    source, target_in, target_out = copy_task(rng, 8, tiny_model_config().vocab_size)
    data = tf.data.Dataset.from_tensors(((source, target_in), target_out)).repeat(3)
    plain, compiled = _model(), _model()
    compiled.set_weights(plain.get_weights())
    start = _weights(plain)
    for model, jit_compile in ((plain, False), (compiled, True)):
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=1.0), loss=SequenceCrossEntropy(),
                      jit_compile=jit_compile)
        model.fit(data, verbose=0)
    assert compiled.jit_compile and not plain.jit_compile
    for a, b in zip(_weights(plain), _weights(compiled)):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
    assert max(float(np.abs(a - b).max()) for a, b in zip(start, _weights(plain))) > 1e-2  # three steps moved them


def test_the_step_minimises_the_rl_objective_alone(rng):
    """The step applies exactly the gradient of MixedObjective.loss, with the same samples."""
    model = _model()
    source, target_in, target_out = copy_task(rng, 4, model.model_config.vocab_size)

    def even_tokens(outputs, references):  # a reward that varies between samples: RL has a gradient
        real = tf.cast(tf.not_equal(outputs, PAD_ID), tf.float32)
        even = tf.cast(tf.equal(outputs % 2, 0), tf.float32) * real
        return tf.reduce_sum(even, 1) / tf.maximum(tf.reduce_sum(real, 1), 1.0)

    objective = MixedObjective(RLConfig(samples=4, ml_weight=0.0), even_tokens)  # O_RL alone
    tf.random.set_seed(5)
    with tf.GradientTape() as tape:
        loss, objective_logs = objective.loss(model, Batch(source, target_in, target_out), training=True)
    gradients = _dense(tape.gradient(loss, model.trainable_variables))
    assert np.sqrt(sum((g ** 2).sum() for g in gradients)) > 1e-4  # the estimator of eq. 8 is not zero here

    before = _weights(model)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=1.0), objective=objective)
    tf.random.set_seed(5)  # the same samples
    logs = model.train_step(((source, target_in), target_out))
    for old, new, gradient in zip(before, _weights(model), gradients):
        np.testing.assert_allclose(old - new, gradient, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(float(logs["loss"]), float(loss), rtol=1e-6)
    for name in ("reward", "ml_loss", "sample_length"):
        np.testing.assert_allclose(float(logs[name]), float(objective_logs[name]), rtol=1e-6)
    np.testing.assert_allclose(float(logs["perplexity"]), np.exp(float(objective_logs["reference_nll"])), rtol=1e-5)
    assert "reference_nll" not in logs  # reported as perplexity
    np.testing.assert_allclose(float(logs["gradient_norm"]), np.sqrt(sum((g ** 2).sum() for g in gradients)),
                               rtol=1e-5)


def test_loss_and_perplexity_are_means_over_the_epoch_and_evaluate_reports_the_compiled_loss(rng):
    model = _model()
    vocab = model.model_config.vocab_size
    first, second = copy_task(rng, 8, vocab), copy_task(rng, 4, vocab, max_len=3)
    losses = [_hand_ml_loss(model((s, ti)).numpy(), to) for s, ti, to in (first, second)]
    weights = len(model.weights)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.0))  # the weights stay as they are
    assert len(model.weights) == weights  # the steps' running means are not model weights

    def step(batch):
        source, target_in, target_out = batch
        return {k: float(v) for k, v in model.train_step(((source, target_in), target_out)).items()}

    np.testing.assert_allclose(step(first)["loss"], losses[0], rtol=1e-5)
    mean = (8 * losses[0] + 4 * losses[1]) / 12  # weighted by sentences, as Keras' compiled loss
    logs = step(second)
    np.testing.assert_allclose([logs["loss"], logs["perplexity"]], [mean, np.exp(mean)], rtol=1e-5)
    model.reset_metrics()  # what fit does at each epoch's start
    np.testing.assert_allclose(step(second)["loss"], losses[1], rtol=1e-5)

    data = tf.data.Dataset.from_generator(
        lambda: (((s, ti), to) for s, ti, to in (first, second)),
        output_signature=((tf.TensorSpec([None, None], tf.int32),) * 2, tf.TensorSpec([None, None], tf.int32)),
    )
    results = model.evaluate(data, verbose=0, return_dict=True)
    np.testing.assert_allclose([results["loss"], results["perplexity"]], [mean, np.exp(mean)], rtol=1e-5)
    assert results["target_tokens"] == (second[2] != PAD_ID).sum()  # the last batch's


def test_compile_refuses_what_the_step_cannot_honour():
    model = _model()
    with pytest.raises(ValueError, match="no metrics"):
        model.compile(optimizer="sgd", loss=SequenceCrossEntropy(), metrics=["accuracy"])
    with pytest.raises(TypeError, match="keras.losses.Loss"):
        model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")


def test_a_saved_compiled_model_loads_compiled_and_trains_on_as_the_original(rng, tmp_path):
    model = _model()
    # Eagerly (Keras' own switch, which the saved file keeps): the four steps and evaluations below would
    # each trace the model's step once, which costs many times more than running it.
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=SequenceCrossEntropy(), run_eagerly=True)
    source, target_in, target_out = copy_task(rng, 8, model.model_config.vocab_size)
    model.fit((source, target_in), target_out, epochs=1, verbose=0)
    model.save(str(tmp_path / "gnmt.keras"))
    loaded = keras.models.load_model(str(tmp_path / "gnmt.keras"))
    assert isinstance(loaded.objective, MaximumLikelihood)
    assert isinstance(loaded.objective.loss_function, SequenceCrossEntropy)
    assert int(loaded.optimizer.iterations) == 1  # the optimizer's state came back with it
    assert loaded.run_eagerly
    expected = model.evaluate((source, target_in), target_out, verbose=0, return_dict=True)
    assert loaded.evaluate((source, target_in), target_out, verbose=0, return_dict=True) == expected
    for trained in (model, loaded):  # one more Adam step each: the same moments give the same update
        trained.fit((source, target_in), target_out, epochs=1, verbose=0)
    for a, b in zip(model.get_weights(), loaded.get_weights()):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)
