"""int8 exports (section 6): eq. 12 weights inside the artifacts, size, int8 products, and BLEU against float.

BLEU is measured on the fixture model's test.tsv, held out from training and from the dev.tsv
on which the exporter checks every int8 export itself, so these tests do not repeat its check.
"""

import os
import re
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import INT8_BLEU_TOLERANCE
from export.exporters import ExportError, ExportRequest, SavedModelExporter, TFLiteExporter, directory_bytes, export
from gnmt_tf.metrics.bleu import corpus_bleu
from gnmt_tf.model_files import load_model_dir
from gnmt_tf.inference.translator import Translator


def numpy_eq12(kernel):
    """Eq. 12 for a Keras kernel [input, output]: one scale per output unit (column)."""
    scales = np.abs(kernel).max(axis=0)
    return np.round(kernel / scales * 127.0).astype(np.int8), scales


def read_pairs(path):
    with open(path, encoding="utf-8") as handle:
        return [line.rstrip("\n").split("\t") for line in handle if line.strip()]


def tflite_paths(int8_exports):
    _, paths = int8_exports
    if "tflite" not in paths:
        pytest.skip("ai_edge_litert (the TFLite interpreter) is not installed")
    return paths["tflite"]


@pytest.fixture(scope="module")
def float_model(trained_number_model):
    """The fixture model's best checkpoint as Keras loads it (model, tokenizer, config), loaded once for
    the tests that compare against it; they only read it."""
    model_dir, _ = trained_number_model
    return load_model_dir(model_dir)


@pytest.fixture(scope="module")
def float_baseline(trained_number_model, float_model):
    """Held-out sources, references and the float Keras model's BLEU on them.

    test.tsv, not the dev.tsv the exporter's BLEU gate reads: a measurement of its own, on
    sentences the gate never saw (and that training never saw).
    """
    model_dir, _ = trained_number_model
    pairs = read_pairs(os.path.join(model_dir, "test.tsv"))
    dev_sources = {source for source, _ in read_pairs(os.path.join(model_dir, "dev.tsv"))}
    assert len(pairs) == 100 and not dev_sources & {source for source, _ in pairs}
    sources, references = [p[0] for p in pairs], [p[1] for p in pairs]
    model, tokenizer, config = float_model
    translations = Translator(model, tokenizer, config.decoding).translate(sources)
    float_bleu = corpus_bleu([t.text for t in translations], references).score
    assert float_bleu > 80  # a model that really translates, so the comparison means something
    return sources, references, float_bleu


def saved_model_translations(path, sources):
    translate = tf.saved_model.load(path).signatures["serving_default"]
    return [t.decode() for t in translate(sentences=tf.constant(sources))["translations"].numpy()]


def matmul_input_types(path):
    """{(op, input dtype)} of every matrix product in a SavedModel's graph and functions."""
    from tensorflow.core.framework import types_pb2

    from export.serving_runtime import saved_model_nodes

    nodes = [node for graph_nodes in saved_model_nodes(path).values() for node in graph_nodes]
    return {(node.op, types_pb2.DataType.Name(node.attr["Ta" if "Ta" in node.attr else "T"].type))
            for node in nodes if "MatMul" in node.op}


@pytest.mark.parametrize("name", ["saved_model", "saved_model_int8_products"])
def test_saved_model_int8_translates_within_tolerance_of_float(name, int8_exports, float_baseline):
    _, paths = int8_exports
    sources, references, float_bleu = float_baseline
    int8_out = saved_model_translations(paths[name], sources)
    assert corpus_bleu(int8_out, references).score >= float_bleu - INT8_BLEU_TOLERANCE


def test_int8_products_run_int8_matmuls_and_the_default_does_not(int8_exports):
    """--int8-products int8 multiplies int8 by int8 (section 6); the default dequantizes and multiplies floats."""
    _, paths = int8_exports
    products = matmul_input_types(paths["saved_model_int8_products"])
    default = matmul_input_types(paths["saved_model"])
    assert ("BatchMatMulV3", "DT_INT8") in products
    assert not any(dtype == "DT_INT8" for _, dtype in default) and ("MatMul", "DT_FLOAT") in default


