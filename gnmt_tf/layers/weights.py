"""How a model reads its weights: one mechanism for float, fake-quantized and int8 weights.

Every product of an LSTM or softmax kernel and every embedding lookup in the model (in a table of
its own, or in the softmax kernel's columns when the embeddings are tied to it) goes
through a :class:`WeightReader`, passed to the method that computes as its argument
``weights``. What the reader returns is decided by the one :class:`WeightTransform` it was
made with:

* the plain transform (:data:`FLOAT_WEIGHTS`, read by :data:`FLOAT_READER`): the float
  weights, as trained;
* quantization-aware training (:mod:`gnmt_tf.quantization.qat`): each LSTM kernel
  fake-quantized to eq. 12's int8 grid, with a straight-through gradient;
* int8 inference (:class:`gnmt_tf.quantization.weights.Int8Weights`, section 6):
  int8 kernels and embedding tables with one scale per output unit (eq. 12);
* simulated int8 (:class:`gnmt_tf.quantization.weights.FakeQuantizedWeights`): the
  float numbers that the int8 weights stand for, for measuring the rounding alone.

A reader is an immutable value: nothing switches how a model reads its weights while a
graph is traced, and a ``tf.function`` computes with the reader it is given (two
translators of one model, each with its own reader, can decode at the same time). Where
a reader comes from:

* the model's entry points (``GNMT.encode``, ``step``, ``forward``, ...) and the Keras
  ``call`` of every layer take ``weights`` with the default :data:`FLOAT_READER`; the
  pieces they are composed of (a cell's ``project_inputs`` and ``recur``, a stack's
  ``step``, the decoder's step pieces) require it, so that no path inside the model falls
  back to float by omission;
* a translator (:class:`gnmt_tf.inference.translator.TranslatorModule`) makes its reader from
  the transform it is constructed with, and a search reads through the reader's
  read-once snapshot (:meth:`WeightReader.reading_once`);
* training computes with the reader of the transform given to ``GNMT.compile``
  (``weight_transform``), which the compiled steps pass to the objective.

Not read through a reader, because no transform replaces them: the attention's kernels, bias
and score vector (:mod:`gnmt_tf.layers.attention`; section 6: "the calculations within the
softmax function and the attention model are not quantized during inference"), the biases
of the LSTM cells and the softmax (eq. 12 quantizes weight matrices), and delta.

A search reads its kernels once (:meth:`WeightReader.reading_once`, called by the translator
before its decoding loop): a new reader whose products with each float product kernel use the
kernel read through the transform (dequantized, fake-quantized) before the loop rather than at
every step, and laid out for the small products of a step (:class:`ProductKernel`).

A reader says what the products read, not how a layer runs over time: that is the
:class:`~gnmt_tf.layers.recurrence.Recurrence` its caller passes (a layer whose recurrent products
are int8 has no float kernel to write its gradient with, and runs step by step).
"""

from __future__ import annotations

import types
from typing import Any, Callable, Iterable, Mapping, NamedTuple, Optional, Union

import tensorflow as tf


# On x86 CPUs with one thread, oneDNN (through tf.matmul) multiplies a [k, n] kernel whose row stride
# is a multiple of 2 KiB (n = 512, 1024, 4096: every LSTM kernel, 4 x units wide) far more slowly
# than one with 32 more columns; at 2 threads the two are level. Padding copies the kernel, so it is
# done once per search (ProductKernel), and only for searches of at least PADDED_PRODUCT_ROWS rows:
# with fewer, a step is bound by reading the weights, not by the products, and the copy is pure
# cost. The figures: benchmarks/README.md, section "Decoding".
ALIASED_STRIDE_COLUMNS = 512  # float32 columns: 2 KiB
PADDING_COLUMNS = 32
PADDED_PRODUCT_ROWS = 16


class ProductKernel(NamedTuple):
    """A float kernel read once for the many products of a search (:meth:`WeightReader.reading_once`).

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

    def float_values(self) -> tf.Tensor:
        """The kernel's own values [input, columns], without the padding columns."""
        return self.values[:, : self.columns]

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


