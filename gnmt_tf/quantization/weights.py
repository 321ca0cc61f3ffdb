"""Run a trained GNMT with int8 weights (section 6): eq. 12 storage and int8 products.

:class:`Int8Weights` holds a model's weights in int8 form, as new variables:

* every LSTM ``kernel`` / ``recurrent_kernel`` and the softmax kernel: int8
  codes with one float scale per output unit (eq. 12, or Marian's per-column
  7-sigma rule for comparison); their products run as
  :func:`gnmt_tf.quantization.int8.int8_matmul` (activations quantized on the fly,
  int32 accumulation). Section 6 quantizes exactly these: eq. 10-11 and the
  softmax weight ``W_s`` of eq. 13;
* the two embedding tables: int8 with one scale per token (eq. 12 applied to
  each row). A lookup has no product, so the looked-up rows are dequantized;
  this is storage only, and what makes the model about 4x smaller;
* everything else (attention, biases, delta) stays float32, as the paper
  keeps the attention model and the softmax itself in float.

The model's code is unchanged: inside ``with int8.active():`` its products
and lookups read the int8 variables instead of the float ones (see
:func:`kernel_product`, :func:`dense_product`, :func:`embedding_lookup`,
which every layer uses). Graphs traced inside the context capture only the
int8 variables for those weights, so a SavedModel of such a graph stores
int8::

    int8 = Int8Weights(model)
    with int8.active():
        logits, probs, state = model.step(state, tokens)
"""

from __future__ import annotations

import contextlib
import threading
from typing import Dict, Iterator, List, Optional, Tuple

import tensorflow as tf

from gnmt_tf.quantization import int8 as quantization

_ACTIVE = threading.local()

PRODUCTS = ("int8", "float")


def _active_weights() -> Optional["Int8Weights"]:
    stack = getattr(_ACTIVE, "stack", None)
    return stack[-1] if stack else None


def _matmul(x: tf.Tensor, kernel) -> tf.Tensor:
    if x.shape.rank == 2:
        return tf.matmul(x, kernel)
    return tf.tensordot(x, kernel, axes=1)  # [batch, time, features]: one product for all steps


def kernel_product(x: tf.Tensor, kernel: tf.Variable) -> tf.Tensor:
    """``x @ kernel`` for any leading shape of ``x``; int8 when an :class:`Int8Weights` is active for it."""
    weights = _active_weights()
    parts = weights.kernel_parts(kernel) if weights is not None else None
    if parts is None:
        return _matmul(x, kernel)
    if isinstance(parts, tf.Tensor):  # products="float": the kernel dequantized once
        return _matmul(x, parts)
    return quantization.int8_matmul(x, *parts)


def dense_product(layer, x: tf.Tensor) -> tf.Tensor:
    """A built ``keras.layers.Dense`` (no activation) applied to ``x``, with its kernel int8 when active."""
    weights = _active_weights()
    if weights is None or weights.kernel_parts(layer.kernel) is None:
        return layer(x)
    y = kernel_product(x, layer.kernel)
    return y + layer.bias if layer.use_bias else y


def embedding_lookup(layer, ids) -> tf.Tensor:
    """A built ``keras.layers.Embedding`` looked up at ``ids``; dequantized int8 rows when active."""
    weights = _active_weights()
    parts = weights.embedding_parts(layer.embeddings) if weights is not None else None
    if parts is None:
        return layer(ids)
    codes, scales = parts
    ids = tf.convert_to_tensor(ids)
    rows = tf.cast(tf.gather(codes, ids), tf.float32)
    return rows * tf.expand_dims(tf.gather(scales, ids) * (1.0 / quantization.QMAX), -1)


