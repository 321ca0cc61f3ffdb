"""How a layer runs over time is the recurrence its caller passes, whatever the weight reader reads."""

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf.layers.cell import GNMTLSTMCell
from gnmt_tf.layers.recurrence import STEPWISE, WRITTEN_GRADIENT, run_lstm
from gnmt_tf.layers.weights import FLOAT_READER, WeightReader
from gnmt_tf.models.gnmt import GNMT
from gnmt_tf.quantization.weights import Int8Weights
from helpers import tiny_model_config


def _sequence(rng, cell, batch=3, time=6):
    inputs = tf.constant(rng.normal(size=(batch, time, int(cell.kernel.shape[0]))).astype(np.float32))
    mask = tf.constant(np.arange(time)[None, :] < np.array([[time], [2], [4]])[:batch])
    return inputs, mask


def _stepped(cell, inputs, mask, weights):
    """The layer one ``cell.recur`` at a time in Python, the state carried over padding."""
    state = cell.get_initial_state(batch_size=inputs.shape[0], dtype=tf.float32)
    outputs = []
    for t in range(inputs.shape[1]):
        output, new_state = cell.recur(cell.project_inputs(inputs[:, t], weights), state, weights)
        keep = mask[:, t : t + 1]
        state = tuple(tf.where(keep, new, old) for new, old in zip(new_state, state))
        outputs.append(tf.where(keep, output, tf.zeros_like(output)))
    return tf.stack(outputs, axis=1).numpy()


def test_int8_products_run_step_by_step_and_the_written_gradient_refuses_them(rng):
    """A layer multiplying in int8 has no float kernel to write a gradient with: the caller that chose int8
    passes the stepwise recurrence, which runs the int8 products at every step."""
    model = GNMT(tiny_model_config(init_scale=0.5))
    model.build()
    cell = model.encoder.forward_cell
    int8 = WeightReader(Int8Weights(model, products="int8"))
    inputs, mask = _sequence(rng, cell)
    with pytest.raises(ValueError, match="int8.*STEPWISE"):
        run_lstm(cell, inputs, mask, int8, WRITTEN_GRADIENT)
    outputs, _ = run_lstm(cell, inputs, mask, int8, STEPWISE)
    np.testing.assert_allclose(outputs.numpy(), _stepped(cell, inputs, mask, int8), rtol=1e-6, atol=1e-6)
    float_outputs, _ = run_lstm(cell, inputs, mask, FLOAT_READER, STEPWISE)
    assert np.abs(outputs.numpy() - float_outputs.numpy()).max() > 1e-4  # really the int8 products


@pytest.mark.parametrize("recurrence", [WRITTEN_GRADIENT, STEPWISE], ids=["written_gradient", "stepwise"])
def test_a_snapshot_reader_runs_a_layer_with_the_kernels_it_read(rng, recurrence):
    """Both recurrences multiply by what a read-once snapshot read (padded columns dropped), not by the
    variables as they are later: which recurrence runs is the caller's choice, not the reader's."""
    cell = GNMTLSTMCell(128, init_scale=0.1)  # 512 columns: kernels that a snapshot of 16 rows pads
    cell.build((None, None, 8))
    inputs, mask = _sequence(rng, cell)
    before, _ = run_lstm(cell, inputs, mask, FLOAT_READER, recurrence)
    snapshot = FLOAT_READER.reading_once([cell.kernel, cell.recurrent_kernel], rows=16)
    cell.recurrent_kernel.assign(2.0 * cell.recurrent_kernel)
    read_once, _ = run_lstm(cell, inputs, mask, snapshot, recurrence)
    after, _ = run_lstm(cell, inputs, mask, FLOAT_READER, recurrence)
    np.testing.assert_allclose(read_once.numpy(), before.numpy(), rtol=1e-6, atol=1e-6)
    assert np.abs(after.numpy() - before.numpy()).max() > 1e-3
