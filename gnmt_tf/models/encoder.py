"""The GNMT encoder (sections 3.1-3.2).

Layer 1 is bi-directional: a forward and a backward LSTM read the embedded
source and their outputs are concatenated (fig. 3). Layers 2..N are
uni-directional, with residual sums from ``residual_start`` up (eq. 6) and
the delta clipping of eq. 10.
"""

from __future__ import annotations

from typing import Optional, Sequence

import tensorflow as tf
import tf_keras as keras

from gnmt_tf.layers.cell import GNMTLSTMCell, cell_arguments
from gnmt_tf.config import ModelConfig
from gnmt_tf.layers.recurrence import WRITTEN_GRADIENT, Recurrence, run_lstm
from gnmt_tf.layers.stack import ResidualLSTMStack, build_sublayer
from gnmt_tf.layers.weights import FLOAT_READER, WeightReader


class GNMTEncoder(keras.layers.Layer):
    """Embedded source [batch, src, embedding] -> top encoder outputs [batch, src, width].

    ``width`` is ``units`` when there is more than one layer, otherwise the
    concatenated width of the two directions.
    """

    def __init__(self, config: ModelConfig, clip_delta: Optional[tf.Variable] = None,
                 devices: Optional[Sequence[str]] = None, **kwargs):
        """``devices``: one per encoder layer, the bi-directional bottom one first (model parallelism)."""
        super().__init__(**kwargs)
        self.config = config
        self.devices = tuple(devices) if devices is not None else (None,) * config.encoder_layers
        cell_args = cell_arguments(config, clip_delta)
        self.forward_cell = GNMTLSTMCell(config.direction_units, name="lstm_1_forward", **cell_args)
        self.backward_cell = GNMTLSTMCell(config.direction_units, name="lstm_1_backward", **cell_args)
        self.input_dropout = keras.layers.Dropout(config.dropout)
        self.upper = ResidualLSTMStack(
            num_layers=config.encoder_layers - 1,
            units=config.units,
            first_layer=2,
            residual_start=config.residual_start,
            dropout=config.dropout,
            devices=self.devices[1:],
            name="upper_layers",
            **cell_args,
        )

    @property
    def output_width(self) -> int:
        if self.config.encoder_layers > 1:
            return self.config.units
        return 2 * self.config.direction_units

    def build(self, input_shape):
        build_sublayer(self.forward_cell, (None, input_shape[-1]), self.devices[0])
        build_sublayer(self.backward_cell, (None, input_shape[-1]), self.devices[0])
        build_sublayer(self.upper, (None, None, 2 * self.config.direction_units))
        super().build(input_shape)

    def call(self, embedded: tf.Tensor, mask: tf.Tensor, weights: WeightReader = FLOAT_READER, training=None,
             recurrence: Recurrence = WRITTEN_GRADIENT) -> tf.Tensor:
        """``weights``: the reader of the cells' kernels (:mod:`gnmt_tf.layers.weights`). ``recurrence``: how
        each layer runs over time (:mod:`gnmt_tf.layers.recurrence`)."""
        bottom = self.bottom_layer(embedded, mask, weights, recurrence, training=training)
        return self.upper(bottom, mask=mask, weights=weights, training=training, recurrence=recurrence)

    def bottom_layer(self, embedded: tf.Tensor, mask: tf.Tensor, weights: WeightReader, recurrence: Recurrence,
                     training=None) -> tf.Tensor:
        """Layer 1: embedded source -> the two directions' outputs concatenated (fig. 3)."""
        lengths = tf.reduce_sum(tf.cast(mask, tf.int32), axis=1)
        x = self.input_dropout(embedded, training=training)
        forward, _ = run_lstm(self.forward_cell, x, mask, weights, recurrence)
        # Reverse only the real tokens of each sentence so that right-padding
        # stays at the end and cannot reach the backward LSTM's real outputs.
        reversed_x = tf.reverse_sequence(x, lengths, seq_axis=1, batch_axis=0)
        backward, _ = run_lstm(self.backward_cell, reversed_x, mask, weights, recurrence)
        backward = tf.reverse_sequence(backward, lengths, seq_axis=1, batch_axis=0)
        return tf.concat([forward, backward], axis=-1)  # fig. 3