def test_tflite_int8_translates_within_tolerance_of_float(int8_exports, float_baseline):
    from export.tflite import TFLiteTranslator

    path = tflite_paths(int8_exports)
    sources, references, float_bleu = float_baseline
    translator = TFLiteTranslator(os.path.join(path, TFLiteExporter.MODEL_FILE))
    int8_out = [t.text for i in range(0, len(sources), 32) for t in translator.translate(sources[i : i + 32])]
    assert corpus_bleu(int8_out, references).score >= float_bleu - INT8_BLEU_TOLERANCE
    ops = open(os.path.join(path, TFLiteExporter.OPS_FILE), encoding="utf-8").read().split()
    assert not any(op.startswith("Flex") for op in ops)


def test_saved_model_stores_eq12_int8_weights(int8_exports, float_model):
    """The variables inside the SavedModel are eq. 12 of the trained kernels, recomputed in NumPy."""
    _, paths = int8_exports
    model, _, _ = float_model
    loaded = tf.saved_model.load(paths["saved_model"])
    variables = list(loaded.model_variables) + list(loaded.weight_transform.variables_int8)
    stored = {v.name: v.numpy() for v in variables}
    kernels = [v for v in model.variables if v.name.endswith(("/kernel:0", "/recurrent_kernel:0"))]
    kernels = [v for v in kernels if "attention" not in v.name]
    assert len(kernels) == 2 * 7 + 1  # 4 encoder cells (bottom: 2 directions), 3 decoder cells, softmax
    for variable in kernels:
        base = variable.name[: -len(":0")].replace("/", "_")
        codes, scales = stored[f"{base}_q:0"], stored[f"{base}_scale:0"]
        expected_codes, expected_scales = numpy_eq12(variable.numpy())
        assert codes.dtype == np.int8
        np.testing.assert_allclose(scales, expected_scales, rtol=1e-7)
        np.testing.assert_array_equal(codes, expected_codes)
        # The round trip: dequantized weights within half a step of the float ones.
        error = np.abs(codes * (scales / 127.0) - variable.numpy())
        assert np.all(error <= scales / 254.0 * (1 + 1e-5))
    # The float kernels it replaces are not in the artifact; the attention stays float.
    assert not any(name.endswith("/recurrent_kernel:0") for name in stored)
    assert any(stored[name].dtype == np.float32 for name in stored if "attention" in name)


def test_tflite_int8_weights_are_eq12_per_output_unit(int8_exports, float_model):
    """TFLite's dynamic-range weights: one scale per output row, codes equal to eq. 12 in NumPy."""
    from export.tflite import int8_weight_tensors

    model, _, _ = float_model
    with open(os.path.join(tflite_paths(int8_exports), TFLiteExporter.MODEL_FILE), "rb") as handle:
        tensors = int8_weight_tensors(handle.read())
    lstm = [v for v in model.variables if v.name.endswith(("/kernel:0", "/recurrent_kernel:0"))]
    lstm = [v for v in lstm if "attention" not in v.name and v.shape.num_elements() >= 1024]
    assert lstm
    for variable in lstm:
        rows = variable.numpy().T  # TFLite keeps FULLY_CONNECTED weights as [output, input]
        expected_codes, expected_scales = numpy_eq12(variable.numpy())
        candidates = [
            t for t in tensors
            if t["shape"] == list(rows.shape) and len(t["scales"]) == rows.shape[0] and t["quantized_dimension"] == 0
            and np.allclose(t["scales"] * 127.0, expected_scales, rtol=1e-6)
        ]
        assert candidates, f"no per-row int8 tensor for {variable.name}"
        difference = np.abs(candidates[0]["values"].astype(int) - expected_codes.T.astype(int))
        assert difference.max() <= 1  # TFLite rounds ties away from zero, NumPy to even
        assert (difference > 0).mean() < 1e-3


