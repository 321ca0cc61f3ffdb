"""The SavedModel export: TF Serving layout, in-graph translation, loading without gnmt_tf, bad exports."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from export.exporters import EXPORTERS, ExportError, Exporter, ExportRequest, export, next_version
from gnmt_tf import model_files
from helpers import ROOT, run_in_process

pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test

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


@pytest.fixture(scope="module")
def loaded(exported_number_model):
    """The session's export loaded in this process, once for the tests that call its signatures here."""
    import tensorflow as tf

    return tf.saved_model.load(exported_number_model)


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


class MarkerExporter(Exporter):
    """An artifact format of one small file, translated by appending "!" to each sentence: the export's
    version, staging and check logic without a TensorFlow artifact (which takes tens of seconds)."""

    format_name = "marker"

    def module(self, model, tokenizer, decoding, shortlist=None, text=None):
        return None

    def write(self, translator, directory):
        os.makedirs(directory)
        with open(os.path.join(directory, "artifact.txt"), "w", encoding="utf-8") as handle:
            handle.write("written\n")

    def translate(self, directory, sentences, switch=None):
        assert os.path.exists(os.path.join(directory, "artifact.txt"))  # the staged artifact, before the move
        return [f"{sentence}!" for sentence in sentences]


class ExclaimingTranslator:
    """Stands in for the Keras model's translator in the export's check: it translates as MarkerExporter."""

    def __init__(self, *args, **kwargs):
        pass

    def translate(self, sentences, **overrides):
        from gnmt_tf.inference.results import Translation

        return [Translation(f"{sentence}!") for sentence in sentences]


def test_next_version_and_existing_version(trained_number_model, tmp_path, monkeypatch):
    model_dir, _ = trained_number_model
    monkeypatch.setitem(EXPORTERS, "marker", MarkerExporter)
    monkeypatch.setattr("gnmt_tf.inference.translator.Translator", ExclaimingTranslator)
    base = tmp_path / "gnmt"
    assert next_version(str(base)) == 1  # no base path yet
    for name in ("1", "3", "notes", ".tmp-9-123"):  # versions are the numeric names only
        (base / name).mkdir(parents=True)
    (base / "12.txt").write_text("not a version")
    assert next_version(str(base)) == 4

    def export_marker(**options):
        request = ExportRequest(model_dir=model_dir, output=str(base), log=lambda m: None, **options)
        return export(request, "marker")

    target = export_marker()
    assert target == str(base / "4") and sorted(os.listdir(target)) == ["artifact.txt", "export.json"]
    assert export_marker(version=2) == str(base / "2")  # a free number below the highest is taken as given
    # An existing version is refused before anything is loaded, naming the next free one.
    loads = []
    real_load = model_files.load_checkpoint  # what every model load reads the weights through
    monkeypatch.setattr("gnmt_tf.model_files.load_checkpoint",
                        lambda *args, **kwargs: loads.append(args) or real_load(*args, **kwargs))
    with pytest.raises(ExportError, match="4 already exists; pass another --version \\(next free: 5\\)"):
        export_marker(version=4)
    assert loads == []
    assert export_marker() == str(base / "5") and len(loads) == 1
    # Every export went through a staging directory that is gone: only the old hidden one is left.
    assert sorted(os.listdir(base)) == [".tmp-9-123", "1", "12.txt", "2", "3", "4", "5", "notes"]


def test_an_export_that_translates_differently_is_refused_leaving_nothing(trained_number_model, tmp_path,
                                                                          monkeypatch):
    """python -m export checks that the artifact translates like the Keras model (the real Translator here);
    one that does not is refused with one error line, and no version or staging directory is left."""
    model_dir, _ = trained_number_model
    monkeypatch.setitem(EXPORTERS, "marker", MarkerExporter)
    base = tmp_path / "gnmt"
    result = export_command("--model-dir", model_dir, "--output", str(base), "--format", "marker")
    assert result.returncode == 1
    [error] = result.stderr.splitlines()
    first = model_files.read_dev_split(model_dir)[0][0]  # the first of the check sentences
    assert error.startswith("error: the exported marker translates 10 of 10 check sentences differently "
                            f"from the model: {first!r}: model "), error
    assert f" vs export {first + '!'!r}" in error
    assert not base.exists() or os.listdir(base) == []


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


def test_tflite_export_through_the_cli_translates_as_the_saved_model(exported, loaded, tmp_path):
    """The fixture model's TFLite export against its SavedModel, on 20 held-out sentences and the edge
    cases: the same translations, and the same eq. 14 scores up to float32 rounding."""
    pytest.importorskip("ai_edge_litert")
    import tensorflow as tf

    model_dir, _ = exported
    base = str(tmp_path / "gnmt_tflite")
    result = export_command("--model-dir", model_dir, "--output", base, "--format", "tflite")
    assert result.returncode == 0, result.stderr[-3000:]
    version = os.path.join(base, "1")
    assert sorted(os.listdir(version)) == ["export.json", "translator.ops.txt", "translator.tflite"]
    ops = open(os.path.join(version, "translator.ops.txt"), encoding="utf-8").read().split()
    assert "WHILE" in ops and not any(op.startswith("Flex") for op in ops)
    from export.tflite import TFLiteTranslator

    with open(os.path.join(model_dir, "test.tsv"), encoding="utf-8") as handle:
        held_out = [line.split("\t")[0] for line in handle][:20]
    sentences = SENTENCES + held_out
    results = TFLiteTranslator(os.path.join(version, "translator.tflite")).translate(sentences)
    translations, scores = [t.text for t in results], [t.score for t in results]
    saved_model = loaded.signatures["serving_default"]
    expected = saved_model(sentences=tf.constant(sentences))
    assert translations == [text.decode("utf-8") for text in expected["translations"].numpy()]
    np.testing.assert_allclose(scores, expected["scores"].numpy(), rtol=1e-4, atol=1e-4)
    assert translations[0] == "trois un quatre" and translations[1] == ""
    assert sum(bool(t) for t in translations) == len(sentences) - 1  # only the empty sentence is empty


def test_warmup_records_replay_through_the_saved_model(exported, loaded):
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
    for request in requests:
        signature = loaded.signatures[request.model_spec.signature_name]
        inputs = {name: tf.constant(tf.make_ndarray(proto)) for name, proto in request.inputs.items()}
        outputs = signature(**inputs)
        assert outputs["translations"].shape[0] == inputs["sentences"].shape[0] > 0
    assert max(len(tf.make_ndarray(r.inputs["sentences"])) for r in requests) > 1  # a batch, not only one
