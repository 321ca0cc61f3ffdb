"""The SavedModel export: TF Serving layout, in-graph translation, loading without gnmt_tf, bad exports."""

import json
import os
import subprocess
import sys

import pytest

from export.exporters import ExportError, ExportRequest, export, next_version
from helpers import ROOT, run_in_process

ENV = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
SENTENCES = ["three one four", "", "nine", "zero zero seven five two one", "eight six"]

# What TF Serving does: only TensorFlow and the tensorflow-text ops, no gnmt_tf.
LOAD_AND_TRANSLATE = """
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the wordpiece ops
loaded = tf.saved_model.load(sys.argv[1])
sentences = json.loads(sys.argv[2])
out = loaded.signatures["serving_default"](sentences=tf.constant(sentences))
nbest = loaded.signatures["translate_nbest"](sentences=tf.constant(sentences), alpha=tf.constant(0.2),
                                              beta=tf.constant(0.2), beamsize=tf.constant(3.0))
print(json.dumps({
    "translations": [t.decode() for t in out["translations"].numpy()],
    "scores": out["scores"].numpy().tolist(),
    "signatures": sorted(loaded.signatures),
    "nbest_shape": nbest["attention"].shape.as_list(),
    "gnmt_tf_imported": any(name.startswith("gnmt_tf") for name in sys.modules),
}))
"""


def run(args, **kwargs):
    return subprocess.run([sys.executable, *args], env=ENV, capture_output=True, text=True, timeout=600, **kwargs)


def export_command(*args):
    """``python -m export ARGS`` run in this process (a usage error or an export: the command's own work)."""
    return run_in_process([sys.executable, "-m", "export", *args])


@pytest.fixture(scope="module")
def exported(trained_number_model, exported_number_model):
    """The session's export, made by ``python -m export`` with its checks (tests/conftest.py): model dir, base path."""
    model_dir, _ = trained_number_model
    return model_dir, os.path.dirname(exported_number_model)


def test_layout_and_fresh_process_without_gnmt_tf(exported):
    model_dir, base = exported
    assert sorted(os.listdir(base)) == ["1"]  # no staging directory left behind
    assert os.path.exists(os.path.join(base, "1", "saved_model.pb"))
    loaded = run(["-c", LOAD_AND_TRANSLATE, os.path.join(base, "1"), json.dumps(SENTENCES)])
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    out = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert not out["gnmt_tf_imported"]
    assert out["signatures"] == ["serving_default", "translate_nbest", "translate_with_options"]
    assert out["nbest_shape"][0] == len(SENTENCES)
    # The same strings as python -m gnmt_tf.translate on the same model (run in this process).
    cli = run_in_process([sys.executable, "-m", "gnmt_tf.translate", "--model-dir", model_dir],
                         "\n".join(SENTENCES) + "\n")
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert out["translations"] == cli.stdout.split("\n")[: len(SENTENCES)]
    assert out["translations"][0] == "trois un quatre" and out["translations"][1] == ""


def test_next_version_and_existing_version(exported, tmp_path):
    from conftest import copy_version

    model_dir, shared_base = exported
    base = copy_version(os.path.join(shared_base, "1"), str(tmp_path / "gnmt"))  # the shared one stays as it is
    assert next_version(base) == 2
    logs = []
    target = export(ExportRequest(model_dir=model_dir, output=base, log=logs.append), "saved_model")
    assert target == os.path.join(base, "2") and os.path.isdir(target)
    with pytest.raises(ExportError, match="already exists; pass another --version \\(next free: 3\\)"):
        export(ExportRequest(model_dir=model_dir, output=base, version=2, log=logs.append), "saved_model")
    assert sorted(os.listdir(base)) == ["1", "2"]


def test_bad_exports_fail_clearly(trained_number_model, tmp_path):
    model_dir, _ = trained_number_model
    unknown = export_command("--model-dir", model_dir, "--output", str(tmp_path / "x"), "--format", "onnx")
    assert unknown.returncode == 2 and "unknown format 'onnx'" in unknown.stderr
    empty = tmp_path / "no_checkpoint"
    empty.mkdir()
    for name in ("config.yaml", "wordpieces.txt"):
        with open(os.path.join(model_dir, name), encoding="utf-8") as src:
            (empty / name).write_text(src.read(), encoding="utf-8")
    missing = export_command("--model-dir", str(empty), "--output", str(tmp_path / "y"), "--format", "saved_model")
    assert missing.returncode == 2 and "has no checkpoint" in missing.stderr  # the model directory: a usage error
    assert not (tmp_path / "y").exists() or not os.listdir(tmp_path / "y")


def test_tflite_export_through_the_cli(trained_number_model, tmp_path):
    pytest.importorskip("ai_edge_litert")
    model_dir, _ = trained_number_model
    base = str(tmp_path / "gnmt_tflite")
    result = export_command("--model-dir", model_dir, "--output", base, "--format", "tflite")
    assert result.returncode == 0, result.stderr[-3000:]
    version = os.path.join(base, "1")
    assert sorted(os.listdir(version)) == ["export.json", "translator.ops.txt", "translator.tflite"]
    ops = open(os.path.join(version, "translator.ops.txt"), encoding="utf-8").read().split()
    assert "WHILE" in ops and not any(op.startswith("Flex") for op in ops)
    from export.tflite import TFLiteTranslator

    translations, _ = TFLiteTranslator(os.path.join(version, "translator.tflite")).translate(SENTENCES)
    assert translations[0] == "trois un quatre" and translations[1] == ""


def test_warmup_records_replay_through_the_saved_model(exported):
    """assets.extra/tf_serving_warmup_requests: PredictionLog records that the SavedModel answers."""
    import tensorflow as tf

    from export.warmup import read_warmup_requests, warmup_path

    _, base = exported
    version = os.path.join(base, "1")
    assert os.path.exists(warmup_path(version))
    requests = read_warmup_requests(version)
    assert {r.model_spec.signature_name for r in requests} == {
        "serving_default", "translate_with_options", "translate_nbest"}
    assert all(r.model_spec.name == "gnmt" for r in requests)
    loaded = tf.saved_model.load(version)
    for request in requests:
        signature = loaded.signatures[request.model_spec.signature_name]
        inputs = {name: tf.constant(tf.make_ndarray(proto)) for name, proto in request.inputs.items()}
        outputs = signature(**inputs)
        assert outputs["translations"].shape[0] == inputs["sentences"].shape[0] > 0
    assert max(len(tf.make_ndarray(r.inputs["sentences"])) for r in requests) > 1  # a batch, not only one
