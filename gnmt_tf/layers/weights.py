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
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Optional

import tensorflow as tf


def matmul(x: tf.Tensor, kernel) -> tf.Tensor:
    """``x @ kernel`` for any leading shape of ``x`` (one product for all time steps of a sequence)."""
    if x.shape.rank == 2:
        return tf.matmul(x, kernel)
    return tf.tensordot(x, kernel, axes=1)


def kernel_columns(kernel, columns: Optional[tf.Tensor]):
    """The output units ``columns`` of a ``[input, output]`` kernel (all of it for None)."""
    return kernel if columns is None else tf.gather(kernel, columns, axis=1)


class WeightTransform:
    """The float weights as they are; subclasses replace some of them.

    Subclasses override :meth:`float_kernel` (float products with other values) or
    :meth:`product` and :meth:`partial_product` (other products), and :meth:`lookup`,
    for the weights they replace, and defer to this class for the others. :meth:`enter` and :meth:`exit`
    run when a :class:`WeightReader` starts and stops using the transform, in the
    graph being traced (e.g. to dequantize once per call rather than once per step).
    """

    def float_kernel(self, kernel: tf.Variable) -> tf.Tensor:
        """The float values a product with ``kernel`` uses (a transform with float products replaces this)."""
        return kernel

    def product(self, x: tf.Tensor, kernel: tf.Variable, columns: Optional[tf.Tensor] = None) -> tf.Tensor:
        """``x @ kernel``; with ``columns`` (int32 [n]) only those output units, ``[..., n]``."""
        return matmul(x, kernel_columns(self.float_kernel(kernel), columns))

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

    def enter(self) -> None:
        """Called when a reader starts using this transform."""

    def exit(self) -> None:
        """Called when the reader stops using it."""


FLOAT_WEIGHTS = WeightTransform()


class WeightReader:
    """The one way a model's layers read their kernels and embedding tables.

    A model creates one and passes it to every layer it builds, so one call of
    :meth:`using` changes how the whole model computes. A layer built on its own
    gets a reader of its own.
    """

    def __init__(self):
        self._transform: WeightTransform = FLOAT_WEIGHTS

    @property
    def transform(self) -> WeightTransform:
        return self._transform

    def product(self, x: tf.Tensor, kernel: tf.Variable, columns: Optional[tf.Tensor] = None) -> tf.Tensor:
        """``x @ kernel`` under the current transform (only the output units ``columns``, if given)."""
        return self._transform.product(x, kernel, columns)

    def partial_product(self, kernel: tf.Variable, rows: slice) -> Callable[[tf.Tensor], tf.Tensor]:
        """``x -> x @ kernel[rows]`` under the current transform (see :meth:`WeightTransform.partial_product`)."""
        return self._transform.partial_product(kernel, rows)

    def dense(self, layer, x: tf.Tensor, columns: Optional[tf.Tensor] = None) -> tf.Tensor:
        """A built ``keras.layers.Dense`` without activation applied to ``x``, its kernel read through the transform.

        With ``columns`` (int32 [n]), only those output units: the kernel's columns and the
        bias entries at ``columns``, ``[..., n]`` (a vocabulary shortlist's softmax).
        """
        y = self.product(x, layer.kernel, columns)
        if not layer.use_bias:
            return y
        return y + (layer.bias if columns is None else tf.gather(layer.bias, columns))

    def lookup(self, layer, ids) -> tf.Tensor:
        """A built ``keras.layers.Embedding`` looked up at ``ids``, its table read through the transform."""
        return self._transform.lookup(layer.embeddings, tf.convert_to_tensor(ids))

    @contextlib.contextmanager
    def using(self, transform: Optional[WeightTransform]) -> Iterator[WeightTransform]:
        """Read the weights through ``transform`` (None: float) inside the ``with`` block."""
        transform = transform or FLOAT_WEIGHTS
        if self._transform is not FLOAT_WEIGHTS and transform is not self._transform:
            raise ValueError(
                f"the model already computes with {type(self._transform).__name__}; "
                f"leave that scope before using {type(transform).__name__}"
            )
        previous = self._transform
        transform.enter()
        self._transform = transform
        try:
            yield transform
        finally:
            self._transform = previous
            transform.exit()
