"""python -m export over several models: one SavedModel and one TFLite model of the ensemble, with a single
model's signatures, translating as the Python ensemble does."""

import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import run_each_in_process

from export.tflite import TFLiteTranslator
from gnmt_tf import model_files
from gnmt_tf.inference.evaluation import load_translator
from gnmt_tf.inference.results import texts

pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test


@pytest.fixture(scope="module")
def ensemble_exports(trained_number_model, tmp_path_factory):
    """The ensemble of the fixture's two checkpoints exported as a SavedModel and as TFLite through the
    command line: (model directory, {format: version directory})."""
    model_dir, _ = trained_number_model
    base = tmp_path_factory.mktemp("ensemble_exports")
    formats = ("saved_model", "tflite")
    commands = [([sys.executable, "-m", "export", "--model-dir", model_dir, "--last-checkpoints", "2",
                  "--output", str(base / name), "--format", name], None) for name in formats]
    exports = {}
    for name, result in zip(formats, run_each_in_process(*commands)):
        assert result.returncode == 0, (name, result.stderr[-3000:])
        assert "one ensemble (mean_log_probs)" in result.stdout
        exports[name] = str(base / name / "1")
    return model_dir, exports


def sentences(model_dir):
    return [source for source, _ in model_files.read_test_split(model_dir)[:24]] + ["", "one"]


def test_the_exported_ensemble_translates_as_the_python_ensemble(ensemble_exports):
    model_dir, exports = ensemble_exports
    paths = model_files.newest_checkpoints(model_dir, 2)
    ensemble, _, _ = load_translator([model_dir] * 2, paths)
    single, _, _ = load_translator(model_dir, paths[-1])
    inputs = sentences(model_dir)
    expected = ensemble.translate(inputs)
    texts_expected, scores_expected = texts(expected), np.array([t.score for t in expected])
    # The second model changes the scores (the number task's translations themselves agree).
    assert np.abs(np.array([t.score for t in single.translate(inputs)]) - scores_expected).max() > 1e-3

    loaded = tf.saved_model.load(exports["saved_model"])
    assert set(loaded.signatures) == {"serving_default", "translate_with_options", "translate_nbest"}
    served = loaded.signatures["serving_default"](sentences=tf.constant(inputs))
    assert [text.decode("utf-8") for text in served["translations"].numpy()] == texts_expected
    np.testing.assert_allclose(served["scores"].numpy(), scores_expected, atol=1e-4)
    tflite = TFLiteTranslator(os.path.join(exports["tflite"], "translator.tflite")).translate(inputs)
    assert texts(tflite) == texts_expected
    np.testing.assert_allclose([t.score for t in tflite], scores_expected, atol=1e-4)
    with open(os.path.join(exports["saved_model"], "export.json"), encoding="utf-8") as handle:
        recorded = json.load(handle)
    assert recorded["checkpoint"] == os.path.abspath(paths[0])
    assert [member["checkpoint"] for member in recorded["ensemble_with"]] == [os.path.abspath(paths[1])]
