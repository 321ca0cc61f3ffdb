"""Section 6: int8 weights (eq. 12), int8 products, quantization-aware training.

The int8 arithmetic is in :mod:`~gnmt_tf.quantization.int8`; the weight transforms a
model computes with (through a :class:`gnmt_tf.layers.weights.WeightReader`) are
:class:`~gnmt_tf.quantization.weights.Int8Weights`,
:class:`~gnmt_tf.quantization.weights.FakeQuantizedWeights` and
:class:`~gnmt_tf.quantization.qat.QuantizationAwareTraining` (imported from its
module: it loads tensorflow-model-optimization).
"""

from gnmt_tf.quantization.weights import FakeQuantizedWeights, Int8Weights

__all__ = ["FakeQuantizedWeights", "Int8Weights"]
