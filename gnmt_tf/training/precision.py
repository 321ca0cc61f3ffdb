"""bfloat16 products in training (``training.product_precision: bfloat16``).

The large products of a training step, the input projection of every LSTM layer over the whole
sequence, the softmax projection and the gradient of each recurrent kernel (one product over all
steps), are computed from bfloat16 operands: on CPUs with AVX-512 BF16 (or AMX) oneDNN multiplies
bfloat16 at about twice the float32 rate. Everything else stays float32: the weights and their
updates, the recurrent products of a layer run over a whole sequence, one per time step (too small
to gain: benchmarks/README.md, "The training step's levers"), the cell state
and eq. 10's clip, attention, the logits' clip and the loss. Steps that compute a layer one time
step at a time through the weight reader multiply from bfloat16 operands too, the recurrent
product included: the bottom decoder layer with input feeding, the model-parallel wavefront
(``parallel.mode``) and RL's sampled translations. Dev evaluation, translation and export always
compute in float32: this is how a step is computed, not what the model is.

It is a :class:`~gnmt_tf.layers.weights.WeightTransform` wrapped around the one training would
use otherwise (float, or quantization-aware training's fake-quantized kernels), so that the model
reads its weights through one mechanism.
"""

from __future__ import annotations

from typing import Callable, FrozenSet, Optional, Sequence

import tensorflow as tf

from gnmt_tf.layers.weights import FLOAT_WEIGHTS, ForwardingTransform, WeightTransform, matmul


def _bfloat16_product(x: tf.Tensor, values, transpose_x: bool = False) -> tf.Tensor:
    """``x @ values`` (``x^T @ values`` with ``transpose_x``) from bfloat16 operands, returned in ``x``'s
    dtype. ``values`` may already be bfloat16 (a kernel slice cast once, outside a loop)."""
    x_rounded, values_rounded = tf.cast(x, tf.bfloat16), tf.cast(values, tf.bfloat16)
    product = (tf.matmul(x_rounded, values_rounded, transpose_a=True) if transpose_x
               else matmul(x_rounded, values_rounded))
    return tf.cast(product, x.dtype)


class BFloat16Products(ForwardingTransform):
    """The products of ``inner`` (default: the float weights) computed from bfloat16 operands.

    The recurrence over a whole sequence multiplies by :meth:`float_kernel` itself, in float32
    (:func:`gnmt_tf.layers.recurrence.lstm_over_time`), and sums its kernel's gradient over all steps
    in one product from bfloat16 operands (:meth:`kernel_gradient`); products that ``inner`` computes
    in int8 are left to it. Everything else (float kernels, columns, lookups, what a module stores)
    is the inner transform's, forwarded. Gradients flow through the casts to the float32 weights.
    """

    def product(self, x: tf.Tensor, kernel: tf.Variable, columns=None) -> tf.Tensor:
        values = self.inner.float_kernel(kernel)  # made once: under QAT it is eq. 12's fake quantization
        if values is None:  # int8 products: the inner transform's, columns too
            return self.inner.product(x, kernel, columns)
        return _bfloat16_product(x, values if columns is None else columns)

    def kernel_gradient(self, x: tf.Tensor, dy: tf.Tensor) -> tf.Tensor:
        # As autodiff takes it through product: both operands rounded, the result in float32.
        return _bfloat16_product(x, dy, transpose_x=True)

    def partial_product(self, kernel: tf.Variable, rows: slice) -> Callable[[tf.Tensor], tf.Tensor]:
        values = self.inner.float_kernel(kernel)
        if values is None:
            return self.inner.partial_product(kernel, rows)
        part = tf.cast(values[rows], tf.bfloat16)  # sliced and cast once, outside any loop
        return lambda x: _bfloat16_product(x, part)


NATIVE_BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")
"""CPU flags (Linux' /proc/cpuinfo) of instructions that multiply bfloat16: without them oneDNN
converts and bfloat16 products are slower than float32 ones."""


class CpuInfoFile:
    """Where the CPU's description is read: a file in the form of Linux' /proc/cpuinfo.

    What :func:`resolve_product_precision` (and the Trainer) ask about the machine, passed in so that a
    test can describe another machine: any object with ``text() -> str`` does."""

    def __init__(self, path: str = "/proc/cpuinfo"):
        self.path = path

    def text(self) -> str:
        """The file's text; empty where it cannot be read (not Linux, or no /proc): do not guess."""
        try:
            with open(self.path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return ""


PROC_CPUINFO = CpuInfoFile()
"""This machine's CPU, as Linux describes it."""


def cpu_flags(cpuinfo_text: str) -> FrozenSet[str]:
    """The flags of cpuinfo text: the words of its ``flags`` lines (one per processor), only those, so
    that a flag's name elsewhere (a model name, a ``bugs`` line) does not count."""
    flags = set()
    for line in cpuinfo_text.splitlines():
        key, colon, value = line.partition(":")
        if colon and key.strip() == "flags":
            flags.update(value.split())
    return frozenset(flags)


def cpu_multiplies_bfloat16(cpuinfo=PROC_CPUINFO) -> bool:
    """Whether the CPU ``cpuinfo`` describes multiplies bfloat16 natively (one of :data:`NATIVE_BFLOAT16_FLAGS`)."""
    return not cpu_flags(cpuinfo.text()).isdisjoint(NATIVE_BFLOAT16_FLAGS)


def resolve_product_precision(product_precision: str, cpuinfo=PROC_CPUINFO,
                              gpus: Optional[Sequence] = None) -> str:
    """``training.product_precision`` as a precision: ``"auto"`` is bfloat16 on a CPU that multiplies
    it natively (:func:`cpu_multiplies_bfloat16` of ``cpuinfo``, a :class:`CpuInfoFile` or any object
    with ``text()``), float32 elsewhere, and float32 wherever a GPU (``gpus``; default: those TensorFlow
    sees) takes the products: the CPU's flags say nothing of it."""
    if product_precision == "auto":
        if gpus is None:
            gpus = tf.config.list_physical_devices("GPU")
        return "bfloat16" if not gpus and cpu_multiplies_bfloat16(cpuinfo) else "float32"
    return product_precision


def training_transform(product_precision: str, inner: Optional[WeightTransform],
                       cpuinfo=PROC_CPUINFO) -> Optional[WeightTransform]:
    """The transform a training step computes with: ``inner`` (None: the float weights), with
    bfloat16 products when ``product_precision`` resolves to ``"bfloat16"`` (``"auto"``: on the CPU
    ``cpuinfo`` describes; see :func:`resolve_product_precision`)."""
    if resolve_product_precision(product_precision, cpuinfo) != "bfloat16":
        return inner
    return BFloat16Products(inner if inner is not None else FLOAT_WEIGHTS)