def columns_as_rows(gather_columns: Callable[[tf.Tensor], tf.Tensor], ids) -> tf.Tensor:
    """Columns ``ids`` (int32, any shape) of an [input, output] kernel as rows: [*ids.shape, input].

    ``gather_columns``: flat ids [n] -> those columns [input, n]. Only the gathered columns are
    transposed, never the whole kernel: a tied model (Press & Wolf 2017) looks its embeddings up in the
    softmax kernel at every decoding step, where a transposed copy of it would cost a softmax's worth
    of memory traffic."""
    ids = tf.convert_to_tensor(ids, tf.int32)
    rows = tf.transpose(gather_columns(tf.reshape(ids, [-1])))  # [n, input]
    shaped = tf.reshape(rows, tf.concat([tf.shape(ids), tf.shape(rows)[1:]], axis=0))
    shaped.set_shape(ids.shape.concatenate(rows.shape[1:]))
    return shaped


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
    :meth:`product`, :meth:`columns`, :meth:`partial_product` and :meth:`lookup_columns` (other
    products), and :meth:`lookup`, for the weights they replace, and defer to this class for the others.
    """

    def float_kernel(self, kernel: tf.Variable) -> Optional[tf.Tensor]:
        """The float values a product with ``kernel`` uses (a transform with float products replaces
        this); None when the transform's product with it is not a float product (int8 arithmetic).

        Whatever :meth:`product` does, it must equal ``x @ float_kernel(kernel)`` wherever this is not
        None, up to the rounding of a transform that multiplies at a lower precision
        (:mod:`gnmt_tf.training.precision`): a whole-sequence recurrence reads these values once and
        multiplies by them itself, in float32 (:meth:`WeightReader.sequence_kernel`)."""
        return kernel

    def kernel_gradient(self, x: tf.Tensor, dy: tf.Tensor) -> tf.Tensor:
        """``x^T @ dy``: the gradient of a kernel from the rows ``x`` [n, input] it multiplied and the
        gradient ``dy`` [n, output] of their products, for a recurrence that writes its gradient out
        (:func:`gnmt_tf.layers.recurrence.lstm_over_time`). A transform that multiplies at a lower
        precision computes it as autodiff would through its :meth:`product`."""
        return tf.matmul(x, dy, transpose_a=True)

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

    def lookup_columns(self, kernel: tf.Variable, ids: tf.Tensor) -> tf.Tensor:
        """Columns ``ids`` of an [input, output] ``kernel`` as embedding rows [*ids.shape, input], each
        column as :meth:`product` reads it (the values of :meth:`float_kernel`, by default): the lookups of
        a tied model, whose embeddings are the softmax kernel's columns (Press & Wolf 2017)."""
        values = self.float_kernel(kernel)
        return columns_as_rows(lambda flat: tf.gather(values, flat, axis=1), ids)

    # What a module computing with the transform stores (a translator, and its SavedModel).
    def replaces(self, variable: tf.Variable) -> bool:
        """Whether the transform holds its own form of ``variable``, so that a module computing with
        it neither reads nor stores the float one (:class:`gnmt_tf.quantization.Int8Weights`)."""
        return False

    def stored_rows(self, table: tf.Tensor) -> "StoredRows":
        """``table`` [rows, width] (computed from the weights, e.g. a precomputed product) kept as a
        module computing with the transform keeps its embedding tables; called with ids, its rows."""
        return StoredRows(table)


FLOAT_WEIGHTS = WeightTransform()


class ForwardingTransform(WeightTransform):
    """A transform stacked on another, ``inner``: every method is the inner transform's until a
    subclass overrides it. A wrapper (bfloat16 products around quantization-aware training) then
    overrides only what it changes, and a method added to :class:`WeightTransform` later reaches the
    inner transform without being forwarded by hand."""

    def __init__(self, inner: WeightTransform = FLOAT_WEIGHTS):
        self.inner = inner


def _forwarded(name: str):
    def forward(self, *args, **kwargs):
        return getattr(self.inner, name)(*args, **kwargs)

    forward.__name__ = name
    forward.__doc__ = f"The inner transform's :meth:`WeightTransform.{name}`."
    return forward


for _name, _method in list(vars(WeightTransform).items()):
    if callable(_method) and not _name.startswith("_"):
        setattr(ForwardingTransform, _name, _forwarded(_name))


class StoredRows(tf.Module):
    """A float table kept as a variable; called with ids, it gives their rows."""

    def __init__(self, table, name: Optional[str] = None):
        super().__init__(name=name)
        self.table = tf.Variable(table, trainable=False, name="table")

    def __call__(self, ids) -> tf.Tensor:
        return tf.gather(self.table, ids)


