"""The LSTM cell of eq. 11 with the cell-state clipping of eq. 10.

Gate order in the fused kernels follows eq. 11: ``[i, i', f, o]`` (input gate,
candidate, forget gate, output gate), so ``kernel[:, k*units:(k+1)*units]`` is
W_{2k+1} and ``recurrent_kernel[...]`` is W_{2k+2}.

Two forms (``ModelConfig.cell``):

* ``"paper"``: eq. 11 as written: no biases, ``c = f*c + i*i'``, ``m = c*o``.
* ``"standard"``: biases, a constant ``forget_bias`` on the forget gate and
  ``m = o*tanh(c)``.

Both clip the new cell state to [-delta, delta] every step (eq. 10); delta is a
non-trainable variable, usually shared by the whole model so that training can
anneal it from 8 to 1 and inference fixes it at 1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence, Tuple

import tensorflow as tf
import tf_keras as keras

from gnmt_tf.layers.clipping import clip
from gnmt_tf.layers.weights import FLOAT_READER, WeightReader

if TYPE_CHECKING:
    from gnmt_tf.config import ModelConfig


def uniform_initializer(scale: float) -> keras.initializers.Initializer:
    """Section 8.3: every trainable parameter starts uniform in [-scale, scale].

    Call once per weight: Keras gives identical values to every weight that
    shares one unseeded initializer instance.
    """
    return keras.initializers.RandomUniform(-scale, scale)


def cell_arguments(config: "ModelConfig", clip_delta: Optional[tf.Variable]) -> Dict[str, Any]:
    """The keyword arguments every LSTM cell of a model with ``config`` is made with (and every
    :class:`~gnmt_tf.layers.stack.ResidualLSTMStack`, which passes them to its cells): the cell form,
    its forget bias and initial scale, and delta, ``clip_delta`` shared by the whole model (eq. 10)."""
    return dict(
        form=config.cell,
        forget_bias=config.forget_bias,
        init_scale=config.init_scale,
        clip_delta=clip_delta,
        initial_delta=config.clip_delta,
    )


@keras.saving.register_keras_serializable(package="gnmt_tf")
class GNMTLSTMCell(keras.layers.Layer):
    """One LSTM layer's step function, eq. 10-11.

    The step is split in two so that sequence loops can hoist the input
    product out of time (one large matmul over all steps, an identity that
    changes no output):

    * :meth:`project_inputs` computes ``W_odd x`` (plus the bias) for any
      leading shape;
    * :meth:`recur` takes that projection and the state ``(c, m)`` and returns
      ``(m, (c, m))``.

    Both read their kernel through the :class:`~gnmt_tf.layers.weights.WeightReader` they are
    given (float, fake-quantized for quantization-aware training, or int8, section 6).
    ``cell(x, (c, m))`` does both, like a Keras RNN cell (float weights unless ``weights`` is given).
    """

    def __init__(
        self,
        units: int,
        form: str = "paper",
        forget_bias: float = 0.0,
        init_scale: float = 0.04,
        clip_delta: Optional[tf.Variable] = None,
        initial_delta: float = 1.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if form not in ("paper", "standard"):
            raise ValueError(f"form must be 'paper' or 'standard', got {form!r}")
        if form == "paper" and forget_bias:
            raise ValueError("the 'paper' cell has no biases (eq. 11); forget_bias must be 0")
        self.units = units
        self.form = form
        self.forget_bias = forget_bias
        self.init_scale = init_scale
        self.initial_delta = initial_delta
        self.state_size = (units, units)
        self.output_size = units
        # A shared delta is passed in by the model; a standalone cell owns one.
        self._shared_delta = clip_delta

    def build(self, input_shape):
        input_dim = int(input_shape[-1])
        self.kernel = self.add_weight("kernel", shape=(input_dim, 4 * self.units), initializer=uniform_initializer(self.init_scale))
        self.recurrent_kernel = self.add_weight(
            "recurrent_kernel", shape=(self.units, 4 * self.units), initializer=uniform_initializer(self.init_scale)
        )
        self.bias = (
            self.add_weight("bias", shape=(4 * self.units,), initializer=uniform_initializer(self.init_scale)) if self.form == "standard" else None
        )
        if self._shared_delta is None:
            self._shared_delta = self.add_weight(
                "clip_delta",
                shape=(),
                initializer=keras.initializers.Constant(self.initial_delta),
                trainable=False,
            )
        super().build(input_shape)

    @property
    def clip_delta(self) -> tf.Variable:
        return self._shared_delta

    def project_inputs(self, inputs: tf.Tensor, weights: WeightReader) -> tf.Tensor:
        """``W_1 x, W_3 x, W_5 x, W_7 x`` stacked on the last axis (plus the bias)."""
        projected = weights.product(inputs, self.kernel)  # [batch, time, features]: one product for all steps
        if self.bias is not None:
            projected = projected + self.bias
        return projected

    def recur(self, projected_inputs: tf.Tensor, state: Tuple[tf.Tensor, tf.Tensor], weights: WeightReader):
        """One step of eq. 11 given ``project_inputs(x_t)``; returns ``(m_t, (c_t, m_t))``."""
        c_prev, m_prev = state
        z = projected_inputs + weights.product(m_prev, self.recurrent_kernel)
        m, c, _ = self.activate(z, c_prev, self._shared_delta)
        return m, (c, m)

    def activate(self, z: tf.Tensor, c_prev: tf.Tensor, delta):
        """Eq. 10-11 from the gates' pre-activations ``z`` [batch, 4 units] (``W_odd x_t + W_even m_{t-1}``,
        plus the bias) and ``c_{t-1}``.

        Returns ``(m_t, c_t, parts)``; ``parts``: the gates ``i, i', f, o`` and the cell state before
        eq. 10's clip, each [batch, units], which :meth:`activation_gradient` needs (with ``c_{t-1}``).
        """
        z_i, z_j, z_f, z_o = tf.split(z, 4, axis=-1)
        input_gate = tf.sigmoid(z_i)
        candidate = tf.tanh(z_j)
        forget_gate = tf.sigmoid(z_f + self.forget_bias) if self.forget_bias else tf.sigmoid(z_f)
        output_gate = tf.sigmoid(z_o)
        unclipped = c_prev * forget_gate + candidate * input_gate
        c = clip(unclipped, delta)  # eq. 10
        m = c * output_gate if self.form == "paper" else output_gate * tf.tanh(c)
        return m, c, (input_gate, candidate, forget_gate, output_gate, unclipped)

    def activation_gradient(self, d_m: tf.Tensor, d_c: tf.Tensor, saved: Sequence[tf.Tensor], delta):
        """The gradient of :meth:`activate`: from dL/dm_t and dL/dc_t to ``(dL/dz, dL/dc_{t-1})``.

        ``saved``: the ``parts`` :meth:`activate` returned with m_t, then ``c_{t-1}`` (six [batch, units]).
        Eq. 10's clip passes the gradient where
        the unclipped state lies in [-delta, delta], as ``tf.clip_by_value``'s gradient does.
        """
        input_gate, candidate, forget_gate, output_gate, unclipped, c_prev = saved
        c = clip(unclipped, delta)
        if self.form == "paper":  # m = c * o
            d_o = d_m * c
            d_c = d_c + d_m * output_gate
        else:  # m = o * tanh(c)
            tanh_c = tf.tanh(c)
            d_o = d_m * tanh_c
            d_c = d_c + tf.raw_ops.TanhGrad(y=tanh_c, dy=d_m * output_gate)
        d_unclipped = tf.where(tf.abs(unclipped) <= tf.cast(delta, unclipped.dtype), d_c, tf.zeros_like(d_c))
        d_z = tf.concat([
            tf.raw_ops.SigmoidGrad(y=input_gate, dy=d_unclipped * candidate),
            tf.raw_ops.TanhGrad(y=candidate, dy=d_unclipped * input_gate),
            tf.raw_ops.SigmoidGrad(y=forget_gate, dy=d_unclipped * c_prev),
            tf.raw_ops.SigmoidGrad(y=output_gate, dy=d_o),
        ], axis=-1)
        return d_z, d_unclipped * forget_gate

    def call(self, inputs, states, weights: WeightReader = FLOAT_READER):
        return self.recur(self.project_inputs(inputs, weights), tuple(states), weights)

    def get_initial_state(self, inputs=None, batch_size=None, dtype=None):
        zeros = tf.zeros((batch_size, self.units), dtype=dtype or self.compute_dtype)
        return (zeros, zeros)

    def get_config(self):
        config = super().get_config()
        config.update(
            units=self.units,
            form=self.form,
            forget_bias=self.forget_bias,
            init_scale=self.init_scale,
            initial_delta=self.initial_delta,
        )
        return config
