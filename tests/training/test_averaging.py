"""The weight average a run ships (gnmt_tf.training.averaging), against a NumPy re-derivation."""

import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from gnmt_tf.models.gnmt import GNMT
from gnmt_tf.models.losses import SequenceCrossEntropy
from gnmt_tf.training.averaging import WeightAverage, WeightAveraging
from helpers import SHALLOW_MODEL, copy_task, tiny_model_config


def numpy_average(history, decay):
    """TensorFlow's ExponentialMovingAverage with num_updates: decay_t = min(decay, (1 + t) / (10 + t))."""
    average = np.array(history[0], np.float64)
    for t, weights in enumerate(history[1:], start=1):
        keep = min(decay, (1.0 + t) / (10.0 + t))
        average = keep * average + (1.0 - keep) * np.asarray(weights, np.float64)
    return average


def test_the_average_follows_the_exponential_rule_with_its_warm_up():
    variable = tf.Variable([1.0, -2.0])
    average = WeightAverage([variable], decay=0.9)
    rng = np.random.default_rng(0)
    history = [variable.numpy()]
    for step in range(1, 40):  # the warm-up's decay rises past 0.9 at step 81; 0.9 caps it from there
        variable.assign(rng.normal(size=2).astype(np.float32))
        history.append(variable.numpy())
        average.update([variable], step)
    np.testing.assert_allclose(average.averages[0].numpy(), numpy_average(history, 0.9), rtol=1e-5)
    assert float(average.decay_at(1000)) == pytest.approx(0.9) and float(average.decay_at(1)) == pytest.approx(2 / 11)
    target = tf.Variable([0.0, 0.0])
    average.copy_to([target])
    np.testing.assert_array_equal(target.numpy(), average.averages[0].numpy())
    with pytest.raises(ValueError, match="decay must be in"):
        WeightAverage([variable], decay=1.0)
    with pytest.raises(ValueError, match="2 variables for an average of 1"):
        average.copy_to([target, target])


def test_a_segment_of_updates_moves_the_average_as_that_many_updates_to_its_last_weights():
    """Parameter-server fit calls batch callbacks at segment ends only: the callback then moves the average
    once for the segment's updates, by the product of their decay_t (NumPy's, from the rule)."""
    from types import SimpleNamespace

    start, weights = np.array([1.0, -2.0]), np.array([3.0, 0.5])
    variable = tf.Variable(start.astype(np.float32))
    average = WeightAverage([variable], decay=0.9)
    model = SimpleNamespace(optimizer=SimpleNamespace(iterations=tf.Variable(3, dtype=tf.int64)),
                            trainable_variables=[variable])
    callback = WeightAveraging(average)
    callback.set_model(model)
    callback.on_train_begin()  # a run resumed at step 3
    variable.assign(weights.astype(np.float32))
    model.optimizer.iterations.assign(7)  # a segment of 4 updates: 4, 5, 6, 7
    callback.on_train_batch_end(0)
    keep = np.prod([min(0.9, (1.0 + t) / (10.0 + t)) for t in range(4, 8)])
    np.testing.assert_allclose(average.averages[0].numpy(), keep * start + (1 - keep) * weights, rtol=1e-6)
    callback.on_train_batch_end(0)  # no update since: no move
    np.testing.assert_allclose(average.averages[0].numpy(), keep * start + (1 - keep) * weights, rtol=1e-6)


def test_the_callback_moves_the_average_after_each_update():
    """fit on a tiny model: after each step the average is the rule applied to the weights each step left."""
    keras.utils.set_random_seed(3)
    model = GNMT(tiny_model_config(dropout=0.0, **SHALLOW_MODEL))
    model.build()
    average = WeightAverage(model.trainable_variables, decay=0.5)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=SequenceCrossEntropy())
    assert not any(v.ref() in {a.ref() for a in average.averages} for v in model.weights)  # not the model's weights
    source, target_in, target_out = copy_task(np.random.default_rng(1), 16, model.model_config.vocab_size)
    history = [[v.numpy() for v in model.trainable_variables]]

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            history.append([v.numpy() for v in model.trainable_variables])

    model.fit((source, target_in), target_out, batch_size=8, epochs=2, verbose=0,
              callbacks=[WeightAveraging(average), Record()], shuffle=False)
    assert len(history) == 5
    for index in (0, 7, len(history[0]) - 1):  # an embedding, an LSTM kernel, the softmax bias
        expected = numpy_average([weights[index] for weights in history], 0.5)
        np.testing.assert_allclose(average.averages[index].numpy(), expected, rtol=1e-4, atol=1e-6)
    assert not np.allclose(average.averages[7].numpy(), model.trainable_variables[7].numpy())


def test_a_run_resumed_with_an_average_starts_it_at_the_restored_weights(tmp_path):
    """training.average_decay set when resuming a run begun without it: its checkpoints hold no average."""
    from gnmt_tf import model_files
    from gnmt_tf.training.trainer import Trainer
    from helpers import SHALLOW
    from number_model import tiny_number_setup

    config, model_dir, train, dev, tokenizer = tiny_number_setup(
        tmp_path, 2, **SHALLOW, **{"training.checkpoint_every": 2})
    Trainer(config, model_dir, train, dev, tokenizer, log=lambda m: None, verbose=0).train()
    resumed = config.replace(**{"training.average_decay": 0.9, "training.max_steps": 4})
    lines = []
    trainer = Trainer(resumed, model_dir, train, dev, tokenizer, log=lines.append, verbose=0)
    assert trainer.step == 2 and any("weight average starts there" in line for line in lines), lines
    average = trainer.state.shipped.average
    for averaged, variable in zip(average.averages, trainer.model.trainable_variables):
        np.testing.assert_array_equal(averaged.numpy(), variable.numpy())
    start = [v.numpy() for v in trainer.model.trainable_variables]
    trainer.train()
    assert trainer.step == 4
    # Two updates later the average has left the restored weights, following the trained ones.
    moved = [i for i, v in enumerate(trainer.model.trainable_variables) if not np.allclose(v.numpy(), start[i])]
    assert moved
    index = moved[0]
    assert not np.allclose(average.averages[index].numpy(), start[index])
    assert os.path.isdir(model_files.averaged_dir(model_dir))
