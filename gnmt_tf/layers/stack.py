"""The residual LSTM stack (eq. 6 and 10), and building sublayers in place.

``ResidualLSTMStack.call`` runs whole sequences (training, encoding), each layer
run over time by the :class:`~gnmt_tf.layers.recurrence.Recurrence` it is given;
``ResidualLSTMStack.step`` is the one-step path that decoding uses. Both use the same cell math and the same
:meth:`~ResidualLSTMStack.layer_input` / :meth:`~ResidualLSTMStack.layer_output`,
which the model-parallel wavefront (section 3.3) calls too.
"""

from __future__ import annotations

import contextlib
from typing import List, Optional, Sequence, Tuple

import tensorflow as tf
import tf_keras as keras

from gnmt_tf.layers.cell import GNMTLSTMCell
from gnmt_tf.layers.clipping import clip
from gnmt_tf.layers.recurrence import WRITTEN_GRADIENT, LSTMState, Recurrence, run_lstm
from gnmt_tf.layers.weights import FLOAT_READER, WeightReader


def device_scope(device: Optional[str]):
    """``tf.device(device)``, or no scope for None (one device)."""
    return tf.device(device) if device else contextlib.nullcontext()


def build_sublayer(layer: keras.layers.Layer, input_shape, device: Optional[str] = None) -> None:
    """Build a sublayer that is used through methods rather than ``__call__``.

    Weights get the sublayer's name as their scope, as ``__call__`` would give them,
    and are created on ``device`` (model parallelism, section 3.3) when one is given.
    """
    if not layer.built:
        with tf.name_scope(layer.name), device_scope(device):
            layer.build(tf.TensorShape(input_shape))


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
        devices: Optional[Sequence[str]] = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if devices is not None and len(devices) != num_layers:
            raise ValueError(f"{len(devices)} devices for {num_layers} layers")
        # Where each layer's weights live (model parallelism, section 3.3); None: one device.
        self.devices = tuple(devices) if devices is not None else (None,) * num_layers
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
            build_sublayer(cell, (None, width + self.context_units), self.devices[k])
            if self._shared_delta is None:
                self._shared_delta = cell.clip_delta
            width = self.units
        super().build(input_shape)

    @property
    def clip_delta(self) -> tf.Variable:
        return self._shared_delta

    def layer_output(self, k: int, layer_output: tf.Tensor, layer_input: tf.Tensor) -> tf.Tensor:
        """x^i of layer ``k``: the clipped residual sum from ``residual_start`` up (eq. 6, 10), else m^i."""
        if self.has_residual(k):
            return clip(layer_output + layer_input, self._shared_delta)  # eq. 10
        return layer_output

    def layer_input(self, k: int, x: tf.Tensor, context: Optional[tf.Tensor] = None, training=None) -> tf.Tensor:
        """What layer ``k`` reads: x^(i-1), the attention context concatenated (decoder), dropout applied."""
        if context is not None:
            x = tf.concat([x, context], axis=-1)
        if training is False:  # decoding steps: no dropout op in the graph
            return x
        return self.dropouts[k](x, training=training)

    def call(
        self,
        inputs: tf.Tensor,
        mask: tf.Tensor,
        context: Optional[tf.Tensor] = None,
        weights: WeightReader = FLOAT_READER,
        training=None,
        recurrence: Recurrence = WRITTEN_GRADIENT,
    ) -> tf.Tensor:
        """Whole sequences: ``inputs`` [batch, time, features] -> top output x^N.

        ``weights``: the reader of the cells' kernels (:mod:`gnmt_tf.layers.weights`). ``recurrence``:
        how each layer runs over time (:mod:`gnmt_tf.layers.recurrence`).
        """
        x = inputs
        for k, cell in enumerate(self.cells):
            layer_input = self.layer_input(k, x, context, training)
            outputs, _ = run_lstm(cell, layer_input, mask, weights, recurrence)
            x = self.layer_output(k, outputs, x)
        return x

    def step(
        self,
        inputs: tf.Tensor,
        states: Sequence[LSTMState],
        weights: WeightReader,
        context: Optional[tf.Tensor] = None,
    ) -> Tuple[tf.Tensor, Tuple[LSTMState, ...]]:
        """One time step for decoding: ``inputs`` [batch, features] -> (x^N, new states)."""
        x = inputs
        new_states = []
        for k, cell in enumerate(self.cells):
            projected = cell.project_inputs(self.layer_input(k, x, context, training=False), weights)
            output, state = cell.recur(projected, states[k], weights)
            new_states.append(state)
            x = self.layer_output(k, output, x)
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
