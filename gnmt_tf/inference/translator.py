"""Text in, text out: one translator, in the TensorFlow graph, exported as it is and wrapped for Python.

:class:`TranslatorModule` is the translator: a ``tf.Module`` whose functions take raw
strings and return translations, with everything in between in the graph, so an
exported artifact needs nothing from gnmt_tf at run time, only TensorFlow and the
tensorflow-text ops. Its three parts, each written once:

* **preprocess** (:meth:`TranslatorModule.preprocess`): wordpiece tokenization, the
  EOS every source ends with, truncation to ``max_input_length`` pieces, densified
  with gathers (TFLite has no kernels for the ragged ops); an empty sentence becomes
  a lone EOS;
* **search** (:meth:`TranslatorModule.search`): encode and run a decoding strategy
  (:mod:`gnmt_tf.decoding`: the beam search of section 7, greedy search, forced
  scoring) with the module's weights: the reader of the weight transform it was made
  with (int8 for an int8 export, float by default; :mod:`gnmt_tf.layers.weights`);
* **postprocess** (:meth:`TranslatorModule.postprocess`): detokenization; an empty
  sentence translates to "" with score 0.

The SavedModel signatures are its functions (``translate``, ``translate_with_options``,
``translate_nbest``, and with a vocabulary shortlist ``translate_with_shortlist`` and
``translate_nbest_with_shortlist``); TFLite converts ``translate``. :class:`Translator`, the Python
API, wraps the same module as keras-hub's ``generate`` does: preprocess every sentence
in the graph, sort by length and batch (section 7: sentences of similar length are
decoded together), call the compiled search per batch, postprocess, and turn the
tensors into Python strings and :class:`Translation` records::

    translator = Translator(model, tokenizer, config.decoding)
    translator.translate(["Open the file", "Save as..."])          # best translations
    translator.translate_nbest(["Open the file"], n_best=4)         # Translation records
    translator.translate(["Open the file"], return_alignment=True)  # with each word's source word
    translator.score(["Open the file"], ["Ouvrir le fichier"])      # log P and eq. 14 of given ones

A vocabulary shortlist (:mod:`gnmt_tf.data.shortlist`), when the module is given one, is
held as variables and optional per call: the beam search of a batch then computes the
softmax over the batch's allowed output ids only (the step wrapper of
:meth:`TranslatorModule.search`).
``decoding.use_shortlist`` is the default of the functions without a ``use_shortlist``
input; scoring given translations and greedy search always use the whole softmax.

Defined behaviour at the edges: an empty (or all-whitespace) sentence translates to
""; a sentence longer than ``max_input_length`` wordpieces is truncated to that many
(the Python API can refuse it instead; a Translation says when its source was truncated);
every output is at most ``max_length_ratio`` x the source length (section 7).
"""

from __future__ import annotations

import concurrent.futures
import copy
import functools
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from gnmt_tf.config import DecodingConfig
from gnmt_tf.data.shortlist import Shortlist, ShortlistTables
from gnmt_tf.decoding import BeamSearch, ForcedScoring, GreedySearch, decode
from gnmt_tf.decoding.buckets import BucketedRows, ShapeBuckets
from gnmt_tf.decoding.options import SEARCH_OPTIONS, assert_search_options, check_search_option
from gnmt_tf.inference.alignment import alignment_pairs, word_alignments, word_initial_table
from gnmt_tf.inference.results import Translation
from gnmt_tf.localization.in_graph import VERBATIM, Glossary, TextMasking
from gnmt_tf.layers.recurrence import STEPWISE, Recurrence
from gnmt_tf.layers.weights import FLOAT_WEIGHTS, WeightReader, WeightTransform
from gnmt_tf.vocab import EOS, EOS_ID, PAD_ID

SENTENCES = tf.TensorSpec([None], tf.string, name="sentences")
SCALAR = tf.TensorSpec([], tf.float32)
SWITCH = tf.TensorSpec([], tf.bool)
SOURCE_IDS = tf.TensorSpec([None, None], tf.int32)
TERMS = tf.TensorSpec([None, None], tf.string)  # a glossary's source or target terms, [batch, terms]


class GraphTarget(NamedTuple):
    """The runtime a search's graph is traced for, which decides how parts of it are built."""

    # How the encoder's layers run over time (gnmt_tf.layers.recurrence): step by step, as they read the
    # search's kernels (read once, or int8 products); no gradient is taken.
    recurrence: Recurrence = STEPWISE
    read_kernels_once: bool = True  # read each product kernel once per search, before the decoding
    # loop, laid out for a step's small products (gnmt_tf.layers.weights.WeightReader.reading_once)


TENSORFLOW = GraphTarget()  # TensorFlow itself: Python, SavedModel, TF Serving

# Every loop and branch on a tensor in the translator is written as tf.while_loop / tf.cond /
# tf.where already, so AutoGraph would only re-parse the Python source of ~70 functions (model,
# layers, strategies): most of a translator's first call.
graph_function = functools.partial(tf.function, autograph=False)


