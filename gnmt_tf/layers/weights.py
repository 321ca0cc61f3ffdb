"""How a model reads its weights: one mechanism for float, fake-quantized and int8 weights.

Every product of a kernel and every embedding lookup in the model goes through one
:class:`WeightReader`, which the model owns and hands to each of its layers. What
the reader returns is decided by one :class:`WeightTransform` at a time:

* the plain transform (the default): the float weights, as trained;
* quantization-aware training (:mod:`gnmt_tf.quantization.qat`): each LSTM kernel
  fake-quantized to eq. 12's int8 grid, with a straight-through gradient;
* int8 inference (:class:`gnmt_tf.quantization.weights.Int8Weights`, section 6):
  int8 kernels and embedding tables with one scale per output unit (eq. 12);
* simulated int8 (:class:`gnmt_tf.quantization.weights.FakeQuantizedWeights`): the
  float numbers that the int8 weights stand for, for measuring the rounding alone.

A transform is chosen for a scope, explicitly: ``with model.transformed_weights(t):``
(:meth:`gnmt_tf.models.GNMT.transformed_weights`). Graphs are traced with the
transform of the scope they are traced in; a ``tf.function`` traced inside the
scope keeps that transform, one traced outside uses float weights.

A search reads its kernels once (:meth:`WeightReader.kernels_read_once`, entered by the
translator before its decoding loop): each float product kernel is read through the
transform (dequantized, fake-quantized) before the loop rather than at every step, and
laid out for the small products of a step (:class:`ProductKernel`).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Iterable, Iterator, NamedTuple, Optional, Union

import tensorflow as tf


# Measured on this project's AVX2 CPU (oneDNN through tf.matmul, one thread): a [k, n] kernel whose
# row stride is a multiple of 2 KiB (n = 512, 1024, 4096: every LSTM kernel, 4 x units wide)
# multiplies 16-128 rows at half the speed of one with 32 more columns (40-45 against 80-90
# GFLOPS); at 2 threads the two are level. Padding copies the kernel, so it is done once per
# search (ProductKernel), and only for searches of at least PADDED_PRODUCT_ROWS rows: with fewer,
# a step is bound by reading the weights, not by the products, and the copy is pure cost
# (trained small, one thread: batch 1 x beam 4 padded ran 13.6 against 16.8 sentences/s; batch 4:
# +5-8%; batch 16: 50 against 34).
ALIASED_STRIDE_COLUMNS = 512  # float32 columns: 2 KiB
PADDING_COLUMNS = 32
PADDED_PRODUCT_ROWS = 16


class ProductKernel(NamedTuple):
    """A float kernel read once for the many products of a search (:meth:`WeightReader.kernels_read_once`).

    ``values`` holds the kernel with zero columns appended when its row stride would be a multiple
    of 2 KiB (see ``ALIASED_STRIDE_COLUMNS``); a product drops their (zero) outputs.
    """

    values: tf.Tensor  # [input, columns (+ padding)]; the width unknown to the graph when decided per call
    columns: int  # the kernel's own output units

    @classmethod
    def of(cls, kernel: tf.Tensor, padded: Union[bool, tf.Tensor] = True) -> "ProductKernel":
        """``kernel`` read for products; ``padded`` (a bool, or a bool tensor decided per call): pad
        its columns if its row stride is a multiple of 2 KiB."""
        kernel = tf.convert_to_tensor(kernel)
        columns = int(kernel.shape[-1])
        if columns % ALIASED_STRIDE_COLUMNS != 0 or padded is False:
            return cls(kernel, columns)
        pad = lambda: tf.pad(kernel, [[0, 0], [0, PADDING_COLUMNS]])
        return cls(pad() if padded is True else tf.cond(padded, pad, lambda: kernel), columns)

    def rows(self, rows: slice) -> "ProductKernel":
        """The kernel's input rows ``rows``, in the same layout (for a part of the input)."""
        return ProductKernel(self.values[rows], self.columns)

    def gather_columns(self, ids: tf.Tensor) -> tf.Tensor:
        """The output units ``ids`` (int32 [n]), a plain [input, n] kernel."""
        return tf.gather(self.values, ids, axis=1)


