"""Parallel text in, wordpiece ids out: readers, the built-in gettext catalogs, the tokenizer, the tf.data pipeline."""

from gnmt_tf.data.pipeline import count_filtered, make_dataset
from gnmt_tf.data.readers import (DataError, LoadReport, Pair, read_aligned, read_parallel, read_tsv, split_dev,
                                 split_held_out)

__all__ = [
    "DataError", "LoadReport", "Pair", "count_filtered", "make_dataset", "read_aligned", "read_parallel",
    "read_tsv", "split_dev", "split_held_out",
]