class TranslatorModule(tf.Module):
    """A trained GNMT and its tokenizer as string-to-string TensorFlow functions (the exported translator).

    Args:
        model: a built :class:`gnmt_tf.models.GNMT` (at the delta it was trained at).
        tokenizer: its :class:`gnmt_tf.data.tokenizer.WordpieceTokenizer`.
        decoding: beam search defaults; the exported signatures fix ``beam_width`` and
            ``n_best`` (they set tensor shapes), alpha, beta and beamsize are inputs.
        max_input_length: source wordpieces kept per sentence, longer ones truncated (None:
            ``decoding.max_input_length``).
        weight_transform: what every search reads the model's weights through
            (:mod:`gnmt_tf.layers.weights`; None: the float weights). With a
            :class:`gnmt_tf.quantization.Int8Weights` of ``model`` every search computes with
            eq. 12's int8 weights, and the module tracks only those plus the weights kept in
            float, so a SavedModel of it stores int8.
        jit_step: compile each decoding step (LSTM layers, attention, softmax) with XLA;
            a TF Serving binary then needs ``--xla_cpu_compilation_enabled``. The searches then
            run at ``shape_buckets``' sizes (default :class:`gnmt_tf.decoding.buckets.ShapeBuckets`),
            so the step compiles once per bucket, not once per batch and source length. A search
            with the shortlist runs its step uncompiled and unpadded (the shortlist's size changes
            per batch).
        shape_buckets: pad the running searches and the source length of the searches over the
            whole softmax to these sizes (also without ``jit_step``; outputs are unchanged up to
            float rounding).
        precompute_target_inputs: compute the bottom decoder layer's input projection of
            every target token now (:meth:`gnmt_tf.models.GNMT.target_input_table`, through the
            weight transform, and stored as it stores tables: int8 with ``Int8Weights``) so that
            each step gathers a row instead of a product
            (Devlin 2017). A snapshot of the weights: only for a model that will not change
            (an export, a loaded checkpoint), not for one still training.
        text: what is done to the text around the search: :data:`~gnmt_tf.localization.in_graph.VERBATIM`
            (nothing), or :class:`~gnmt_tf.localization.in_graph.PlaceholderMasking` (placeholders masked
            before tokenizing, restored in the translations, every slot token of a source written exactly
            as often by the beam search); :func:`~gnmt_tf.localization.in_graph.text_masking` chooses by
            the model's config.
        shortlist: a :class:`gnmt_tf.data.shortlist.Shortlist` of the model's vocabulary, held
            as variables (:attr:`shortlist` is then its :class:`~gnmt_tf.data.shortlist.ShortlistTables`,
            else None); ``decoding.use_shortlist`` says whether the functions without a
            ``use_shortlist`` input use it.

    Functions (the SavedModel signatures):

    * ``translate(sentences)``: string [batch] -> ``translations`` string [batch], ``scores``
      float32 [batch] (eq. 14), with the config's alpha, beta and beamsize;
    * ``translate_with_options(sentences, alpha, beta, beamsize)``: the same with the
      options given per request (scalars);
    * ``translate_nbest(sentences, alpha, beta, beamsize)``: n-best lists ``translations``
      [batch, n_best], ``scores``, ``lengths``, ``attention`` [batch, n_best, target, source],
      and the wordpieces the attention refers to, ``source_pieces`` [batch, source] and
      ``target_pieces`` [batch, n_best, target] (padded with ""); ``alignments`` int32 [batch, n_best,
      target words]: for each word of a translation, the source word with the most attention (word indices
      of the sentence and the translation as returned, split on white space; -1 pads;
      :mod:`gnmt_tf.inference.alignment`).

    With placeholder masking (``text``), also:

    * ``translate_with_glossary(sentences, alpha, beta, beamsize, term_sources, term_targets)``: as
      ``translate_with_options``, every occurrence of ``term_sources[i, g]`` in sentence i (as a word)
      translated as ``term_targets[i, g]`` (string [batch, terms]; "" pads a row's entries).

    With a shortlist, also (the same with a bool scalar input ``use_shortlist``):

    * ``translate_with_shortlist(sentences, alpha, beta, beamsize, use_shortlist)``: as
      ``translate_with_options``;
    * ``translate_nbest_with_shortlist(sentences, alpha, beta, beamsize, use_shortlist)``: as
      ``translate_nbest``.

    alpha, beta and beamsize must be finite float32 >= 0 (:mod:`gnmt_tf.decoding.options`): every
    function taking them as inputs raises ``InvalidArgumentError`` for another value (TF Serving:
    INVALID_ARGUMENT) before any search; the config's values are checked in Python here, when the
    module is made (ValueError).
    """

    def __init__(self, model, tokenizer, decoding: DecodingConfig, max_input_length: Optional[int] = None,
                 weight_transform: Optional[WeightTransform] = None, jit_step: bool = False,
                 precompute_target_inputs: bool = False, shortlist: Optional[Shortlist] = None,
                 shape_buckets: Optional[ShapeBuckets] = None, text: TextMasking = VERBATIM,
                 name: Optional[str] = None):
        super().__init__(name=name)
        # Track the model's variables, not the Keras model: saving a tracked Keras model would
        # run Keras' own (legacy) model serialization, which the functions below do not need.
        object.__setattr__(self, "model", model)
        transform = weight_transform if weight_transform is not None else FLOAT_WEIGHTS
        # The weights a transform holds in its own form (int8) are neither used nor saved in float.
        self.model_variables = [v for v in model.variables if not transform.replaces(v)]
        self.weight_transform = transform  # tracked: a transform holding variables (int8) is saved with it
        # What every search reads the weights through: made here, once, from the transform.
        object.__setattr__(self, "weights", WeightReader(transform))
        self.jit_step = jit_step
        object.__setattr__(self, "shape_buckets", shape_buckets if shape_buckets is not None or not jit_step
                           else ShapeBuckets())
        self.target_input_rows = None  # token ids -> precomputed rows, when precomputed
        if precompute_target_inputs:
            # One table per model (a tuple of them for an ensemble, gnmt_tf.models.ensemble).
            self.target_input_rows = tf.nest.map_structure(transform.stored_rows,
                                                           model.target_input_table(self.weights))
        self.tokenizer = tokenizer
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "decoding", decoding)
        self.beam_width = decoding.beam_width
        self.n_best = max(decoding.n_best, min(4, decoding.beam_width))
        self.max_input_length = decoding.max_input_length if max_input_length is None else max_input_length
        # Checked here in Python: translate (and the TFLite export of it) uses them without graph checks.
        self._defaults = tuple(check_search_option(name, getattr(decoding, name)) for name in SEARCH_OPTIONS)
        if shortlist is not None and shortlist.vocab_size != tokenizer.vocab_size:
            raise ValueError(f"the shortlist is for {shortlist.vocab_size} wordpieces, the tokenizer has "
                             f"{tokenizer.vocab_size}")
        self.shortlist = ShortlistTables(shortlist, name="shortlist") if shortlist is not None else None
        # The default of the functions without a use_shortlist input: the config's, where there is one.
        self.uses_shortlist = bool(decoding.use_shortlist and self.shortlist is not None)
        self.translate = graph_function(self._translate, input_signature=[SENTENCES])
        self.translate_with_options = graph_function(
            self._translate_with_options, input_signature=[SENTENCES, SCALAR, SCALAR, SCALAR]
        )
        self.translate_nbest = graph_function(self._translate_nbest, input_signature=[SENTENCES, SCALAR, SCALAR, SCALAR])
        if text.takes_glossary:
            self.translate_with_glossary = graph_function(
                self._translate_with_glossary, input_signature=[SENTENCES, SCALAR, SCALAR, SCALAR, TERMS, TERMS])
        if self.shortlist is not None:
            switched = [SENTENCES, SCALAR, SCALAR, SCALAR, SWITCH]
            self.translate_with_shortlist = graph_function(self._translate_with_shortlist,
                                                        input_signature=switched)
            self.translate_nbest_with_shortlist = graph_function(self._translate_nbest_with_shortlist,
                                                              input_signature=switched)
        # The Python API's compiled pieces, made on first use (not saved: not attributes tf.Module tracks).
        object.__setattr__(self, "_compiled", {})

    # ------------------------------------------------------------------ preprocess
    def preprocess(self, sentences) -> Tuple[tf.Tensor, tf.Tensor]:
        """Wordpieces + EOS, right-padded [batch, source], and each sentence's piece count before truncation.

        An empty sentence gives a lone EOS. Densified with gathers rather than ragged
        slicing and ``to_tensor``, whose ragged ops (RaggedGather, RaggedRange) have no
        TFLite kernel.
        """
        pieces = self.tokenizer.tokenize(sentences)
        values = tf.concat([pieces.values, tf.constant([PAD_ID], tf.int32)], axis=0)  # PAD at the end
        no_value = tf.shape(values)[0] - 1
        splits = tf.cast(pieces.row_splits, tf.int32)
        counts = splits[1:] - splits[:-1]
        starts = tf.expand_dims(splits[:-1], 1)  # [batch, 1]
        lengths = tf.expand_dims(tf.minimum(counts, self.max_input_length), 1)
        width = tf.reduce_max(tf.concat([tf.reshape(lengths, [-1]), tf.zeros([1], tf.int32)], axis=0)) + 1
        position = tf.expand_dims(tf.range(width), 0)  # [1, source]
        index = tf.where(position < lengths, starts + position, no_value)
        ids = tf.gather(values, index)
        return tf.where(tf.equal(position, lengths), tf.constant(EOS_ID, tf.int32), ids), counts

    def source_length(self, sentence: str) -> int:
        """The source length a search sees for ``sentence``: its wordpieces (at most
        ``max_input_length``) + EOS."""
        pieces = int(self.tokenizer.tokenize([sentence]).row_lengths()[0])
        return min(pieces, self.max_input_length) + 1

    def source_ids(self, sentences) -> tf.Tensor:
        """:meth:`preprocess`'s ids alone."""
        return self.preprocess(sentences)[0]

    # ------------------------------------------------------------------ search
    def search(self, source_ids, strategy, target: GraphTarget = TENSORFLOW,
               use_shortlist: Union[bool, tf.Tensor] = False):
        """Encode ``source_ids`` [batch, source] and run ``strategy`` (:mod:`gnmt_tf.decoding`).

        ``target``: the runtime the graph is for (:class:`GraphTarget`; the TFLite exporter passes
        its own). ``use_shortlist`` (a bool, or a bool tensor chosen per
        call): every step computes only the logits of the batch's allowed output ids
        (:meth:`gnmt_tf.data.shortlist.ShortlistTables.allowed_ids`, at least the strategy's
        rows per search besides EOS); False: the whole softmax, as without a shortlist.
        """
        if use_shortlist is not False and self.shortlist is None:
            raise ValueError("this translator has no vocabulary shortlist (python -m gnmt_tf.shortlist "
                             "builds one)")
        weights = self.weights
        if target.read_kernels_once:  # the search's own snapshot; the module's reader is left as it is
            # Unpadded under XLA: the compiled step would see two kernel shapes per shape bucket.
            rows = tf.shape(source_ids)[0] * strategy.rows_per_search * strategy.searches_per_sentence
            weights = weights.reading_once(self.model.product_kernels(), rows=None if self.jit_step else rows)
        memory = self.model.encode(source_ids, weights, training=False, recurrence=target.recurrence)
        step = functools.partial(self.model.step, weights=weights)
        if self.target_input_rows is not None:
            target_inputs = self.model.target_input_projection(self.target_input_rows, weights)
            step = functools.partial(step, target_inputs=target_inputs)
        # Under XLA the whole softmax's step only: a shortlist's size changes with every batch,
        # so its step would compile again for almost every request.
        full_step = graph_function(step, jit_compile=True) if self.jit_step else step

        def run(step_fn, buckets: Optional[ShapeBuckets] = None):
            if buckets is None:
                return decode(step_fn, self.model.initial_state(memory), memory.mask, strategy,
                              max_length_ratio=self.decoding.max_length_ratio)
            source_length = tf.shape(memory.mask)[1]
            padded = memory.padded_to(buckets.source_size(source_length))
            output = decode(step_fn, self.model.initial_state(padded), padded.mask, strategy,
                            max_length_ratio=self.decoding.max_length_ratio, layout=BucketedRows(buckets))
            return _without_padded_source(output, source_length)

        def run_shortlisted():
            output_ids = self.shortlist.allowed_ids(source_ids, minimum=strategy.rows_per_search)
            columns = self.model.softmax_columns(output_ids, weights)  # gathered once, outside the loop
            # At its own shapes: buckets only spare compilations, and this step is not compiled.
            return run(lambda state, tokens: step(state, tokens, softmax_columns=columns))

        def run_full():
            return run(full_step, self.shape_buckets)

        if use_shortlist is False:
            return run_full()
        if use_shortlist is True:
            return run_shortlisted()
        return tf.cond(use_shortlist, run_shortlisted, run_full)

    def beam_search(self, source_ids, alpha, beta, beamsize, beam_width: int, n_best: int,
                    return_attention: bool, target: GraphTarget = TENSORFLOW,
                    use_shortlist: Union[bool, tf.Tensor] = False):
        """Section 7's beam search of ``source_ids``: a :class:`gnmt_tf.decoding.BeamSearchOutput`,
        under the text masking's constraint (slot tokens)."""
        strategy = BeamSearch(beam_width, alpha=alpha, beta=beta, beamsize=beamsize, n_best=n_best,
                              return_attention=return_attention, eos_rule=self.decoding.eos_rule,
                              constraint=self.text.constraint(source_ids))
        return self.search(source_ids, strategy, target, use_shortlist)

    # ------------------------------------------------------------------ postprocess
    def postprocess(self, source_ids, ids) -> tf.Tensor:
        """Texts of output ids [batch, n, length]: [batch, n]; an empty sentence's are ""."""
        # An empty sentence (its source is a lone EOS; text never gives EOS) translates to ""
        # rather than to whatever follows a lone EOS. Its ids are blanked before detokenizing
        # (all PAD detokenizes to "") because TFLite's select has no string kernel.
        ids = tf.where(tf.reshape(self._empty(source_ids), [-1, 1, 1]), tf.constant(PAD_ID, tf.int32), ids)
        batch, n, length = tf.shape(ids)[0], tf.shape(ids)[1], tf.shape(ids)[2]
        texts = self.tokenizer.detokenize(tf.reshape(ids, [batch * n, length]))
        return tf.reshape(texts, [batch, n])

    @staticmethod
    def _empty(source_ids) -> tf.Tensor:
        return tf.equal(source_ids[:, 0], EOS_ID)

    def piece_strings(self, ids) -> tf.Tensor:
        """The wordpieces of ``ids`` as strings, "" for PAD (the paper form: "▁" starts a word)."""
        pieces = tf.constant(self.tokenizer.piece_strings(range(self.tokenizer.vocab_size)))
        return tf.where(tf.equal(ids, PAD_ID), tf.constant(""), tf.gather(pieces, ids))

    # ------------------------------------------------------------------ the functions
    @staticmethod
    def checked_options(**options) -> Tuple[tf.Tensor, ...]:
        """The options (alpha, beta, beamsize, given by name) behind the graph twin of the search option rule.

        Every function that takes them as inputs passes them through this first: a NaN, infinite or
        negative value raises InvalidArgumentError before the search (the Python entry points apply
        the same rule, :func:`gnmt_tf.decoding.options.check_search_option`, before calling). Not
        ``translate``: its values are the checked defaults, and TFLite has no Assert kernel.
        """
        return tuple(assert_search_options(**options).values())

    def nbest_outputs(self, source_ids, alpha, beta, beamsize, beam_width: int, n_best: int,
                      return_attention: bool, target: GraphTarget = TENSORFLOW,
                      use_shortlist: Union[bool, tf.Tensor, None] = None) -> Dict[str, tf.Tensor]:
        """Search and postprocess: every output of ``translate_nbest`` from source ids.

        ``use_shortlist``: see :meth:`search`; None: the module's default (:attr:`uses_shortlist`).
        """
        if use_shortlist is None:
            use_shortlist = self.uses_shortlist
        output = self.beam_search(source_ids, alpha, beta, beamsize, beam_width, n_best, return_attention,
                                  target, use_shortlist)
        empty = tf.reshape(self._empty(source_ids), [-1, 1])
        outputs = {
            "translations": self.postprocess(source_ids, output.ids),
            "scores": tf.where(empty, tf.zeros_like(output.scores), output.scores),
            "log_probs": output.log_probs,
            "lengths": output.lengths,
            "ids": output.ids,
        }
        if return_attention:
            outputs.update(attention=output.attention, source_pieces=self.piece_strings(source_ids),
                           target_pieces=self.piece_strings(output.ids))
        return outputs

    def _translate_with_options(self, sentences, alpha, beta, beamsize, use_shortlist=None):
        alpha, beta, beamsize = self.checked_options(alpha=alpha, beta=beta, beamsize=beamsize)
        return self._best_translations(sentences, alpha, beta, beamsize, use_shortlist=use_shortlist)

    def _best_translations(self, sentences, alpha, beta, beamsize, target: GraphTarget = TENSORFLOW,
                           use_shortlist=None, glossary: Optional[Glossary] = None):
        masked = self.text.mask(sentences, glossary)
        outputs = self.nbest_outputs(self.source_ids(masked.text), alpha, beta, beamsize, self.beam_width, 1,
                                     False, target, use_shortlist)
        return {"translations": self.text.restore(outputs["translations"][:, 0], masked),
                "scores": outputs["scores"][:, 0]}

    def _translate_with_glossary(self, sentences, alpha, beta, beamsize, term_sources, term_targets):
        alpha, beta, beamsize = self.checked_options(alpha=alpha, beta=beta, beamsize=beamsize)
        return self._best_translations(sentences, alpha, beta, beamsize,
                                       glossary=Glossary(term_sources, term_targets))

    def _translate_with_shortlist(self, sentences, alpha, beta, beamsize, use_shortlist):
        return self._translate_with_options(sentences, alpha, beta, beamsize, use_shortlist=use_shortlist)

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

    def translate_with_defaults(self, sentences, target: GraphTarget = TENSORFLOW):
        """``translate``'s math with the search inlined (a Python function, for re-tracing, e.g. for TFLite).

        Without the options' graph checks: the defaults were checked in Python, and TFLite has no
        kernel for the Assert op.
        """
        return self._best_translations(sentences, *self._default_options(), target=target)

    def word_alignments(self, source_ids, ids, attention, masked, source_masked=None) -> tf.Tensor:
        """For each word of each hypothesis, the source word with the most attention (int32 [batch, n, target
        words], -1 padded; :func:`gnmt_tf.inference.alignment.word_alignments`): word indices of the sentences
        and the translations as the user sees them, after the text masking's restore.

        ``masked``: what the text masking made of the sentences (a row each); ``source_masked``: the same with
        the source terms in the slots, when a glossary put its target terms in ``masked`` (None: ``masked``).
        """
        word_initial = tf.constant(word_initial_table(self.tokenizer.pieces))
        return word_alignments(attention, ids, source_ids, word_initial, self.text,
                               masked if source_masked is None else source_masked, masked)

    def _translate_nbest(self, sentences, alpha, beta, beamsize, use_shortlist=None):
        alpha, beta, beamsize = self.checked_options(alpha=alpha, beta=beta, beamsize=beamsize)
        masked = self.text.mask(sentences)
        source_ids = self.source_ids(masked.text)
        outputs = self.nbest_outputs(source_ids, alpha, beta, beamsize, self.beam_width, self.n_best, True,
                                     use_shortlist=use_shortlist)
        outputs["alignments"] = self.word_alignments(source_ids, outputs["ids"], outputs["attention"], masked)
        del outputs["log_probs"], outputs["ids"]
        flat = self.text.restore(tf.reshape(outputs["translations"], [-1]), masked.repeated(self.n_best))
        outputs["translations"] = tf.reshape(flat, [-1, self.n_best])
        return outputs

    def _translate_nbest_with_shortlist(self, sentences, alpha, beta, beamsize, use_shortlist):
        return self._translate_nbest(sentences, alpha, beta, beamsize, use_shortlist=use_shortlist)

    def signatures(self):
        """The SavedModel signatures: serving_default, translate_with_options, translate_nbest, and
        with a shortlist translate_with_shortlist and translate_nbest_with_shortlist.

        The functions themselves, not concrete functions: ``tf.saved_model.save`` traces them
        in its save context, and a concrete function traced outside it would be a second copy
        of the whole graph in saved_model.pb.
        """
        signatures = {
            "serving_default": self.translate,
            "translate_with_options": self.translate_with_options,
            "translate_nbest": self.translate_nbest,
        }
        if self.text.takes_glossary:
            signatures.update(translate_with_glossary=self.translate_with_glossary)
        if self.shortlist is not None:
            signatures.update(translate_with_shortlist=self.translate_with_shortlist,
                              translate_nbest_with_shortlist=self.translate_nbest_with_shortlist)
        return signatures

    # ------------------------------------------------------------------ compiled pieces for Python
    def compiled(self, key: tuple, make):
        """The ``tf.function`` that ``make()`` builds, once per ``key`` (static settings of a search)."""
        if key not in self._compiled:
            self._compiled[key] = make()
        return self._compiled[key]

    def compiled_preprocess(self):
        return self.compiled(("preprocess",), lambda: graph_function(self.preprocess, input_signature=[SENTENCES]))

    def compiled_mask(self):
        """The text masking's mask of sentences (a nest of tensors, a row per sentence)."""
        return self.compiled(("mask",), lambda: graph_function(self.text.mask, input_signature=[SENTENCES]))

    def compiled_mask_with_glossary(self):
        """The mask of sentences with a glossary given as its source and target terms [batch, terms]."""
        def mask(sentences, term_sources, term_targets):
            return self.text.mask(sentences, Glossary(term_sources, term_targets))

        return self.compiled(("mask_glossary",), lambda: graph_function(mask, input_signature=[SENTENCES, TERMS, TERMS]))

    def compiled_restore(self):
        """The text masking's restore: translations [n] and the masked nest of their sources, a row each."""
        def restore(translations, masked):
            return self.text.restore(translations, masked)

        return self.compiled(("restore",), lambda: graph_function(
            restore, input_signature=[tf.TensorSpec([None], tf.string), self.text.masked_spec()]))

    def compiled_nbest(self, beam_width: int, n_best: int, return_attention: bool,
                       use_shortlist: bool = False):
        """``nbest_outputs`` on source ids, traced for these static settings (alpha, beta, beamsize are inputs)."""
        def make():
            def search(source_ids, alpha, beta, beamsize):
                alpha, beta, beamsize = self.checked_options(alpha=alpha, beta=beta, beamsize=beamsize)
                return self.nbest_outputs(source_ids, alpha, beta, beamsize, beam_width, n_best,
                                          return_attention, use_shortlist=use_shortlist)

            return graph_function(search, input_signature=[SOURCE_IDS, SCALAR, SCALAR, SCALAR])

        return self.compiled(("nbest", beam_width, n_best, return_attention, use_shortlist), make)

    def compiled_alignments(self):
        """:meth:`word_alignments` of a batch's search outputs (source ids, ids, attention), masked rows."""
        def align(source_ids, ids, attention, masked, source_masked):
            return self.word_alignments(source_ids, ids, attention, masked, source_masked)

        return self.compiled(("alignments",), lambda: graph_function(align, reduce_retracing=True))

    def compiled_greedy(self):
        """Greedy translations of source ids (quick dev BLEU during training)."""
        def greedy(source_ids):
            ids = self.search(source_ids, GreedySearch())
            return self.postprocess(source_ids, tf.expand_dims(ids, 1))[:, 0]

        return self.compiled(("greedy",), lambda: graph_function(greedy, input_signature=[SOURCE_IDS]))

    def compiled_score(self, return_attention: bool):
        """log P(Y|X), eq. 14 and lengths of given target ids (each ending with EOS) for source ids."""
        def score(source_ids, target_ids, alpha, beta):
            alpha, beta = self.checked_options(alpha=alpha, beta=beta)
            return self.search(source_ids, ForcedScoring(target_ids, alpha, beta, return_attention))._asdict()

        return self.compiled(("score", return_attention), lambda: graph_function(
            score, input_signature=[SOURCE_IDS, SOURCE_IDS, SCALAR, SCALAR]))


