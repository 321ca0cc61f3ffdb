"""A trained GNMT computing with int8 weights (section 6): weight transforms for a weight reader.

Both classes here are :class:`gnmt_tf.layers.weights.WeightTransform`\\ s, used through the
model's one mechanism for reading weights, a :class:`gnmt_tf.layers.weights.WeightReader`::

    int8 = WeightReader(Int8Weights(model))    # eq. 12: int8 codes, one scale per output unit
    logits, probs, state = model.step(state, tokens, int8)   # every product and lookup reads the int8 form
    translator = Translator(model, tokenizer, weight_transform=Int8Weights(model))

:class:`Int8Weights` holds the model's weights in int8 form, as new variables:

* every LSTM ``kernel`` / ``recurrent_kernel`` and the softmax kernel: int8
  codes with one float scale per output unit (eq. 12, or Marian's per-column
  7-sigma rule for comparison); their products run as
  :func:`gnmt_tf.quantization.int8.int8_matmul` (activations quantized on the fly,
  int32 accumulation) with ``products="int8"``, or are dequantized and multiplied in
  float32 with ``products="float"`` (once per search, before its decoding loop:
  :meth:`gnmt_tf.layers.weights.WeightReader.reading_once`): the same storage, at float speed where int8
  arithmetic is slower (benchmarks/README.md, section "int8 products"). Section 6 quantizes
  exactly these: eq. 10-11 and the softmax weight ``W_s`` of eq. 13;
* the two embedding tables: int8 with one scale per token (eq. 12 applied to
  each row). A lookup has no product, so the looked-up rows are dequantized;
  this is storage only, and what makes the model about 4x smaller. A model with
  tied embeddings (``model.tied_embeddings``) has no tables of its own: its lookups
  dequantize the softmax kernel's int8 columns, whose eq. 12 scales are one per
  wordpiece too;
* everything else (attention, biases, delta) stays float32, as the paper
  keeps the attention model and the softmax itself in float.

Graphs traced with such a reader capture only the int8 variables for those weights,
so a SavedModel of such a graph stores int8.

:class:`FakeQuantizedWeights` computes in float with the values the int8 kernels
stand for (``dequantize(quantize(W))``), to measure what the rounding alone costs.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import tensorflow as tf

from gnmt_tf.layers.weights import WeightTransform, columns_as_rows, matmul
from gnmt_tf.quantization import int8 as quantization

PRODUCTS = ("int8", "float")


class Int8Weights(WeightTransform, tf.Module):
    """A GNMT's weights in int8 form (see the module docstring for which and how).

    Args:
        model: a built :class:`gnmt_tf.models.GNMT`. Its float weights are read once
            here; later changes to the model are not seen.
        method: ``"per_row"`` (eq. 12, the default) or ``"per_column_7sigma"``
            (Marian, with an offset per column) for the products' kernels.
            Embeddings always use eq. 12 per token.
        sigmas: the saturation width of ``"per_column_7sigma"``.
        products: ``"int8"``: section 6's int8 x int8 products with int32 accumulation;
            ``"float"``: the int8 kernels dequantized (once per search where the kernels are read
            once), products in float32.
    """

    def __init__(self, model, method: str = "per_row", sigmas: float = 7.0, products: str = "int8",
                 name: Optional[str] = None):
        tf.Module.__init__(self, name=name)
        if method not in quantization.METHODS:
            raise ValueError(f"method must be one of {quantization.METHODS}, got {method!r}")
        if products not in PRODUCTS:
            raise ValueError(f"products must be one of {PRODUCTS}, got {products!r}")
        self.method = method
        self.products = products
        # Lookup tables keyed by variable reference, set without tf.Module's attribute tracking
        # (which cannot hold such keys); the variables themselves are tracked in variables_int8.
        object.__setattr__(self, "_kernels", {})
        object.__setattr__(self, "_embeddings", {})
        self.variables_int8: List[tf.Variable] = []  # tracked, so they are saved with this module
        options = {"sigmas": sigmas} if method == "per_column_7sigma" else {}
        for kernel in quantization.quantized_kernel_variables(model):
            parts = quantization.quantize(kernel, method, axis=0, **options)
            self._kernels[kernel.ref()] = self._store(kernel, parts, ("q", "scale", "offset"))
        for table in model.embedding_tables():
            codes, scales = quantization.quantize_per_output_unit(table, axis=1)  # one scale per token row
            self._embeddings[table.ref()] = self._store(table, (codes, scales), ("q", "scale"))
        object.__setattr__(self, "_float_variables", list(model.variables))

    def _store(self, source: tf.Variable, parts, suffixes) -> Tuple[tf.Variable, ...]:
        base = source.name.split(":")[0].replace("/", "_")
        stored = tuple(
            tf.Variable(value, trainable=False, name=f"{base}_{suffix}") for value, suffix in zip(parts, suffixes)
        )
        self.variables_int8.extend(stored)
        return stored

    # ------------------------------------------------------------------ the transform
    def float_kernel(self, kernel):
        parts = self._kernels.get(kernel.ref())
        if parts is None:
            return kernel
        if self.products == "int8":  # no float product: int8_matmul
            return None
        return quantization.dequantize(*parts[:2], offsets=parts[2] if len(parts) == 3 else None)

    def _int8_product_parts(self, kernel):
        """``kernel``'s int8 parts when its products are int8 ones (``products="int8"``), else None."""
        return self._kernels.get(kernel.ref()) if self.products == "int8" else None

    def product(self, x: tf.Tensor, kernel, columns=None) -> tf.Tensor:
        if isinstance(columns, tuple):  # what columns() gave for int8 products
            return quantization.int8_matmul(x, *columns)
        parts = self._int8_product_parts(kernel)
        if columns is None and parts is not None:
            return quantization.int8_matmul(x, *parts)
        return super().product(x, kernel, columns)

    def columns(self, kernel, ids):
        parts = self._int8_product_parts(kernel)
        if parts is None:
            return super().columns(kernel, ids)
        return gathered_columns(parts, ids)

    def partial_product(self, kernel, rows: slice) -> Callable[[tf.Tensor], tf.Tensor]:
        parts = self._int8_product_parts(kernel)
        if parts is None:
            return super().partial_product(kernel, rows)
        codes = parts[0][rows]  # the scales (and offsets) belong to output units: a row slice keeps them
        return lambda x: quantization.int8_matmul(x, codes, *parts[1:])

    def lookup(self, table, ids: tf.Tensor) -> tf.Tensor:
        parts = self._embeddings.get(table.ref())
        if parts is None:
            return tf.gather(table, ids)
        return gather_dequantized(*parts, ids)

    def lookup_columns(self, kernel, ids: tf.Tensor) -> tf.Tensor:
        parts = self._kernels.get(kernel.ref())
        if parts is None:
            return super().lookup_columns(kernel, ids)
        # A tied model's embeddings are the softmax kernel's columns (Press & Wolf 2017): only the
        # columns looked up are dequantized, each with its own scale (eq. 12's one per output unit is
        # one per wordpiece, as the separate tables keep one per row), whatever the products.
        return columns_as_rows(lambda flat: quantization.dequantize(*gathered_columns(parts, flat)), ids)

    def stored_rows(self, table: tf.Tensor) -> "Int8Rows":
        """``table`` [rows, width] stored in int8 like the embeddings (one eq. 12 scale per row)."""
        return Int8Rows(table)

    # ------------------------------------------------------------------ what is stored
    def replaces(self, variable) -> bool:
        return variable.ref() in self._kernels or variable.ref() in self._embeddings

    def kept_float_variables(self) -> List[tf.Variable]:
        """The model's variables that int8 inference still reads in float32."""
        return [v for v in self._float_variables if not self.replaces(v)]

    def size_bytes(self) -> Dict[str, int]:
        """Bytes of the int8 form (int8 codes + float32 scales/offsets + kept float weights) and of float32."""
        def size(variables):
            return sum(int(v.shape.num_elements()) * v.dtype.size for v in variables)

        return {
            "float32_bytes": size(self._float_variables),
            "int8_bytes": size(self.variables_int8) + size(self.kept_float_variables()),
        }


