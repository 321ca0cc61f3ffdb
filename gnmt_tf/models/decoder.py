"""The GNMT decoder (section 3, fig. 1).

The bottom decoder layer's output queries the attention; the resulting
context is concatenated to the input of every layer above it ("sent directly
to all the remaining decoder layers", fig. 1). With ``input_feeding`` the
bottom layer also reads the previous step's context. Layers from
``residual_start`` up add their input (without the context) to their output
and clip the sum (eq. 6, 10). The top output goes through dropout and the
softmax projection, whose logits are clipped to [-gamma, gamma] (eq. 13).

Two paths share all of this math:

* :meth:`GNMTDecoder.call`: teacher forcing over whole target sequences.
  Without input feeding, nothing in the bottom layer depends on attention,
  so the bottom layer runs over the whole sequence, then attention for all
  positions at once, then each upper layer. With input feeding, the bottom
  layer and the attention run together, one :meth:`GNMTDecoder.feed_bottom_step`
  per time step. How each runs over time is the
  :class:`~gnmt_tf.layers.recurrence.Recurrence` ``call`` is given.
* :meth:`GNMTDecoder.step`: one token per sentence, for beam search and sampling.

The model-parallel schemes (:mod:`gnmt_tf.parallel.model_parallel`) place the same pieces on
their devices: :meth:`~GNMTDecoder.bottom_inputs`, :meth:`~GNMTDecoder.bottom_step` (or
:meth:`~GNMTDecoder.bottom_layer` and the attention), the upper stack's layers,
:meth:`~GNMTDecoder.top_output` and the softmax (:meth:`~GNMTDecoder.logits`, or
:meth:`~GNMTDecoder.column_logits` of a slice of the vocabulary).

Every method that computes reads the kernels through the
:class:`~gnmt_tf.layers.weights.WeightReader` it is given as ``weights``.

Decoding can skip the product of the embedded token with the bottom layer's input
kernel (Devlin 2017, section 4): that product depends on the token alone, so
:meth:`GNMTDecoder.target_input_table` computes it once for every vocabulary entry
and a step gathers its row (:class:`TargetInputProjection`).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Sequence, Tuple

import tensorflow as tf
import tf_keras as keras

from gnmt_tf.layers.attention import AdditiveAttention, AttentionMemory
from gnmt_tf.layers.clipping import clip_logits
from gnmt_tf.layers.cell import GNMTLSTMCell, cell_arguments, uniform_initializer
from gnmt_tf.config import ModelConfig
from gnmt_tf.layers.recurrence import WRITTEN_GRADIENT, LSTMState, Recurrence, masked_step, run_projected_lstm
from gnmt_tf.layers.stack import ResidualLSTMStack, build_sublayer, device_scope
from gnmt_tf.layers.weights import FLOAT_READER, DenseColumns, WeightReader


class DecoderState(NamedTuple):
    """Everything one decoding step needs besides the previous token.

    A nest of tensors whose leading dimension is the batch, so beam search can
    tile and reorder it with ``tf.nest.map_structure``.
    """

    layers: Tuple[LSTMState, ...]  # (c, m) for decoder layers 1..N
    context: tf.Tensor  # [batch, encoder_width]: the last attention context
    memory: AttentionMemory  # the encoded source sentence


class TargetInputProjection(NamedTuple):
    """The bottom layer's input projection in a step that reads it from a precomputed table.

    Made per search, before the loop (:meth:`GNMTDecoder.target_input_projection`).
    """

    token_rows: Callable[[tf.Tensor], tf.Tensor]  # token ids [rows] -> table rows [rows, 4 units] (bias included)
    context_product: Optional[Callable[[tf.Tensor], tf.Tensor]]  # context -> its share of the projection

    def __call__(self, token_ids: tf.Tensor, previous_context: tf.Tensor) -> tf.Tensor:
        projected = self.token_rows(token_ids)
        if self.context_product is not None:  # input feeding: [e; c] W = e W_e + c W_c
            projected = projected + self.context_product(previous_context)
        return projected


class GNMTDecoder(keras.layers.Layer):
    """Embedded target inputs + encoder memory -> clipped logits."""

    def __init__(self, config: ModelConfig, encoder_width: int, clip_delta: Optional[tf.Variable] = None,
                 devices: Optional[Sequence[str]] = None,
                 attention_device: Optional[str] = None, softmax_device: Optional[str] = None, **kwargs):
        """``devices`` (one per decoder layer), ``attention_device``, ``softmax_device``: where the
        weights live under model parallelism (section 3.3); None: one device."""
        super().__init__(**kwargs)
        self.config = config
        self.devices = tuple(devices) if devices is not None else (None,) * config.decoder_layers
        self.attention_device = attention_device
        self.softmax_device = softmax_device
        self.encoder_width = encoder_width
        cell_args = cell_arguments(config, clip_delta)
        self.bottom_cell = GNMTLSTMCell(config.units, name="lstm_1", **cell_args)
        self.input_dropout = keras.layers.Dropout(config.dropout)
        self.attention = AdditiveAttention(config.attention_units, init_scale=config.init_scale, name="attention")
        self.upper = ResidualLSTMStack(
            num_layers=config.decoder_layers - 1,
            units=config.units,
            first_layer=2,
            residual_start=config.residual_start,
            context_units=encoder_width,
            dropout=config.dropout,
            devices=self.devices[1:],
            name="upper_layers",
            **cell_args,
        )
        self.output_dropout = keras.layers.Dropout(config.dropout)
        self.softmax_projection = keras.layers.Dense(
            config.vocab_size,
            kernel_initializer=uniform_initializer(config.init_scale),
            bias_initializer=uniform_initializer(config.init_scale),
            name="softmax",
        )

    def build(self, input_shape):
        embedding_dim = self.embedding_dim = int(input_shape[-1])
        bottom_width = embedding_dim + (self.encoder_width if self.config.input_feeding else 0)
        build_sublayer(self.bottom_cell, (None, bottom_width), self.devices[0])
        with device_scope(self.attention_device):
            self.attention.build_for(self.config.units, self.encoder_width)
        build_sublayer(self.upper, (None, None, self.config.units))
        build_sublayer(self.softmax_projection, (None, self.config.units), self.softmax_device)
        super().build(input_shape)

    # ----------------------------------------------------------------- shared pieces
    def softmax_columns(self, output_ids, weights: WeightReader) -> DenseColumns:
        """The softmax weights of the output ids ``output_ids`` (int32 [n], distinct: a vocabulary
        shortlist, :mod:`gnmt_tf.data.shortlist`), read once per batch for :meth:`logits`."""
        return weights.dense_columns(self.softmax_projection, output_ids)

    def top_output(self, top: tf.Tensor, training=None) -> tf.Tensor:
        """The top decoder output as the softmax reads it: through dropout, unless ``training`` is False."""
        if training is False:  # decoding steps: no dropout op in the graph
            return top
        return self.output_dropout(top, training=training)

    def column_logits(self, top: tf.Tensor, columns: DenseColumns, weights: WeightReader) -> tf.Tensor:
        """The logits of the output ids of ``columns`` (:meth:`softmax_columns`) alone, clipped (eq. 13):
        [..., n]. ``top`` as :meth:`top_output` gives it."""
        return clip_logits(weights.dense(self.softmax_projection, top, columns), self.config.logit_clip)

    def logits(self, top: tf.Tensor, weights: WeightReader, training=None,
               softmax_columns: Optional[DenseColumns] = None) -> tf.Tensor:
        """The top decoder output through dropout and the softmax projection, clipped (eq. 13).

        With ``softmax_columns`` (:meth:`softmax_columns`; ``top`` [batch, units]), only the logits
        of those ids are computed, from the softmax kernel's columns and bias entries there (where
        the softmax's FLOPs go), and every other id gets -inf: the row still spans the vocabulary,
        and a search over it never picks an id outside the shortlist.
        """
        top = self.top_output(top, training)
        if softmax_columns is None:
            return clip_logits(weights.dense(self.softmax_projection, top), self.config.logit_clip)
        logits = self.column_logits(top, softmax_columns, weights)
        # Spread over the vocabulary: row 0 of the transposed logits is -inf, id v reads row
        # positions[v] (0 for an id not computed). Row gathers and transposes: a column gather is slower.
        excluded = tf.fill(tf.stack([1, tf.shape(logits)[0]]), tf.constant(float("-inf"), logits.dtype))
        spread = tf.gather(tf.concat([excluded, tf.transpose(logits)], axis=0), softmax_columns.positions)
        return tf.transpose(spread)

    def token_projection(self, embedded: tf.Tensor, previous_context: tf.Tensor,
                         weights: WeightReader) -> tf.Tensor:
        """The bottom layer's input product at one step [batch, 4 units]: of the embedded token [batch, E]
        and, with input feeding, of the last context (:class:`TargetInputProjection` reads it from a
        table instead)."""
        x = tf.concat([embedded, previous_context], axis=-1) if self.config.input_feeding else embedded
        return self.bottom_cell.project_inputs(x, weights)

    def target_input_table(self, embeddings: tf.Tensor, weights: WeightReader) -> tf.Tensor:
        """The bottom layer's input projection of each embedding [V, E] (the bias included): [V, 4 units]."""
        projected = weights.partial_product(self.bottom_cell.kernel, slice(0, self.embedding_dim))(embeddings)
        return projected + self.bottom_cell.bias if self.bottom_cell.bias is not None else projected

    def target_input_projection(self, token_rows: Callable[[tf.Tensor], tf.Tensor],
                                weights: WeightReader) -> TargetInputProjection:
        """A step's input projection from ``token_rows`` (rows of :meth:`target_input_table`'s table).

        Call it outside the decoding loop: the kernel's context rows are sliced here, once.
        """
        context_product = None
        if self.config.input_feeding:
            context_rows = slice(self.embedding_dim, None)
            context_product = weights.partial_product(self.bottom_cell.kernel, context_rows)
        return TargetInputProjection(token_rows, context_product)

    # ----------------------------------------------------------------- the bottom layer over a sequence
    def bottom_inputs(self, embedded: tf.Tensor, weights: WeightReader, training=None) -> tf.Tensor:
        """What the bottom layer reads at each target position [batch, time, ...]: the embedded targets
        through dropout; without input feeding, their input product too, made for every position at
        once (an identity, as :func:`gnmt_tf.layers.recurrence.run_lstm` hoists it). With input
        feeding the product also reads the previous context, known only step by step."""
        x = self.input_dropout(embedded, training=training)
        if self.config.input_feeding:
            return x
        return self.bottom_cell.project_inputs(x, weights)

    def bottom_initial_state(self, batch, dtype=tf.float32):
        """The bottom layer's state before the first target token: ``(c, m)``, and with input
        feeding the previous context (zeros) as well."""
        state = tuple(self.bottom_cell.get_initial_state(batch_size=batch, dtype=dtype))
        if self.config.input_feeding:
            state += (tf.zeros([batch, self.encoder_width], dtype=dtype),)
        return state

    def feed_bottom_step(self, x_t: tf.Tensor, state, memory: AttentionMemory, weights: WeightReader):
        """Input feeding, one time step: the bottom layer reads x_t and the previous context, then attends.

        ``state`` is ``(c, m, previous context)``. Returns ``((m^1_t, context_t, attention
        probs_t), (c, m, context_t))``; the teacher-forcing loop runs it through
        :func:`gnmt_tf.layers.recurrence.masked_step`.
        """
        c, m, previous_context = state
        projected = self.token_projection(x_t, previous_context, weights)
        output, (c, m) = self.bottom_cell.recur(projected, (c, m), weights)
        context, probs = self.attention.attend_step(output, memory)
        return (output, context, probs), (c, m, context)

    def bottom_step(self, inputs_t: tf.Tensor, state, mask_t: tf.Tensor, memory: AttentionMemory,
                    weights: WeightReader):
        """One time step of the bottom layer and its attention, padding-proof (``mask_t``: the real rows).

        ``inputs_t`` is time step t of :meth:`bottom_inputs`, ``state`` starts as
        :meth:`bottom_initial_state`. Returns ``((m^1_t, context_t, attention probs_t), new state)``,
        the numbers :meth:`call` computes at step t: with input feeding the attention is part of the
        masked step (:meth:`feed_bottom_step`: context and probs 0 at padding); without, it reads the
        masked output (0 at padding), as attention over every position of the bottom layer's output does.
        The model-parallel wavefront runs this step, one diagonal at a time.
        """
        if self.config.input_feeding:
            return masked_step(lambda x_t, s: self.feed_bottom_step(x_t, s, memory, weights), inputs_t, state,
                               mask_t)
        recur = lambda projected_t, s: self.bottom_cell.recur(projected_t, s, weights)  # noqa: E731
        output, new_state = masked_step(recur, inputs_t, state, mask_t)
        context, probs = self.attention.attend_step(output, memory)
        return (output, context, probs), new_state

    def bottom_layer(self, inputs: tf.Tensor, mask: tf.Tensor, weights: WeightReader,
                     recurrence: Recurrence) -> tf.Tensor:
        """Without input feeding: the bottom layer over whole sequences, from :meth:`bottom_inputs`
        (their input products), run by ``recurrence``: m^1 [batch, time, units]. Nothing in it depends
        on attention."""
        if self.config.input_feeding:
            raise ValueError("with input feeding the bottom layer reads the attention context step by step "
                             "(bottom_step)")
        return run_projected_lstm(self.bottom_cell, inputs, mask, weights, recurrence)[0]

    # ----------------------------------------------------------------- teacher forcing
    def call(
        self, embedded: tf.Tensor, mask: tf.Tensor, memory: AttentionMemory,
        weights: WeightReader = FLOAT_READER, training=None, recurrence: Recurrence = WRITTEN_GRADIENT,
    ) -> Tuple[tf.Tensor, tf.Tensor]:
        """Whole target sequences -> (logits [B, T, V], attention probs [B, T, S]), each layer run over time
        by ``recurrence`` (:mod:`gnmt_tf.layers.recurrence`)."""
        inputs = self.bottom_inputs(embedded, weights, training)
        if self.config.input_feeding:
            initial = self.bottom_initial_state(tf.shape(inputs)[0], inputs.dtype)
            sizes = (self.config.units, self.encoder_width, tf.shape(memory.mask)[1])
            step = lambda x_t, state: self.feed_bottom_step(x_t, state, memory, weights)  # noqa: E731
            (bottom, contexts, probs), _ = recurrence.steps(step, inputs, mask, initial, sizes)
        else:
            bottom = self.bottom_layer(inputs, mask, weights, recurrence)
            contexts, probs = self.attention.attend(bottom, memory)
        top = self.upper(bottom, mask=mask, context=contexts, weights=weights, training=training,
                         recurrence=recurrence)
        return self.logits(top, weights, training=training), probs

    # ----------------------------------------------------------------- one step
    def initial_state(self, memory: AttentionMemory) -> DecoderState:
        batch = tf.shape(memory.values)[0]
        dtype = memory.values.dtype
        layers = (self.bottom_cell.get_initial_state(batch_size=batch, dtype=dtype),)
        layers += self.upper.get_initial_state(batch, dtype)
        context = tf.zeros([batch, self.encoder_width], dtype=dtype)
        return DecoderState(layers=layers, context=context, memory=memory)

    def step(self, state: DecoderState, weights: WeightReader, embedded: Optional[tf.Tensor] = None,
             projected: Optional[tf.Tensor] = None,
             softmax_columns: Optional[DenseColumns] = None) -> Tuple[tf.Tensor, tf.Tensor, DecoderState]:
        """One token per sentence -> (logits [B, V], probs [B, S], new state).

        The token comes as ``embedded`` [B, E], or as ``projected`` [B, 4 units]: the bottom
        layer's input projection already made (:class:`TargetInputProjection`). ``softmax_columns``:
        a vocabulary shortlist (see :meth:`logits`).
        """
        if projected is None:
            projected = self.token_projection(embedded, state.context, weights)
        bottom, bottom_state = self.bottom_cell.recur(projected, state.layers[0], weights)
        context, probs = self.attention.attend_step(bottom, state.memory)
        top, upper_states = self.upper.step(bottom, state.layers[1:], weights, context=context)
        new_state = DecoderState(layers=(bottom_state,) + upper_states, context=context, memory=state.memory)
        return self.logits(top, weights, training=False, softmax_columns=softmax_columns), probs, new_state
