"""Model parallelism (section 3.3) and the hybrid scheme (Ono et al. 2019): gnmt_tf.parallel.model_parallel.

The two-device checks need two logical CPUs, which must be configured before
TensorFlow initializes; this process has already initialized it, so they run in
one subprocess (``TWO_DEVICE_SCRIPT``) that prints its findings as JSON.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf.config import ConfigError, ParallelConfig
from gnmt_tf.models.gnmt import GNMT
from gnmt_tf.parallel.model_parallel import resolve_placement, run_stack_wavefront
from gnmt_tf.layers.stack import ResidualLSTMStack
from gnmt_tf.layers.weights import FLOAT_READER, WeightReader
from gnmt_tf.quantization.weights import FakeQuantizedWeights
from helpers import ROOT, copy_task, tiny_model_config

CPU0 = "/device:CPU:0"

# ---------------------------------------------------------------------------------------------
# In-process: one device
# ---------------------------------------------------------------------------------------------


def test_wavefront_equals_residual_stack_with_masks(rng):
    """The diagonal loop computes what ResidualLSTMStack computes: outputs and gradients."""
    stack = ResidualLSTMStack(
        num_layers=3, units=8, first_layer=2, residual_start=3, context_units=4, clip_delta=None, initial_delta=1.5
    )
    stack.build(tf.TensorShape([None, None, 8]))
    inputs = tf.constant(rng.normal(size=(4, 6, 8)), tf.float32)
    context = tf.constant(rng.normal(size=(4, 6, 4)), tf.float32)
    mask = tf.constant(np.arange(6)[None, :] < np.array([6, 2, 4, 1])[:, None])  # right-padded, unequal

    weights = tf.constant(rng.normal(size=(4, 6, 8)), tf.float32)
    with tf.GradientTape(persistent=True) as tape:  # eagerly; the subprocess below checks the graph path
        tape.watch([inputs, context])
        expected = stack(inputs, mask=mask, context=context)
        got = run_stack_wavefront(stack, inputs, mask, [CPU0] * 3, FLOAT_READER, context=context)
        loss_expected = tf.reduce_sum(expected * weights)
        loss_got = tf.reduce_sum(got * weights)
    sources = [inputs, context] + stack.trainable_variables
    grads_expected, grads_got = tape.gradient(loss_expected, sources), tape.gradient(loss_got, sources)
    np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    assert np.abs(expected.numpy()).max() > 0.1  # not trivially zero
    for g_got, g_expected in zip(grads_got, grads_expected):
        np.testing.assert_allclose(g_got.numpy(), g_expected.numpy(), rtol=1e-5, atol=1e-6)


def test_model_mode_with_input_feeding_and_uneven_softmax_shards_matches(rng):
    """Input feeding (the bottom stage keeps its last context) and 64 words in 3 shards."""
    config = tiny_model_config(input_feeding=True)
    source, target_in, _ = copy_task(rng, 4, config.vocab_size, min_len=1, max_len=5)
    base = GNMT(config)
    base.build()
    placed = GNMT(config, parallel=ParallelConfig(mode="model", devices=[CPU0, CPU0], softmax_shards=3))
    placed.build()
    placed.set_weights(base.get_weights())
    logits, probs = base.forward(source, target_in)
    placed_logits, placed_probs = placed.forward(source, target_in)
    np.testing.assert_allclose(placed_logits.numpy(), logits.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(placed_probs.numpy(), probs.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode, tied_embeddings", [("model", False), ("hybrid", False), ("model", True)],
                         ids=["model", "hybrid", "model_tied_embeddings"])
def test_placed_layers_and_sharded_softmax_read_their_weights_through_the_reader(rng, mode, tied_embeddings):
    """Fake-quantized kernels (every LSTM cell and the softmax): the placed model computes with them what
    one device computes with them, the vocabulary-sharded softmax included, and not the float numbers.
    With tied embeddings the lookups read the softmax kernel where it lives, fake-quantized too."""
    config = tiny_model_config(input_feeding=False, init_scale=0.5,  # large weights: visible rounding
                               tied_embeddings=tied_embeddings)
    source, target_in, _ = copy_task(rng, 4, config.vocab_size, min_len=1, max_len=5)
    base = GNMT(config)
    base.build()
    shards = 3 if mode == "model" else 1
    placed = GNMT(config, parallel=ParallelConfig(mode=mode, devices=[CPU0, CPU0], softmax_shards=shards))
    placed.build()
    placed.set_weights(base.get_weights())
    float_logits, _ = base.forward(source, target_in)
    logits, probs = base.forward(source, target_in, weights=WeightReader(FakeQuantizedWeights(base)))
    placed_weights = WeightReader(FakeQuantizedWeights(placed))
    placed_logits, placed_probs = placed.forward(source, target_in, weights=placed_weights)
    assert np.abs(logits.numpy() - float_logits.numpy()).max() > 1e-3  # the rounding shows
    np.testing.assert_allclose(placed_logits.numpy(), logits.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(placed_probs.numpy(), probs.numpy(), rtol=1e-5, atol=1e-6)


def test_placement_is_not_architecture():
    config = tiny_model_config()
    assert GNMT(config, parallel=ParallelConfig()).placement is None  # mode none: the default path
    default = GNMT(config, name="gnmt")
    default.build()
    placed = GNMT(config, parallel=ParallelConfig(mode="hybrid", devices=[CPU0]), name="gnmt")
    placed.build()
    assert placed.placement.encoder == (tf.config.list_logical_devices("CPU")[0].name,) * 3
    assert placed.get_config() == default.get_config()
    assert [w.name for w in placed.weights] == [w.name for w in default.weights]
    assert [w.shape for w in placed.weights] == [w.shape for w in default.weights]


@pytest.mark.parametrize(
    "parallel, field",
    [
        (ParallelConfig(mode="model", devices=["/device:CPU:7"]), "parallel.devices"),
        (ParallelConfig(mode="model", devices=["CPU"]), "parallel.devices"),
        (ParallelConfig(mode="model", encoder_layer_devices=[0, 0]), "parallel.encoder_layer_devices"),
        (ParallelConfig(mode="hybrid", devices=[CPU0], decoder_layer_devices=[0, 0, 1]), "parallel.decoder_layer_devices"),
        (ParallelConfig(mode="hybrid", softmax_shards=2), "parallel.softmax_shards"),
    ],
)
def test_clear_errors(parallel, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        resolve_placement(parallel, tiny_model_config())
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        GNMT(tiny_model_config(), parallel=parallel)


# ---------------------------------------------------------------------------------------------
# Subprocess: two logical CPUs
# ---------------------------------------------------------------------------------------------
TWO_DEVICE_SCRIPT = r'''
import json, os, re, sys, threading, time

watchdog = threading.Timer(float(sys.argv[1]), lambda: os._exit(3))  # always ends by itself
watchdog.daemon = True
watchdog.start()

import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
# Grappler off only to keep the test short: devices are the placer's choice either way.
tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})

import numpy as np
from tensorflow.python.eager import context as eager_context

from gnmt_tf.config import ParallelConfig
from gnmt_tf.models.losses import SequenceCrossEntropy
from gnmt_tf.models.gnmt import GNMT
from helpers import copy_task, tiny_model_config

config = tiny_model_config()
source, target_in, target_out = copy_task(np.random.default_rng(0), 5, config.vocab_size, min_len=1, max_len=6)
loss_fn = SequenceCrossEntropy()
MARKER = re.compile(r"(encoder_layer_\d+|decoder_layer_\d+|attention_slice_\d+|softmax_shard_\d+|softmax_slice_\d+)(?!\d)")
PRODUCTS = ("MatMul",)


def training_step(model):
    # Without AutoGraph, as GNMT.train_step is traced in training: the layers' loops and branches on
    # tensors are tf.while_loop / tf.cond already, and converting their source would only add to the trace.
    @tf.function(autograph=False)
    def step(source, target_in, target_out):
        with tf.GradientTape() as tape:
            logits, probs = model.forward(source, target_in, training=True)
            loss = loss_fn(target_out, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        return logits, probs, [tf.convert_to_tensor(g) for g in grads]
    return step


def index(device):
    return tf.DeviceSpec.from_string(device).device_index if device else None


def compare(got, expected):
    try:
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        return None
    except AssertionError as error:
        return str(error)[:500]


base = GNMT(config)
base.build()
# The one-device reference eagerly: a traced graph of it would cost a third tracing of the model.
with tf.GradientTape() as tape:
    ref_logits, ref_probs = base.forward(source, target_in, training=True)
    ref_loss = loss_fn(target_out, ref_logits)
ref_grads = [tf.convert_to_tensor(g).numpy() for g in tape.gradient(ref_loss, base.trainable_variables)]
ref_logits, ref_probs = ref_logits.numpy(), ref_probs.numpy()

CASES = {
    "model": dict(mode="model", encoder=[0, 0, 1], decoder=[0, 1, 1], softmax_shards=2),
    "hybrid": dict(mode="hybrid", encoder=[1, 1, 0], decoder=[1, 0, 0], softmax_shards=1),
}
started = time.time()
results = {"lengths": (source != 0).sum(1).tolist(), "target_lengths": (target_in != 0).sum(1).tolist()}
for name, case in CASES.items():
    parallel = ParallelConfig(
        mode=case["mode"], devices=["/device:CPU:0", "/device:CPU:1"], encoder_layer_devices=case["encoder"],
        decoder_layer_devices=case["decoder"], softmax_shards=case["softmax_shards"],
    )
    model = GNMT(config, parallel=parallel)
    model.build()
    model.set_weights(base.get_weights())
    enc, dec = case["encoder"], case["decoder"]

    # Where each layer's ops must run.
    expected = {f"encoder_layer_{i + 1}": d for i, d in enumerate(enc)}
    expected.update({f"decoder_layer_{i + 1}": d for i, d in enumerate(dec)})
    if name == "model":
        expected.update({"softmax_shard_0": 0, "softmax_shard_1": 1})
    else:
        expected.update({"attention_slice_0": 0, "attention_slice_1": 1, "softmax_slice_0": 0, "softmax_slice_1": 1})

    # Where each layer's weights must live.
    layers = [(model.source_embedding, enc[0]), (model.encoder.forward_cell, enc[0]), (model.encoder.backward_cell, enc[0])]
    layers += [(cell, enc[k + 1]) for k, cell in enumerate(model.encoder.upper.cells)]
    layers += [(model.target_embedding, dec[0]), (model.decoder.bottom_cell, dec[0])]
    layers += [(cell, dec[k + 1]) for k, cell in enumerate(model.decoder.upper.cells)]
    layers += [(model.decoder.attention, dec[0] if name == "model" else 0), (model.decoder.softmax_projection, 0)]
    variables = {w.name: [index(w.device), d] for layer, d in layers for w in layer.trainable_weights}

    # (a) the traced graph (forward and gradient, every nested function): every op of a layer
    # that carries a device carries the layer's device.
    step = training_step(model)
    eager_context.enable_run_metadata()  # before the function is instantiated
    graph = step.get_concrete_function(source, target_in, target_out).graph.as_graph_def()
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    traced = {}
    for node in nodes:
        found = MARKER.findall(node.name)
        if found and node.device:
            counts = traced.setdefault(found[-1], {})
            counts[str(index(node.device))] = counts.get(str(index(node.device)), 0) + 1

    # ... and at run time (after TensorFlow's placer and partitioning): every matrix product of a
    # layer, forward and backward, ran on the layer's device.
    logits, probs, grads = step(source, target_in, target_out)
    metadata = eager_context.export_run_metadata()
    eager_context.disable_run_metadata()
    executed = {}
    for function_graph in metadata.function_graphs:
        for partition in function_graph.partition_graphs:
            for node in list(partition.node) + [n for f in partition.library.function for n in f.node_def]:
                found = MARKER.findall(node.name)
                if found and any(p in node.op for p in PRODUCTS):  # MatMul, BatchMatMulV2, _MklMatMul, ...
                    kind = "backward" if "grad" in node.name.lower() else "forward"
                    key = f"{index(node.device)}/{kind}"
                    counts = executed.setdefault(found[-1], {})
                    counts[key] = counts.get(key, 0) + 1

    # (b) the same numbers as one device with the same weights.
    results[name] = {
        "expected": expected,
        "variables": variables,
        "traced": traced,
        "executed": executed,
        "logits": compare(logits.numpy(), ref_logits),
        "probs": compare(probs.numpy(), ref_probs),
        "grads": [compare(g.numpy(), r) for g, r in zip(grads, ref_grads)],
        "max_logit_diff": float(np.abs(logits.numpy() - ref_logits).max()),
        "max_grad_diff": float(max(np.abs(g.numpy() - r).max() for g, r in zip(grads, ref_grads))),
        "seconds": round(time.time() - started, 1),
    }
print(json.dumps(results))
'''


@pytest.fixture(scope="module")
def two_devices():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]), TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, "-c", TWO_DEVICE_SCRIPT, "150"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=180
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["model", "hybrid"])
def test_layers_and_weights_are_on_their_devices(two_devices, mode):
    result = two_devices[mode]
    for name, (device, wanted) in result["variables"].items():
        assert device == wanted, f"{name} is on CPU:{device}, configured CPU:{wanted}"
    for marker, wanted in result["expected"].items():
        traced = result["traced"].get(marker, {})
        assert traced.get(str(wanted), 0) > 0, f"no op of {marker} was placed: {traced}"
        assert set(traced) == {str(wanted)}, f"{marker}: ops placed on {traced}, configured CPU:{wanted}"
        executed = result["executed"].get(marker, {})
        assert executed.get(f"{wanted}/forward", 0) > 0, f"{marker}: products ran on {executed}"
        assert executed.get(f"{wanted}/backward", 0) > 0, f"{marker}: gradient products ran on {executed}"
        assert all(key.startswith(f"{wanted}/") for key in executed), f"{marker}: products ran on {executed}"


@pytest.mark.parametrize("mode", ["model", "hybrid"])
def test_two_device_outputs_and_gradients_equal_one_device(two_devices, mode):
    result = two_devices[mode]
    assert len(set(two_devices["lengths"])) > 1 and len(set(two_devices["target_lengths"])) > 1  # padded batch
    assert result["logits"] is None, result["logits"]
    assert result["probs"] is None, result["probs"]
    failures = [message for message in result["grads"] if message is not None]
    assert not failures, failures[0]
