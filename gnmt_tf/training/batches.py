"""The training batches of a run, as ``fit`` takes them on each kind of cluster."""

from __future__ import annotations

from typing import Sequence, Tuple

import tensorflow as tf
import tf_keras as keras

from gnmt_tf.config import GNMTConfig
from gnmt_tf.data import count_filtered, make_dataset
from gnmt_tf.data.tokenizer import WordpieceTokenizer
from gnmt_tf.training.masked_pairs import pairs_as_trained
from gnmt_tf.training.state import Cluster

Pair = Tuple[str, str]


class TrainingBatches:
    """The training pairs, batched with the config's data and training sections (:func:`gnmt_tf.data.make_dataset`).

    ``pairs`` are the pairs as given; :attr:`pairs` those trained on: masked when the config says
    ``localization.placeholders`` (:mod:`gnmt_tf.training.masked_pairs`)."""

    def __init__(self, config: GNMTConfig, pairs: Sequence[Pair], tokenizer: WordpieceTokenizer, cluster: Cluster):
        self.masking = pairs_as_trained(config.localization, pairs)
        self.config, self.pairs, self.tokenizer, self.cluster = config, self.masking.pairs, tokenizer, cluster

    def placeholder_note(self) -> str:
        """How many training pairs hold placeholders (and how many were left out), or "" when the config
        masks none."""
        return self.masking.note()

    def length_filter_note(self) -> str:
        """What data.max_length leaves out of training, or "" when it keeps every pair."""
        max_length = self.config.data.max_length
        dropped = count_filtered(self.pairs, self.tokenizer.tokenize, max_length)
        if not dropped:
            return ""
        return (f"length filter: {dropped:,} of {len(self.pairs):,} training pairs have more than "
                f"{max_length} wordpieces on a side and are not trained on (data.max_length)")

    def _dataset(self, pairs, seed):
        t, d = self.config.training, self.config.data
        return make_dataset(
            pairs, self.tokenizer.tokenize, batch_size=t.batch_size, batch_tokens=t.batch_tokens,
            batch_cells=t.batch_cells,
            max_length=d.max_length, bucket_width=d.bucket_width, shuffle_buffer=d.shuffle_buffer,
            seed=seed, training=True, repeat=True, bucket_shapes=t.jit_compile,
        )

    def for_fit(self, step: int):
        """The batches of a run starting at ``step``: a dataset, or for parameter-server training a
        dataset function."""
        seed = self.config.training.seed + step  # a resumed run does not replay the batches it began with
        if self.cluster.coordinated:
            # Each worker reads its own shard in its own order, a whole batch per update
            # (the paper's asynchronous replicas). Called in graph mode, once per worker.
            def per_worker(context):
                shard = self.pairs[context.input_pipeline_id::context.num_input_pipelines]
                return self._dataset(shard, seed + context.input_pipeline_id)

            return keras.utils.experimental.DatasetCreator(per_worker)
        data = self._dataset(self.pairs, seed)
        if self.cluster.multi_worker:
            # Every worker builds the same batches (same seed) and keeps its share of each;
            # stating it spares tf.data's fallback warning (the data are not files).
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
            data = data.with_options(options)
        return data
