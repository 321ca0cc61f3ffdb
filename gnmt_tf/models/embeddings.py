"""Where a GNMT's wordpiece embeddings come from: tables of their own, or the softmax weights.

Section 3 gives the encoder and the decoder each an embedding table [V, E], beside the softmax
weights W_s of eq. 13. The vocabulary is one set of wordpieces shared by both languages (section
4.1), so the three can be one table (Press & Wolf 2017, "Using the Output Embedding to Improve
Language Models", section 3; Marian's ``--tied-embeddings-all``): ``model.tied_embeddings``. The
GNMT chooses its embedding source once, in its constructor, and asks it for every lookup, for the
tables that int8 inference stores a row at a time, and for where they live under model
parallelism:

* :class:`SeparateEmbeddings`: the paper's two Keras ``Embedding`` layers (the GNMT tracks them as
  ``source_embedding`` and ``target_embedding``, the names its checkpoints store them under);
* :class:`TiedEmbeddings`: the softmax's Dense kernel [units, V], column v being wordpiece v's
  embedding. The kernel (and the softmax bias) stays the one stored variable, under its own
  checkpoint name; the lookups read its columns through the weight reader as the softmax's products
  read the kernel (:meth:`gnmt_tf.layers.weights.WeightReader.lookup_columns`), so whatever a weight
  transform makes of the kernel, the embeddings are that too:
  :class:`~gnmt_tf.quantization.weights.Int8Weights`' int8 columns, whose eq. 12 scales are one per
  output unit, i.e. one per wordpiece (the separate tables get one per row), or
  :class:`~gnmt_tf.quantization.weights.FakeQuantizedWeights`' rounded kernel. Its gradient is the sum
  of the three uses'.
"""

from __future__ import annotations

from typing import List, Optional

import tensorflow as tf
import tf_keras as keras

from gnmt_tf.config import ModelConfig
from gnmt_tf.layers.cell import uniform_initializer
from gnmt_tf.layers.stack import build_sublayer
from gnmt_tf.layers.weights import WeightReader


def embedding_layer(config: ModelConfig, name: str) -> keras.layers.Embedding:
    """One of section 3's embedding tables: [vocab_size, embedding width], uniform in +-init_scale."""
    return keras.layers.Embedding(config.vocab_size, config.embedding_width,
                                  embeddings_initializer=uniform_initializer(config.init_scale), name=name)


class SeparateEmbeddings:
    """The paper's source and target embedding tables, each a Keras ``Embedding`` layer of the model."""

    def __init__(self, source_layer: keras.layers.Embedding, target_layer: keras.layers.Embedding):
        self.source_layer = source_layer
        self.target_layer = target_layer

    def source_device(self, placement) -> Optional[str]:
        """Where the source table lives under model parallelism: with the bottom encoder layer, its reader."""
        return placement.encoder[0] if placement else None

    def target_device(self, placement) -> Optional[str]:
        """Where the target table lives: with the bottom decoder layer that reads it."""
        return placement.decoder[0] if placement else None

    def build(self, placement) -> None:
        build_sublayer(self.source_layer, (None, None), self.source_device(placement))
        build_sublayer(self.target_layer, (None, None), self.target_device(placement))

    def source(self, ids, weights: WeightReader) -> tf.Tensor:
        return weights.lookup(self.source_layer, ids)

    def target(self, ids, weights: WeightReader) -> tf.Tensor:
        return weights.lookup(self.target_layer, ids)

    def tables(self) -> List[tf.Variable]:
        """The tables that are looked up only (int8 inference stores them with one scale per row)."""
        return [self.source_layer.embeddings, self.target_layer.embeddings]


class TiedEmbeddings:
    """Source and target embeddings that are the columns of the softmax kernel (Press & Wolf 2017).

    ``softmax``: the decoder's softmax ``Dense`` layer, which creates and builds the kernel (on the
    softmax's device under model parallelism).
    """

    def __init__(self, softmax: keras.layers.Dense):
        self.softmax = softmax

    def source_device(self, placement) -> Optional[str]:
        """Where the table lives: with the softmax (the root device of a placement). Lookups gather there,
        so only the looked-up rows travel to the bottom layers' devices, never the table."""
        return placement.root if placement else None

    def target_device(self, placement) -> Optional[str]:
        return self.source_device(placement)

    def build(self, placement) -> None:
        """Nothing of its own to build: the decoder builds the softmax."""

    def source(self, ids, weights: WeightReader) -> tf.Tensor:
        return weights.lookup_columns(self.softmax, ids)

    def target(self, ids, weights: WeightReader) -> tf.Tensor:
        return weights.lookup_columns(self.softmax, ids)

    def tables(self) -> List[tf.Variable]:
        """None: the one table is the softmax kernel, a product kernel (``GNMT.product_kernels``) that int8
        inference already stores with one scale per wordpiece."""
        return []