def matmul(x: tf.Tensor, kernel) -> tf.Tensor:
    """``x @ kernel`` for any leading shape of ``x`` (one product for all time steps of a sequence);
    ``kernel``: a tensor, variable or :class:`ProductKernel`."""
    if isinstance(kernel, ProductKernel):
        product = matmul(x, kernel.values)
        return product if kernel.values.shape[-1] == kernel.columns else product[..., : kernel.columns]
    if x.shape.rank == 2:
        return tf.matmul(x, kernel)
    return tf.tensordot(x, kernel, axes=1)


class DenseColumns(NamedTuple):
    """Some output units of a Dense layer, read once (:meth:`WeightReader.dense_columns`): a vocabulary
    shortlist's softmax. Gathering a kernel's columns is a strided copy, too slow to repeat every step."""

    ids: tf.Tensor  # int32 [n]: the output units, distinct
    kernel: Any  # their kernel columns, as the transform's product reads them ([input, n] in float)
    bias: Optional[tf.Tensor]  # [n], or None for a layer without bias
    positions: tf.Tensor  # int32 [output]: 1 + each unit's place in ``ids``, 0 for a unit not in it


class WeightTransform:
    """The float weights as they are; subclasses replace some of them.

    Subclasses override :meth:`float_kernel` (float products with other values) or
    :meth:`product`, :meth:`columns` and :meth:`partial_product` (other products), and
    :meth:`lookup`, for the weights they replace, and defer to this class for the others.
    """

    def float_kernel(self, kernel: tf.Variable) -> Optional[tf.Tensor]:
        """The float values a product with ``kernel`` uses (a transform with float products replaces
        this); None when the transform's product with it is not a float product (int8 arithmetic)."""
        return kernel

    def product(self, x: tf.Tensor, kernel: tf.Variable, columns=None) -> tf.Tensor:
        """``x @ kernel``; with ``columns`` (what :meth:`columns` gave) only those output units: [..., n]."""
        return matmul(x, self.float_kernel(kernel) if columns is None else columns)

    def columns(self, kernel: tf.Variable, ids: tf.Tensor):
        """The output units ``ids`` (int32 [n]) of an [input, output] kernel, as :meth:`product` reads it."""
        return tf.gather(self.float_kernel(kernel), ids, axis=1)

    def partial_product(self, kernel: tf.Variable, rows: slice) -> Callable[[tf.Tensor], tf.Tensor]:
        """``x -> x @ kernel[rows]``, for an ``x`` that is that slice of the kernel's input.

        The slice is taken here, once: call this outside a loop and the product inside
        (a slice of a variable is a copy, which no graph optimizer hoists out of a loop).
        """
        part = self.float_kernel(kernel)[rows]
        return lambda x: matmul(x, part)

    def lookup(self, table: tf.Variable, ids: tf.Tensor) -> tf.Tensor:
        """Rows ``ids`` of the embedding ``table``."""
        return tf.gather(table, ids)


FLOAT_WEIGHTS = WeightTransform()


