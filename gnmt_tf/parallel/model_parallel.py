"""Model parallelism (section 3.3) and the hybrid data/model-parallel scheme (Ono et al. 2019).

Section 3.3 places each LSTM layer of the encoder and the decoder on its own
device. Layers 2..N of the encoder and every decoder layer are uni-directional,
so layer i+1 can work on time step t while layer i works on step t+1. This
module runs a stack of such layers as a *wavefront*: one ``tf.while_loop`` over
``T + L - 1`` diagonals where, at diagonal k, layer l processes time step
``t = k - l``. Within one iteration every layer's ops sit under its device and
read only the previous iteration's values (its own state and the output the
layer below produced at diagonal k-1), so TensorFlow's executor runs the layers
of one iteration concurrently on their devices::

    diagonal k:   0    1    2    3    4  ...
    layer 3:      -    -   t=0  t=1  t=2
    layer 2:      -   t=0  t=1  t=2  t=3
    layer 1:     t=0  t=1  t=2  t=3  t=4

Outside its time range (the pipeline filling and draining) a layer's step is
masked like a padding step: its state is carried and its output discarded.

What runs where (``parallel.mode``):

* ``"model"`` (section 3.3, fig. 1): encoder layer 1 (bi-directional: it needs
  the whole source, so it runs before the wavefront) and then encoder layers
  2..N as a wavefront; the decoder's layers 1..N as one wavefront in which the
  bottom layer also computes the attention for its step (the attention "runs
  with the bottom layer"), whose context travels up with the bottom output to
  the layers above; the softmax split over the vocabulary into
  ``softmax_shards`` slices of the projection, slice s on ``devices[s % n]``.
  Input feeding works here too: the bottom layer keeps the last context in its
  own state.
* ``"hybrid"`` (Ono et al. 2019, section 3.2): the encoder as above; the
  decoder's bottom layer over the whole target; then the attention
  data-parallel (the gathered bottom outputs and encoder outputs split along
  the batch, one slice per device); then decoder layers 2..N as a wavefront
  with the gathered contexts; then the softmax data-parallel (each device a
  batch slice of the top outputs, the full vocabulary). Needs no input feeding.

Each layer's weights are created on its device: the GNMT gives its encoder and
decoder their layers' devices from the :class:`Placement` when it constructs them.
The attention and softmax weights of the hybrid scheme live on ``devices[0]``, the
root of their data parallelism. The embedding tables live with the bottom layers that
read them; a model with tied embeddings (Press & Wolf 2017) has one table, the softmax
kernel on the root, so its lookups gather there and only the looked-up rows travel to the
bottom layers (``GNMT.embeddings``). The checkpoint is
unchanged: placement is not architecture.

Only teacher forcing (``GNMT.forward``: training and dev loss) uses the
placement. ``GNMT.encode`` / ``GNMT.step`` (beam search, sampling) and every
export path keep the single-device graph.

The per-layer math is the cells', the stacks' and the decoder's own public methods
(``project_inputs``, ``recur``, ``ResidualLSTMStack.layer_input`` / ``layer_output``; the
decoder's ``bottom_inputs``, ``bottom_step`` / ``bottom_layer``, ``top_output``, ``logits`` and,
for a slice of the vocabulary, ``softmax_columns`` / ``column_logits``), each layer's step made
padding-proof by the one masked time step (:func:`gnmt_tf.layers.recurrence.masked_step`) and the
sequences made time-major by the recurrences' own helpers, so outputs equal the single-device model's
up to float rounding. The layers outside a wavefront (encoder layer 1; the hybrid scheme's bottom
decoder layer) run over time by the :class:`~gnmt_tf.layers.recurrence.Recurrence` ``forward`` is given. Every kernel and embedding table
is read through the :class:`~gnmt_tf.layers.weights.WeightReader` ``forward`` is given. Dropout
masks are drawn per step rather than per sequence inside a wavefront: the same distribution, not
the same draws.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, List, Optional, Sequence, Tuple

import tensorflow as tf

from gnmt_tf.layers.attention import AttentionMemory
from gnmt_tf.config import ConfigError, ModelConfig, ParallelConfig
from gnmt_tf.layers.recurrence import Recurrence, masked_step, swap_batch_time, time_major_mask
from gnmt_tf.layers.stack import ResidualLSTMStack
from gnmt_tf.layers.weights import WeightReader
from gnmt_tf.vocab import PAD_ID


# --------------------------------------------------------------------------------------
# Devices
# --------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Placement:
    """Resolved device names for one model replica."""

    mode: str  # "model" or "hybrid"
    devices: Tuple[str, ...]
    encoder: Tuple[str, ...]  # one per encoder layer, the bi-directional bottom one first
    decoder: Tuple[str, ...]  # one per decoder layer
    softmax_shards: int

    @property
    def root(self) -> str:
        """Where the data-parallel attention and softmax weights of the hybrid scheme live."""
        return self.devices[0]

    @property
    def attention_device(self) -> str:
        return self.decoder[0] if self.mode == "model" else self.root

    def softmax_shard_devices(self) -> List[str]:
        return [self.devices[s % len(self.devices)] for s in range(self.softmax_shards)]


def local_devices() -> List[str]:
    """Every logical device of the accelerator type: the GPUs, else the CPUs."""
    devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    return [device.name for device in devices]


def _device_key(name: str, field_name: str) -> Tuple[str, int]:
    try:
        spec = tf.DeviceSpec.from_string(name)
    except (ValueError, TypeError) as error:
        raise ConfigError(f"{field_name}: {name!r} is not a device name ({error})") from None
    if spec.device_type is None or spec.device_index is None:
        raise ConfigError(f"{field_name}: {name!r} needs a type and an index, e.g. '/device:GPU:1'")
    return spec.device_type.upper(), int(spec.device_index)


def resolve_devices(parallel: ParallelConfig) -> List[str]:
    """``parallel.devices`` as this process' logical device names; empty: :func:`local_devices`."""
    if not parallel.devices:
        return local_devices()
    available = {_device_key(d.name, "local device"): d.name for d in tf.config.list_logical_devices()}
    resolved = []
    for name in parallel.devices:
        key = _device_key(name, "parallel.devices")
        if key not in available:
            raise ConfigError(
                f"parallel.devices: {name!r} is not a device of this process; it has {sorted(available.values())}"
            )
        resolved.append(available[key])
    return resolved