class WeightReader:
    """How a model's layers read their kernels and embedding tables: through one transform.

    An immutable value, passed to every method that computes (as ``weights``). ``transform``
    (default :data:`FLOAT_WEIGHTS`) decides what the products and lookups read. A reader made by
    :meth:`reading_once` also holds a snapshot of the product kernels, read through the transform
    once, for the many steps of one search.
    """

    __slots__ = ("_transform", "_read_once")

    def __init__(self, transform: Optional[WeightTransform] = None):
        self._transform: WeightTransform = transform if transform is not None else FLOAT_WEIGHTS
        # kernel ref -> its values read once, in a reader made by reading_once; None in any other.
        self._read_once: Optional[Mapping[Any, ProductKernel]] = None

    def __setattr__(self, name, value):
        if hasattr(self, name):
            raise AttributeError(f"a WeightReader is immutable: make another (reading_once) rather than "
                                 f"setting {name}")
        object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        once = f", {len(self._read_once)} kernels read once" if self._read_once is not None else ""
        return f"WeightReader({type(self._transform).__name__}{once})"

    @property
    def transform(self) -> WeightTransform:
        return self._transform

    def _read(self, kernel: tf.Variable) -> Optional[ProductKernel]:
        """``kernel`` as this snapshot read it once, or None (not read once: read through the transform)."""
        return self._read_once.get(kernel.ref()) if self._read_once is not None else None

    def reading_once(self, kernels: Iterable[tf.Variable],
                     rows: Union[int, tf.Tensor, None] = None) -> "WeightReader":
        """A new reader with the same transform whose products with ``kernels`` read each of them once, here.

        Each kernel with a float product under the transform is read through it now (dequantized,
        fake-quantized, or as it is) as a :class:`ProductKernel`, padded when the products have at
        least ``PADDED_PRODUCT_ROWS`` rows (``rows``: the decoder rows of the search, an int or a
        tensor of the call; None: never). Called in a traced function before a decoding loop, the
        loop's steps multiply by those tensors rather than reading (and dequantizing) the kernel at
        every step. Kernels with int8 products are read by the transform as before. A snapshot:
        for inference, not for a model being trained. This reader is left as it is.
        """
        if self._read_once is not None:
            raise ValueError("this reader already holds kernels read once; call reading_once on the reader "
                             "it was made from")
        padded = False if rows is None else rows >= PADDED_PRODUCT_ROWS
        read = {}
        for kernel in kernels:
            values = self._transform.float_kernel(kernel)
            if values is not None:
                read[kernel.ref()] = ProductKernel.of(values, padded)
        snapshot = WeightReader(self._transform)
        object.__setattr__(snapshot, "_read_once", types.MappingProxyType(read))
        return snapshot

    def product(self, x: tf.Tensor, kernel: tf.Variable) -> tf.Tensor:
        """``x @ kernel`` through the transform."""
        read = self._read(kernel)
        return matmul(x, read) if read is not None else self._transform.product(x, kernel)

    def sequence_kernel(self, kernel: tf.Variable) -> tf.Tensor:
        """The float values this reader's products with ``kernel`` use (a snapshot's: as it read them), for
        a recurrence over a whole sequence that multiplies by them at every step and differentiates
        through them (:class:`gnmt_tf.layers.recurrence.WrittenGradientRecurrence`).

        Raises ValueError when those products are not float products (int8 arithmetic): a layer with
        such a reader runs step by step (:data:`gnmt_tf.layers.recurrence.STEPWISE`)."""
        read = self._read(kernel)
        values = read.float_values() if read is not None else self._transform.float_kernel(kernel)
        if values is None:
            raise ValueError(
                f"{self!r} multiplies {kernel.name} in int8, so a layer cannot multiply by its float values "
                "over a whole sequence; run such layers step by step (gnmt_tf.layers.recurrence.STEPWISE)")
        return tf.convert_to_tensor(values)

    def kernel_gradient(self, x: tf.Tensor, dy: tf.Tensor) -> tf.Tensor:
        """``x^T @ dy`` through the transform (:meth:`WeightTransform.kernel_gradient`): the gradient of a
        :meth:`sequence_kernel` summed over every step of the recurrence."""
        return self._transform.kernel_gradient(x, dy)

    def partial_product(self, kernel: tf.Variable, rows: slice) -> Callable[[tf.Tensor], tf.Tensor]:
        """``x -> x @ kernel[rows]`` through the transform (see :meth:`WeightTransform.partial_product`)."""
        read = self._read(kernel)
        if read is not None:
            part = read.rows(rows)
            return lambda x: matmul(x, part)
        return self._transform.partial_product(kernel, rows)

    def dense(self, layer, x: tf.Tensor, columns: Optional[DenseColumns] = None) -> tf.Tensor:
        """A built ``keras.layers.Dense`` without activation applied to ``x``, its kernel read through the transform.

        With ``columns`` (:meth:`dense_columns` of this layer), only those output units, ``[..., n]``.
        The bias is read as it is (see the module docstring).
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
        read = self._read(layer.kernel)
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

    def lookup_columns(self, layer, ids) -> tf.Tensor:
        """The kernel columns ``ids`` (int32, any shape) of a built ``keras.layers.Dense`` as rows
        [*ids.shape, input]: a tied model's embeddings (:mod:`gnmt_tf.models.embeddings`), read as this
        reader's products with that kernel read it (a snapshot's: as it read the kernel once)."""
        read = self._read(layer.kernel)
        if read is not None:  # its padding columns are never gathered: ids < the kernel's own columns
            return columns_as_rows(read.gather_columns, ids)
        return self._transform.lookup_columns(layer.kernel, tf.convert_to_tensor(ids))


FLOAT_READER = WeightReader()
"""The float weights, as trained: the default reader of the model's entry points."""