class Int8Weights(tf.Module):
    """A GNMT's weights in int8 form (see the module docstring for which and how).

    Args:
        model: a built :class:`gnmt_tf.models.gnmt.GNMT`. Its float weights are read once
            here; later changes to the model are not seen.
        method: ``"per_row"`` (eq. 12, the default) or ``"per_column_7sigma"``
            (Marian, with an offset per column) for the products' kernels.
            Embeddings always use eq. 12 per token.
        sigmas: the saturation width of ``"per_column_7sigma"``.
    """

    def __init__(self, model, method: str = "per_row", sigmas: float = 7.0, name: Optional[str] = None):
        super().__init__(name=name)
        if method not in quantization.METHODS:
            raise ValueError(f"method must be one of {quantization.METHODS}, got {method!r}")
        self.method = method
        # Lookup tables keyed by variable reference, set without tf.Module's attribute tracking
        # (which cannot hold such keys); the variables themselves are tracked in variables_int8.
        object.__setattr__(self, "_dequantized", None)  # set inside active(products="float")
        object.__setattr__(self, "_kernels", {})
        object.__setattr__(self, "_embeddings", {})
        self.variables_int8: List[tf.Variable] = []  # tracked, so they are saved with this module
        options = {"sigmas": sigmas} if method == "per_column_7sigma" else {}
        for kernel in quantization.quantized_kernel_variables(model):
            parts = quantization.quantize(kernel, method, axis=0, **options)
            self._kernels[kernel.ref()] = self._store(kernel, parts, ("q", "scale", "offset"))
        for layer in (model.source_embedding, model.target_embedding):
            table = layer.embeddings
            codes, scales = quantization.quantize_per_output_unit(table, axis=1)  # one scale per token row
            self._embeddings[table.ref()] = self._store(table, (codes, scales), ("q", "scale"))

    def _store(self, source: tf.Variable, parts, suffixes) -> Tuple[tf.Variable, ...]:
        base = source.name.split(":")[0].replace("/", "_")
        stored = tuple(
            tf.Variable(value, trainable=False, name=f"{base}_{suffix}") for value, suffix in zip(parts, suffixes)
        )
        self.variables_int8.extend(stored)
        return stored

    def kernel_parts(self, kernel):
        """``(q, scales[, offsets])`` standing for ``kernel`` (its dequantized tensor when the
        products are float), or None if it is not quantized."""
        if self._dequantized is not None and kernel.ref() in self._dequantized:
            return self._dequantized[kernel.ref()]
        return self._kernels.get(kernel.ref())

    def embedding_parts(self, table) -> Optional[Tuple[tf.Variable, tf.Variable]]:
        return self._embeddings.get(table.ref())

    def replaces(self, variable) -> bool:
        return variable.ref() in self._kernels or variable.ref() in self._embeddings

    def kept_float_variables(self, model) -> List[tf.Variable]:
        """The model's variables that int8 inference still reads in float32."""
        return [v for v in model.variables if not self.replaces(v)]

    def size_bytes(self, model) -> Dict[str, int]:
        """Bytes of the int8 form (int8 codes + float32 scales/offsets + kept float weights) and of float32."""
        int8 = sum(int(v.shape.num_elements()) * v.dtype.size for v in self.variables_int8)
        kept = sum(int(v.shape.num_elements()) * v.dtype.size for v in self.kept_float_variables(model))
        total = sum(int(v.shape.num_elements()) * v.dtype.size for v in model.variables)
        return {"float32_bytes": total, "int8_bytes": int8 + kept}

    @contextlib.contextmanager
    def active(self, products: str = "int8") -> Iterator["Int8Weights"]:
        """Within this context the model computes with these int8 weights (at trace time, for graphs).

        ``products="int8"``: section 6's int8 x int8 products with int32 accumulation.
        ``products="float"``: the int8 kernels are dequantized once, when the context is
        entered (outside any decoding loop), and multiplied in float32: the same storage, and
        the float speed where int8 arithmetic is slower (see benchmarks/README.md). Not nestable
        in ``"float"`` mode.
        """
        if products not in PRODUCTS:
            raise ValueError(f"products must be one of {PRODUCTS}, got {products!r}")
        stack = getattr(_ACTIVE, "stack", None)
        if stack is None:
            stack = _ACTIVE.stack = []
        if products == "float":
            dequantized = {
                ref: quantization.dequantize(*parts[:2], offsets=parts[2] if len(parts) == 3 else None)
                for ref, parts in self._kernels.items()
            }
            object.__setattr__(self, "_dequantized", dequantized)
        stack.append(self)
        try:
            yield self
        finally:
            stack.pop()
            object.__setattr__(self, "_dequantized", None)
