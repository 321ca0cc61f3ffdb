"""The GNMT Keras model: embeddings, encoder, attention, decoder, clipped softmax.

Teacher forcing::

    logits = model((source_ids, target_input_ids))   # [batch, tgt, vocab]

Decoding, one token at a time (what beam search and sampling call)::

    memory = model.encode(source_ids)
    state = model.initial_state(memory)
    logits, attention_probs, state = model.step(state, token_ids)

Ids are int32 with :data:`gnmt_tf.vocab.PAD_ID` (0) as right-padding; padding
is masked in every layer, so it never changes a real position's output.
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Optional, Tuple, Union

import tensorflow as tf
import tf_keras as keras

from gnmt_tf.layers.attention import AttentionMemory
from gnmt_tf.layers.cell import uniform_initializer
from gnmt_tf.config import ModelConfig, model_config_from_dict
from gnmt_tf.models.decoder import DecoderState, GNMTDecoder
from gnmt_tf.models.encoder import GNMTEncoder
from gnmt_tf.parallel import model_parallel
from gnmt_tf.layers.weights import WeightReader, WeightTransform
from gnmt_tf.layers.stack import build_sublayer
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
            every LSTM cell and residual sum. Training anneals it; use
            :meth:`set_clip_delta` to change it.
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
            # Training assigns it inside the step; one value for every replica.
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )
        # A function of the optimizer's step giving delta (section 6); when set,
        # every training step assigns delta from it before the forward pass.
        self.delta_schedule = None
        # When set, an object whose ``train_step(model, data)`` replaces the maximum-likelihood
        # step (eq. 7), e.g. the mixed RL objective of eq. 9 (gnmt_tf.training.reinforce.MixedObjective).
        self.training_objective = None
        # The one reader of every kernel and embedding table: float, fake-quantized or int8,
        # whichever transform_weights() scope the model is traced in (gnmt_tf.layers.weights).
        self.weight_reader = WeightReader()
        self.source_embedding = keras.layers.Embedding(
            config.vocab_size, config.embedding_width, embeddings_initializer=uniform_initializer(config.init_scale), name="source_embedding"
        )
        self.target_embedding = keras.layers.Embedding(
            config.vocab_size, config.embedding_width, embeddings_initializer=uniform_initializer(config.init_scale), name="target_embedding"
        )
        # Which device each layer runs on (section 3.3), from a ParallelConfig; None: one device.
        # Placement is not architecture: get_config and the checkpoint do not record it.
        self.placement = model_parallel.resolve_placement(parallel, config)
        placement = self.placement
        self.encoder = GNMTEncoder(
            config, clip_delta=self.clip_delta, weight_reader=self.weight_reader,
            devices=placement.encoder if placement else None, name="encoder",
        )
        self.decoder = GNMTDecoder(
            config, encoder_width=self.encoder.output_width, clip_delta=self.clip_delta,
            weight_reader=self.weight_reader, devices=placement.decoder if placement else None,
            attention_device=placement.attention_device if placement else None,
            softmax_device=placement.root if placement else None, name="decoder",
        )

    # ------------------------------------------------------------------ building
    def build(self, input_shape=None):
        """Create every weight; no example input is needed."""
        if self.built:
            return
        placement = self.placement  # the embeddings live with the bottom layers that read them
        build_sublayer(self.source_embedding, (None, None), placement.encoder[0] if placement else None)
        build_sublayer(self.target_embedding, (None, None), placement.decoder[0] if placement else None)
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
        """``(source_ids, target_input_ids)`` -> logits [batch, tgt, vocab], clipped to [-gamma, gamma]."""
        logits, _ = self.forward(*_unpack(inputs), training=training)
        return logits

    def forward(self, source_ids, target_input_ids, training=None) -> Tuple[tf.Tensor, tf.Tensor]:
        """Teacher forcing with attention: (logits [B, T, V], attention probs [B, T, S])."""
        if self.placement is not None:  # layers on their devices (gnmt_tf.parallel.model_parallel)
            return model_parallel.forward(self, source_ids, target_input_ids, training=training)
        memory = self.encode(source_ids, training=training)
        target_input_ids = tf.convert_to_tensor(target_input_ids)
        return self.decoder(
            self.embed_target(target_input_ids),
            mask=tf.not_equal(target_input_ids, PAD_ID),
            memory=memory,
            training=training,
        )

    # ------------------------------------------------------------------ training
    def train_step(self, data):
        """Keras' training step, plus delta annealing and the logs training wants.

        Logs besides the compiled loss and metrics: ``perplexity`` (exp of the
        per-token loss), ``gradient_norm`` (global norm before clipping),
        ``learning_rate``, ``delta``, and ``source_tokens`` / ``target_tokens`` (real
        tokens in the batch, for throughput).
        """
        if self.training_objective is not None:  # e.g. RL refinement (gnmt_tf.training.reinforce)
            return self.training_objective.train_step(self, data)
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        if self.delta_schedule is not None:
            self.delta_schedule.update(self.clip_delta, self.optimizer.iterations)
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x, y, y_pred, sample_weight)
        gradients = tape.gradient(loss, self.trainable_variables)
        learning_rate = self.optimizer.learning_rate  # the rate this update uses
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
        logs = self.compute_metrics(x, y, y_pred, sample_weight)
        logs.update(self._step_logs(x, y, logs))
        logs["gradient_norm"] = tf.linalg.global_norm(gradients)
        logs["learning_rate"] = tf.convert_to_tensor(learning_rate)
        logs["delta"] = tf.convert_to_tensor(self.clip_delta)
        return logs

    def test_step(self, data):
        logs = super().test_step(data)
        x, y, _ = keras.utils.unpack_x_y_sample_weight(data)
        logs.update(self._step_logs(x, y, logs))
        return logs

    @staticmethod
    def _step_logs(x, y, logs):
        source_ids, _ = _unpack(x)
        return {
            "perplexity": tf.exp(tf.minimum(tf.cast(logs["loss"], tf.float32), 50.0)),
            "source_tokens": tf.reduce_sum(tf.cast(tf.not_equal(source_ids, PAD_ID), tf.float32)),
            "target_tokens": tf.reduce_sum(tf.cast(tf.not_equal(y, PAD_ID), tf.float32)),
        }

    # ------------------------------------------------------------------ one step at a time
    def encode(self, source_ids, training=None, time_loop=None) -> AttentionMemory:
        """Encode source ids [batch, src]; attention keys are projected here, once per sentence.

        ``time_loop`` chooses how the encoder's time steps are iterated
        (:mod:`gnmt_tf.layers.recurrence`; the TFLite exporter passes its own).
        """
        source_ids = tf.convert_to_tensor(source_ids)
        mask = tf.not_equal(source_ids, PAD_ID)
        outputs = self.encoder(self.embed_source(source_ids), mask=mask, training=training, time_loop=time_loop)
        return self.decoder.attention.memory(outputs, mask)

    def initial_state(self, memory: AttentionMemory) -> DecoderState:
        """The decoder state before the first target token (zeros, plus the memory)."""
        return self.decoder.initial_state(memory)

    def step(self, state: DecoderState, token_ids) -> Tuple[tf.Tensor, tf.Tensor, DecoderState]:
        """Feed one token per sentence [batch] -> (logits [B, V], attention probs [B, S], new state)."""
        return self.decoder.step(state, self.embed_target(token_ids))

    def embed_source(self, source_ids) -> tf.Tensor:
        """Source embeddings of ids [batch, ...], read through the model's weight transform."""
        return self.weight_reader.lookup(self.source_embedding, source_ids)

    def embed_target(self, target_ids) -> tf.Tensor:
        """Target embeddings of ids [batch, ...], read through the model's weight transform."""
        return self.weight_reader.lookup(self.target_embedding, target_ids)

    # ------------------------------------------------------------------ weights (section 6)
    def transformed_weights(self, transform: Optional[WeightTransform]) -> "contextlib.AbstractContextManager":
        """Compute with ``transform``'s weights inside the ``with`` block (and in graphs traced there).

        ``transform`` is, e.g., :class:`gnmt_tf.quantization.Int8Weights` (section 6's int8
        inference), :class:`gnmt_tf.quantization.QuantizationAwareTraining` or
        :class:`gnmt_tf.quantization.FakeQuantizedWeights`; None means the float weights.
        A graph keeps the transform it was traced with: Keras caches the functions of
        ``fit``/``evaluate``/``predict``, so make them inside the scope
        (``model.make_test_function(force=True)``) when they were first made outside it.
        """
        return self.weight_reader.using(transform)

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
