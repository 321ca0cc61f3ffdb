"""Additive attention with one hidden layer (eq. 4).

Written with expand_dims/squeeze rather than ``x[:, None]`` indexing, which
TFLite cannot convert inside loops.

    s_t = v . tanh(W_q y + W_k x_t + b)        (the one hidden layer)
    p_t = softmax_t(s_t)                       (padding positions excluded)
    a   = sum_t p_t x_t

``W_k x_t + b`` depends only on the source sentence, so :meth:`project_keys`
computes it once per sentence and every decoding step reuses it (an identity
that changes no output; Devlin 2017, section 4.3).

Its weights are read as they are, not through a
:class:`~gnmt_tf.layers.weights.WeightReader`: section 6 keeps the attention model in float,
and no weight transform (int8, fake-quantized, quantization-aware training) replaces them.
"""

from __future__ import annotations

from typing import NamedTuple, Tuple

import tensorflow as tf
import tf_keras as keras

from gnmt_tf.layers.cell import uniform_initializer

# Added to the scores of padding positions; exp() of it is exactly 0 in float32.
_MASKED_SCORE = -1e9


class AttentionMemory(NamedTuple):
    """What the decoder attends to, prepared once per source sentence.

    In a search every hypothesis of a sentence attends to the same memory, so the search
    keeps one row of it per search rather than a copy per beam row
    (``one_row_per_search``, read by :func:`gnmt_tf.decoding.search.decode`): nothing of
    it is tiled over the beam or gathered when the beam is reordered (Devlin 2017:
    merge what is identical across the beam).
    """

    one_row_per_search = True  # a class attribute, not a field

    keys: tf.Tensor  # [batch, src, attention_units]: W_k x_t + b
    values: tf.Tensor  # [batch, src, encoder_units]: the top encoder outputs x_t
    mask: tf.Tensor  # [batch, src] bool: True at real (non-padding) positions

    def padded_to(self, length) -> "AttentionMemory":
        """The memory with ``length`` source positions (>= its own): the new ones are masked out,
        so every attention result is unchanged (a compiled step then sees fewer shapes)."""
        extra = [[0, 0], [0, length - tf.shape(self.mask)[1]]]
        return AttentionMemory(tf.pad(self.keys, extra + [[0, 0]]), tf.pad(self.values, extra + [[0, 0]]),
                               tf.pad(self.mask, extra, constant_values=False))


def _last_size(tensor: tf.Tensor):
    """The last dimension, static when known (keeps shapes static for the layers above)."""
    return tensor.shape[-1] if tensor.shape[-1] is not None else tf.shape(tensor)[-1]


@keras.saving.register_keras_serializable(package="gnmt_tf")
class AdditiveAttention(keras.layers.Layer):
    """Bahdanau-style attention; the query is the bottom decoder layer's output."""

    def __init__(self, units: int, init_scale: float = 0.04, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.init_scale = init_scale

    def build_for(self, query_dim: int, value_dim: int) -> None:
        """Create the weights for the given query and encoder-output widths."""
        with tf.name_scope(self.name):
            self.query_kernel = self.add_weight("query_kernel", shape=(query_dim, self.units), initializer=uniform_initializer(self.init_scale))
            self.key_kernel = self.add_weight("key_kernel", shape=(value_dim, self.units), initializer=uniform_initializer(self.init_scale))
            self.hidden_bias = self.add_weight("hidden_bias", shape=(self.units,), initializer=uniform_initializer(self.init_scale))
            self.score_vector = self.add_weight("score_vector", shape=(self.units,), initializer=uniform_initializer(self.init_scale))
        self.built = True

    def project_keys(self, values: tf.Tensor) -> tf.Tensor:
        """``W_k x_t + b`` for every source position: [batch, src, units]. Once per sentence."""
        # Float in every weight transform (section 6), so read directly (see the module docstring).
        return tf.tensordot(values, self.key_kernel, axes=1) + self.hidden_bias

    def memory(self, values: tf.Tensor, mask: tf.Tensor) -> AttentionMemory:
        """Prepare the encoder outputs for attention: keys projected once per sentence."""
        return AttentionMemory(self.project_keys(values), values, mask)

    def attend(self, queries: tf.Tensor, memory: AttentionMemory) -> Tuple[tf.Tensor, tf.Tensor]:
        """Context and attention probabilities for ``queries`` [batch, tgt, query_dim].

        Returns ``(contexts [batch, tgt, value_dim], probs [batch, tgt, src])``.
        """
        # [B, T, A]; float in every weight transform, as project_keys reads W_k.
        projected_queries = tf.tensordot(queries, self.query_kernel, axes=1)
        hidden = tf.tanh(tf.expand_dims(memory.keys, 1) + tf.expand_dims(projected_queries, 2))  # [B, T, S, A]
        scores = tf.tensordot(hidden, self.score_vector, axes=1)  # [B, T, S]
        scores = tf.where(tf.expand_dims(memory.mask, 1), scores, tf.cast(_MASKED_SCORE, scores.dtype))
        probs = tf.nn.softmax(scores, axis=-1)
        contexts = tf.matmul(probs, memory.values)  # [B, T, V]
        return contexts, probs

    def attend_step(self, query: tf.Tensor, memory: AttentionMemory) -> Tuple[tf.Tensor, tf.Tensor]:
        """:meth:`attend` for one query per row [rows, query_dim] -> ([rows, value_dim], [rows, src]).

        ``rows`` is a multiple of the memory's batch: consecutive rows share a memory row
        (a search's beam hypotheses; one row each outside a search). They are attended
        as one sentence's several queries, the way :meth:`attend` treats target positions.
        """
        queries = tf.reshape(query, [tf.shape(memory.keys)[0], -1, _last_size(query)])
        contexts, probs = self.attend(queries, memory)
        return tf.reshape(contexts, [-1, _last_size(contexts)]), tf.reshape(probs, [-1, _last_size(probs)])

    def get_config(self):
        config = super().get_config()
        config.update(units=self.units, init_scale=self.init_scale)
        return config
