"""The translator as a ``tf.Module``: raw strings in, translations out, all inside the graph.

Wordpiece tokenization, encoding, beam search (section 7) and detokenization
are one TensorFlow graph, so the exported artifact needs nothing from gnmt_tf
at run time: only TensorFlow and the tensorflow-text ops.

Functions (also the SavedModel signatures):

* ``translate(sentences)``: string [batch] -> ``translations`` string [batch],
  ``scores`` float32 [batch] (eq. 14), with the decoding defaults of the config.
* ``translate_with_options(sentences, alpha, beta, beamsize)``: the same with
  eq. 14's alpha and beta and the pruning margin given per request (scalars).
* ``translate_nbest(sentences, alpha, beta, beamsize)``: n-best lists
  ``translations`` [batch, n_best], ``scores`` [batch, n_best], ``attention``
  [batch, n_best, target, source], and the wordpieces the attention refers to,
  ``source_pieces`` [batch, source] and ``target_pieces`` [batch, n_best, target]
  (padded with "").

The beam width and n_best are fixed when the module is built (they set tensor
shapes); alpha, beta and beamsize are inputs.

With ``int8_weights`` (:class:`gnmt_tf.quantization.weights.Int8Weights`) the
functions compute with eq. 12's int8 weights (traced inside
``model.transformed_weights(int8_weights)``) and the module tracks only those
plus the weights kept in float, so a SavedModel of it stores int8. With
``jit_step`` each decoding step (the LSTM layers, attention and softmax,
not the tokenizer) is compiled with XLA; a TF Serving binary then needs XLA
on CPU enabled (``--xla_cpu_compilation_enabled``).
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf

from gnmt_tf.decoding.beam import beam_search
from gnmt_tf.config import DecodingConfig
from gnmt_tf.quantization.weights import Int8Weights
from gnmt_tf.vocab import EOS_ID, PAD_ID

SENTENCES = tf.TensorSpec([None], tf.string, name="sentences")
SCALAR = tf.TensorSpec([], tf.float32)


class ExportableTranslator(tf.Module):
    """A trained GNMT and its tokenizer as string-to-string TensorFlow functions.

    Args:
        model: a built :class:`gnmt_tf.models.gnmt.GNMT` (at the delta it was trained at).
        tokenizer: its :class:`gnmt_tf.data.tokenizer.WordpieceTokenizer`.
        decoding: beam search defaults; ``beam_width`` and ``n_best`` are fixed here.
        max_input_length: source wordpieces kept per sentence (longer ones are truncated).
    """

    def __init__(self, model, tokenizer, decoding: DecodingConfig, max_input_length: int = 250,
                 int8_weights: Optional[Int8Weights] = None, jit_step: bool = False, name: Optional[str] = None):
        super().__init__(name=name)
        # Track the model's variables, not the Keras model: saving a tracked Keras model would
        # run Keras' own (legacy) model serialization, which the functions below do not need.
        object.__setattr__(self, "model", model)
        if int8_weights is None:
            self.model_variables = list(model.variables)
        else:  # the float weights that int8 replaces are neither used nor saved
            self.model_variables = int8_weights.kept_float_variables()
        self.int8_weights = int8_weights
        self.jit_step = jit_step
        self.tokenizer = tokenizer
        self.beam_width = decoding.beam_width
        self.n_best = max(decoding.n_best, min(4, decoding.beam_width))
        self.max_length_ratio = decoding.max_length_ratio
        self.eos_rule = decoding.eos_rule
        self.max_input_length = max_input_length
        self._defaults = (float(decoding.alpha), float(decoding.beta), float(decoding.beamsize))
        self.translate = tf.function(self._translate, input_signature=[SENTENCES])
        self.translate_with_options = tf.function(
            self._translate_with_options, input_signature=[SENTENCES, SCALAR, SCALAR, SCALAR]
        )
        self.translate_nbest = tf.function(self._translate_nbest, input_signature=[SENTENCES, SCALAR, SCALAR, SCALAR])

    # ------------------------------------------------------------------ graph pieces
    def source_ids(self, sentences):
        """Wordpieces + EOS, right-padded [batch, source]; empty sentences give a lone EOS.

        Densified with gathers rather than ragged slicing and ``to_tensor``, whose ragged ops
        (RaggedGather, RaggedRange) have no TFLite kernel.
        """
        pieces = self.tokenizer.tokenize(sentences)
        values = tf.concat([pieces.values, tf.constant([PAD_ID], tf.int32)], axis=0)  # PAD at the end
        no_value = tf.shape(values)[0] - 1
        splits = tf.cast(pieces.row_splits, tf.int32)
        starts = tf.expand_dims(splits[:-1], 1)  # [batch, 1]
        lengths = tf.expand_dims(tf.minimum(splits[1:] - splits[:-1], self.max_input_length), 1)
        width = tf.reduce_max(tf.concat([tf.reshape(lengths, [-1]), tf.zeros([1], tf.int32)], axis=0)) + 1
        position = tf.expand_dims(tf.range(width), 0)  # [1, source]
        index = tf.where(position < lengths, starts + position, no_value)
        ids = tf.gather(values, index)
        return tf.where(tf.equal(position, lengths), tf.constant(EOS_ID, tf.int32), ids)

    def search(self, sentences, alpha, beta, beamsize, n_best, return_attention, time_loop=None):
        """``time_loop``: how the encoder iterates time (:mod:`gnmt_tf.layers.recurrence`; TFLite passes its own)."""
        source_ids = self.source_ids(sentences)
        with self.model.transformed_weights(self.int8_weights):
            memory = self.model.encode(source_ids, training=False, time_loop=time_loop)
            step = tf.function(self.model.step, jit_compile=True) if self.jit_step else self.model.step
            output = beam_search(
                step, self.model.initial_state(memory), memory.mask, self.beam_width,
                alpha=alpha, beta=beta, beamsize=beamsize, max_length_ratio=self.max_length_ratio, n_best=n_best,
                return_attention=return_attention, eos_rule=self.eos_rule,
            )
        return source_ids, output

    def _detokenize_nbest(self, ids):
        batch, n, length = tf.shape(ids)[0], tf.shape(ids)[1], tf.shape(ids)[2]
        texts = self.tokenizer.detokenize(tf.reshape(ids, [batch * n, length]))
        return tf.reshape(texts, [batch, n])

    def _translate_with_options(self, sentences, alpha, beta, beamsize, time_loop=None):
        source_ids, output = self.search(
            sentences, alpha, beta, beamsize, n_best=1, return_attention=False, time_loop=time_loop
        )
        # An empty sentence (no wordpieces: its source is a lone EOS, text never gives EOS) translates
        # to "" rather than to whatever follows a lone EOS. Its ids are blanked before detokenizing
        # (all PAD detokenizes to "") because TFLite's select has no string kernel.
        empty = tf.equal(source_ids[:, 0], EOS_ID)
        ids = tf.where(tf.reshape(empty, [-1, 1, 1]), tf.constant(PAD_ID, tf.int32), output.ids)
        translations = self._detokenize_nbest(ids)[:, 0]
        scores = tf.where(empty, tf.zeros_like(output.scores[:, 0]), output.scores[:, 0])
        return {"translations": translations, "scores": scores}

    @property
    def default_options(self):
        """The config's ``alpha``, ``beta`` and ``beamsize``, as ``serving_default`` uses them."""
        return dict(zip(("alpha", "beta", "beamsize"), self._defaults))

    def _default_options(self):
        return tuple(tf.constant(value) for value in self._defaults)

    def _translate(self, sentences):
        # A call of the translate_with_options function rather than its Python body: the saved
        # graph then holds the search once for both signatures.
        return self.translate_with_options(sentences, *self._default_options())

    def translate_with_defaults(self, sentences, time_loop=None):
        """``translate``'s math with the search inlined (a Python function, for re-tracing, e.g. for TFLite)."""
        return self._translate_with_options(sentences, *self._default_options(), time_loop=time_loop)

    def _translate_nbest(self, sentences, alpha, beta, beamsize):
        source_ids, output = self.search(sentences, alpha, beta, beamsize, n_best=self.n_best, return_attention=True)
        pieces = tf.constant(self.tokenizer.piece_strings(range(self.tokenizer.vocab_size)))
        source_pieces = tf.where(tf.equal(source_ids, PAD_ID), tf.constant(""), tf.gather(pieces, source_ids))
        target_pieces = tf.where(tf.equal(output.ids, PAD_ID), tf.constant(""), tf.gather(pieces, output.ids))
        return {
            "translations": self._detokenize_nbest(output.ids),
            "scores": output.scores,
            "lengths": output.lengths,
            "attention": output.attention,
            "source_pieces": source_pieces,
            "target_pieces": target_pieces,
        }

    def signatures(self):
        """The SavedModel signatures: serving_default, translate_with_options, translate_nbest.

        The functions themselves, not concrete functions: ``tf.saved_model.save`` traces them
        in its save context, and a concrete function traced outside it would be a second copy
        of the whole graph in saved_model.pb.
        """
        return {
            "serving_default": self.translate,
            "translate_with_options": self.translate_with_options,
            "translate_nbest": self.translate_nbest,
        }