def _without_padded_source(output, source_length):
    """A search output's attention [..., source] cut back to the unpadded source length."""
    attention = getattr(output, "attention", None)
    if not isinstance(attention, tf.Tensor):  # greedy ids, or no attention requested
        return output
    return output._replace(attention=attention[..., :source_length])


def _check_batching(batch_size: int, concurrent_batches: int) -> None:
    for name, value in (("batch_size", batch_size), ("concurrent_batches", concurrent_batches)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


class Translator:
    """Translate raw sentences with a trained :class:`~gnmt_tf.models.GNMT`: the Python face of :class:`TranslatorModule`.

    Args:
        model, tokenizer: a trained model and its wordpiece tokenizer.
        decoding: beam search defaults (width, alpha, beta, beamsize, n-best, length ratio);
            every one but the length ratio can be overridden per call.
        batch_size: sentences decoded together (sorted by length first, as section 7 does).
        concurrent_batches: batches decoded at the same time, each on a thread of its own. A
            decoding step is a few products between many small ops; a second batch in flight
            keeps the cores busy while the first runs those (docs/benchmarks.md,
            decoding against the peer). Each batch translates as it would alone. 1: one
            after another.
        max_input_length: wordpieces per source sentence, EOS excluded (None: ``decoding.max_input_length``);
            a translation of a longer one has ``truncated=True``.
        truncate_long_inputs: truncate longer sentences (True) or raise ValueError (False).
        precompute_target_inputs: gather the bottom decoder layer's input projection from a
            table computed now (see :class:`TranslatorModule`); only for a model whose weights
            will not change while this translator is used.
        shortlist: the model's vocabulary shortlist (:func:`gnmt_tf.model_files.read_shortlist`),
            used when ``decoding.use_shortlist`` or a call's ``use_shortlist`` says so.
        weight_transform: what the searches read the model's weights through (None: the float
            weights), e.g. :class:`gnmt_tf.quantization.Int8Weights` (section 6) or, for dev
            translations during quantization-aware training,
            :class:`gnmt_tf.quantization.qat.QuantizationAwareTraining`. Translators of one model
            with different transforms can be used at the same time, from different threads.
        text: placeholder masking around the searches, or none (see :class:`TranslatorModule`).
            ``score`` reads its sources and targets as they are.

    Attributes:
        module: the :class:`TranslatorModule` doing the work (what ``python -m export`` saves).
    """

    def __init__(self, model, tokenizer, decoding: Optional[DecodingConfig] = None, batch_size: int = 32,
                 max_input_length: Optional[int] = None, truncate_long_inputs: bool = True,
                 precompute_target_inputs: bool = False, shortlist: Optional[Shortlist] = None,
                 concurrent_batches: int = 2, weight_transform: Optional[WeightTransform] = None,
                 text: TextMasking = VERBATIM):
        _check_batching(batch_size, concurrent_batches)
        self.module = TranslatorModule(model, tokenizer, decoding or DecodingConfig(), max_input_length,
                                       weight_transform=weight_transform, text=text,
                                       precompute_target_inputs=precompute_target_inputs, shortlist=shortlist)
        self.batch_size = batch_size
        self.concurrent_batches = concurrent_batches
        self.truncate_long_inputs = truncate_long_inputs

    def with_batching(self, batch_size: int, concurrent_batches: int) -> "Translator":
        """A translator that batches as given and shares everything else with this one, its module too.

        Batching happens in Python, around the module's traced searches: the new translator traces
        none of them again (each trace of a search takes seconds).
        """
        _check_batching(batch_size, concurrent_batches)
        translator = copy.copy(self)
        translator.batch_size = batch_size
        translator.concurrent_batches = concurrent_batches
        return translator

    @property
    def model(self):
        return self.module.model

    @property
    def tokenizer(self):
        return self.module.tokenizer

    @property
    def decoding(self) -> DecodingConfig:
        return self.module.decoding

    @property
    def max_input_length(self) -> int:
        return self.module.max_input_length

    # ------------------------------------------------------------------ preprocess and batches
    def _preprocess(self, sentences: Sequence[str], glossary: Sequence[Tuple[str, str]] = ()
                    ) -> Tuple[np.ndarray, np.ndarray, tuple]:
        """Source ids [n, width], piece counts [n] (before truncation; a long one refused unless
        truncating) and what the module's text masking made of the sentences, with the glossary's terms
        (NumPy, a row each)."""
        if not sentences:
            return np.zeros([0, 1], np.int32), np.zeros([0], np.int32), ()
        masked = self._masked(sentences, glossary)
        ids, counts = self.module.compiled_preprocess()(tf.constant(masked.text))
        ids, counts = ids.numpy(), counts.numpy()
        long = np.flatnonzero(counts > self.max_input_length)
        if len(long) and not self.truncate_long_inputs:
            raise ValueError(
                f"sentence {long[0]} has {counts[long[0]]} wordpieces, more than max_input_length "
                f"({self.max_input_length})"
            )
        return ids, counts, masked

    def _masked(self, sentences: Sequence[str], glossary: Sequence[Tuple[str, str]] = ()) -> tuple:
        """What the text masking makes of non-empty ``sentences`` with the glossary's terms (NumPy)."""
        strings = tf.constant(list(sentences), tf.string)
        if glossary:
            terms = [tf.tile(tf.constant([[entry[side] for entry in glossary]]), [len(sentences), 1])
                     for side in (0, 1)]
            masked = self.module.compiled_mask_with_glossary()(strings, *terms)
        else:
            masked = self.module.compiled_mask()(strings)
        return type(masked)(*(part.numpy() for part in masked))

    def _source_masked(self, sentences: Sequence[str], glossary: Sequence[Tuple[str, str]],
                       masked: tuple) -> tuple:
        """``masked`` as the sentences' words need it: with a glossary, each term's slot holds its source term
        (a glossary of each term to itself masks the same slots), not the target term restore writes."""
        if not glossary or not sentences:
            return masked
        return self._masked(sentences, [(term, term) for term, _ in glossary])

    def _alignments(self, batch: np.ndarray, out: Dict[str, np.ndarray], masked: tuple, source_masked: tuple,
                    rows: Sequence[int]) -> np.ndarray:
        """The module's word alignments of one batch's search outputs (the sentences ``rows``)."""
        def of_rows(parts):
            return type(parts)(*(part[rows] for part in parts))

        return self.module.compiled_alignments()(tf.constant(batch), tf.constant(out["ids"]),
                                                 tf.constant(out["attention"]), of_rows(masked),
                                                 of_rows(source_masked)).numpy()

    def _restored(self, texts: np.ndarray, masked: tuple, rows: Sequence[int]) -> List[List[str]]:
        """Translations [k, n] (bytes) of the sentences ``rows`` with the text masking's restore, as str."""
        n = texts.shape[1]
        sources = type(masked)(*(np.repeat(part[rows], n, axis=0) for part in masked))
        restored = self.module.compiled_restore()(tf.constant(texts.reshape(-1)), sources).numpy()
        return [[text.decode("utf-8") for text in restored[i * n:(i + 1) * n]] for i in range(len(rows))]

    def _batches(self, ids: np.ndarray, counts: np.ndarray):
        """Non-empty sentences sorted by length, in batches: (indices, ids [k, width], source lengths)."""
        lengths = np.minimum(counts, self.max_input_length) + 1  # EOS included
        order = sorted(np.flatnonzero(counts > 0).tolist(), key=lambda i: lengths[i])
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            width = int(max(lengths[i] for i in chunk))
            yield chunk, ids[chunk, :width], lengths[chunk]

    def _decoded(self, decode, batches):
        """``(batch, decode(*batch))`` for each of ``batches`` in order, ``concurrent_batches`` at a time.

        ``decode`` returns NumPy arrays (and whatever else it computed for the batch), so that each
        thread waits for its own batch's results.
        """
        batches = list(batches)
        if self.concurrent_batches == 1 or len(batches) < 2:
            for batch in batches:
                yield batch, decode(*batch)
            return
        with concurrent.futures.ThreadPoolExecutor(min(self.concurrent_batches, len(batches))) as pool:
            yield from zip(batches, pool.map(lambda batch: decode(*batch), batches))

    def _options(self, **given) -> List[tf.Tensor]:
        """The given options (None: the config's) as float32 scalars, after the search option rule (ValueError)."""
        return [tf.constant(check_search_option(name, getattr(self.decoding, name) if value is None else value),
                            tf.float32) for name, value in given.items()]

    # ------------------------------------------------------------------ translate
    def translate(self, sentences: Sequence[str], **overrides) -> List[Translation]:
        """The best translation of each sentence (beam search with eq. 14), in input order.

        An empty sentence gets ``Translation("", score=0.0)``. Keyword overrides: beam_width, alpha,
        beta, beamsize (finite and >= 0; ``no_pruning()``, 1e9, disables pruning), use_shortlist, glossary;
        and return_attention, return_alignment as :meth:`translate_nbest` takes them.
        """
        return [nbest[0] if nbest else Translation("", score=0.0)
                for nbest in self.translate_nbest(sentences, n_best=1, **overrides)]

    def translate_nbest(
        self,
        sentences: Sequence[str],
        n_best: Optional[int] = None,
        return_attention: bool = False,
        beam_width: Optional[int] = None,
        alpha: Optional[float] = None,
        beta: Optional[float] = None,
        beamsize: Optional[float] = None,
        use_shortlist: Optional[bool] = None,
        glossary: Sequence[Tuple[str, str]] = (),
        return_alignment: bool = False,
    ) -> List[List[Translation]]:
        """n-best lists (best first) of :class:`Translation`; an empty sentence gets ``[]``.

        ``alpha``, ``beta`` and ``beamsize`` must be finite and >= 0 (ValueError otherwise).
        ``use_shortlist``: decode with the vocabulary shortlist (True; the translator must have
        one), without it (False), or as ``decoding.use_shortlist`` says when there is one (None).
        ``glossary``: (source term, target term) pairs: every occurrence of a source term, as a word,
        is translated as its target term (:mod:`gnmt_tf.localization.glossary`; a model trained with
        ``localization.placeholders`` only, ValueError otherwise).
        ``return_alignment``: each Translation's ``alignment``, (source word, target word) pairs: for each
        word of the translation, the source word with the most attention (:mod:`gnmt_tf.inference.alignment`;
        word indices of the sentence and the translation, split on white space).
        """
        d = self.decoding
        beam_width = beam_width or d.beam_width
        n_best = n_best or d.n_best
        if n_best > beam_width:
            raise ValueError(f"n_best ({n_best}) must not exceed beam_width ({beam_width})")
        if use_shortlist and self.module.shortlist is None:
            raise ValueError("use_shortlist: this translator has no vocabulary shortlist (python -m "
                             "gnmt_tf.shortlist --model-dir DIR builds one)")
        use_shortlist = self.module.uses_shortlist if use_shortlist is None else bool(use_shortlist)
        if glossary and not self.module.text.takes_glossary:
            raise ValueError("a glossary needs a model trained with localization.placeholders: its terms are "
                             "masked as placeholder slots, which this model has not learned")
        options = self._options(alpha=alpha, beta=beta, beamsize=beamsize)  # refused before anything is traced
        search = self.module.compiled_nbest(beam_width, n_best, return_attention or return_alignment,
                                            use_shortlist)
        results: List[List[Translation]] = [[] for _ in sentences]

        def decode(chunk, batch, source_lengths):
            out = {key: value.numpy() for key, value in search(tf.constant(batch), *options).items()}
            if return_alignment:
                out["alignments"] = self._alignments(batch, out, masked, source_masked, chunk)
            out["translations"] = self._restored(out["translations"], masked, chunk)
            return out

        ids, counts, masked = self._preprocess(sentences, list(glossary))
        source_masked = self._source_masked(sentences, list(glossary), masked) if return_alignment else masked
        for (chunk, batch, source_lengths), out in self._decoded(decode, self._batches(ids, counts)):
            for row, i in enumerate(chunk):
                for rank in range(n_best):
                    length = int(out["lengths"][row, rank])
                    if length == 0:  # fewer finished hypotheses than n_best
                        continue
                    results[i].append(Translation(
                        text=out["translations"][row][rank],
                        score=float(out["scores"][row, rank]),
                        log_prob=float(out["log_probs"][row, rank]),
                        length=length,
                        target_pieces=self.tokenizer.piece_strings(out["ids"][row, rank, : length - 1]),
                        source_pieces=self.tokenizer.piece_strings(batch[row, : source_lengths[row] - 1]) + [EOS],
                        attention=(out["attention"][row, rank, :length, : source_lengths[row]]
                                   if return_attention else None),
                        truncated=bool(counts[i] > self.max_input_length),
                        alignment=alignment_pairs(out["alignments"][row, rank]) if return_alignment else None,
                    ))
        return results

    def greedy(self, sentences: Sequence[str]) -> List[Translation]:
        """Greedy translations (text only, no score), in input order; an empty sentence gets
        ``Translation("")``."""
        ids, counts, masked = self._preprocess(sentences)
        results = [Translation("") for _ in sentences]
        greedy = self.module.compiled_greedy()

        def decode(chunk, batch, _):
            return self._restored(greedy(tf.constant(batch)).numpy().reshape(-1, 1), masked, chunk)

        for (chunk, _, _), texts in self._decoded(decode, self._batches(ids, counts)):
            for row, i in enumerate(chunk):
                results[i] = Translation(texts[row][0], truncated=bool(counts[i] > self.max_input_length))
        return results

    # ------------------------------------------------------------------ score
    def score(self, sources: Sequence[str], targets: Sequence[str], alpha: Optional[float] = None,
              beta: Optional[float] = None, return_attention: bool = False) -> List[Optional[Translation]]:
        """Score given translations: log P(Y|X) and eq. 14 of ``targets[i]`` as a translation of ``sources[i]``.

        The same log-softmax and penalties as the beam search, so scoring a translation the
        search produced returns the log P and score it reported. None for an empty source
        or target. Targets are cut to ``max_input_length`` wordpieces like sources.
        """
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
        options = self._options(alpha=alpha, beta=beta)
        target_ids, target_counts, _ = self._preprocess(targets)
        source_ids, source_counts, _ = self._preprocess(sources)
        present = np.flatnonzero((source_counts > 0) & (target_counts > 0))
        results: List[Optional[Translation]] = [None] * len(sources)
        score = self.module.compiled_score(return_attention)

        def decode(chunk, batch, source_lengths):
            rows = present[chunk]
            target_lengths = np.minimum(target_counts[rows], self.max_input_length) + 1
            targets_batch = target_ids[rows, : int(target_lengths.max())]
            out = {k: v.numpy() for k, v in score(tf.constant(batch), tf.constant(targets_batch), *options).items()
                   if v is not None}
            return rows, targets_batch, out

        batches = self._batches(source_ids[present], source_counts[present])
        for (chunk, batch, source_lengths), (rows, targets_batch, out) in self._decoded(decode, batches):
            for row, i in enumerate(rows):
                length = int(out["lengths"][row])
                results[i] = Translation(
                    text=targets[i],
                    log_prob=float(out["log_probs"][row]),
                    score=float(out["scores"][row]),
                    length=length,
                    target_pieces=self.tokenizer.piece_strings(targets_batch[row, : length - 1]),
                    source_pieces=self.tokenizer.piece_strings(batch[row, : source_lengths[row] - 1]) + [EOS],
                    attention=out["attention"][row, :length, : source_lengths[row]] if return_attention else None,
                    truncated=bool(max(source_counts[i], target_counts[i]) > self.max_input_length),
                )
        return results
