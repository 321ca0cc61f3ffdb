"""The masked time step, and the strategies that run layers over whole sequences with it.

Every recurrence of the model over a padded batch is one function of one time step,
``step(inputs_t, state) -> (outputs_t, new_state)``, made padding-proof by
:func:`masked_step`: at a padding position the outputs are 0 and the state is carried
through unchanged, so padding can never change a real position.

How a layer runs over time is a :class:`Recurrence`, chosen by whoever owns the decision and
passed down to the layers (never inferred from the weight reader):

* :data:`WRITTEN_GRADIENT` (:class:`WrittenGradientRecurrence`): an LSTM layer over the whole
  sequence whose gradient, back-propagation through time, is written out
  (:func:`lstm_over_time`): the default of the model's entry points, what training and the dev
  loss run. It multiplies by the recurrent kernel's float values itself, so it cannot run int8
  products;
* :data:`STEPWISE` (:class:`StepwiseRecurrence` in a :class:`TensorArrayLoop`): every step is
  ``cell.recur``, its products read through the weight reader, the gradient derived op by op:
  what the translator's searches run (their reader's kernels read once, or int8 products);
* ``export.tflite.CONCATENATING_RECURRENCE``: the same steps in a loop without TensorArrays, which
  TFLite converts to builtin ops (the TFLite exporter's choice).

A recurrence runs an LSTM layer (:meth:`Recurrence.lstm`, its input product hoisted out of time
into one matmul by :func:`run_lstm`, an identity) and any other masked step
(:meth:`Recurrence.steps`: the decoder's bottom layer with input feeding, which also attends,
:meth:`gnmt_tf.models.decoder.GNMTDecoder.feed_bottom_step`). The model-parallel wavefront
(:mod:`gnmt_tf.parallel.model_parallel`) runs whole stacks its own way, one diagonal of
:func:`masked_step`\\ s per iteration, with the same helpers.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Tuple

import tensorflow as tf

from gnmt_tf.layers.weights import FLOAT_READER, WeightReader

LSTMState = Tuple[tf.Tensor, tf.Tensor]
Step = Callable[[Any, Any], Tuple[Any, Any]]


def masked_step(step: Step, inputs_t, state, mask_t: tf.Tensor, zero_padding=True):
    """``step(inputs_t, state)`` for a batch in which ``mask_t`` [batch] marks the real positions.

    Where ``mask_t`` is False the outputs are 0 and the state keeps its old value (the
    semantics of ``keras.backend.rnn`` with ``zero_output_for_mask``). ``inputs_t``,
    ``state`` and the outputs may be nests of [batch, ...] tensors.

    ``zero_padding`` says which outputs are zeroed there: True (all), or, for a step whose outputs
    are a tuple, a tuple with a bool for each of its parts. A part given False keeps what the step
    computed at padding, for outputs nothing reads there: the records that a training forward loop
    saves for its backward loop, which gives padding no gradient (:func:`lstm_over_time`). Zeroing
    them would allocate and select every record at every step for nothing.
    """
    outputs, new_state = step(inputs_t, state)
    keep = tf.reshape(tf.cast(mask_t, tf.bool), [-1, 1])

    def zeroed(part):
        return tf.nest.map_structure(lambda o: tf.where(keep, o, tf.zeros_like(o)), part)

    if zero_padding is True:
        outputs = zeroed(outputs)
    else:
        if len(zero_padding) != len(outputs):
            raise ValueError(f"zero_padding has {len(zero_padding)} entries for {len(outputs)} outputs")
        outputs = tuple(zeroed(part) if zero else part for zero, part in zip(zero_padding, outputs))
    new_state = tf.nest.map_structure(lambda new, old: tf.where(keep, new, old), new_state, state)
    return outputs, new_state


def swap_batch_time(x: tf.Tensor) -> tf.Tensor:
    """[batch, time, ...] <-> [time, batch, ...]."""
    return tf.transpose(x, [1, 0] + list(range(2, x.shape.rank)))


def time_major_mask(mask: tf.Tensor) -> tf.Tensor:
    """A [batch, time] mask as the bool [time, batch] mask a time loop reads."""
    return tf.transpose(tf.cast(mask, tf.bool), [1, 0])


def _tensor_array_loop(step: Step, inputs_tm, mask_tm: tf.Tensor, initial_state, output_sizes,
                       backwards: bool, zero_padding):
    """:func:`masked_step` over time in a ``tf.while_loop`` reading and writing TensorArrays.

    ``inputs_tm``: a nest of time-major tensors, or of TensorArrays another such loop wrote, taken as
    they are. Returns (the TensorArrays of the outputs, final state). ``backwards``: t = time-1 .. 0
    (back-propagation through time), reading and writing position t, so the outputs are in the
    inputs' order and nothing is reversed. ``zero_padding``: which outputs are 0 at padding
    (:func:`masked_step`).
    """
    steps = tf.shape(mask_tm)[0]
    input_arrays = tf.nest.map_structure(
        lambda x: x if isinstance(x, tf.TensorArray)
        else tf.TensorArray(x.dtype, size=steps, element_shape=x.shape[1:]).unstack(x), inputs_tm
    )
    mask_array = tf.TensorArray(tf.bool, size=steps, element_shape=mask_tm.shape[1:]).unstack(mask_tm)
    dtype = tf.nest.flatten(input_arrays)[0].dtype
    output_arrays = tf.nest.map_structure(
        lambda size: tf.TensorArray(dtype, size=steps, element_shape=[None, size] if isinstance(size, int)
                                    else None), output_sizes)

    def body(i, state, output_arrays):
        t = steps - 1 - i if backwards else i
        inputs_t = tf.nest.map_structure(lambda array: array.read(t), input_arrays)
        outputs, state = masked_step(step, inputs_t, state, mask_array.read(t), zero_padding)
        output_arrays = tf.nest.map_structure(lambda array, o: array.write(t, o), output_arrays, outputs)
        return i + 1, state, output_arrays

    _, final_state, output_arrays = tf.while_loop(
        lambda t, *_: t < steps, body, (tf.constant(0), initial_state, output_arrays), maximum_iterations=steps
    )
    return output_arrays, final_state


class TensorArrayLoop:
    """A time loop: time steps in a ``tf.while_loop`` reading and writing TensorArrays (fast, differentiable).

    ``loop(step, inputs_tm, mask_tm, initial_state, output_sizes)`` runs :func:`masked_step` for
    t = 0 .. time-1 on time-major inputs (a nest of [time, batch, ...]) and a time-major bool mask
    [time, batch]; returns (time-major outputs, final state). ``output_sizes`` (the last dimension of
    each output, an int or a scalar tensor) is part of the contract for loops that must allocate
    their outputs up front; this one does not need it.
    """

    def __call__(self, step: Step, inputs_tm, mask_tm: tf.Tensor, initial_state, output_sizes):
        output_arrays, final_state = _tensor_array_loop(step, inputs_tm, mask_tm, initial_state, output_sizes,
                                                        backwards=False, zero_padding=True)
        return tf.nest.map_structure(lambda array: array.stack(), output_arrays), final_state


TENSOR_ARRAY_LOOP = TensorArrayLoop()


class Recurrence(Protocol):
    """How layers run over the time steps of a padded batch (see the module docstring for the choices)."""

    def lstm(self, cell, projected: tf.Tensor, mask: tf.Tensor, weights: WeightReader,
             initial_state: LSTMState) -> Tuple[tf.Tensor, LSTMState]:
        """The LSTM layer ``cell`` (:class:`gnmt_tf.layers.cell.GNMTLSTMCell`) over ``projected``
        [batch, time, 4 units], the input product of every step (``cell.project_inputs``), from
        ``initial_state`` (c, m), the kernels read through ``weights``; ``mask`` [batch, time] marks
        the real positions. Returns (outputs [batch, time, units], final state (c, m))."""

    def steps(self, step: Step, inputs, mask: tf.Tensor, initial_state, output_sizes):
        """``step`` (made padding-proof by :func:`masked_step`) over batch-major ``inputs`` (a nest of
        [batch, time, ...]) with ``mask`` [batch, time]. ``output_sizes``: a nest shaped like the step's
        outputs holding each output's last dimension (an int or a scalar tensor). Returns
        (batch-major outputs, final state)."""


class StepwiseRecurrence:
    """Each time step on its own, iterated by ``loop`` (a time loop: :class:`TensorArrayLoop`, or the TFLite
    exporter's). An LSTM layer's step is ``cell.recur``, every product read through the weight reader
    (a search's kernels read once, int8 products); its gradient is derived op by op."""

    def __init__(self, loop: Callable):
        self.loop = loop

    def lstm(self, cell, projected, mask, weights, initial_state):
        return self.steps(lambda projected_t, state: cell.recur(projected_t, state, weights), projected, mask,
                          tuple(initial_state), cell.units)

    def steps(self, step, inputs, mask, initial_state, output_sizes):
        inputs_tm = tf.nest.map_structure(swap_batch_time, inputs)
        mask_tm = time_major_mask(mask)
        outputs_tm, final_state = self.loop(step, inputs_tm, mask_tm, initial_state, output_sizes)
        return tf.nest.map_structure(swap_batch_time, outputs_tm), final_state


STEPWISE = StepwiseRecurrence(TENSOR_ARRAY_LOOP)
"""Step by step in TensorArrays: the translator's searches, and any reader with int8 products."""


class WrittenGradientRecurrence:
    """An LSTM layer over the whole sequence with its gradient written out (:func:`lstm_over_time`):
    the same forward numbers as :data:`STEPWISE`, the gradient computed by a backward loop rather than
    derived op by op. Any other step has no gradient written out: it runs as :data:`STEPWISE` runs it.

    The layer multiplies by the float values of the recurrent kernel (``weights.sequence_kernel``), so a
    reader whose products are int8 cannot run it (:data:`STEPWISE` can)."""

    def lstm(self, cell, projected, mask, weights, initial_state):
        return lstm_over_time(cell, projected, mask, weights.sequence_kernel(cell.recurrent_kernel),
                              tuple(initial_state), weights.kernel_gradient)

    def steps(self, step, inputs, mask, initial_state, output_sizes):
        return STEPWISE.steps(step, inputs, mask, initial_state, output_sizes)


WRITTEN_GRADIENT = WrittenGradientRecurrence()
"""Whole sequences with back-propagation through time written out: the default of the model's entry
points (training, the dev loss)."""


def run_lstm(cell, inputs: tf.Tensor, mask: tf.Tensor, weights: WeightReader,
             recurrence: Recurrence) -> Tuple[tf.Tensor, LSTMState]:
    """An LSTM layer (:class:`gnmt_tf.layers.cell.GNMTLSTMCell`) over ``inputs`` [batch, time, features]
    from the zero state, run by ``recurrence``.

    The input product of every step is computed up front in one matmul (an identity that changes no
    output). ``weights``: the :class:`gnmt_tf.layers.weights.WeightReader` the cell's products read
    through. Returns (outputs [batch, time, units], final state (c, m)).
    """
    return run_projected_lstm(cell, cell.project_inputs(inputs, weights), mask, weights, recurrence)


def run_projected_lstm(cell, projected: tf.Tensor, mask: tf.Tensor, weights: WeightReader,
                       recurrence: Recurrence) -> Tuple[tf.Tensor, LSTMState]:
    """:func:`run_lstm` given the input product of every step, ``cell.project_inputs(inputs, weights)``."""
    initial_state = cell.get_initial_state(batch_size=tf.shape(projected)[0], dtype=projected.dtype)
    return recurrence.lstm(cell, projected, mask, weights, tuple(initial_state))


def lstm_over_time(cell, projected: tf.Tensor, mask: tf.Tensor, kernel: tf.Tensor, initial_state: LSTMState,
                   kernel_gradient: Callable[[tf.Tensor, tf.Tensor], tf.Tensor] = FLOAT_READER.kernel_gradient):
    """An LSTM layer over ``projected`` [batch, time, 4 units] (its input products) whose gradient is
    back-propagation through time written out, rather than derived op by op.

    The forward pass is :func:`masked_step` of ``cell.activate`` in a TensorArray loop, the same
    numbers as ``cell.recur`` with ``kernel`` (the recurrent kernel's values). The backward pass is
    one more masked loop, backwards in time, over what each forward step saved (its gates, the
    unclipped cell state and the previous state: ``cell.activation_gradient``), and the kernel's gradient
    is one product over all steps, ``kernel_gradient(m_prev, d_z)`` (the weight reader's: in bfloat16
    where the step's large products are). Derived op by op, the while loop's gradient instead stacks ~30
    intermediates per step and runs ~180 small ops per step back (many more ops to trace and to run). Returns (outputs [batch, time, units], final state (c, m)).

    Without a gradient (dev loss, forced scoring) the saved records are written and not read: seven
    more TensorArray writes per step (no copies), which searches avoid (the translator runs them
    :data:`STEPWISE`).
    """
    delta = tf.convert_to_tensor(cell.clip_delta)
    mask_tm = time_major_mask(mask)
    units = cell.units

    @tf.custom_gradient
    def recurrence(projected, kernel, c_0, m_0):
        def forward_step(projected_t, state):
            c_prev, m_prev = state
            m, c, parts = cell.activate(projected_t + tf.matmul(m_prev, kernel), c_prev, delta)
            # Each record in its own array: concatenated, every step would copy them in and out again.
            return (m, (*parts, c_prev), m_prev), (c, m)

        # The records stay in the arrays the forward loop wrote, which the backward loop reads: stacked
        # into one tensor, they would be copied out and back in again (6 units per position). Only the
        # layer's output is zeroed at padding: the backward step gives padding no gradient, so the
        # records there are never read (and m_prev meets a zero d_z in the kernel's gradient).
        (output_array, saved_arrays, m_prev_array), (c_last, m_last) = _tensor_array_loop(
            forward_step, swap_batch_time(projected), mask_tm, (c_0, m_0), (units, (units,) * 6, units),
            backwards=False, zero_padding=(True, False, False))

        def gradient(d_outputs, d_c_last, d_m_last):
            # At a real step the gradient reaching m_t is that of the output plus that of the next
            # step's state; at padding masked_step carries the state's gradient through, as the
            # forward pass carried the state, and gives the step no gradient.
            def backward_step(inputs_t, state):
                d_output_t, saved_t = inputs_t
                d_c, d_m = state
                d_z, d_c_prev = cell.activation_gradient(d_output_t + d_m, d_c, saved_t, delta)
                return d_z, (d_c_prev, tf.matmul(d_z, kernel_transposed))

            kernel_transposed = tf.transpose(kernel)
            d_c_last = tf.zeros_like(c_last) if d_c_last is None else d_c_last
            d_m_last = tf.zeros_like(m_last) if d_m_last is None else d_m_last
            d_z_array, (d_c_0, d_m_0) = _tensor_array_loop(
                backward_step, (swap_batch_time(d_outputs), saved_arrays), mask_tm, (d_c_last, d_m_last),
                4 * units, backwards=True, zero_padding=True)
            # Summed over time and batch: one product of [time x batch, units]^T and [time x batch, 4 units],
            # the transpose left to the product (tensordot would transpose the states in memory first).
            d_z_tm = d_z_array.stack()
            d_kernel = kernel_gradient(tf.reshape(m_prev_array.stack(), [-1, units]),
                                       tf.reshape(d_z_tm, [-1, 4 * units]))
            return swap_batch_time(d_z_tm), d_kernel, d_c_0, d_m_0

        return (swap_batch_time(output_array.stack()), c_last, m_last), gradient

    outputs, c_last, m_last = recurrence(projected, kernel, *initial_state)
    return outputs, (c_last, m_last)
