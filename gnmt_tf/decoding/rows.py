"""The decoder rows of the one decoding loop (:func:`gnmt_tf.decoding.search.decode`).

A search has ``rows_per_search`` decoder rows (its hypotheses; the beam width), adjacent:
row ``a * rows_per_search + k`` of the decoder state is row k of the loop's a-th search. A
part of the decoder state whose type says ``one_row_per_search`` (the attention memory) is
shared by a search's rows and has one row per search instead (:func:`map_rows`).

A :class:`RowLayout` says how the loop lays these rows out for ``step_fn``. The driver calls
it at three fixed points, the same for every layout:

* :meth:`RowLayout.pad`: a tensor with a row per running search (the searches kept, the
  tokens fed next) as the loop keeps it;
* :meth:`RowLayout.pad_state`: the initial decoder state at the searches' places;
* :meth:`RowLayout.wrap`: ``step_fn`` as the loop calls it, giving the real rows' outputs.

:class:`RowLayout` itself keeps the running searches as they are;
:class:`gnmt_tf.decoding.buckets.BucketedRows` pads them to shape buckets, so that a
compiled step sees few shapes.
"""

from __future__ import annotations

from typing import Callable

import tensorflow as tf


def map_rows(nest, per_row: Callable, per_search: Callable):
    """``nest`` with ``per_search`` applied to the tensors of its parts that have one row per
    search (their type's ``one_row_per_search`` is true) and ``per_row`` to all others."""
    if getattr(type(nest), "one_row_per_search", False):
        return tf.nest.map_structure(per_search, nest)
    if isinstance(nest, tuple) and hasattr(nest, "_fields"):
        return type(nest)(*(map_rows(part, per_row, per_search) for part in nest))
    if isinstance(nest, (tuple, list)):
        return type(nest)(map_rows(part, per_row, per_search) for part in nest)
    if isinstance(nest, dict):
        return {key: map_rows(part, per_row, per_search) for key, part in nest.items()}
    return per_row(nest)


def repeat_rows(nest, times: int):
    """Every tensor of ``nest`` [batch, ...] -> [batch * times, ...], each row's copies adjacent."""

    def repeat(tensor):
        tensor = tf.convert_to_tensor(tensor)
        multiples = tf.concat([[1, times], tf.ones([tf.rank(tensor) - 1], tf.int32)], axis=0)
        tiled = tf.tile(tf.expand_dims(tensor, 1), multiples)
        return tf.reshape(tiled, tf.concat([[-1], tf.shape(tensor)[1:]], axis=0))

    return tf.nest.map_structure(repeat, nest) if times != 1 else nest


def gather_rows(decoder_state, searches: tf.Tensor, rows: tf.Tensor):
    """``decoder_state``'s rows ``rows`` [len(searches), rows_per_search], flattened, and the
    per-search parts' rows ``searches``."""
    rows = tf.reshape(rows, [-1])
    return map_rows(decoder_state, lambda s: tf.gather(s, rows), lambda s: tf.gather(s, searches))


class RowLayout:
    """The running searches' decoder rows as they are: row a of a tensor is the a-th running search."""

    def pad(self, tensor: tf.Tensor) -> tf.Tensor:
        """``tensor`` [running searches, ...] with a row per search the loop keeps rows for."""
        return tensor

    def pad_state(self, decoder_state, searches: tf.Tensor, rows_per_search: int):
        """The decoder state of every search [searches * rows_per_search, ...] (per-search parts
        [searches, ...]) at the searches ``searches`` = ``pad(every search)``."""
        return decoder_state

    def wrap(self, step_fn: Callable) -> Callable:
        """``step_fn`` as the loop calls it, ``(state, tokens, rows) -> (logits, attention, state)``:
        the logits and attention of the ``rows`` real rows (the running searches'), the state of all."""
        return lambda state, tokens, rows: step_fn(state, tokens)


UNPADDED = RowLayout()
