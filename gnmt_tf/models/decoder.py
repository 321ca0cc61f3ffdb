"""The GNMT decoder (section 3, fig. 1).

The bottom decoder layer's output queries the attention; the resulting
context is concatenated to the input of every layer above it ("sent directly
to all the remaining decoder layers", fig. 1). With ``input_feeding`` the
bottom layer also reads the previous step's context. Layers from
``residual_start`` up add their input (without the context) to their output
and clip the sum (eq. 6, 10). The top output goes through dropout and the
softmax projection, whose logits are clipped to [-gamma, gamma] (eq. 13).

Two paths share all of this math:

* :meth:`GNMTDecoder.call`: teacher forcing over whole target sequences.
  Without input feeding, nothing in the bottom layer depends on attention,
  so the bottom layer runs over the whole sequence, then attention for all
  positions at once, then each upper layer.
* :meth:`GNMTDecoder.step`: one token per sentence, for beam search and sampling.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import tensorflow as tf
import tf_keras as keras

from gnmt_tf.layers.attention import AdditiveAttention, AttentionMemory
from gnmt_tf.layers.cell import GNMTLSTMCell, uniform_initializer
from gnmt_tf.config import ModelConfig
from gnmt_tf.quantization.weights import dense_product
from gnmt_tf.layers.stack import LSTMState, ResidualLSTMStack, build_sublayer, placement_scope, run_over_time


class DecoderState(NamedTuple):
    """Everything one decoding step needs besides the previous token.

    A nest of tensors whose leading dimension is the batch, so beam search can
    tile and reorder it with ``tf.nest.map_structure``.
    """

    layers: Tuple[LSTMState, ...]  # (c, m) for decoder layers 1..N
    context: tf.Tensor  # [batch, encoder_width]: the last attention context
    memory: AttentionMemory  # the encoded source sentence


class GNMTDecoder(keras.layers.Layer):
    """Embedded target inputs + encoder memory -> clipped logits."""

    def __init__(self, config: ModelConfig, encoder_width: int, clip_delta: Optional[tf.Variable] = None, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.encoder_width = encoder_width
        cell_args = dict(
            form=config.cell,
            forget_bias=config.forget_bias,
            init_scale=config.init_scale,
            clip_delta=clip_delta,
            initial_delta=config.clip_delta,
        )
        self.bottom_cell = GNMTLSTMCell(config.units, name="lstm_1", **cell_args)
        self.input_dropout = keras.layers.Dropout(config.dropout)
        self.attention = AdditiveAttention(config.attention_units, init_scale=config.init_scale, name="attention")
        self.upper = ResidualLSTMStack(
            num_layers=config.decoder_layers - 1,
            units=config.units,
            first_layer=2,
            residual_start=config.residual_start,
            context_units=encoder_width,
            dropout=config.dropout,
            name="upper_layers",
            **cell_args,
        )
        self.output_dropout = keras.layers.Dropout(config.dropout)
        self.softmax_projection = keras.layers.Dense(
            config.vocab_size,
            kernel_initializer=uniform_initializer(config.init_scale),
            bias_initializer=uniform_initializer(config.init_scale),
            name="softmax",
        )

    def build(self, input_shape):
        embedding_dim = int(input_shape[-1])
        bottom_input = embedding_dim + (self.encoder_width if self.config.input_feeding else 0)
        build_sublayer(self.bottom_cell, (None, bottom_input))
        with placement_scope(self.attention):
            self.attention.build_for(self.config.units, self.encoder_width)
        build_sublayer(self.upper, (None, None, self.config.units))
        build_sublayer(self.softmax_projection, (None, self.config.units))
        super().build(input_shape)

    # ----------------------------------------------------------------- shared pieces
    def _logits(self, top: tf.Tensor, training=None) -> tf.Tensor:
        logits = dense_product(self.softmax_projection, self.output_dropout(top, training=training))
        gamma = tf.cast(self.config.logit_clip, logits.dtype)
        return tf.clip_by_value(logits, -gamma, gamma)  # eq. 13

    def _bottom_input(self, embedded: tf.Tensor, previous_context: tf.Tensor) -> tf.Tensor:
        if self.config.input_feeding:
            return tf.concat([embedded, previous_context], axis=-1)
        return embedded

    # ----------------------------------------------------------------- teacher forcing
    def call(
        self, embedded: tf.Tensor, mask: tf.Tensor, memory: AttentionMemory, training=None
    ) -> Tuple[tf.Tensor, tf.Tensor]:
        """Whole target sequences -> (logits [B, T, V], attention probs [B, T, S])."""
        x = self.input_dropout(embedded, training=training)
        if self.config.input_feeding:
            bottom, contexts, probs = self._bottom_with_input_feeding(x, mask, memory)
        else:
            bottom, _ = run_over_time(self.bottom_cell, x, mask)
            contexts, probs = self.attention.attend(bottom, memory)
        top = self.upper(bottom, mask=mask, context=contexts, training=training)
        return self._logits(top, training=training), probs

    def _bottom_with_input_feeding(self, x, mask, memory):
        """Bottom layer and attention in one loop: step t reads the context of step t-1."""
        batch = tf.shape(x)[0]
        initial = self.bottom_cell.get_initial_state(batch_size=batch, dtype=x.dtype)
        initial_context = tf.zeros([batch, self.encoder_width], dtype=x.dtype)

        def step(x_t, states):
            c, m, previous_context = states
            cell_input = self.bottom_cell.project_inputs(self._bottom_input(x_t, previous_context))
            output, (c, m) = self.bottom_cell.recur(cell_input, (c, m))
            context, probs = self.attention.attend_step(output, memory)
            return tf.concat([output, context, probs], axis=-1), [c, m, context]

        _, outputs, _ = keras.backend.rnn(
            step, x, [initial[0], initial[1], initial_context], mask=mask, zero_output_for_mask=True
        )
        units = self.config.units
        bottom = outputs[:, :, :units]
        contexts = outputs[:, :, units : units + self.encoder_width]
        probs = outputs[:, :, units + self.encoder_width :]
        return bottom, contexts, probs

    # ----------------------------------------------------------------- one step
    def initial_state(self, memory: AttentionMemory) -> DecoderState:
        batch = tf.shape(memory.values)[0]
        dtype = memory.values.dtype
        layers = (self.bottom_cell.get_initial_state(batch_size=batch, dtype=dtype),)
        layers += self.upper.get_initial_state(batch, dtype)
        context = tf.zeros([batch, self.encoder_width], dtype=dtype)
        return DecoderState(layers=layers, context=context, memory=memory)

    def step(self, state: DecoderState, embedded: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor, DecoderState]:
        """One token per sentence: embedded [B, E] -> (logits [B, V], probs [B, S], new state)."""
        bottom_input = self._bottom_input(embedded, state.context)
        bottom, bottom_state = self.bottom_cell.recur(
            self.bottom_cell.project_inputs(bottom_input), state.layers[0]
        )
        context, probs = self.attention.attend_step(bottom, state.memory)
        top, upper_states = self.upper.step(bottom, state.layers[1:], context=context)
        new_state = DecoderState(layers=(bottom_state,) + upper_states, context=context, memory=state.memory)
        return self._logits(top), probs, new_state