class WeightReader:
    """The one way a model's layers read their kernels and embedding tables.

    A model creates one and passes it to every layer it builds, so one call of
    :meth:`using` changes how the whole model computes. A layer built on its own
    gets a reader of its own.
    """

    def __init__(self):
        self._transform: WeightTransform = FLOAT_WEIGHTS
        self._read_once: Dict[Any, ProductKernel] = {}  # kernel ref -> its values, in kernels_read_once

    @property
    def transform(self) -> WeightTransform:
        return self._transform

    def product(self, x: tf.Tensor, kernel: tf.Variable) -> tf.Tensor:
        """``x @ kernel`` under the current transform."""
        read = self._read_once.get(kernel.ref())
        return matmul(x, read) if read is not None else self._transform.product(x, kernel)

    def partial_product(self, kernel: tf.Variable, rows: slice) -> Callable[[tf.Tensor], tf.Tensor]:
        """``x -> x @ kernel[rows]`` under the current transform (see :meth:`WeightTransform.partial_product`)."""
        read = self._read_once.get(kernel.ref())
        if read is not None:
            part = read.rows(rows)
            return lambda x: matmul(x, part)
        return self._transform.partial_product(kernel, rows)

    def dense(self, layer, x: tf.Tensor, columns: Optional[DenseColumns] = None) -> tf.Tensor:
        """A built ``keras.layers.Dense`` without activation applied to ``x``, its kernel read through the transform.

        With ``columns`` (:meth:`dense_columns` of this layer), only those output units, ``[..., n]``.
        """
        if columns is None:
            y = self.product(x, layer.kernel)
            return y + layer.bias if layer.use_bias else y
        y = self._transform.product(x, layer.kernel, columns.kernel)
        return y + columns.bias if columns.bias is not None else y

    def dense_columns(self, layer, ids) -> DenseColumns:
        """The output units ``ids`` (int32 [n], distinct) of a built ``keras.layers.Dense``, read once through
        the transform (its kernel's columns, its bias entries) for :meth:`dense` to compute only those."""
        ids = tf.convert_to_tensor(ids, tf.int32)
        units = int(layer.kernel.shape[-1])
        read = self._read_once.get(layer.kernel.ref())
        kernel = read.gather_columns(ids) if read is not None else self._transform.columns(layer.kernel, ids)
        return DenseColumns(
            ids=ids,
            kernel=kernel,
            bias=tf.gather(layer.bias, ids) if layer.use_bias else None,
            positions=tf.scatter_nd(tf.expand_dims(ids, 1), tf.range(1, tf.size(ids) + 1), [units]),
        )

    def lookup(self, layer, ids) -> tf.Tensor:
        """A built ``keras.layers.Embedding`` looked up at ``ids``, its table read through the transform."""
        return self._transform.lookup(layer.embeddings, tf.convert_to_tensor(ids))

    @contextlib.contextmanager
    def using(self, transform: Optional[WeightTransform]) -> Iterator[WeightTransform]:
        """Read the weights through ``transform`` (None: float) inside the ``with`` block."""
        transform = transform or FLOAT_WEIGHTS
        if self._read_once and transform is not self._transform:
            raise ValueError("the kernels are read once already: choose the weight transform before "
                             "kernels_read_once")
        if self._transform is not FLOAT_WEIGHTS and transform is not self._transform:
            raise ValueError(
                f"the model already computes with {type(self._transform).__name__}; "
                f"leave that scope before using {type(transform).__name__}"
            )
        previous = self._transform
        self._transform = transform
        try:
            yield transform
        finally:
            self._transform = previous

    @contextlib.contextmanager
    def kernels_read_once(self, kernels: Iterable[tf.Variable],
                          rows: Union[int, tf.Tensor, None] = None) -> Iterator[None]:
        """Inside the ``with`` block, products with ``kernels`` read each of them once, here.

        Each kernel with a float product under the current transform is read through it now
        (dequantized, fake-quantized, or as it is) as a :class:`ProductKernel`, padded when the
        products have at least ``PADDED_PRODUCT_ROWS`` rows (``rows``: the decoder rows of the
        search, an int or a tensor of the call; None: never). Entered in a traced function before a
        decoding loop, the loop's steps multiply by those tensors rather than reading (and
        dequantizing) the kernel at every step. Kernels with int8 products are read by the
        transform as before. A snapshot: for inference, not for a model being trained.
        """
        if self._read_once:
            raise ValueError("kernels_read_once is already in effect")
        padded = False if rows is None else rows >= PADDED_PRODUCT_ROWS
        read = {}
        for kernel in kernels:
            values = self._transform.float_kernel(kernel)
            if values is not None:
                read[kernel.ref()] = ProductKernel.of(values, padded)
        self._read_once = read
        try:
            yield
        finally:
            self._read_once = {}
