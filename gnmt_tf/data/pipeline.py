"""The tf.data pipeline: sentence pairs in, padded batches of wordpiece ids out.

:func:`make_dataset` tokenizes, filters by length (section 8.3 trains on sentences of
bounded length), buckets similar lengths together and pads, yielding
``((source_ids, target_input_ids), target_output_ids)`` for teacher forcing.
:func:`count_filtered` says how many pairs the length filter drops, so the caller
can report it.  Training and evaluation compose the same small steps (text pairs,
tokenizing, special ids, batching); training adds shuffling, the length filter and
bucketing.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple

from gnmt_tf.data.readers import DataError, Pair
from gnmt_tf.vocab import BOS_ID, EOS_ID, PAD_ID

TOKENIZE_CHUNK = 1024
"""Sentences tokenized per call in the pipeline (one call per chunk is far faster than
one per sentence)."""

Tokenize = Callable[..., object]
"""A callable mapping a tf.string tensor [N] to a tf.RaggedTensor of int32 ids [N, None]
(wordpieces only: no BOS/EOS)."""

_PADDING = (PAD_ID, PAD_ID, PAD_ID)


def make_dataset(
    pairs: Sequence[Pair],
    tokenize: Tokenize,
    *,
    batch_size: int,
    batch_tokens: Optional[int] = None,
    max_length: int,
    bucket_width: int,
    shuffle_buffer: int,
    seed: int,
    training: bool = True,
    repeat: bool = False,
    bucket_shapes: bool = False,
    batch_cells: Optional[int] = None,
):
    """A ``tf.data.Dataset`` of ``((source_ids, target_input_ids), target_output_ids)``.

    All three are int32 [batch, time], right-padded with PAD_ID (0).  Per pair, with
    ``x`` and ``y`` the wordpieces of source and target::

        source_ids        = x + [EOS]
        target_input_ids  = [BOS] + y      (the decoder's inputs, y_0 = BOS, eq. 2)
        target_output_ids = y + [EOS]      (what it must predict at each step)

    Training (``training=True``): pairs are shuffled (``seed``, reshuffled every
    epoch), tokenized in chunks, pairs with more than ``max_length`` wordpieces on
    either side are dropped (see :func:`count_filtered` to report how many), and
    pairs are grouped into buckets of similar length (width ``bucket_width``,
    measured on the longer side) so that little of each batch is padding.  A batch
    holds ``batch_size`` pairs or, when ``batch_tokens`` is set, as many pairs as
    keep ``batch x longest target_output`` within ``batch_tokens`` (computed per
    bucket from its longest possible target); where ``batch_cells`` is set, no more
    than keep ``batch x longest source x longest target_output`` within it (the bucket's
    widest possible pair), the memory bound explained below.

    Evaluation (``training=False``): the input order is kept, nothing is filtered
    (every pair is scored) and batches are ``batch_size`` consecutive pairs, or fewer where
    ``batch_cells`` is set and a batch would exceed ``batch x longest source x longest
    target_output`` cells. Why cells: teacher forcing scores every target step against every source
    position at once (eq. 4, a [batch, target, source, attention units] tensor), so one
    pair of several hundred wordpieces in a batch of 64 would need tens of gigabytes. A
    dev pair alone over the bound is a batch of its own; in training, ``batch_cells`` must
    hold one pair of the longest allowed length, ``(max_length + 1) ** 2``.

    ``bucket_shapes`` (training only): every batch of a bucket has the same shape, so that a
    step compiled per shape (``training.jit_compile``, XLA) compiles once per bucket and never
    again: source and target are padded to the bucket's widest possible target (EOS included)
    and each epoch's last, partial batch of every bucket is dropped (its pairs come back
    reshuffled in the next epoch).

    ``repeat`` repeats the data forever (a new shuffle each epoch).  Given the same
    ``seed`` (and the same TensorFlow global seed, which tf.data combines with it)
    two datasets yield the same batches.
    """
    if not pairs:
        raise DataError("make_dataset: no sentence pairs")
    if batch_size <= 0 or max_length <= 0 or bucket_width <= 0:
        raise ValueError(
            f"batch_size, max_length and bucket_width must be positive, got {batch_size}, {max_length}, "
            f"{bucket_width}"
        )
    if training:
        batches = _training_batches(
            pairs, tokenize, batch_size=batch_size, batch_tokens=batch_tokens, max_length=max_length,
            bucket_width=bucket_width, shuffle_buffer=shuffle_buffer, seed=seed, bucket_shapes=bucket_shapes,
            batch_cells=batch_cells,
        )
    else:
        batches = _evaluation_batches(pairs, tokenize, batch_size=batch_size, batch_cells=batch_cells)
    return _for_teacher_forcing(batches, repeat=repeat)


def _training_batches(
    pairs, tokenize, *, batch_size, batch_tokens, max_length, bucket_width, shuffle_buffer, seed, bucket_shapes,
    batch_cells=None,
):
    """Shuffled, length-filtered pairs in batches of similar length (see :func:`make_dataset`)."""
    boundaries = _bucket_boundaries(max_length, bucket_width)
    bucket_batch_sizes = _bucket_batch_sizes(boundaries, max_length, batch_size, batch_tokens, batch_cells)
    dataset = _text_pairs(pairs).shuffle(
        max(1, min(shuffle_buffer, len(pairs))), seed=seed, reshuffle_each_iteration=True
    )
    dataset = _within_length(_tokenized(dataset, tokenize), max_length)
    batches = _bucketed(_with_special_ids(dataset), boundaries, bucket_batch_sizes, drop_remainder=bucket_shapes)
    return _padded_to_bucket_width(batches, boundaries, max_length) if bucket_shapes else batches


def _evaluation_batches(pairs, tokenize, *, batch_size, batch_cells=None):
    """Every pair, in input order, in batches of consecutive pairs (see :func:`make_dataset`)."""
    import tensorflow as tf

    dataset = _with_special_ids(_tokenized(_text_pairs(pairs), tokenize))
    if batch_cells is None:
        return dataset.padded_batch(batch_size, padding_values=_PADDING)
    dataset = dataset.cache()  # tokenized once: the lengths are read here, the batches made below
    lengths = [(len(source), len(target_out)) for source, _, target_out in dataset.as_numpy_iterator()]
    sizes = cell_bounded_batch_sizes(lengths, batch_size, batch_cells)
    batch_ids = tf.data.Dataset.from_tensor_slices(tf.repeat(tf.range(len(sizes), dtype=tf.int64), sizes))
    sizes = tf.constant(sizes, tf.int64)
    # A batch's pairs are consecutive, so each window fills, and is emitted, before the next begins.
    return tf.data.Dataset.zip((batch_ids, dataset)).group_by_window(
        key_func=lambda batch_id, _: batch_id,
        reduce_func=lambda _, window: window.map(lambda __, ids: ids).padded_batch(batch_size, padding_values=_PADDING),
        window_size_func=lambda batch_id: sizes[batch_id],
    )


def cell_bounded_batch_sizes(lengths: Sequence[Tuple[int, int]], batch_size: int, batch_cells: int) -> List[int]:
    """Sizes of the batches that consecutive pairs of ``(source, target)`` lengths make when a batch
    holds at most ``batch_size`` pairs and ``batch x longest source x longest target`` stays within
    ``batch_cells`` (a pair alone over it is a batch of its own)."""
    sizes: List[int] = []
    count = longest_source = longest_target = 0
    for source, target in lengths:
        grown = (count + 1) * max(longest_source, source) * max(longest_target, target)
        if count and (count == batch_size or grown > batch_cells):
            sizes.append(count)
            count = longest_source = longest_target = 0
        count += 1
        longest_source, longest_target = max(longest_source, source), max(longest_target, target)
    if count:
        sizes.append(count)
    return sizes


def _bucket_boundaries(max_length: int, bucket_width: int) -> list:
    """Bucket i holds pairs whose longer side has fewer than ``boundaries[i]`` wordpieces."""
    return list(range(bucket_width + 1, max_length + 1, bucket_width))


def _bucket_batch_sizes(boundaries: list, max_length: int, batch_size: int, batch_tokens: Optional[int],
                        batch_cells: Optional[int] = None):
    """Pairs per batch in each bucket: ``batch_size``, or as many as fit in ``batch_tokens``; no more
    than fit in ``batch_cells`` when it is set."""
    # Bucket i holds longer-side lengths < boundaries[i], so its sources and targets (with EOS) are
    # at most boundaries[i] wide; the last bucket goes up to max_length (+1 for EOS).
    widths = boundaries + [max_length + 1]
    if batch_tokens is None:
        sizes = [batch_size] * len(widths)
    elif batch_tokens < max_length + 1:
        raise ValueError(
            f"batch_tokens ({batch_tokens}) must be at least max_length + 1 ({max_length + 1}) so that "
            f"one pair of the longest allowed length fits in a batch"
        )
    else:
        sizes = [batch_tokens // width for width in widths]
    if batch_cells is None:
        return sizes
    if batch_cells < (max_length + 1) ** 2:
        raise ValueError(
            f"batch_cells ({batch_cells}) must be at least (max_length + 1) ** 2 ({(max_length + 1) ** 2}) so "
            f"that one pair of the longest allowed length fits in a batch"
        )
    return [min(size, batch_cells // (width * width)) for size, width in zip(sizes, widths)]


def _text_pairs(pairs: Sequence[Pair]):
    """A dataset of (source, target) tf.string scalars."""
    import tensorflow as tf

    sources = tf.constant([source for source, _ in pairs], dtype=tf.string)
    targets = tf.constant([target for _, target in pairs], dtype=tf.string)
    return tf.data.Dataset.from_tensor_slices((sources, targets))


def _tokenized(dataset, tokenize: Tokenize):
    """(source, target) strings to int32 wordpiece ids, tokenized ``TOKENIZE_CHUNK`` pairs at a time."""
    import tensorflow as tf

    # Traced as written: tf.data would run AutoGraph over tensorflow-text's tokenizer code, which has
    # no tensor-dependent Python control flow to convert.
    @tf.autograph.experimental.do_not_convert
    def tokenize_chunk(source_text, target_text):
        return (
            tf.cast(tokenize(source_text), tf.int32),
            tf.cast(tokenize(target_text), tf.int32),
        )

    return (
        dataset.batch(TOKENIZE_CHUNK)
        .map(tokenize_chunk, num_parallel_calls=tf.data.AUTOTUNE)  # ordered: deterministic
        .unbatch()
    )


def _within_length(dataset, max_length: int):
    """Drops pairs with more than ``max_length`` wordpieces on either side (section 8.3)."""
    import tensorflow as tf

    return dataset.filter(
        lambda source_tokens, target_tokens: tf.logical_and(
            tf.size(source_tokens) <= max_length, tf.size(target_tokens) <= max_length
        )
    )


def _with_special_ids(dataset):
    """(x, y) to (x + [EOS], [BOS] + y, y + [EOS])."""
    import tensorflow as tf

    def add_special_ids(source_tokens, target_tokens):
        eos = tf.constant([EOS_ID], tf.int32)
        bos = tf.constant([BOS_ID], tf.int32)
        return (
            tf.concat([source_tokens, eos], 0),
            tf.concat([bos, target_tokens], 0),
            tf.concat([target_tokens, eos], 0),
        )

    return dataset.map(add_special_ids, num_parallel_calls=tf.data.AUTOTUNE)


def _bucketed(dataset, boundaries: list, bucket_batch_sizes: list, drop_remainder: bool = False):
    """Padded batches of pairs of similar length, so that little of each batch is padding."""
    import tensorflow as tf

    # Bucket on the longer side's wordpiece count (the EOS/BOS adds 1 to both).
    return dataset.bucket_by_sequence_length(
        element_length_func=lambda source, target_in, target_out: tf.maximum(
            tf.shape(source)[0], tf.shape(target_out)[0]
        ) - 1,
        bucket_boundaries=boundaries,
        bucket_batch_sizes=bucket_batch_sizes,
        padding_values=_PADDING,
        drop_remainder=drop_remainder,
    )


def _padded_to_bucket_width(batches, boundaries: list, max_length: int):
    """Each batch padded to its bucket's widest possible sequence: boundaries[i] ids (at most
    boundaries[i] - 1 wordpieces + EOS/BOS), max_length + 1 in the last bucket."""
    import tensorflow as tf

    widths = tf.constant(boundaries + [max_length + 1], tf.int32)
    limits = tf.constant(boundaries, tf.int32)

    def pad(source, target_in, target_out):
        # The bucket of the batch's longest pair, measured as _bucketed measures it.
        longest = tf.maximum(tf.shape(source)[1], tf.shape(target_out)[1]) - 1
        width = widths[tf.reduce_sum(tf.cast(limits <= longest, tf.int32))]
        return tuple(
            tf.pad(ids, [[0, 0], [0, width - tf.shape(ids)[1]]], constant_values=PAD_ID)
            for ids in (source, target_in, target_out)
        )

    return batches.map(pad)


def _for_teacher_forcing(batches, *, repeat: bool):
    """Batches as ``((source_ids, target_input_ids), target_output_ids)``, repeated if asked, prefetched,
    with tf.data's autotuning off."""
    import tensorflow as tf

    dataset = batches.map(lambda source, target_in, target_out: ((source, target_in), target_out))
    if repeat:
        dataset = dataset.repeat()
    # Autotuning off: with it on, the end of a training run sat idle for up to a minute (16 s after a
    # 30-second run, 55 s after SIGTERM at 75 s; TensorFlow 2.21) while fit tore down its iterator,
    # which waits out the tuning thread's sleep. Off, there is no wait, and steps/s did not change:
    # a step of an LSTM stack takes far longer than making its batch, so AUTOTUNE's fixed defaults do.
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.prefetch(tf.data.AUTOTUNE).with_options(options)


def count_filtered(
    pairs: Sequence[Pair], tokenize: Tokenize, max_length: int, chunk_size: int = 4 * TOKENIZE_CHUNK
) -> int:
    """How many pairs have more than ``max_length`` wordpieces on either side.

    These are the pairs :func:`make_dataset` drops in training; the caller reports
    the number (the pipeline itself cannot print without losing determinism or speed).
    Tokenizes every pair once, in chunks.
    """
    import tensorflow as tf

    dropped = 0
    for start in range(0, len(pairs), chunk_size):
        chunk = pairs[start:start + chunk_size]
        longest = None
        for side in (0, 1):
            lengths = tokenize(tf.constant([pair[side] for pair in chunk], dtype=tf.string)).row_lengths()
            longest = lengths if longest is None else tf.maximum(longest, lengths)
        dropped += int(tf.reduce_sum(tf.cast(longest > max_length, tf.int32)))
    return dropped