@pytest.fixture(scope="module")
def synthetic_artifacts(trained_number_model, tmp_path_factory):
    """Every export format, float and int8, of an untrained GNMT trained with dropout: {(format, quantize):
    directory}, and the model. (TFLite only where its interpreter is installed.)

    Two 320-unit layers a side, so that the weights outweigh the graph (the sizes' ratio is the
    weights'), and fewer layers are quicker to trace four times. Dropout 0.3, so that a dropout op
    left in a decoding graph would be in these artifacts.
    """
    import importlib.util

    from gnmt_tf.config import load_config
    from gnmt_tf.model_files import load_metadata
    from gnmt_tf.models.gnmt import GNMT

    model_dir, _ = trained_number_model
    config, tokenizer = load_metadata(model_dir)  # the fixture's wordpieces and decoding; not its weights
    model_config = load_config("tiny", {"model.units": 320, "model.attention_units": 64,
                                         "model.encoder_layers": 2, "model.decoder_layers": 2, "model.dropout": 0.3,
                                         "model.vocab_size": tokenizer.vocab_size}).model
    model = GNMT(model_config)
    model.build()
    base = tmp_path_factory.mktemp("synthetic_artifacts")
    directories = {}
    for exporter_class in (SavedModelExporter, TFLiteExporter):
        if exporter_class is TFLiteExporter and not importlib.util.find_spec("ai_edge_litert"):
            continue
        for quantize in ("none", "int8"):
            exporter = exporter_class(ExportRequest(model_dir="", output="", quantize=quantize))
            directory = str(base / f"{exporter.format_name}_{quantize}")
            exporter.write(exporter.module(model, tokenizer, config.decoding), directory)
            directories[exporter.format_name, quantize] = directory
    return directories, model


def test_int8_artifacts_are_at_least_3x_smaller(synthetic_artifacts):
    """Whole artifacts on disk, float vs int8, for a model whose weights outweigh its graph."""
    directories, _ = synthetic_artifacts
    if ("tflite", "none") not in directories:
        pytest.skip("ai_edge_litert (the TFLite interpreter) is not installed")
    sizes = {key: directory_bytes(directory) for key, directory in directories.items()}
    for format_name in ("saved_model", "tflite"):
        ratio = sizes[format_name, "none"] / sizes[format_name, "int8"]
        assert ratio >= 3.0, f"{format_name}: float {sizes[format_name, 'none']} B, int8 {sizes[format_name, 'int8']} B"


# Op names of random number generation, as TensorFlow (RandomUniform, StatelessRandomUniformV2, ...) and
# TFLite (RANDOM_UNIFORM, MULTINOMIAL, ...) name them: what a dropout left in a graph adds.
RANDOM_OP = re.compile(r"random|multinomial", re.IGNORECASE)


def test_dropout_is_in_training_graphs_and_in_no_export(synthetic_artifacts):
    """Dropout (section 8.3) regularizes training only: a training forward pass of the model holds random
    ops, and no export of it (SavedModel or TFLite, float or int8: every graph and function a loader
    instantiates, every op of every subgraph) holds any."""
    from export.serving_runtime import saved_model_nodes
    from gnmt_tf.vocab import BOS_ID, EOS_ID

    directories, model = synthetic_artifacts
    source, target = tf.constant([[5, 6, EOS_ID]]), tf.constant([[BOS_ID, 7, 8]])
    graph = tf.function(lambda x, y: model((x, y), training=True)).get_concrete_function(source, target).graph
    training_ops = {node.op for node in graph.as_graph_def().node}
    training_ops |= {node.op for function in graph.as_graph_def().library.function for node in function.node_def}
    assert any(RANDOM_OP.search(op) for op in training_ops), sorted(training_ops)  # the scan finds dropout

    assert {("saved_model", "none"), ("saved_model", "int8")} <= set(directories)
    for (format_name, quantize), directory in directories.items():
        if format_name == "saved_model":
            ops = {node.op for nodes in saved_model_nodes(directory).values() for node in nodes}
        else:
            with open(os.path.join(directory, TFLiteExporter.OPS_FILE), encoding="utf-8") as handle:
                ops = set(handle.read().split())
        assert len(ops) > 20 and not [op for op in ops if RANDOM_OP.search(op)], (format_name, quantize)


def written_as(version_dir):
    """A stand-in for ``Exporter.write`` that stages a copy of an export already made by the same exporter
    (the fixture's, checked there), for a test of what the exporter does after writing: a write traces
    and saves the whole translator again."""
    import shutil

    return lambda self, translator, directory: shutil.copytree(version_dir, directory)


