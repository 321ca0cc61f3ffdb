"""8-bit weight quantization (GNMT paper, section 6, eq. 12) and an int8 matmul.

Orientation: which axis is a "row"
----------------------------------
The paper multiplies a column vector, ``W x``, so its row ``i`` of ``W`` is one
OUTPUT unit, and eq. 12 gives one scale per output unit::

    s_i       = max_j |W[i, j]|                      (max over the inputs j)
    WQ[i, j]  = round(W[i, j] / s_i * 127)

In this code base every kernel is a Keras kernel of shape ``[input_dim,
output_dim]`` used as ``x @ W`` (LSTM ``kernel`` / ``recurrent_kernel`` with
the four gates side by side, the softmax ``Dense`` kernel ``[units, vocab]``).
The paper's row ``i`` is therefore COLUMN ``i`` of the Keras kernel, and its
``max over j`` is a reduction over axis 0. The quantizers take ``axis``,
the axis that is REDUCED (the input axis), default 0; scales have the kernel's
shape without that axis (``[output_dim]`` for a 2-D kernel).

Marian (Kim et al., "From Research to Production and Back", WNGT 2019,
section 4, "8-bit matrix multiplication with packing") quantizes "each column
of the weight matrix separately with different scales and offsets per
column". Marian also computes ``x W`` with ``W`` of shape ``[input,
output]`` (Marian's doc/layer.md: ``output = activation(input * weight +
bias)``, weight ``{input_dim, output_dim}``), so its columns are output units
too: in Keras layout BOTH methods have one scale per output unit (per column
of the kernel, reduction over axis 0). What differs is the range: eq. 12 is
symmetric min-max (``[-max|W|, max|W|]``), Marian saturates to
``mean ± 7 sigma`` of the column and uses an offset.

Methods
-------
* :func:`quantize_per_output_unit` (``method="per_row"``): eq. 12 exactly.
* :func:`quantize_per_column_saturating` (``method="per_column_7sigma"``):
  Marian's rule: the values of column ``j`` are clipped ("saturated") into
  ``[mean_j - k sigma_j, mean_j + k sigma_j]`` (k = 7, population standard
  deviation) and that interval is mapped linearly onto the int8 codes
  ``-127..127`` around its centre, the column mean, which is kept as a float
  offset (Marian/FBGEMM's "scale and offset per column")::

      W ~= offset_j + q[:, j] * scale_j / 127,  scale_j = k sigma_j,  offset_j = mean_j

  Note: for a column without outliers beyond k sigma this range is WIDER than
  the data (a Gaussian column of 1024 values has max |z| ~ 3.3, a uniform one
  max |z| = 1.73), i.e. coarser than eq. 12; it only pays off when outliers
  would otherwise dominate the min-max range. ``tighten_to_data=True``
  intersects the interval with the column's ``[min, max]`` (never coarser
  than asymmetric min-max); this is an option, not Marian's rule.

Both round half to even (``tf.round``, like ``np.round``); ties are
measure-zero for real weights. A column that is all zero (eq. 12) or constant
(7 sigma: sigma = 0) gets scale 1 instead of 0, so nothing divides by zero;
its codes are all 0 and it is reconstructed exactly (0, resp. the offset).

Products
--------
:func:`int8_matmul` is the inference-side product: activations are quantized
on the fly with one scale per input vector (per row of ``x``,
``s_x = max|x|``, ``xq = round(x / s_x * 127)``), multiplied by the int8
kernel with int32 accumulation (``tf.linalg.matmul(..., output_type=tf.int32)``)
and rescaled: ``y = acc * s_x * s_w / 127**2`` (plus the offset term for
Marian-style kernels). It is plain TensorFlow and works eagerly, in
``tf.function`` and in ``tf.function(jit_compile=True)``. On x86 CPUs it is
slower than the float32 matmul in a plain ``tf.function`` (TensorFlow has no fast
int8 kernel outside XLA there); under ``jit_compile=True`` it is faster for the
LSTM kernels at small batches, most when the weights do not fit in cache, and
not for the softmax. The figures are in benchmarks/README.md, section "int8
products" (``benchmarks/int8_matmul_benchmark.py``).

Which kernels
-------------
:func:`quantized_kernel_variables` names the kernels int8 inference quantizes: every
LSTM ``kernel`` and ``recurrent_kernel`` and the softmax kernel. What stays float32
and why:

* attention (query/key kernels, bias, score vector): the paper does not
  quantize the attention model;
* biases (softmax bias, the "standard" cell's bias) and delta: not matrices.

Embedding tables have no product to speed up; :class:`gnmt_tf.quantization.weights.Int8Weights`
stores them int8 per token for size only. A model computes with any of these through
a weight reader of that transform (:class:`gnmt_tf.layers.weights.WeightReader`).
"""