def gathered_columns(parts, ids) -> Tuple[tf.Tensor, ...]:
    """An int8 kernel's ``(codes, scales[, offsets])`` at the output units ``ids`` (int32 [n]): the
    columns keep their own scales and offsets (eq. 12: one per output unit)."""
    return (tf.gather(parts[0], ids, axis=1),) + tuple(tf.gather(part, ids) for part in parts[1:])


def gather_dequantized(codes, scales, ids) -> tf.Tensor:
    """Rows ``ids`` of an int8 table with one scale per row, as float32."""
    rows = tf.cast(tf.gather(codes, ids), tf.float32)
    return rows * tf.expand_dims(tf.gather(scales, ids) * (1.0 / quantization.QMAX), -1)


class Int8Rows(tf.Module):
    """A float table kept as int8 codes and one eq. 12 scale per row; called with ids, it gives their rows."""

    def __init__(self, table, name: Optional[str] = None):
        super().__init__(name=name)
        codes, scales = quantization.quantize_per_output_unit(tf.convert_to_tensor(table), axis=1)
        self.codes = tf.Variable(codes, trainable=False, name="codes")
        self.scales = tf.Variable(scales, trainable=False, name="scales")

    def __call__(self, ids) -> tf.Tensor:
        return gather_dequantized(self.codes, self.scales, ids)


class FakeQuantizedWeights(WeightTransform):
    """The float values int8 kernels stand for: every LSTM and softmax kernel as ``dequantize(quantize(W))``.

    Computed once, here, from the model's current weights; attention, embeddings and
    biases stay exact. For measuring what eq. 12's (or Marian's) rounding of the kernels
    costs, with float products. ``options``: ``sigmas``, ``tighten_to_data`` for
    ``"per_column_7sigma"``.
    """

    def __init__(self, model, method: str = "per_row", **options):
        if method not in quantization.METHODS:
            raise ValueError(f"method must be one of {quantization.METHODS}, got {method!r}")
        self.method = method
        self._kernels: Dict = {
            kernel.ref(): tf.constant(quantization.fake_quantize(kernel, method, axis=0, **options))
            for kernel in quantization.quantized_kernel_variables(model)
        }

    def kernel(self, variable) -> Optional[tf.Tensor]:
        """The fake-quantized value standing for ``variable`` (None if it is not quantized)."""
        return self._kernels.get(variable.ref())

    def float_kernel(self, kernel) -> tf.Tensor:
        replacement = self._kernels.get(kernel.ref())
        return kernel if replacement is None else replacement
