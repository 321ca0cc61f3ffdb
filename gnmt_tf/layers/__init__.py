"""The building blocks of section 3: the LSTM cell of eq. 10-11, the masked time step, the residual stack, attention.

Every method that computes reads its kernels and embedding tables through the
:class:`WeightReader` it is given as ``weights`` (float, fake-quantized or int8 weights).
"""

from gnmt_tf.layers.attention import AdditiveAttention, AttentionMemory
from gnmt_tf.layers.cell import GNMTLSTMCell, uniform_initializer
from gnmt_tf.layers.clipping import clip, clip_logits
from gnmt_tf.layers.recurrence import TENSOR_ARRAY_LOOP, LSTMState, masked_step, run_lstm, run_over_time
from gnmt_tf.layers.stack import ResidualLSTMStack
from gnmt_tf.layers.weights import FLOAT_READER, FLOAT_WEIGHTS, WeightReader, WeightTransform

__all__ = [
    "AdditiveAttention", "AttentionMemory", "FLOAT_READER", "FLOAT_WEIGHTS", "GNMTLSTMCell", "LSTMState",
    "ResidualLSTMStack", "TENSOR_ARRAY_LOOP", "WeightReader", "WeightTransform", "clip", "clip_logits",
    "masked_step", "run_lstm", "run_over_time", "uniform_initializer",
]