from __future__ import annotations

from typing import Dict, List, Tuple

import numpy as np
import tensorflow as tf

QMAX = 127.0  # int8 codes are symmetric: -127..127 (-128 is never produced)

METHODS = ("per_row", "per_column_7sigma")


# ------------------------------------------------------------------------------ helpers
def _expand(vector: tf.Tensor, axis: int, rank: int) -> tf.Tensor:
    """Put back the reduced ``axis`` so ``vector`` broadcasts against the kernel."""
    return tf.expand_dims(vector, axis % rank)


def _safe_scale(scale: tf.Tensor) -> tf.Tensor:
    """Zero (all-zero or constant column) -> 1, so that nothing divides by zero."""
    return tf.where(scale > 0, scale, tf.ones_like(scale))


# ------------------------------------------------------------------------------ eq. 12
def quantize_per_output_unit(kernel, axis: int = 0) -> Tuple[tf.Tensor, tf.Tensor]:
    """Eq. 12: one scale per output unit, ``s = max |W|`` over the input ``axis``.

    Args:
        kernel: float weights; for a Keras kernel ``[input_dim, output_dim]``
            keep ``axis=0`` (the paper's row ``i`` = the kernel's column ``i``).
        axis: the axis reduced by the max (the input axis).

    Returns:
        ``(q, scales)``: ``q`` int8 with the kernel's shape, codes in
        ``[-127, 127]``, the max-magnitude element of each output unit mapped
        exactly to ±127; ``scales`` float32 with the kernel's shape minus
        ``axis`` (1.0 for an all-zero unit). ``W ~= q * scales / 127``, with an
        error of at most ``scales / 254`` per element.
    """
    kernel = tf.convert_to_tensor(kernel, tf.float32)
    rank = kernel.shape.rank
    scales = _safe_scale(tf.reduce_max(tf.abs(kernel), axis=axis))
    codes = tf.round(kernel / _expand(scales, axis, rank) * QMAX)
    return tf.cast(tf.clip_by_value(codes, -QMAX, QMAX), tf.int8), scales