def _layer_devices(
    indices: Optional[Sequence[int]], layers: int, devices: Sequence[str], field_name: str, layers_field: str
) -> Tuple[str, ...]:
    if indices is None:  # contiguous blocks, as in fig. 1 (one layer per GPU when there are as many GPUs)
        return tuple(devices[i * len(devices) // layers] for i in range(layers))
    if len(indices) != layers:
        raise ConfigError(
            f"parallel.{field_name}: {len(indices)} entries for {layers} layers (model.{layers_field}); "
            "give one device index per layer"
        )
    bad = [i for i in indices if not 0 <= i < len(devices)]
    if bad:
        raise ConfigError(
            f"parallel.{field_name}: indices {bad} are out of range for the {len(devices)} devices {list(devices)}"
        )
    return tuple(devices[i] for i in indices)


def resolve_placement(parallel: Optional[ParallelConfig], model: ModelConfig) -> Optional[Placement]:
    """The devices of every layer, or None for ``mode: none``. Raises ConfigError naming the field."""
    if parallel is None or parallel.mode == "none":
        return None
    if parallel.mode not in ("model", "hybrid"):
        raise ConfigError(f"parallel.mode: {parallel.mode!r} is not one of 'none', 'model', 'hybrid'")
    if parallel.mode == "hybrid" and model.input_feeding:
        raise ConfigError(
            "parallel.mode: 'hybrid' computes attention for all target positions at once after the bottom "
            "decoder layer, which input feeding forbids; set model.input_feeding: false"
        )
    if parallel.mode == "hybrid" and parallel.softmax_shards != 1:
        raise ConfigError(
            "parallel.softmax_shards: 'hybrid' runs the softmax data-parallel (each device a batch slice, "
            "the full vocabulary); set softmax_shards: 1 or use mode 'model'"
        )
    if parallel.softmax_shards < 1 or parallel.softmax_shards > model.vocab_size:
        raise ConfigError(
            f"parallel.softmax_shards: must be in [1, model.vocab_size], got {parallel.softmax_shards}"
        )
    if tf.distribute.has_strategy() and tf.distribute.get_strategy().num_replicas_in_sync > 1:
        raise ConfigError(
            f"parallel.mode: {parallel.mode!r} places one replica's layers on several devices and cannot be "
            "combined with a multi-replica tf.distribute strategy; use one or the other"
        )
    devices = resolve_devices(parallel)
    if not devices:
        raise ConfigError("parallel.devices: no local devices found")
    return Placement(
        mode=parallel.mode,
        devices=tuple(devices),
        encoder=_layer_devices(
            parallel.encoder_layer_devices, model.encoder_layers, devices, "encoder_layer_devices", "encoder_layers"
        ),
        decoder=_layer_devices(
            parallel.decoder_layer_devices, model.decoder_layers, devices, "decoder_layer_devices", "decoder_layers"
        ),
        softmax_shards=parallel.softmax_shards,
    )


# --------------------------------------------------------------------------------------
# Ops and their gradients on one device
# --------------------------------------------------------------------------------------
def placed(device: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with its forward ops *and its gradient ops* on ``device``.

    TensorFlow puts an op's gradient wherever its placer puts unassigned ops (the
    default device), not with the op, so a layer's backward pass would leave the
    layer's device. Here the gradient is built under the same ``tf.device`` from a
    tape recorded in the forward pass (no recomputation). ``fn`` takes only the
    float tensors gradients must reach (masks and flags go in by closure) and
    returns a tensor or a tuple of tensors.
    """

    @tf.custom_gradient
    def run(*args):
        with tf.device(device):
            with tf.GradientTape(persistent=True) as tape:
                tape.watch(args)
                result = fn(*args)
        flat = tf.nest.flatten(result)

        def gradient(*upstream, variables=None):
            variables = list(variables or ())
            upstream = [tf.zeros_like(r) if u is None else u for u, r in zip(upstream, flat)]
            with tf.device(device):
                grads = tape.gradient(
                    flat,
                    list(args) + variables,
                    output_gradients=upstream,
                    unconnected_gradients=tf.UnconnectedGradients.ZERO,
                )
            return grads[: len(args)], grads[len(args) :]

        return result, gradient

    return run


# --------------------------------------------------------------------------------------
# The wavefront
# --------------------------------------------------------------------------------------
class _LSTMStage:
    """Layer ``stack.cells[k]``: ``x^i = clip(m^i + x^(i-1), delta)`` from ``residual_start`` up (eq. 6, 10).

    Reads from below ``(x^(i-1)_t, [context_t])``, or, as the first stage of a
    wavefront, ``(projected_t, x^(i-1)_t, [context_t])`` with the input product of
    the whole sequence computed up front (as ``run_lstm`` does). Passes
    ``(x^i_t, [context_t])`` up.
    """

    def __init__(self, stack: ResidualLSTMStack, k: int, device: str, name: str, weights: WeightReader,
                 training, hoisted: bool):
        self.stack, self.k, self.device, self.name = stack, k, device, name
        self.cell = stack.cells[k]
        self.weights = weights
        self.training = training
        self.hoisted = hoisted
        self.units = self.cell.units
        self.record_shapes = ()

    def initial_state(self, batch, dtype):
        return tuple(self.cell.get_initial_state(batch_size=batch, dtype=dtype))

    def zeros_passed_up(self, below, batch, dtype):
        context = below[2:] if self.hoisted else below[1:]
        return (tf.zeros([batch, self.units], dtype),) + tuple(context)

    def step(self, below, mask_t, state):
        stack, k, cell, hoisted, training = self.stack, self.k, self.cell, self.hoisted, self.training
        weights = self.weights

        def layer_step(*args):
            if hoisted:
                projected, x_below, *rest = args
            else:
                x_below, *rest = args
            context = rest[0] if len(rest) == 3 else None
            c, m = rest[-2:]
            if not hoisted:
                projected = cell.project_inputs(stack.layer_input(k, x_below, context, training), weights)
            recur = lambda p, state: cell.recur(p, state, weights)  # noqa: E731
            output, (new_c, new_m) = masked_step(recur, projected, (c, m), mask_t)
            return stack.layer_output(k, output, x_below), new_c, new_m

        x, c, m = placed(self.device, layer_step)(*below, *state)
        context = below[2:] if hoisted else below[1:]
        return (x,) + tuple(context), (c, m), ()


class _BottomDecoderStage:
    """Decoder layer 1 and the attention of its step (fig. 1: attention runs with the bottom layer).

    Reads time step t of the decoder's ``bottom_inputs`` (with input feeding the embedded
    ``x_t``, which the step concatenates with its own last context; without, the input
    product of the whole target computed up front) and runs the decoder's ``bottom_step``.
    Passes ``(m^1_t, context_t)`` up and records the attention probabilities.
    """

    def __init__(self, decoder, memory: AttentionMemory, device: str, name: str, weights: WeightReader):
        self.decoder, self.device, self.name = decoder, device, name
        self.memory = memory
        self.weights = weights
        self.units = decoder.bottom_cell.units
        self.record_shapes = (tf.TensorShape([None, None]),)  # attention probs [batch, source]

    def zeros_passed_up(self, below, batch, dtype):
        return tf.zeros([batch, self.units], dtype), tf.zeros([batch, self.decoder.encoder_width], dtype)

    def initial_state(self, batch, dtype):
        return self.decoder.bottom_initial_state(batch, dtype)

    def step(self, below, mask_t, state):
        decoder, weights, source_mask = self.decoder, self.weights, self.memory.mask

        def bottom_step(inputs_t, keys, values, *layer_state):
            memory = AttentionMemory(keys, values, source_mask)
            outputs, new_state = decoder.bottom_step(inputs_t, layer_state, mask_t, memory, weights)
            return tuple(outputs) + tuple(new_state)  # (m^1_t, context_t, probs_t), then the new state

        results = placed(self.device, bottom_step)(below[0], self.memory.keys, self.memory.values, *state)
        output, context, probs = results[:3]
        return (output, context), tuple(results[3:]), (probs,)


def wavefront(stages: Sequence[Any], inputs: Sequence[tf.Tensor], mask: tf.Tensor):
    """Run ``stages`` (layers, bottom first) over time as a wavefront.

    ``inputs`` are [batch, time, ...] tensors; ``stages[0]`` reads their time step t.
    Returns (the top stage's first output [time, batch, units], per stage the
    [time, batch, ...] tensors it recorded).
    """
    layers = len(stages)
    batch, steps = tf.shape(mask)[0], tf.shape(mask)[1]
    dtype = inputs[0].dtype
    diagonals = tf.where(steps > 0, steps + layers - 1, 0)
    # One copy of every loop invariant on the device that reads it, not one per step.
    with tf.device(stages[0].device):
        inputs_tm = tuple(swap_batch_time(x) for x in inputs)
    masks_tm, states, passed = [], [], []
    for stage in stages:
        with tf.device(stage.device):
            masks_tm.append(time_major_mask(mask))
            states.append(stage.initial_state(batch, dtype))

    # What each stage passes up before it has processed anything: zeros of the right widths.
    with tf.device(stages[0].device):
        below = tuple(tf.zeros_like(x[0]) for x in inputs_tm)
    for stage in stages[:-1]:
        with tf.device(stage.device):
            below = stage.zeros_passed_up(below, batch, dtype)
            passed.append(below)

    def array(device, element_shape):
        with tf.device(device):
            return tf.TensorArray(dtype, size=diagonals, element_shape=element_shape)

    top_array = array(stages[-1].device, tf.TensorShape([None, stages[-1].units]))
    record_arrays = tuple(tuple(array(stage.device, shape) for shape in stage.record_shapes) for stage in stages)

    def body(k, states, passed, top_array, record_arrays):
        new_states, new_passed, new_records = [], [], []
        for l, stage in enumerate(stages):
            with tf.device(stage.device), tf.name_scope(stage.name):
                t = k - l
                index = tf.clip_by_value(t, 0, tf.maximum(steps - 1, 0))
                valid = tf.logical_and(t >= 0, t < steps)
                mask_t = tf.expand_dims(tf.logical_and(tf.gather(masks_tm[l], index), valid), 1)
                below = tuple(tf.gather(x, index) for x in inputs_tm) if l == 0 else passed[l - 1]
                up, state, records = stage.step(below, mask_t, states[l])
                new_states.append(state)
                if l < layers - 1:
                    new_passed.append(up)
                else:
                    top_array = top_array.write(k, up[0])
                new_records.append(tuple(a.write(k, r) for a, r in zip(record_arrays[l], records)))
        return k + 1, tuple(new_states), tuple(new_passed), top_array, tuple(new_records)

    _, _, _, top_array, record_arrays = tf.while_loop(
        lambda k, *_: k < diagonals,
        body,
        (tf.constant(0), tuple(states), tuple(passed), top_array, record_arrays),
    )
    # Stage l processed time t at diagonal t + l.
    with tf.device(stages[-1].device):
        top = top_array.stack()[layers - 1 : layers - 1 + steps]
    records = []
    for l, (stage, arrays) in enumerate(zip(stages, record_arrays)):
        with tf.device(stage.device):
            records.append(tuple(a.stack()[l : l + steps] for a in arrays))
    return top, records


def run_stack_wavefront(
    stack: ResidualLSTMStack,
    inputs: tf.Tensor,
    mask: tf.Tensor,
    devices: Sequence[str],
    weights: WeightReader,
    context: Optional[tf.Tensor] = None,
    training=None,
    name: str = "layer",
) -> tf.Tensor:
    """``stack(inputs, mask, context, weights)`` as a wavefront, layer k on ``devices[k]``: the top x^N.

    Stage names (for name scopes) are ``f"{name}_{stack.layer_number(k)}"``.
    """
    if stack.num_layers == 0:
        return inputs
    if len(devices) != stack.num_layers:
        raise ValueError(f"{len(devices)} devices for {stack.num_layers} layers")
    first = stack.cells[0]
    extra = (context,) if context is not None else ()

    def project(x, *ctx):  # layer input, dropout and input product of the whole sequence, as run_lstm
        return first.project_inputs(stack.layer_input(0, x, ctx[0] if ctx else None, training), weights)

    with tf.name_scope(f"{name}_{stack.layer_number(0)}"):
        projected = placed(devices[0], project)(inputs, *extra)
    stages = [
        _LSTMStage(stack, k, devices[k], f"{name}_{stack.layer_number(k)}", weights, training,
                   hoisted=(k == 0))
        for k in range(stack.num_layers)
    ]
    top, _ = wavefront(stages, (projected, inputs) + extra, mask)
    return swap_batch_time(top)


# --------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------
def _batch_slices(batch: tf.Tensor, parts: int) -> tf.Tensor:
    """Sizes of ``parts`` near-equal slices of the batch (some may be empty)."""
    bounds = [(batch * i) // parts for i in range(parts + 1)]
    return tf.stack([bounds[i + 1] - bounds[i] for i in range(parts)])


def encode(model, placement: Placement, source_ids: tf.Tensor, weights: WeightReader, recurrence: Recurrence,
           training=None) -> Tuple[tf.Tensor, tf.Tensor]:
    """Source ids -> (top encoder outputs [B, S, width], source mask): layer 1 (run by ``recurrence``),
    then a wavefront."""
    encoder, devices = model.encoder, placement.encoder
    mask = tf.not_equal(source_ids, PAD_ID)
    # Where the table lives (model.embeddings): with this layer, or a tied model's softmax kernel on the root.
    with tf.device(model.embeddings.source_device(placement)), tf.name_scope("source_embedding"):
        embedded = model.embed_source(source_ids, weights)
    with tf.device(devices[0]), tf.name_scope("encoder_layer_1"):
        # Bi-directional (fig. 3): it needs the whole source, so it cannot join the wavefront.
        bottom_layer = lambda x: encoder.bottom_layer(x, mask, weights, recurrence, training)  # noqa: E731
        bottom = placed(devices[0], bottom_layer)(embedded)
    top = run_stack_wavefront(encoder.upper, bottom, mask, devices[1:], weights, training=training,
                              name="encoder_layer")
    return top, mask


def _model_parallel_decoder(model, placement, embedded, mask, outputs, source_mask, weights, training):
    """Section 3.3: decoder layers 1..N in one wavefront, attention with the bottom layer."""
    decoder, devices = model.decoder, placement.decoder
    device = devices[0]
    with tf.name_scope("decoder_layer_1"):
        keys = placed(device, decoder.attention.project_keys)(outputs)
        with tf.device(device):
            values = tf.identity(outputs)
        first = placed(device, lambda e: decoder.bottom_inputs(e, weights, training))(embedded)
    memory = AttentionMemory(keys, values, source_mask)
    stages = [_BottomDecoderStage(decoder, memory, device, "decoder_layer_1", weights)]
    stages += [
        _LSTMStage(decoder.upper, k, devices[k + 1], f"decoder_layer_{k + 2}", weights, training,
                   hoisted=False)
        for k in range(decoder.upper.num_layers)
    ]
    top, records = wavefront(stages, (first,), mask)
    return swap_batch_time(top), swap_batch_time(records[0][0])


def _hybrid_decoder(model, placement, embedded, mask, outputs, source_mask, weights, recurrence, training):
    """Ono et al. (2019): bottom layer (run by ``recurrence``), attention data-parallel, upper layers as a
    wavefront."""
    decoder, devices = model.decoder, placement.devices
    with tf.name_scope("decoder_layer_1"):
        bottom = placed(
            placement.decoder[0],
            lambda e: decoder.bottom_layer(decoder.bottom_inputs(e, weights, training), mask, weights,
                                           recurrence),
        )(embedded)
    # The gathered bottom outputs and encoder outputs, split along the batch: each device attends for its slice.
    sizes = _batch_slices(tf.shape(bottom)[0], len(devices))
    slices = zip(
        tf.split(bottom, sizes, num=len(devices)),
        tf.split(outputs, sizes, num=len(devices)),
        tf.split(source_mask, sizes, num=len(devices)),
    )
    contexts, probs = [], []
    for i, (device, (queries, values, slice_mask)) in enumerate(zip(devices, slices)):

        def attend(queries, values, slice_mask=slice_mask):
            memory = decoder.attention.memory(values, slice_mask)
            return decoder.attention.attend(queries, memory)

        with tf.name_scope(f"attention_slice_{i}"):
            context, prob = placed(device, attend)(queries, values)
        contexts.append(context)
        probs.append(prob)
    with tf.device(placement.decoder[min(1, len(placement.decoder) - 1)]):
        contexts = tf.concat(contexts, axis=0)
    top = run_stack_wavefront(
        decoder.upper, bottom, mask, placement.decoder[1:], weights, context=contexts, training=training,
        name="decoder_layer",
    )
    return top, tf.concat(probs, axis=0)


def _vocabulary_sharded_logits(decoder, placement: Placement, top: tf.Tensor,
                               weights: WeightReader) -> List[tf.Tensor]:
    """Section 3.3: 'the softmax layer is also partitioned', slice s of the vocabulary on device s mod n."""
    devices = placement.softmax_shard_devices()
    if len(devices) == 1:
        with tf.name_scope("softmax_shard_0"):  # training=False: the dropout came before
            return [placed(devices[0], lambda x: decoder.logits(x, weights, training=False))(top)]
    vocab = decoder.config.vocab_size
    kernel_device = decoder.softmax_projection.kernel.device
    parts = []
    for s, device in enumerate(devices):
        ids = tf.range(vocab * s // len(devices), vocab * (s + 1) // len(devices))
        # The shard's columns of the one kernel variable (the checkpoint is unchanged), read where it lives.
        with tf.name_scope(f"softmax_kernel_slice_{s}"), tf.device(kernel_device):
            columns = decoder.softmax_columns(ids, weights)
        # The columns go in as arguments, so that their gradient reaches the kernel (see placed).
        read = tf.nest.flatten((columns.kernel, columns.bias))

        def shard_logits(x, *read, columns=columns):
            kernel, bias = tf.nest.pack_sequence_as((columns.kernel, columns.bias), list(read))
            return decoder.column_logits(x, columns._replace(kernel=kernel, bias=bias), weights)

        with tf.name_scope(f"softmax_shard_{s}"):
            parts.append(placed(device, shard_logits)(top, *read))
    return parts


def forward(model, source_ids, target_input_ids, weights: WeightReader, recurrence: Recurrence,
            training=None) -> Tuple[tf.Tensor, tf.Tensor]:
    """``GNMT.forward`` with ``model.placement``: (logits [B, T, V], attention probs [B, T, S]).

    ``recurrence`` runs the layers that are not part of a wavefront over time: encoder layer 1, and in the
    hybrid scheme the decoder's bottom layer."""
    placement: Placement = model.placement
    decoder = model.decoder
    source_ids = tf.convert_to_tensor(source_ids)
    target_input_ids = tf.convert_to_tensor(target_input_ids)
    outputs, source_mask = encode(model, placement, source_ids, weights, recurrence, training=training)
    mask = tf.not_equal(target_input_ids, PAD_ID)
    with tf.device(model.embeddings.target_device(placement)), tf.name_scope("target_embedding"):
        embedded = model.embed_target(target_input_ids, weights)
    if placement.mode == "model":
        top, probs = _model_parallel_decoder(model, placement, embedded, mask, outputs, source_mask, weights,
                                             training)
    else:
        top, probs = _hybrid_decoder(model, placement, embedded, mask, outputs, source_mask, weights, recurrence,
                                     training)
    with tf.name_scope("decoder_output"):
        top = placed(placement.decoder[-1], lambda x: decoder.top_output(x, training))(top)
    if placement.mode == "model":
        logits = tf.concat(_vocabulary_sharded_logits(decoder, placement, top, weights), axis=-1)
    else:
        # Data-parallel softmax: each device the full vocabulary for its slice of the batch.
        devices = placement.devices
        parts = tf.split(top, _batch_slices(tf.shape(top)[0], len(devices)), num=len(devices))
        logits = []
        for i, (device, part) in enumerate(zip(devices, parts)):
            with tf.name_scope(f"softmax_slice_{i}"):  # training=False: the dropout came before
                project = lambda x: decoder.logits(x, weights, training=False)  # noqa: E731
                logits.append(placed(device, project)(part))
        logits = tf.concat(logits, axis=0)
    return logits, probs
