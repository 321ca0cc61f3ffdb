"""Running LSTM cells over time, and the residual LSTM stack (eq. 6 and 10).

``run_over_time`` is the one time loop for whole sequences (training,
encoding); ``ResidualLSTMStack.step`` is the one-step path that decoding
uses. Both call the same :class:`~gnmt_tf.layers.cell.GNMTLSTMCell` math.

``run_over_time`` has two implementations of the same loop, with identical
results (the same ops on the same values at every step):

* the default, ``keras.backend.rnn``: TensorArrays, fast, and what training
  differentiates through;
* inside :func:`tflite_compatible_loops`, a ``tf.while_loop`` without
  TensorArrays that grows its outputs by concatenation. TFLite's converter
  cannot lower a TensorArray whose element shape is not static (the batch of
  an exported translator is dynamic) without Flex ops, but it converts this
  loop to builtin ops. Its cost grows with the square of the length (each
  step copies the outputs so far), so it is used only for export tracing.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator, List, Optional, Sequence, Tuple

import tensorflow as tf
import tf_keras as keras

from gnmt_tf.layers.cell import GNMTLSTMCell, clip

LSTMState = Tuple[tf.Tensor, tf.Tensor]


def placement_scope(layer: keras.layers.Layer):
    """``tf.device`` of the device model parallelism gave ``layer`` (section 3.3), else a no-op."""
    device = getattr(layer, "placement_device", None)
    return tf.device(device) if device else contextlib.nullcontext()


def build_sublayer(layer: keras.layers.Layer, input_shape) -> None:
    """Build a sublayer that is used through methods rather than ``__call__``.

    Weights get the sublayer's name as their scope, as ``__call__`` would give them,
    and are created on the layer's device when model parallelism placed it.
    """
    if not layer.built:
        with tf.name_scope(layer.name), placement_scope(layer):
            layer.build(tf.TensorShape(input_shape))


_LOOP_MODE = threading.local()


@contextlib.contextmanager
def tflite_compatible_loops() -> Iterator[None]:
    """Functions traced inside this context run sequences without TensorArrays (for TFLite).

    The choice is made when a graph is traced, so trace (``get_concrete_function``) inside it.
    """
    previous = getattr(_LOOP_MODE, "tflite", False)
    _LOOP_MODE.tflite = True
    try:
        yield
    finally:
        _LOOP_MODE.tflite = previous


def using_tflite_compatible_loops() -> bool:
    return getattr(_LOOP_MODE, "tflite", False)


def _loop_without_tensor_arrays(
    cell: GNMTLSTMCell, projected: tf.Tensor, mask: tf.Tensor, initial_state: LSTMState
) -> Tuple[tf.Tensor, LSTMState]:
    """``keras.backend.rnn`` with ``zero_output_for_mask=True``, written with TFLite builtins only.

    Same math as keras: at a masked step the output is 0 and the state is carried unchanged.
    The inputs are read time-major; the outputs grow batch-major by one step per iteration (a
    concat with a shape invariant). CHOICE: batch-major because TFLite's WHILE fails on a loop
    variable that starts empty along axis 0, while an empty axis 1 works.
    """
    projected_tm = tf.transpose(projected, [1, 0, 2])  # [time, batch, 4 units]
    mask_tm = tf.transpose(tf.cast(mask, tf.bool), [1, 0])  # [time, batch]
    steps = tf.shape(projected_tm)[0]
    c0, m0 = initial_state
    outputs = tf.zeros(tf.stack([tf.shape(projected)[0], 0, cell.units]), dtype=projected.dtype)

    def body(t, c, m, outputs):
        output, (new_c, new_m) = cell.recur(tf.gather(projected_tm, t), (c, m))
        mask_t = tf.expand_dims(tf.gather(mask_tm, t), 1)  # [batch, 1]
        output = tf.where(mask_t, output, tf.zeros_like(output))
        c = tf.where(mask_t, new_c, c)
        m = tf.where(mask_t, new_m, m)
        outputs = tf.concat([outputs, tf.expand_dims(output, 1)], axis=1)
        return t + 1, c, m, outputs

    units = tf.TensorShape([None, cell.units])
    _, c, m, outputs = tf.while_loop(
        lambda t, *_: t < steps,
        body,
        (tf.constant(0), c0, m0, outputs),
        shape_invariants=(tf.TensorShape([]), units, units, tf.TensorShape([None, None, cell.units])),
    )
    return outputs, (c, m)


def run_over_time(
    cell: GNMTLSTMCell,
    inputs: tf.Tensor,
    mask: tf.Tensor,
    initial_state: Optional[LSTMState] = None,
) -> Tuple[tf.Tensor, LSTMState]:
    """Run ``cell`` over ``inputs`` [batch, time, features].

    The input product of every step is computed up front in one matmul. At
    masked (padding) steps the state is carried through unchanged and the
    output is zero, so padding cannot change any real position.
    Returns (outputs [batch, time, units], final state). Inside
    :func:`tflite_compatible_loops` the loop is built without TensorArrays.
    """
    projected = cell.project_inputs(inputs)
    if initial_state is None:
        initial_state = cell.get_initial_state(batch_size=tf.shape(inputs)[0], dtype=inputs.dtype)
    if using_tflite_compatible_loops():
        return _loop_without_tensor_arrays(cell, projected, mask, tuple(initial_state))

    def step(projected_t, states):
        output, new_state = cell.recur(projected_t, tuple(states))
        return output, list(new_state)

    _, outputs, final_state = keras.backend.rnn(
        step, projected, list(initial_state), mask=mask, zero_output_for_mask=True
    )
    return outputs, tuple(final_state)


@keras.saving.register_keras_serializable(package="gnmt_tf")
class ResidualLSTMStack(keras.layers.Layer):
    """Uni-directional LSTM layers ``first_layer .. first_layer+num_layers-1`` of a stack.

    Layer ``i`` (1-based, counted in the whole encoder or decoder) reads
    ``x^(i-1)`` (and, in the decoder, the attention context concatenated to
    it) and produces ``m^i``; from ``residual_start`` up its output is the
    clipped residual sum ``x^i = clip(m^i + x^(i-1), delta)`` (eq. 6, 10),
    below it ``x^i = m^i``. ``context_units`` is the width of a context
    concatenated to every layer's input (0 for none). Dropout is applied to each layer's input, the
    non-recurrent connections only (Zaremba et al.).
    """

    def __init__(
        self,
        num_layers: int,
        units: int,
        first_layer: int,
        residual_start: int,
        context_units: int = 0,
        form: str = "paper",
        forget_bias: float = 0.0,
        dropout: float = 0.0,
        init_scale: float = 0.04,
        clip_delta: Optional[tf.Variable] = None,
        initial_delta: float = 1.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_layers = num_layers
        self.units = units
        self.first_layer = first_layer
        self.residual_start = residual_start
        self.context_units = context_units
        self.form = form
        self.forget_bias = forget_bias
        self.dropout_rate = dropout
        self.init_scale = init_scale
        self.initial_delta = initial_delta
        self._shared_delta = clip_delta
        self.cells: List[GNMTLSTMCell] = [
            GNMTLSTMCell(
                units,
                form=form,
                forget_bias=forget_bias,
                init_scale=init_scale,
                clip_delta=clip_delta,
                initial_delta=initial_delta,
                name=f"lstm_{first_layer + k}",
            )
            for k in range(num_layers)
        ]
        self.dropouts = [keras.layers.Dropout(dropout) for _ in range(num_layers)]

    def layer_number(self, k: int) -> int:
        """1-based position of ``self.cells[k]`` in its encoder or decoder."""
        return self.first_layer + k

    def has_residual(self, k: int) -> bool:
        return self.layer_number(k) >= self.residual_start

    def build(self, input_shape):
        width = int(input_shape[-1])
        for k, cell in enumerate(self.cells):
            if self.has_residual(k) and width != self.units:
                raise ValueError(
                    f"layer {self.layer_number(k)} has a residual connection but its input has "
                    f"{width} features and its output {self.units}; they must match (eq. 6)"
                )
            build_sublayer(cell, (None, width + self.context_units))
            if self._shared_delta is None:
                self._shared_delta = cell.clip_delta
            width = self.units
        super().build(input_shape)

    @property
    def clip_delta(self) -> tf.Variable:
        return self._shared_delta

    def _combine(self, k: int, layer_output: tf.Tensor, layer_input: tf.Tensor) -> tf.Tensor:
        if self.has_residual(k):
            return clip(layer_output + layer_input, self._shared_delta)  # eq. 10
        return layer_output

    def _cell_input(self, k: int, x: tf.Tensor, context: Optional[tf.Tensor], training) -> tf.Tensor:
        if context is not None:
            x = tf.concat([x, context], axis=-1)
        return self.dropouts[k](x, training=training)

    def call(
        self,
        inputs: tf.Tensor,
        mask: tf.Tensor,
        context: Optional[tf.Tensor] = None,
        training=None,
    ) -> tf.Tensor:
        """Whole sequences: ``inputs`` [batch, time, features] -> top output x^N."""
        x = inputs
        for k, cell in enumerate(self.cells):
            outputs, _ = run_over_time(cell, self._cell_input(k, x, context, training), mask)
            x = self._combine(k, outputs, x)
        return x

    def step(
        self,
        inputs: tf.Tensor,
        states: Sequence[LSTMState],
        context: Optional[tf.Tensor] = None,
    ) -> Tuple[tf.Tensor, Tuple[LSTMState, ...]]:
        """One time step for decoding: ``inputs`` [batch, features] -> (x^N, new states)."""
        x = inputs
        new_states = []
        for k, cell in enumerate(self.cells):
            layer_input = x if context is None else tf.concat([x, context], axis=-1)
            output, state = cell.recur(cell.project_inputs(layer_input), states[k])
            new_states.append(state)
            x = self._combine(k, output, x)
        return x, tuple(new_states)

    def get_initial_state(self, batch_size, dtype=tf.float32) -> Tuple[LSTMState, ...]:
        return tuple(cell.get_initial_state(batch_size=batch_size, dtype=dtype) for cell in self.cells)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_layers=self.num_layers,
            units=self.units,
            first_layer=self.first_layer,
            residual_start=self.residual_start,
            context_units=self.context_units,
            form=self.form,
            forget_bias=self.forget_bias,
            dropout=self.dropout_rate,
            init_scale=self.init_scale,
            initial_delta=self.initial_delta,
        )
        return config