# ------------------------------------------------------------------------------ Marian
def quantize_per_column_saturating(
    kernel, sigmas: float = 7.0, axis: int = 0, tighten_to_data: bool = False
) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Marian (WNGT 2019): per column, saturate to ``mean ± sigmas * std``, then 8 bits.

    For each output unit (column of a Keras kernel, reduced over ``axis``):
    ``lo, hi = mean - k*std, mean + k*std`` (population std, computed in
    float64), values clipped
    into ``[lo, hi]``, ``offset = (lo + hi) / 2`` (= the mean),
    ``scale = (hi - lo) / 2`` (= k*std), ``q = round((clip(W) - offset) /
    scale * 127)``. With ``tighten_to_data`` the interval is first intersected
    with the column's ``[min, max]`` (not in the paper). A constant column
    (std 0) gets scale 1 and codes 0: it is reconstructed exactly as its offset.

    Returns:
        ``(q, scales, offsets)``; ``W ~= offsets + q * scales / 127``. Values
        inside the interval are within ``scales / 254``; values outside are
        saturated to the interval's end.
    """
    kernel = tf.convert_to_tensor(kernel, tf.float32)
    rank = kernel.shape.rank
    # Statistics in float64: a constant column then has a mean equal to its value and a
    # std of exactly 0 (in float32 the rounded mean leaves a spurious std ~1e-6 * value).
    wide = tf.cast(kernel, tf.float64)
    mean = tf.reduce_mean(wide, axis=axis)
    std = tf.sqrt(tf.reduce_mean(tf.square(wide - _expand(mean, axis, rank)), axis=axis))
    lo = tf.cast(mean - sigmas * std, tf.float32)
    hi = tf.cast(mean + sigmas * std, tf.float32)
    if tighten_to_data:
        lo = tf.maximum(lo, tf.reduce_min(kernel, axis=axis))
        hi = tf.minimum(hi, tf.reduce_max(kernel, axis=axis))
    offsets = (lo + hi) / 2.0
    scales = _safe_scale((hi - lo) / 2.0)
    clipped = tf.clip_by_value(kernel, _expand(lo, axis, rank), _expand(hi, axis, rank))
    codes = tf.round((clipped - _expand(offsets, axis, rank)) / _expand(scales, axis, rank) * QMAX)
    return tf.cast(tf.clip_by_value(codes, -QMAX, QMAX), tf.int8), scales, offsets


def dequantize(q, scales, offsets=None, axis: int = 0) -> tf.Tensor:
    """``q * scales / 127 (+ offsets)``: the float weights an int8 kernel stands for."""
    q = tf.convert_to_tensor(q)
    rank = q.shape.rank
    steps = tf.convert_to_tensor(scales, tf.float32) * (1.0 / QMAX)
    values = tf.cast(q, tf.float32) * _expand(steps, axis, rank)
    if offsets is not None:
        values = values + _expand(tf.convert_to_tensor(offsets, tf.float32), axis, rank)
    return values


def quantize(kernel, method: str = "per_row", axis: int = 0, **options):
    """Dispatch on ``method``: ``"per_row"`` (eq. 12) -> ``(q, scales)``;
    ``"per_column_7sigma"`` -> ``(q, scales, offsets)`` (``options``: ``sigmas``,
    ``tighten_to_data``)."""
    if method == "per_row":
        if options:
            raise TypeError(f"per_row takes no options, got {sorted(options)}")
        return quantize_per_output_unit(kernel, axis=axis)
    if method == "per_column_7sigma":
        return quantize_per_column_saturating(kernel, axis=axis, **options)
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def fake_quantize(kernel, method: str = "per_row", axis: int = 0, **options) -> tf.Tensor:
    """``dequantize(quantize(kernel))``: float weights carrying exactly the int8 error."""
    parts = quantize(kernel, method, axis=axis, **options)
    return dequantize(*parts[:2], offsets=parts[2] if len(parts) == 3 else None, axis=axis)


# ------------------------------------------------------------------------------ products
def quantize_activations(x) -> Tuple[tf.Tensor, tf.Tensor]:
    """On-the-fly activation quantization, one scale per input vector (last axis).

    ``s_x = max |x|`` over the last axis (1.0 for an all-zero vector),
    ``xq = round(x / s_x * 127)``. Returns ``(xq int8, s_x float32)``, ``s_x``
    with ``x``'s shape minus the last axis.
    """
    x = tf.convert_to_tensor(x, tf.float32)
    scales = _safe_scale(tf.reduce_max(tf.abs(x), axis=-1))
    codes = tf.round(x / tf.expand_dims(scales, -1) * QMAX)
    return tf.cast(tf.clip_by_value(codes, -QMAX, QMAX), tf.int8), scales


def int8_matmul(x, q_kernel, scales, offsets=None) -> tf.Tensor:
    """``x @ W`` with int8 operands and int32 accumulation; float32 result.

    Args:
        x: float activations ``[..., K]`` (any leading shape).
        q_kernel: int8 kernel ``[K, N]`` (Keras layout, quantized with ``axis=0``).
        scales: float32 ``[N]``, one per output unit.
        offsets: float32 ``[N]`` for Marian-style kernels (None for eq. 12).

    Computes ``xq, s_x = quantize_activations(x)``,
    ``acc = xq @ q_kernel`` in int32, and
    ``y = float(acc) * ((s_x / 127**2) * scales)``, plus, with offsets,
    ``float(sum_k xq) * (s_x / 127) * offsets`` (the row sums are integer too,
    as FBGEMM's row offsets). The result equals ``dequantize(xq) @
    dequantize(q_kernel)`` up to float32 rounding of the rescale. Without
    offsets it is bit-identical eagerly, in ``tf.function`` and under XLA;
    with offsets the graph optimizers regroup the final multiply-add (XLA
    makes it an FMA), so results may differ in the last ulp.
    ``float(acc)`` is exact while ``|acc| < 2**24`` (``K <= 1040`` in the worst
    case), beyond that it is rounded to 24 bits. int32 cannot overflow for
    ``K < 133,000``.
    """
    x = tf.convert_to_tensor(x, tf.float32)
    q_kernel = tf.convert_to_tensor(q_kernel)
    if q_kernel.dtype != tf.int8:
        raise TypeError(f"q_kernel must be int8, got {q_kernel.dtype.name}")
    scales = tf.convert_to_tensor(scales, tf.float32)
    depth = x.shape[-1] if x.shape[-1] is not None else tf.shape(x)[-1]
    units = q_kernel.shape[-1] if q_kernel.shape[-1] is not None else tf.shape(q_kernel)[-1]
    flat = x if x.shape.rank == 2 else tf.reshape(x, [-1, depth])
    xq, x_scales = quantize_activations(flat)
    acc = tf.linalg.matmul(xq, q_kernel, output_type=tf.int32)
    # Written as acc * ((s_x / 127**2) outer s_w), constants multiplied in first: in this
    # form eager, tf.function (Grappler) and XLA give bit-identical results; other
    # groupings get reassociated by the graph optimizers and differ in the last ulp.
    rescale = tf.expand_dims(x_scales * (1.0 / (QMAX * QMAX)), -1) * scales
    y = tf.cast(acc, tf.float32) * rescale
    if offsets is not None:
        row_sums = tf.cast(tf.reduce_sum(tf.cast(xq, tf.int32), axis=-1), tf.float32)
        offsets = tf.convert_to_tensor(offsets, tf.float32)
        y = y + tf.expand_dims(row_sums * (x_scales * (1.0 / QMAX)), -1) * offsets
    if x.shape.rank == 2:
        return y
    return tf.reshape(y, tf.concat([tf.shape(x)[:-1], [units]], axis=0))


# ------------------------------------------------------------------------------ models
def quantized_kernel_variables(model) -> List[tf.Variable]:
    """The kernels int8 inference quantizes, in ``model.weights`` order: the model's product
    kernels (:meth:`gnmt_tf.models.GNMT.product_kernels`), every LSTM cell's ``kernel`` and
    ``recurrent_kernel`` and the decoder's softmax projection kernel. Attention, embeddings and
    biases are excluded.
    """
    found = model.product_kernels()
    if not found:
        raise ValueError("found no LSTM or softmax kernels; is the model built?")
    return found


def quantization_report(model, method: str = "per_row", **options) -> List[Dict[str, object]]:
    """Per quantized kernel: name, shape, max |W - W~|, and that error over the kernel's max |W|."""
    rows = []
    for variable in quantized_kernel_variables(model):
        value = variable.numpy()
        error = np.abs(fake_quantize(value, method, axis=0, **options).numpy() - value)
        rows.append({
            "name": variable.name,
            "shape": list(value.shape),
            "max_abs_error": float(error.max()),
            "max_abs_weight": float(np.abs(value).max()),
            "relative_max_error": float(error.max() / max(float(np.abs(value).max()), 1e-30)),
            "rms_error": float(np.sqrt(np.mean(error**2))),
        })
    return rows
