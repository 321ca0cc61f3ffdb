"""The building blocks of section 3: the LSTM cell of eq. 10-11, the masked time step, the residual stack, attention.

Every method that computes reads its kernels and embedding tables through the
:class:`WeightReader` it is given as ``weights`` (float, fake-quantized or int8 weights).
"""

from gnmt_tf.layers.attention import AdditiveAttention, AttentionMemory
from gnmt_tf.layers.cell import GNMTLSTMCell, uniform_initializer
from gnmt_tf.layers.clipping import clip, clip_logits
from gnmt_tf.layers.recurrence import (
    STEPWISE, TENSOR_ARRAY_LOOP, WRITTEN_GRADIENT, LSTMState, Recurrence, StepwiseRecurrence,
    WrittenGradientRecurrence, masked_step, run_lstm,
)
from gnmt_tf.layers.stack import ResidualLSTMStack
from gnmt_tf.layers.weights import FLOAT_READER, FLOAT_WEIGHTS, WeightReader, WeightTransform

__all__ = [
    "AdditiveAttention", "AttentionMemory", "FLOAT_READER", "FLOAT_WEIGHTS", "GNMTLSTMCell", "LSTMState",
    "Recurrence", "ResidualLSTMStack", "STEPWISE", "StepwiseRecurrence", "TENSOR_ARRAY_LOOP", "WRITTEN_GRADIENT",
    "WeightReader", "WeightTransform", "WrittenGradientRecurrence", "clip", "clip_logits", "masked_step",
    "run_lstm", "uniform_initializer",
]
