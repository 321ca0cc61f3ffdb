"""Shape buckets: the few tensor shapes a compiled decoding step is run at.

XLA compiles a function once per distinct input shape. A decoding step sees a new shape
whenever the number of running searches changes (searches end at different steps, see
:func:`gnmt_tf.decoding.search.decode`) or a batch has a new source length, so a step compiled
with ``jit_compile=True`` would compile again for almost every request ("compile storm").
With :class:`ShapeBuckets` the search pads both up to the next bucket size, so the step is
compiled for at most ``len(searches) * len(source)`` shapes (beyond the largest bucket, to
multiples of it), and warm-up requests can compile all of them before serving starts
(:func:`export.warmup.bucket_warmup_requests`). :class:`BucketedRows` pads the running searches
(the row layout the decoding loop takes), the caller pads the source (``AttentionMemory.padded_to``).

Padding never changes a real row's outputs: decoder rows are independent, padded searches
copy a real search's rows and their outputs are dropped, and padded source positions are
masked out of the attention (their score is the masked constant, their probability 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Tuple

import tensorflow as tf

from gnmt_tf.decoding.rows import RowLayout, gather_rows

# Powers of two: padding at most doubles the rows, and each halving of the running searches
# (as a batch's sentences finish) meets the next smaller bucket.
DEFAULT_SEARCHES = (1, 2, 4, 8, 16, 32, 64)
# A translator keeps at most decoding.max_input_length (default 250) source wordpieces + EOS, so 256
# covers every sentence at the default.
DEFAULT_SOURCE = (16, 32, 64, 128, 256)


@dataclass(frozen=True)
class ShapeBuckets:
    """Sizes to pad the number of running searches and the source length up to.

    Args:
        searches: increasing bucket sizes for the searches that run together (a beam search
            has one per sentence, ``rows_per_search`` decoder rows each).
        source: increasing bucket sizes for the source length (wordpieces + EOS).

    A size beyond the largest bucket is padded to a multiple of the largest.
    """

    searches: Tuple[int, ...] = DEFAULT_SEARCHES
    source: Tuple[int, ...] = DEFAULT_SOURCE

    def __post_init__(self):
        for name in ("searches", "source"):
            sizes = tuple(getattr(self, name))
            if not sizes or any(not isinstance(size, int) or size < 1 for size in sizes) or \
                    list(sizes) != sorted(set(sizes)):
                raise ValueError(f"shape buckets: {name} must be increasing positive integers, got {sizes!r}")
            object.__setattr__(self, name, sizes)

    def searches_size(self, count) -> tf.Tensor:
        """The bucket for ``count`` running searches (an int32 scalar tensor; 0 stays 0)."""
        return _bucket(self.searches, count)

    def source_size(self, length) -> tf.Tensor:
        """The bucket for a source length (an int32 scalar tensor)."""
        return _bucket(self.source, length)

    def shapes(self, max_searches: int, max_source: int):
        """Every (searches, source) bucket pair a search of at most these sizes can meet (run eagerly)."""
        largest_searches, largest_source = int(self.searches_size(max_searches)), int(self.source_size(max_source))
        searches = [size for size in self.searches if size <= largest_searches]
        source = [size for size in self.source if size <= largest_source]
        return [(rows, length) for rows in searches for length in source]


def _bucket(sizes: Tuple[int, ...], count) -> tf.Tensor:
    count = tf.convert_to_tensor(count, tf.int32)
    table = tf.constant(sizes, tf.int32)
    index = tf.searchsorted(table, tf.reshape(count, [1]), side="left")[0]  # first size >= count
    beyond = (count + sizes[-1] - 1) // sizes[-1] * sizes[-1]
    fitted = tf.gather(table, tf.minimum(index, len(sizes) - 1))
    return tf.where(tf.equal(count, 0), 0, tf.where(index < len(sizes), fitted, beyond))


def fill_to(tensor: tf.Tensor, count, size) -> tf.Tensor:
    """The first ``count`` rows of ``tensor``, padded to ``size`` rows by repeating row ``count - 1``."""
    return tf.gather(tensor, tf.minimum(tf.range(size), tf.maximum(count - 1, 0)))


@dataclass(frozen=True)
class BucketedRows(RowLayout):
    """The running searches padded to ``buckets.searches_size`` of their count, a row layout of
    :func:`gnmt_tf.decoding.search.decode`: the padded searches repeat the last real one and
    come after the real ones, and their outputs are cut away before the strategy sees them."""

    buckets: ShapeBuckets

    def pad(self, tensor):
        count = tf.shape(tensor)[0]
        return fill_to(tensor, count, self.buckets.searches_size(count))

    def pad_state(self, decoder_state, searches, rows_per_search: int):
        rows = tf.expand_dims(searches * rows_per_search, 1) + tf.range(rows_per_search)
        return gather_rows(decoder_state, searches, rows)

    def wrap(self, step_fn: Callable) -> Callable:
        def step(state, tokens, rows):
            logits, attention, state = step_fn(state, tokens)
            return logits[:rows], attention[:rows], state  # the padded searches' rows come last

        return step
