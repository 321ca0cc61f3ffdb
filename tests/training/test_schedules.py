"""The training recipe's schedules (section 8.3, section 6) and the Adam->SGD optimizer."""

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf.config import load_config
from gnmt_tf.training.optimizer import AdamThenSGD
from gnmt_tf.training.schedules import DeltaSchedule, GNMTLearningRate


def test_paper_learning_rate_schedule_at_the_configured_steps():
    schedule = GNMTLearningRate.from_config_section(load_config("gnmt_wmt14_enfr"))
    expected = {
        0: 0.0002,
        59_999: 0.0002,  # Adam for the first 60k steps ...
        60_000: 0.5,  # ... then SGD at 0.5
        1_199_999: 0.5,
        1_200_000: 0.25,  # anneal after 1.2M steps: halve ...
        1_399_999: 0.25,
        1_400_000: 0.125,  # ... every 200k steps ...
        1_600_000: 0.0625,
        1_800_000: 0.03125,
        1_999_999: 0.03125,  # ... for 800k more steps: four halvings in all
        5_000_000: 0.03125,
    }
    for step, rate in expected.items():
        assert float(schedule(step)) == pytest.approx(rate, rel=1e-6), step


def test_delta_anneals_linearly_from_8_to_1_and_stays():
    config = load_config("gnmt_wmt14_enfr")
    delta = DeltaSchedule.from_config_section(config)
    steps = config.training.delta_anneal_steps
    assert delta(0) == 8.0
    assert delta(steps // 2) == pytest.approx(4.5)
    assert delta(steps) == 1.0
    assert delta(steps * 3) == 1.0
    values = [delta(s) for s in range(0, steps + 1, steps // 10)]
    assert all(a > b for a, b in zip(values, values[1:]))  # strictly decreasing until the end
    # By hand, over the config's 2M steps: a quarter of the way 8 - 7/4, three quarters 8 - 21/4.
    assert steps == 2_000_000
    assert delta(500_000) == pytest.approx(6.25, rel=1e-12)
    assert delta(1_500_000) == pytest.approx(2.75, rel=1e-12)
    assert delta(123_456) == pytest.approx(7.567904, rel=1e-12)  # 8 - 7 x 0.061728
    # How DeltaAnnealing applies it in a real fit, step by step: tests/training/test_callbacks.py.


def test_optimizer_switches_from_adam_to_sgd_at_the_configured_step():
    schedule = GNMTLearningRate(0.1, 3, 0.5, 5, 2, 1)
    optimizer = AdamThenSGD(schedule, adam_steps=3, global_clipnorm=100.0)
    variable = tf.Variable([1.0, -2.0])
    gradient = tf.constant([0.5, 0.25])
    updates = []
    for _ in range(7):
        before = variable.numpy().copy()
        optimizer.apply_gradients([(gradient, variable)])
        updates.append(before - variable.numpy())
    # Adam's first steps move every coordinate by ~lr whatever the gradient's size.
    for step in range(3):
        np.testing.assert_allclose(updates[step], [0.1, 0.1], rtol=1e-3)
    # SGD: w -= lr * g, with the rate halved from step 5 on.
    np.testing.assert_allclose(updates[3], 0.5 * gradient.numpy(), rtol=1e-6)
    np.testing.assert_allclose(updates[4], 0.5 * gradient.numpy(), rtol=1e-6)
    np.testing.assert_allclose(updates[5], 0.25 * gradient.numpy(), rtol=1e-6)
    assert int(optimizer.iterations) == 7


def test_adam_phase_is_kingma_and_ba_as_keras_writes_it_for_dense_and_sparse_gradients():
    """The fused kernel's update against a NumPy re-derivation of Keras' Adam, five steps, on a dense
    variable and an embedding-like one whose gradient is IndexedSlices (with a repeated row: the
    slices add up). Every row's moments decay, touched or not: row 0, touched at the first step
    only, keeps moving."""
    import tf_keras as keras

    rate, beta_1, beta_2, epsilon = 0.01, 0.9, 0.999, 1e-7
    optimizer = AdamThenSGD(GNMTLearningRate(rate, 100, 0.5, 1000, 1, 0), adam_steps=100, global_clipnorm=1e6)
    keras_adam = keras.optimizers.Adam(rate, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon)
    rng = np.random.default_rng(3)
    start_dense, start_table = rng.normal(size=(3, 4)), rng.normal(size=(5, 2))
    dense, table = tf.Variable(start_dense, dtype=tf.float32), tf.Variable(start_table, dtype=tf.float32)
    keras_dense, keras_table = tf.Variable(start_dense, dtype=tf.float32), tf.Variable(start_table, dtype=tf.float32)
    expected = [start_dense.copy(), start_table.copy()]
    moments = [[np.zeros_like(x), np.zeros_like(x)] for x in expected]
    for step in range(1, 6):
        dense_gradient = rng.normal(size=(3, 4))
        rows, values = np.array([0, 3, 0] if step == 1 else [2, 3, 2]), rng.normal(size=(3, 2))
        table_gradient = np.zeros((5, 2))
        np.add.at(table_gradient, rows, values)
        sparse = tf.IndexedSlices(tf.constant(values, tf.float32), tf.constant(rows), tf.constant([5, 2]))
        optimizer.apply_gradients([(tf.constant(dense_gradient, tf.float32), dense), (sparse, table)])
        keras_adam.apply_gradients([(tf.constant(dense_gradient, tf.float32), keras_dense), (sparse, keras_table)])
        alpha = rate * np.sqrt(1 - beta_2 ** step) / (1 - beta_1 ** step)
        for i, gradient in enumerate((dense_gradient, table_gradient)):
            m, v = moments[i]
            m += (gradient - m) * (1 - beta_1)
            v += (gradient ** 2 - v) * (1 - beta_2)
            expected[i] -= m * alpha / (np.sqrt(v) + epsilon)
    for variable, keras_variable, value in zip((dense, table), (keras_dense, keras_table), expected):
        np.testing.assert_allclose(variable.numpy(), value, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(variable.numpy(), keras_variable.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(optimizer._momentums[1].numpy(), moments[1][0], rtol=1e-5, atol=1e-7)
    assert np.all(moments[1][0][0] != 0) and np.all(moments[1][0][1] == 0)  # row 0: touched once, still moving


def test_gradients_are_clipped_to_global_norm_five():
    optimizer = AdamThenSGD(GNMTLearningRate(0.1, 0, 1.0, 100, 1, 0), adam_steps=0, global_clipnorm=5.0)
    a, b = tf.Variable([0.0, 0.0]), tf.Variable([0.0])
    optimizer.apply_gradients([(tf.constant([30.0, 40.0]), a), (tf.constant([0.0]), b)])  # norm 50
    np.testing.assert_allclose(-a.numpy(), [3.0, 4.0], rtol=1e-6)  # scaled to norm 5, SGD with lr 1


def test_optimizer_state_survives_a_checkpoint(tmp_path):
    schedule = GNMTLearningRate(0.1, 3, 0.5, 100, 1, 0)
    variable = tf.Variable([1.0, 2.0])
    optimizer = AdamThenSGD(schedule, adam_steps=3)
    optimizer.apply_gradients([(tf.constant([0.3, -0.1]), variable)])
    path = tf.train.Checkpoint(v=variable, optimizer=optimizer).save(str(tmp_path / "c"))
    reference = variable.numpy().copy()
    optimizer.apply_gradients([(tf.constant([0.3, -0.1]), variable)])
    expected_next = variable.numpy().copy()

    fresh_variable = tf.Variable([0.0, 0.0])
    fresh = AdamThenSGD(schedule, adam_steps=3)
    fresh.build([fresh_variable])
    tf.train.Checkpoint(v=fresh_variable, optimizer=fresh).restore(path).assert_consumed()
    np.testing.assert_array_equal(fresh_variable.numpy(), reference)
    assert int(fresh.iterations) == 1
    fresh.apply_gradients([(tf.constant([0.3, -0.1]), fresh_variable)])
    np.testing.assert_allclose(fresh_variable.numpy(), expected_next, rtol=1e-7)  # same Adam moments


def test_delta_by_the_clock():
    schedule = DeltaSchedule(8.0, 1.0, anneal_steps=1000, anneal_seconds=100.0)
    assert schedule.at_time(0.0) == 8.0 and schedule.at_time(50.0) == pytest.approx(4.5)
    assert schedule.at_time(100.0) == 1.0 and schedule.at_time(1e6) == 1.0
    # Without a time bound the clock bounds nothing. (Which of step, clock and current delta
    # wins: tests/training/test_callbacks.py.)
    assert DeltaSchedule(8.0, 1.0, anneal_steps=1000).at_time(1e6) == 8.0


def test_only_timed_runs_get_a_time_bound():
    config = load_config("small", overrides={"training.max_minutes": 10.0,
                                             "training.delta_anneal_time_fraction": 0.25})
    timed = DeltaSchedule.from_config_section(config)
    assert timed.anneal_seconds == pytest.approx(150.0)  # a quarter of 10 minutes
    assert timed.at_time(75.0) == pytest.approx(4.5) and timed.at_time(150.0) == 1.0  # half way, then the end
    assert DeltaSchedule.from_config_section(config, timed=False).anneal_seconds is None
    assert DeltaSchedule.from_config_section(load_config("gnmt_wmt14_enfr")).anneal_seconds is None  # no max_minutes
