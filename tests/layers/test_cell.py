"""The LSTM cell and the residual stack against eq. 10-11 computed in NumPy."""

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf.layers.cell import GNMTLSTMCell
from gnmt_tf.layers.recurrence import STEPWISE, WRITTEN_GRADIENT, masked_step, run_lstm
from gnmt_tf.layers.stack import ResidualLSTMStack
from gnmt_tf.layers.weights import FLOAT_READER
from numpy_gnmt import cell_weights, lstm_step
from numpy_gnmt import run_lstm as reference_lstm


def make_cell(units, input_dim, form, forget_bias=0.0, scale=1.0, delta=1.0, seed=0):
    cell = GNMTLSTMCell(units, form=form, forget_bias=forget_bias, initial_delta=delta)
    cell.build((None, input_dim))
    rng = np.random.default_rng(seed)
    for weight in cell.trainable_weights:
        weight.assign(rng.uniform(-scale, scale, weight.shape).astype(np.float32))
    return cell


@pytest.mark.parametrize("form, forget_bias", [("paper", 0.0), ("standard", 1.0)])
def test_cell_matches_equations_10_and_11_and_hits_the_clip(form, forget_bias):
    delta = 0.6
    cell = make_cell(units=8, input_dim=5, form=form, forget_bias=forget_bias, scale=1.5, delta=delta)
    rng = np.random.default_rng(1)
    xs = rng.normal(0, 2.0, size=(12, 3, 5)).astype(np.float32)  # time, batch, features
    c = np.zeros((3, 8), np.float32)
    m = np.zeros((3, 8), np.float32)
    state = cell.get_initial_state(batch_size=3)
    clipped = 0
    for x in xs:
        c_ref, m_ref = lstm_step(x, c, m, *cell_weights(cell), form, forget_bias, delta)
        out, state = cell(tf.constant(x), state)
        np.testing.assert_allclose(state[0].numpy(), c_ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out.numpy(), m_ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(state[1].numpy(), m_ref, rtol=1e-5, atol=1e-5)
        clipped += int(np.sum(np.isclose(np.abs(c_ref), delta)))
        c, m = c_ref, m_ref
    # The inputs were chosen so that the clip of eq. 10 is exercised, not just present.
    assert clipped > 10
    assert np.max(np.abs(c)) <= delta + 1e-6


def test_clip_delta_is_a_live_variable():
    cell = make_cell(units=4, input_dim=3, form="paper", scale=2.0, delta=8.0)
    x = tf.constant(np.full((2, 3), 3.0, np.float32))
    state = cell.get_initial_state(batch_size=2)
    _, (c_wide, _) = cell(x, state)
    cell.clip_delta.assign(0.25)
    _, (c_narrow, _) = cell(x, state)
    assert np.max(np.abs(c_wide.numpy())) > 0.25
    assert np.max(np.abs(c_narrow.numpy())) <= 0.25 + 1e-7
    assert not cell.clip_delta.trainable


def test_paper_form_has_no_bias_and_standard_form_has_one():
    assert make_cell(4, 3, "paper").bias is None
    assert make_cell(4, 3, "standard").bias.shape == (16,)
    with pytest.raises(ValueError, match="no biases"):
        GNMTLSTMCell(4, form="paper", forget_bias=1.0)


@pytest.mark.parametrize("recurrence", [WRITTEN_GRADIENT, STEPWISE], ids=["written_gradient", "stepwise"])
def test_run_lstm_matches_stepping_and_ignores_padding(recurrence):
    cell = make_cell(units=6, input_dim=4, form="paper", scale=1.0, delta=1.0)
    rng = np.random.default_rng(2)
    xs = rng.normal(size=(2, 7, 4)).astype(np.float32)
    lengths = [7, 4]
    mask = np.array([[t < n for t in range(7)] for n in lengths])
    outputs, final = run_lstm(cell, tf.constant(xs), tf.constant(mask), FLOAT_READER, recurrence)
    for b, n in enumerate(lengths):
        ref = reference_lstm(xs[b, :n], cell_weights(cell), "paper", 0.0, 1.0)
        np.testing.assert_allclose(outputs.numpy()[b, :n], ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(outputs.numpy()[b, n:], 0.0)  # padding outputs are zero
        np.testing.assert_allclose(final[1].numpy()[b], ref[-1], rtol=1e-5, atol=1e-5)  # state stops at n


@pytest.mark.parametrize("form, forget_bias", [("paper", 0.0), ("standard", 1.0)])
def test_the_written_out_gradient_of_a_layer_equals_the_one_derived_op_by_op(form, forget_bias):
    """Training runs a layer with its gradient written out (``WRITTEN_GRADIENT``); it computes the outputs
    ``STEPWISE`` computes, bit for bit, and its gradient is TensorFlow's own gradient of those steps."""
    delta = 0.6
    cell = make_cell(units=8, input_dim=5, form=form, forget_bias=forget_bias, scale=1.5, delta=delta)
    rng = np.random.default_rng(4)
    xs = tf.constant(rng.normal(0, 2.0, size=(3, 9, 5)).astype(np.float32))
    # right padding, none, and gaps: padding anywhere carries the state (and its gradient) through
    mask = tf.constant(np.array([[1] * 9, [1] * 5 + [0] * 4, [0, 1, 1, 0, 1, 1, 1, 0, 1]]) > 0)
    initial = tuple(tf.constant(rng.normal(size=(3, 8)).astype(np.float32)) for _ in range(2))
    upstream = [tf.constant(rng.normal(size=shape).astype(np.float32)) for shape in ((3, 9, 8), (3, 8), (3, 8))]
    results = {}
    for name, recurrence in (("written out", WRITTEN_GRADIENT), ("derived", STEPWISE)):
        with tf.GradientTape() as tape:
            tape.watch([xs, *initial])
            projected = cell.project_inputs(xs, FLOAT_READER)
            outputs, final = recurrence.lstm(cell, projected, mask, FLOAT_READER, initial)
            loss = sum(tf.reduce_sum(y * u) for y, u in zip((outputs, *final), upstream))
        gradients = tape.gradient(loss, [xs, *initial, *cell.trainable_weights])
        results[name] = ([outputs, *final], gradients)
    for ours, reference in zip(results["written out"][0], results["derived"][0]):
        np.testing.assert_array_equal(ours.numpy(), reference.numpy())  # the same forward numbers
    for ours, reference in zip(results["written out"][1], results["derived"][1]):
        np.testing.assert_allclose(ours.numpy(), reference.numpy(), rtol=1e-5, atol=1e-6)
    # The clip of eq. 10 cut some cell states, so its gradient mask was exercised.
    c = results["derived"][0][1].numpy()
    assert np.sum(np.isclose(np.abs(c), delta)) > 0


def stack_reference(stack, xs, delta):
    """Eq. 6 + 10 for layers first_layer.. with residual sums from residual_start up."""
    x = xs
    for k, cell in enumerate(stack.cells):
        m = reference_lstm(x, cell_weights(cell), "paper", 0.0, delta)
        layer = stack.first_layer + k
        x = np.clip(m + x, -delta, delta) if layer >= stack.residual_start else m
    return x


def build_stack(num_layers, first_layer, residual_start, units=6, seed=3, delta=0.7):
    stack = ResidualLSTMStack(
        num_layers=num_layers, units=units, first_layer=first_layer, residual_start=residual_start,
        initial_delta=delta,
    )
    stack.build((None, None, units))
    rng = np.random.default_rng(seed)
    for weight in stack.trainable_weights:
        weight.assign(rng.uniform(-1.2, 1.2, weight.shape).astype(np.float32))
    return stack


@pytest.mark.parametrize("first_layer, residual_start", [(2, 3), (1, 3), (2, 2), (2, 4)])
def test_stack_matches_numpy_residual_stack(first_layer, residual_start):
    delta = 0.7
    stack = build_stack(4, first_layer, residual_start, delta=delta)
    xs = np.random.default_rng(4).normal(0, 1.5, size=(9, 6)).astype(np.float32)
    got = stack(tf.constant(xs[None]), mask=tf.ones((1, 9), tf.bool)).numpy()[0]
    np.testing.assert_allclose(got, stack_reference(stack, xs, delta), rtol=1e-5, atol=1e-5)
    # The residual sums are clipped too: outputs stay within delta.
    assert np.max(np.abs(got)) <= delta + 1e-6


def test_residual_wiring_starts_at_the_third_layer():
    """Zeroing a layer's weights makes m = 0: a residual layer then passes its input
    through, a non-residual layer outputs zeros. This fails if residuals start at the
    wrong layer or are missing."""
    stack = build_stack(num_layers=4, first_layer=2, residual_start=3)  # layers 2..5
    x = tf.constant(np.random.default_rng(5).normal(0, 0.2, size=(1, 5, 6)).astype(np.float32))
    mask = tf.ones((1, 5), tf.bool)
    for k, cell in enumerate(stack.cells):
        layer = 2 + k
        saved = [w.numpy() for w in cell.trainable_weights]
        for w in cell.trainable_weights:
            w.assign(tf.zeros_like(w))
        # Recompute the stack, capturing layer k's input and output.
        h = x
        for j, other in enumerate(stack.cells):
            outputs, _ = run_lstm(other, h, mask, FLOAT_READER, WRITTEN_GRADIENT)
            new_h = stack.layer_output(j, outputs, h)
            if j == k:
                layer_in, layer_out = h, new_h
            h = new_h
        if layer >= 3:
            np.testing.assert_allclose(layer_out.numpy(), layer_in.numpy(), atol=1e-7)
        else:
            np.testing.assert_array_equal(layer_out.numpy(), 0.0)
        for w, value in zip(cell.trainable_weights, saved):
            w.assign(value)
    assert [stack.has_residual(k) for k in range(4)] == [False, True, True, True]


def test_step_equals_sequence():
    stack = build_stack(num_layers=3, first_layer=2, residual_start=3)
    xs = np.random.default_rng(6).normal(size=(2, 5, 6)).astype(np.float32)
    sequence = stack(tf.constant(xs), mask=tf.ones((2, 5), tf.bool)).numpy()
    states = stack.get_initial_state(2)
    for t in range(5):
        out, states = stack.step(tf.constant(xs[:, t]), states, FLOAT_READER)
        np.testing.assert_allclose(out.numpy(), sequence[:, t], rtol=1e-5, atol=1e-5)


def test_residual_width_mismatch_is_a_clear_error():
    stack = ResidualLSTMStack(num_layers=2, units=8, first_layer=2, residual_start=2)
    with pytest.raises(ValueError, match="layer 2 has a residual connection but its input has 5 features"):
        stack.build((None, None, 5))


def test_masked_step_zeroes_outputs_and_carries_state_at_padding():
    """Nests of outputs and states: real rows take the step's values, padded rows output 0 and keep the state."""
    def step(x_t, state):
        c, (m,) = state
        return (x_t * 2.0, x_t + 1.0), (c + x_t, (m - x_t,))

    x = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    state = (tf.fill([3, 2], 10.0), (tf.fill([3, 2], 20.0),))
    (doubled, plus_one), (c, (m,)) = masked_step(step, x, state, tf.constant([True, False, True]))
    np.testing.assert_array_equal(doubled.numpy(), [[2, 4], [0, 0], [10, 12]])
    np.testing.assert_array_equal(plus_one.numpy(), [[2, 3], [0, 0], [6, 7]])
    np.testing.assert_array_equal(c.numpy(), [[11, 12], [10, 10], [15, 16]])
    np.testing.assert_array_equal(m.numpy(), [[19, 18], [20, 20], [15, 14]])


def test_masked_step_can_leave_outputs_that_nothing_reads_at_padding():
    """``zero_padding`` a bool for each of the step's outputs: the parts given False keep the step's values
    at padding (a training loop's saved records); the others are 0 there, and the state is carried."""
    def step(x_t, state):
        return (x_t * 2.0, (x_t + 1.0, x_t - 1.0)), state + x_t

    x = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    (doubled, (plus_one, minus_one)), total = masked_step(
        step, x, tf.zeros([2, 2]), tf.constant([False, True]), zero_padding=(True, False))
    np.testing.assert_array_equal(doubled.numpy(), [[0, 0], [6, 8]])
    np.testing.assert_array_equal(plus_one.numpy(), [[2, 3], [4, 5]])
    np.testing.assert_array_equal(minus_one.numpy(), [[0, 1], [2, 3]])
    np.testing.assert_array_equal(total.numpy(), [[0, 0], [3, 4]])
    with pytest.raises(ValueError, match="zero_padding has 3 entries for 2 outputs"):
        masked_step(step, x, tf.zeros([2, 2]), tf.constant([False, True]), zero_padding=(True, False, False))


@pytest.mark.parametrize("recurrence", [WRITTEN_GRADIENT, STEPWISE], ids=["written_gradient", "stepwise"])
def test_a_recurrence_runs_any_step_over_nests_of_sequences(recurrence):
    """A running sum with two outputs of different widths; padding leaves the sum and outputs 0."""
    def step(inputs_t, total):
        a_t, b_t = inputs_t
        total = total + a_t
        return (total, tf.concat([b_t, b_t], axis=-1)), total

    rng = np.random.default_rng(7)
    a = rng.normal(size=(2, 5, 3)).astype(np.float32)
    b = rng.normal(size=(2, 5, 1)).astype(np.float32)
    mask = np.arange(5)[None, :] < np.array([[5], [3]])
    (totals, doubled), final = recurrence.steps(step, (tf.constant(a), tf.constant(b)), tf.constant(mask),
                                                tf.zeros([2, 3]), (3, 2))
    expected = np.cumsum(np.where(mask[:, :, None], a, 0.0), axis=1) * mask[:, :, None]
    np.testing.assert_allclose(totals.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(doubled.numpy(), np.concatenate([b, b], -1) * mask[:, :, None], rtol=1e-6)
    np.testing.assert_allclose(final.numpy(), [a[0].sum(0), a[1, :3].sum(0)], rtol=1e-5)