def test_int8_bleu_check_rejects_a_drop_beyond_the_tolerance(int8_exports, tmp_path, monkeypatch):
    """The exporter's BLEU gate fails loudly and leaves nothing behind when int8 loses too much."""
    model_dir, paths = int8_exports
    logs = []
    monkeypatch.setattr(SavedModelExporter, "write", written_as(paths["saved_model"]))  # the int8 SavedModel
    # Make the artifact translate badly: every translation loses its last word.
    original = SavedModelExporter.translate
    monkeypatch.setattr(SavedModelExporter, "translate",
                        lambda self, d, s: [" ".join(t.split()[:-1]) for t in original(self, d, s)])
    # 20 dev sentences: a drop of a word in each is tens of BLEU on any number of them.
    request = ExportRequest(model_dir=model_dir, output=str(tmp_path / "m"), quantize="int8", bleu_sentences=20,
                            log=logs.append)
    with pytest.raises(ExportError, match=r"the int8 saved_model loses .* BLEU on 20 dev sentences .* more than "
                                          r"the tolerance 0.5"):
        export(request, "saved_model")
    assert os.listdir(tmp_path / "m") == []


def test_bad_int8_requests_fail_clearly(trained_number_model, tmp_path, capsys, monkeypatch):
    from export.__main__ import main as export_main

    model_dir, _ = trained_number_model
    # A usage error ends before anything is loaded: checked in-process.
    code = export_main(["--model-dir", model_dir, "--output", str(tmp_path / "x"), "--format", "tflite", "--xla"])
    assert code == 2 and "--xla applies to --format saved_model only" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "x")
    with pytest.raises(ExportError, match="unknown quantization 'int4'"):
        export(ExportRequest(model_dir=model_dir, output=str(tmp_path / "y"), quantize="int4"), "saved_model")
    # No dev split kept with the model: nothing to check int8 BLEU against, found before anything is written.
    monkeypatch.setattr(SavedModelExporter, "write", lambda *args: pytest.fail("wrote an export it cannot check"))
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in os.listdir(model_dir):
        if name != "dev.tsv":
            source = os.path.join(model_dir, name)
            os.symlink(source, bare / name)
    with pytest.raises(ExportError, match="has no dev.tsv to check the int8 export's BLEU"):
        export(ExportRequest(model_dir=str(bare), output=str(tmp_path / "z"), quantize="int8", log=lambda m: None),
               "saved_model")
    assert not os.path.exists(tmp_path / "z")


@pytest.mark.parametrize("format_name", ["saved_model", "tflite"])
def test_the_command_refuses_an_int8_export_of_a_checkpoint_trained_to_another_delta(
        format_name, trained_number_model, tmp_path):
    """Section 6's int8 ranges hold at the final delta: python -m export --quantize int8 of a checkpoint
    saved mid-anneal (delta 4.25 here) fails with one error line naming both deltas, and writes nothing.
    (The same refusal through the Python API, after a real run stopped mid-anneal: tests/training.)"""
    import shutil

    from gnmt_tf import model_files
    from helpers import run_in_process

    model_dir, _ = trained_number_model
    mid_anneal = tmp_path / "mid_anneal"
    mid_anneal.mkdir()
    for name in (model_files.CONFIG_FILE, model_files.WORDPIECES_FILE, model_files.DEV_FILE):
        shutil.copy(os.path.join(model_dir, name), mid_anneal)
    model, _, _ = load_model_dir(model_dir)
    model.set_clip_delta(4.25)
    tf.train.Checkpoint(model=model).save(os.path.join(model_files.checkpoint_dir(str(mid_anneal)), "ckpt"))
    output = tmp_path / "gnmt"
    result = run_in_process([sys.executable, "-m", "export", "--model-dir", str(mid_anneal), "--output",
                             str(output), "--format", format_name, "--quantize", "int8"])
    assert result.returncode == 1, result.stderr[-2000:]
    assert "writing" not in result.stdout  # refused before any work (stdout: the load's delta warning)
    [error] = result.stderr.splitlines()
    assert error.startswith(f"error: refusing an int8 export: the best checkpoint of {mid_anneal} was trained "
                            f"to delta = 4.25, not the final delta = 1"), error
    assert not output.exists()
