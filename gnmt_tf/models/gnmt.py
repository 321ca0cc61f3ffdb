"""The GNMT Keras model: embeddings, encoder, attention, decoder, clipped softmax.

Teacher forcing::

    logits = model((source_ids, target_input_ids))   # [batch, tgt, vocab]

Decoding, one token at a time (what beam search and sampling call)::

    memory = model.encode(source_ids)
    state = model.initial_state(memory)
    logits, attention_probs, state = model.step(state, token_ids)
    columns = model.softmax_columns(allowed_ids)                  # a vocabulary shortlist, once per batch
    logits, attention_probs, state = model.step(state, token_ids, softmax_columns=columns)

Every method that computes takes the :class:`~gnmt_tf.layers.weights.WeightReader` its products
and lookups read through as ``weights``, the float weights (``FLOAT_READER``) by default::

    int8 = WeightReader(Int8Weights(model))                       # section 6
    memory = model.encode(source_ids, int8, recurrence=STEPWISE)  # int8 products: step by step
    logits, attention_probs, state = model.step(model.initial_state(memory), token_ids, int8)

Ids are int32 with :data:`gnmt_tf.vocab.PAD_ID` (0) as right-padding; padding
is masked in every layer, so it never changes a real position's output.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union

import tensorflow as tf
import tf_keras as keras

from gnmt_tf.layers.attention import AttentionMemory
from gnmt_tf.config import ModelConfig, model_config_from_dict
from gnmt_tf.models.decoder import DecoderState, GNMTDecoder, TargetInputProjection
from gnmt_tf.models.embeddings import SeparateEmbeddings, TiedEmbeddings, embedding_layer
from gnmt_tf.models.encoder import GNMTEncoder
from gnmt_tf.parallel import model_parallel
from gnmt_tf.layers.recurrence import WRITTEN_GRADIENT, Recurrence
from gnmt_tf.layers.weights import FLOAT_READER, DenseColumns, WeightReader, WeightTransform
from gnmt_tf.layers.stack import build_sublayer
from gnmt_tf.models.objectives import REFERENCE_NLL, Batch, MaximumLikelihood
from gnmt_tf.vocab import PAD_ID


@keras.saving.register_keras_serializable(package="gnmt_tf")
class GNMT(keras.Model):
    """Google's Neural Machine Translation model (Wu et al. 2016, section 3).

    Args:
        config: a :class:`~gnmt_tf.config.ModelConfig` (or its dict form).
        parallel: an optional :class:`~gnmt_tf.config.ParallelConfig`: model parallelism or the
            hybrid scheme for teacher forcing (:mod:`gnmt_tf.parallel.model_parallel`); None or mode
            ``none`` keeps the whole model on one device.

    Attributes:
        clip_delta: the non-trainable scalar variable delta of eq. 10, shared by
            every LSTM cell and residual sum. Training anneals it
            (:class:`~gnmt_tf.training.callbacks.DeltaAnnealing`); use
            :meth:`set_clip_delta` to change it.
        embeddings: where :meth:`embed_source` and :meth:`embed_target` look up
            (:mod:`gnmt_tf.models.embeddings`): the ``source_embedding`` and ``target_embedding``
            layers, or with ``tied_embeddings`` the softmax kernel's columns (Press & Wolf 2017).
        objective: set by :meth:`compile`: what :meth:`train_step` minimises
            (:mod:`gnmt_tf.models.objectives`).
        compiled_weights: set by :meth:`compile`: the
            :class:`~gnmt_tf.layers.weights.WeightReader` of the compiled training and test
            steps and of Keras ``call`` (float until a ``weight_transform`` is compiled in).
    """

    def __init__(self, config: Union[ModelConfig, Dict[str, Any]], parallel=None, **kwargs):
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = model_config_from_dict(config)
        self.model_config = config
        self.clip_delta = self.add_weight(
            "clip_delta",
            shape=(),
            initializer=keras.initializers.Constant(config.clip_delta),
            trainable=False,
            # One value for every replica (training sets it between steps: DeltaAnnealing).
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )
        if not config.tied_embeddings:
            # Section 3's two tables, made first so that the weights keep their order (get_weights).
            self.source_embedding = embedding_layer(config, "source_embedding")
            self.target_embedding = embedding_layer(config, "target_embedding")
        # Which device each layer runs on (section 3.3), from a ParallelConfig; None: one device.
        # Placement is not architecture: get_config and the checkpoint do not record it.
        self.placement = model_parallel.resolve_placement(parallel, config)
        placement = self.placement
        self.encoder = GNMTEncoder(
            config, clip_delta=self.clip_delta, devices=placement.encoder if placement else None,
            name="encoder",
        )
        self.decoder = GNMTDecoder(
            config, encoder_width=self.encoder.output_width, clip_delta=self.clip_delta,
            devices=placement.decoder if placement else None,
            attention_device=placement.attention_device if placement else None,
            softmax_device=placement.root if placement else None, name="decoder",
        )
        # What every lookup reads (gnmt_tf.models.embeddings), chosen here once: the two tables, or the
        # softmax kernel's columns (Press & Wolf 2017). A plain object, so checkpoints do not record it.
        self.embeddings = (TiedEmbeddings(self.decoder.softmax_projection) if config.tied_embeddings
                           else SeparateEmbeddings(self.source_embedding, self.target_embedding))

    # ------------------------------------------------------------------ building
    def build(self, input_shape=None):
        """Create every weight; no example input is needed."""
        if self.built:
            return
        self.embeddings.build(self.placement)
        width = self.model_config.embedding_width
        build_sublayer(self.encoder, (None, None, width))
        build_sublayer(self.decoder, (None, None, width))
        self.built = True

    def get_build_config(self):
        return {"built": bool(self.built)}

    def build_from_config(self, config):
        if config.get("built"):
            self.build()

    # ------------------------------------------------------------------ teacher forcing
    def call(self, inputs, training=None) -> tf.Tensor:
        """``(source_ids, target_input_ids)`` -> logits [batch, tgt, vocab], clipped to [-gamma, gamma].

        Computed with the model's own reader, :attr:`compiled_weights`; :meth:`forward` takes one.
        """
        logits, _ = self.forward(*_unpack(inputs), weights=self.compiled_weights, training=training)
        return logits

    def forward(self, source_ids, target_input_ids, weights: WeightReader = FLOAT_READER,
                training=None, recurrence: Recurrence = WRITTEN_GRADIENT) -> Tuple[tf.Tensor, tf.Tensor]:
        """Teacher forcing with attention: (logits [B, T, V], attention probs [B, T, S]).

        ``recurrence``: how the layers run over time (:mod:`gnmt_tf.layers.recurrence`): by default with
        back-propagation through time written out, what training runs; a reader with int8 products
        needs :data:`~gnmt_tf.layers.recurrence.STEPWISE`.
        """
        if self.placement is not None:  # layers on their devices (gnmt_tf.parallel.model_parallel)
            return model_parallel.forward(self, source_ids, target_input_ids, weights, recurrence,
                                          training=training)
        memory = self.encode(source_ids, weights, training=training, recurrence=recurrence)
        target_input_ids = tf.convert_to_tensor(target_input_ids)
        return self.decoder(
            self.embed_target(target_input_ids, weights),
            mask=tf.not_equal(target_input_ids, PAD_ID),
            memory=memory,
            weights=weights,
            training=training,
            recurrence=recurrence,
        )

    # ------------------------------------------------------------------ training
    # Set by compile: what train_step minimises (gnmt_tf.models.objectives), the teacher-forcing
    # objective of the compiled loss, which test_step reports, and the reader both compute with.
    objective = None
    _evaluation_objective = None
    _running_means = None
    _compiled_weights = FLOAT_READER

    @property
    def compiled_weights(self) -> WeightReader:
        """The reader the compiled training and test steps and Keras ``call`` compute with: the
        ``weight_transform`` given to :meth:`compile` (float before, or without one)."""
        return self._compiled_weights

    def compile(self, optimizer="rmsprop", loss=None, metrics=None, *, objective=None,
                weight_transform: Optional[WeightTransform] = None, **kwargs):
        """Keras' ``compile``, plus the objective that :meth:`train_step` minimises and the weights it reads.

        Args:
            optimizer: as for Keras (the Trainer's is :class:`~gnmt_tf.training.optimizer.AdamThenSGD`).
            loss: the teacher-forcing loss, a Keras loss of ``(target_output_ids, logits)``:
                what ``evaluate`` reports (dev loss and perplexity), and what training
                minimises when no ``objective`` is given. Default:
                :class:`~gnmt_tf.models.losses.SequenceCrossEntropy` (eq. 7 per token).
            objective: what training minimises: an object with ``loss(model, batch,
                training, weights) -> (loss, logs)`` such as
                :class:`~gnmt_tf.training.reinforce.MixedObjective` (eq. 9). Default:
                :class:`~gnmt_tf.models.objectives.MaximumLikelihood` of ``loss``.
            weight_transform: what the training and test steps (``fit``, ``evaluate``) and Keras
                ``call`` read the weights through (:mod:`gnmt_tf.layers.weights`), e.g.
                :class:`gnmt_tf.quantization.qat.QuantizationAwareTraining` (section 6). Default:
                the float weights. Keras makes its step functions anew after ``compile``, so
                they compute with it; it is not saved with the compile config.
            metrics: not supported; the steps log their own (see :meth:`train_step`).

        A weight average is training state, not the model's: ``fit`` moves one through a callback
        (:class:`~gnmt_tf.training.averaging.WeightAveraging`).
        """
        if metrics or kwargs.get("weighted_metrics"):
            raise ValueError(
                "GNMT.compile takes no metrics: train_step and test_step log loss, perplexity and token "
                "counts themselves (and train_step the gradient norm, learning rate and delta)"
            )
        evaluation = MaximumLikelihood(loss)
        super().compile(optimizer=optimizer, loss=evaluation.loss_function, **kwargs)
        self.objective = objective if objective is not None else evaluation
        self._evaluation_objective = evaluation
        self._compiled_weights = WeightReader(weight_transform)
        with self.distribute_strategy.scope():  # where Keras creates its own metrics
            self._running_means = _RunningMeans()

    def compile_from_config(self, config):
        """Compile a loaded model as it was saved (Keras skips a custom ``compile`` otherwise).

        The objective and the weight transform are not saved: a loaded model trains by maximum
        likelihood of its compiled loss, with float weights, until ``compile`` is given others.
        """
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built and isinstance(self.optimizer, keras.optimizers.Optimizer):
            self.optimizer.build(self.trainable_variables)  # so that the saved optimizer state loads

    @property
    def metrics(self):
        """Keras' metrics plus the running means of the logged loss and perplexity (reset each epoch)."""
        means = self._running_means
        return super().metrics + ([means.loss, means.reference_nll] if means is not None else [])

    # Keras traces its train/test functions with AutoGraph, which would re-parse the Python source
    # of every layer the step calls; the steps' loops and branches on tensors are tf.while_loop /
    # tf.cond already, so they are traced as written (a run's first step: seconds sooner).
    @tf.autograph.experimental.do_not_convert
    def train_step(self, data):
        """One update of the compiled objective; the same step for every objective.

        The objective gives this replica's loss, computed with :attr:`compiled_weights`; the step
        divides it among the replicas
        (Keras' rule: synchronous replicas add their gradients up), takes the gradient and
        applies the optimizer. Logs: ``loss`` and ``perplexity`` (exp of the references'
        per-token negative log-likelihood), both means over the epoch so far, as Keras
        reports a compiled loss; ``gradient_norm`` (global norm before clipping),
        ``learning_rate``, ``delta``, ``source_tokens`` / ``target_tokens`` (real tokens
        in the batch, for throughput); and the objective's own logs.
        """
        self.build()  # a model fit before it was built or called: the objective calls its methods, not Keras'
        batch = unpack_batch(data)
        with tf.GradientTape() as tape:
            loss, objective_logs = self.objective.loss(self, batch, training=True,
                                                       weights=self._compiled_weights)
            # Synchronous replicas add their gradients up: each takes its share (as Keras scales a compiled loss).
            replicas = tf.distribute.get_strategy().num_replicas_in_sync
            scaled = loss * (1.0 / replicas) if replicas > 1 else loss
        gradients = tape.gradient(scaled, self.trainable_variables)
        learning_rate = self.optimizer.learning_rate  # the rate this update uses
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
        logs = self._logs(batch, loss, objective_logs)
        logs["gradient_norm"] = tf.linalg.global_norm(gradients)
        logs["learning_rate"] = tf.convert_to_tensor(learning_rate)
        logs["delta"] = tf.convert_to_tensor(self.clip_delta)
        return logs

    @tf.autograph.experimental.do_not_convert
    def test_step(self, data):
        """The compiled teacher-forcing loss of a batch: logs ``loss``, ``perplexity`` and the token counts."""
        self.build()  # as in train_step
        batch = unpack_batch(data)
        loss, objective_logs = self._evaluation_objective.loss(self, batch, training=False,
                                                               weights=self._compiled_weights)
        return self._logs(batch, loss, objective_logs)

    def _logs(self, batch: Batch, loss, objective_logs) -> Dict[str, tf.Tensor]:
        """The logs every objective shares, after the objective's own (its REFERENCE_NLL becomes perplexity)."""
        logs = dict(objective_logs)
        means = self._running_means
        sentences = tf.shape(batch.target_output_ids)[0]
        means.loss.update_state(loss, sample_weight=sentences)
        means.reference_nll.update_state(logs.pop(REFERENCE_NLL), sample_weight=sentences)
        logs["loss"] = means.loss.result()
        logs["perplexity"] = tf.exp(tf.minimum(tf.cast(means.reference_nll.result(), tf.float32), 50.0))
        logs["source_tokens"] = tf.reduce_sum(tf.cast(tf.not_equal(batch.source_ids, PAD_ID), tf.float32))
        logs["target_tokens"] = tf.reduce_sum(tf.cast(tf.not_equal(batch.target_output_ids, PAD_ID), tf.float32))
        return logs

    # ------------------------------------------------------------------ one step at a time
    def encode(self, source_ids, weights: WeightReader = FLOAT_READER, training=None,
               recurrence: Recurrence = WRITTEN_GRADIENT) -> AttentionMemory:
        """Encode source ids [batch, src]; attention keys are projected here, once per sentence.

        ``recurrence`` chooses how the encoder's layers run over time (:mod:`gnmt_tf.layers.recurrence`):
        by default as training runs them; a search passes its own (the translator's
        :data:`~gnmt_tf.layers.recurrence.STEPWISE`, the TFLite exporter's loop), as does a reader
        with int8 products.
        """
        source_ids = tf.convert_to_tensor(source_ids)
        mask = tf.not_equal(source_ids, PAD_ID)
        outputs = self.encoder(self.embed_source(source_ids, weights), mask=mask, weights=weights,
                               training=training, recurrence=recurrence)
        return self.decoder.attention.memory(outputs, mask)

    def initial_state(self, memory: AttentionMemory) -> DecoderState:
        """The decoder state before the first target token (zeros, plus the memory)."""
        return self.decoder.initial_state(memory)

    def step(self, state: DecoderState, token_ids, weights: WeightReader = FLOAT_READER,
             softmax_columns: Optional[DenseColumns] = None,
             target_inputs: Optional[TargetInputProjection] = None) -> Tuple[tf.Tensor, tf.Tensor, DecoderState]:
        """Feed one token per sentence [batch] -> (logits [B, V], attention probs [B, S], new state).

        ``softmax_columns`` (:meth:`softmax_columns`, read with the same ``weights``): a vocabulary
        shortlist; only its ids' logits are computed, the others are -inf
        (:meth:`gnmt_tf.models.decoder.GNMTDecoder.logits`). ``target_inputs``: read the bottom
        layer's input projection of the tokens from a precomputed table
        (:meth:`target_input_projection`) instead of embedding them.
        """
        if target_inputs is None:
            return self.decoder.step(state, weights, self.embed_target(token_ids, weights),
                                     softmax_columns=softmax_columns)
        return self.decoder.step(state, weights, projected=target_inputs(token_ids, state.context),
                                 softmax_columns=softmax_columns)

    def target_input_table(self, weights: WeightReader = FLOAT_READER) -> tf.Tensor:
        """The bottom decoder layer's input projection of every target token: [V, 4 units] (Devlin 2017).

        What a step would compute from the token's embedding, computed once, with ``weights``.
        A snapshot: it does not follow later changes of the weights.
        """
        all_tokens = tf.range(self.model_config.vocab_size)
        return self.decoder.target_input_table(self.embed_target(all_tokens, weights), weights)

    def target_input_projection(self, token_rows,
                                weights: WeightReader = FLOAT_READER) -> TargetInputProjection:
        """What :meth:`step` takes as ``target_inputs``, given ``token_rows``: ids -> rows of
        :meth:`target_input_table`'s table (e.g. ``lambda ids: tf.gather(table, ids)``), and the
        ``weights`` the steps read. Make it outside the decoding loop."""
        return self.decoder.target_input_projection(token_rows, weights)

    def softmax_columns(self, output_ids, weights: WeightReader = FLOAT_READER) -> DenseColumns:
        """The softmax weights of the output ids ``output_ids`` (int32 [n], distinct), read once through
        ``weights`` for every :meth:`step` that computes only those logits."""
        return self.decoder.softmax_columns(output_ids, weights)

    def embed_source(self, source_ids, weights: WeightReader = FLOAT_READER) -> tf.Tensor:
        """Source embeddings of ids [batch, ...], read through ``weights`` (from :attr:`embeddings`)."""
        return self.embeddings.source(source_ids, weights)

    def embed_target(self, target_ids, weights: WeightReader = FLOAT_READER) -> tf.Tensor:
        """Target embeddings of ids [batch, ...], read through ``weights`` (from :attr:`embeddings`)."""
        return self.embeddings.target(target_ids, weights)

    # ------------------------------------------------------------------ weights (section 6)
    def product_kernels(self) -> List[tf.Variable]:
        """The kernels of the model's matrix products, in ``self.weights`` order: every LSTM cell's
        ``kernel`` and ``recurrent_kernel`` and the softmax kernel (not attention, embeddings, biases).
        What a search reads once (:meth:`gnmt_tf.layers.weights.WeightReader.reading_once`), and what int8
        inference quantizes. With tied embeddings the softmax kernel is also the embedding table, and the
        lookups read it as the products do: a transform that quantizes it (Int8Weights,
        FakeQuantizedWeights) quantizes the embeddings with it, one scale per wordpiece. (QAT's transform
        fake-quantizes the LSTM kernels alone, so there softmax and embeddings both stay float.)"""
        wanted = [getattr(self.decoder.softmax_projection, "kernel", None)]  # None before build
        for module in self.submodules:
            if hasattr(module, "recurrent_kernel") and hasattr(module, "kernel"):
                wanted += [module.kernel, module.recurrent_kernel]
        refs = {v.ref() for v in wanted if v is not None}
        return [w for w in self.weights if w.ref() in refs]

    def embedding_tables(self) -> List[tf.Variable]:
        """The tables that are only looked up (what int8 inference stores per token row): the source and
        target embeddings, or none when they are tied to the softmax kernel (a product kernel)."""
        return self.embeddings.tables()

    # ------------------------------------------------------------------ delta (eq. 10)
    def set_clip_delta(self, value: float) -> None:
        """Set delta for every cell state and residual sum (8.0 -> 1.0 in training, 1.0 at inference)."""
        self.clip_delta.assign(value)

    # ------------------------------------------------------------------ serialisation
    def get_config(self):
        return {"config": self.model_config.__dict__.copy(), "name": self.name}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        return cls(config["config"], name=config.get("name"))


class _RunningMeans:
    """Keras means behind the logged loss and perplexity.

    Held in a plain object rather than as model attributes, so that their variables stay
    out of the model's weights and checkpoints, as Keras keeps its compiled metrics'.
    """

    def __init__(self):
        self.loss = keras.metrics.Mean(name="loss")
        self.reference_nll = keras.metrics.Mean(name=REFERENCE_NLL)


def unpack_batch(data) -> Batch:
    """A batch as ``fit`` and ``evaluate`` pass it, ``((source_ids, target_input_ids), target_output_ids)``."""
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    source_ids, target_input_ids = _unpack(x)
    return Batch(source_ids, target_input_ids, y, sample_weight)


def _unpack(inputs) -> Tuple[tf.Tensor, tf.Tensor]:
    if isinstance(inputs, dict):
        try:
            return inputs["source_ids"], inputs["target_input_ids"]
        except KeyError:
            raise ValueError(
                f"GNMT expects inputs with keys 'source_ids' and 'target_input_ids', got {sorted(inputs)}"
            ) from None
    if isinstance(inputs, (tuple, list)) and len(inputs) == 2:
        return inputs[0], inputs[1]
    raise ValueError(
        "GNMT expects (source_ids, target_input_ids) or a dict with those keys, "
        f"got {type(inputs).__name__}"
    )
