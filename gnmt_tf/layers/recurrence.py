"""The masked time step, and running it over whole sequences.

Every recurrence of the model over a padded batch is one function of one time step,
``step(inputs_t, state) -> (outputs_t, new_state)``, made padding-proof by
:func:`masked_step`: at a padding position the outputs are 0 and the state is carried
through unchanged, so padding can never change a real position. Users:

* :func:`run_lstm`: an LSTM layer over a sequence (encoder, decoder layers in teacher
  forcing), its input product hoisted out of time into one matmul (an identity), and in
  training its gradient written out (:func:`lstm_over_time`: back-propagation through time
  is one more masked loop, backwards);
* the decoder's bottom layer with input feeding, whose step also attends
  (:meth:`gnmt_tf.models.decoder.GNMTDecoder.feed_bottom_step`);
* the model-parallel wavefront (:mod:`gnmt_tf.parallel.model_parallel`), which calls
  :func:`masked_step` for each layer at each diagonal.

How the steps are iterated is a separate, explicit choice, a *time loop* passed to
:func:`run_over_time`: :data:`TENSOR_ARRAY_LOOP` (the default: a ``tf.while_loop``
with TensorArrays, what training differentiates through) or another loop with the
same contract, such as the TFLite exporter's loop without TensorArrays
(``export.tflite.CONCATENATING_LOOP``). Both apply the same steps to the same values.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

import tensorflow as tf

from gnmt_tf.layers.weights import FLOAT_READER

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


class TensorArrayLoop:
    """Time steps in a ``tf.while_loop`` reading and writing TensorArrays: fast, differentiable.

    ``loop(step, inputs_tm, mask_tm, initial_state, output_sizes)`` runs
    :func:`masked_step` for t = 0 .. time-1 on time-major inputs (a nest of [time, batch, ...])
    and a time-major mask [time, batch]; returns (time-major outputs, final state).
    ``output_sizes`` (the last dimension of each output) is part of the contract for loops
    that must allocate their outputs up front; this one does not need it.
    """

    def __call__(self, step: Step, inputs_tm, mask_tm: tf.Tensor, initial_state, output_sizes,
                 backwards: bool = False, stacked: bool = True, zero_padding=True):
        """``backwards``: run t = time-1 .. 0 instead (back-propagation through time), reading and
        writing position t, so the outputs are in the inputs' order and nothing is reversed.
        ``stacked=False`` returns the outputs as the TensorArrays the loop wrote, which another loop
        can take as inputs as they are (an input may be a tensor or such an array).
        ``zero_padding``: which outputs are 0 at padding (:func:`masked_step`; default all)."""
        steps = tf.shape(mask_tm)[0]
        input_arrays = tf.nest.map_structure(
            lambda x: x if isinstance(x, tf.TensorArray)
            else tf.TensorArray(x.dtype, size=steps, element_shape=x.shape[1:]).unstack(x), inputs_tm
        )
        mask_array = tf.TensorArray(tf.bool, size=steps, element_shape=mask_tm.shape[1:]).unstack(
            tf.cast(mask_tm, tf.bool)
        )
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
        if not stacked:
            return output_arrays, final_state
        return tf.nest.map_structure(lambda array: array.stack(), output_arrays), final_state


TENSOR_ARRAY_LOOP = TensorArrayLoop()


def _swap_batch_time(x: tf.Tensor) -> tf.Tensor:
    return tf.transpose(x, [1, 0] + list(range(2, x.shape.rank)))


def run_over_time(step: Step, inputs, mask: tf.Tensor, initial_state, output_sizes, loop=None):
    """Run ``step`` over batch-major ``inputs`` (a nest of [batch, time, ...]) with ``mask`` [batch, time].

    Returns (batch-major outputs, final state). ``output_sizes`` is a nest shaped like the
    step's outputs holding each output's last dimension (an int or a scalar tensor).
    ``loop`` is the time loop (default :data:`TENSOR_ARRAY_LOOP`).
    """
    loop = loop or TENSOR_ARRAY_LOOP
    inputs_tm = tf.nest.map_structure(_swap_batch_time, inputs)
    mask_tm = tf.transpose(tf.cast(mask, tf.bool), [1, 0])
    outputs_tm, final_state = loop(step, inputs_tm, mask_tm, initial_state, output_sizes)
    return tf.nest.map_structure(_swap_batch_time, outputs_tm), final_state


def run_lstm(cell, inputs: tf.Tensor, mask: tf.Tensor, weights, initial_state: Optional[LSTMState] = None,
             loop=None):
    """An LSTM layer (:class:`gnmt_tf.layers.cell.GNMTLSTMCell`) over ``inputs`` [batch, time, features].

    The input product of every step is computed up front in one matmul (an identity that
    changes no output). ``weights``: the :class:`gnmt_tf.layers.weights.WeightReader` the
    cell's products read through. Returns (outputs [batch, time, units], final state (c, m)).
    """
    return run_projected_lstm(cell, cell.project_inputs(inputs, weights), mask, weights, initial_state, loop)


def run_projected_lstm(cell, projected: tf.Tensor, mask: tf.Tensor, weights,
                       initial_state: Optional[LSTMState] = None, loop=None):
    """:func:`run_lstm` given the input product of every step, ``cell.project_inputs(inputs, weights)``.

    With the default loop and a reader whose recurrent products are float products, the layer runs
    as :func:`lstm_over_time`: the same steps, with the gradient of the whole sequence written out
    (what training differentiates). Otherwise (a ``loop`` given, int8 products, a search's read-once
    snapshot) each step is ``cell.recur`` through :func:`run_over_time`.
    """
    if initial_state is None:
        initial_state = cell.get_initial_state(batch_size=tf.shape(projected)[0], dtype=projected.dtype)
    kernel = weights.sequence_kernel(cell.recurrent_kernel) if loop is None else None
    if kernel is not None:
        return lstm_over_time(cell, projected, mask, tf.convert_to_tensor(kernel), tuple(initial_state),
                              weights.kernel_gradient)
    return run_over_time(lambda projected_t, state: cell.recur(projected_t, state, weights), projected, mask,
                         tuple(initial_state), cell.units, loop)


def lstm_over_time(cell, projected: tf.Tensor, mask: tf.Tensor, kernel: tf.Tensor, initial_state: LSTMState,
                   kernel_gradient: Callable[[tf.Tensor, tf.Tensor], tf.Tensor] = FLOAT_READER.kernel_gradient):
    """An LSTM layer over ``projected`` [batch, time, 4 units] (its input products) whose gradient is
    back-propagation through time written out, rather than derived op by op.

    The forward pass is :func:`masked_step` of ``cell.activate`` in :data:`TENSOR_ARRAY_LOOP`, the same
    numbers as ``cell.recur`` with ``kernel`` (the recurrent kernel's values). The backward pass is
    one more masked loop, backwards in time, over what each forward step saved (its gates, the
    unclipped cell state and the previous state: ``cell.activation_gradient``), and the kernel's gradient
    is one product over all steps, ``kernel_gradient(m_prev, d_z)`` (the weight reader's: in bfloat16
    where the step's large products are). Derived op by op, the while loop's gradient instead stacks ~30
    intermediates per step and runs ~180 small ops per step back (many more ops to trace and to run;
    benchmarks/README.md, "Training step"). Returns (outputs [batch, time, units], final state (c, m)).

    Without a gradient (dev loss, forced scoring) the saved records are written and not read: seven
    more TensorArray writes per step (no copies), which searches avoid (their read-once
    reader takes the step-by-step path).
    """
    delta = tf.convert_to_tensor(cell.clip_delta)
    mask_tm = tf.transpose(tf.cast(mask, tf.bool), [1, 0])
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
        (output_array, saved_arrays, m_prev_array), (c_last, m_last) = TENSOR_ARRAY_LOOP(
            forward_step, _swap_batch_time(projected), mask_tm, (c_0, m_0), (units, (units,) * 6, units),
            stacked=False, zero_padding=(True, False, False))

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
            d_z_tm, (d_c_0, d_m_0) = TENSOR_ARRAY_LOOP(
                backward_step, (_swap_batch_time(d_outputs), saved_arrays), mask_tm, (d_c_last, d_m_last), 4 * units,
                backwards=True)
            # Summed over time and batch: one product of [time x batch, units]^T and [time x batch, 4 units],
            # the transpose left to the product (tensordot would transpose the states in memory first).
            d_kernel = kernel_gradient(tf.reshape(m_prev_array.stack(), [-1, units]),
                                       tf.reshape(d_z_tm, [-1, 4 * units]))
            return _swap_batch_time(d_z_tm), d_kernel, d_c_0, d_m_0

        return (_swap_batch_time(output_array.stack()), c_last, m_last), gradient

    outputs, c_last, m_last = recurrence(projected, kernel, *initial_state)
    return outputs, (c_last, m_last)
