"""python -m export --checkpoint averaged --quantize int8: the int8 SavedModel and TFLite model hold eq. 12's
codes of the averaged weights (gnmt-average), not of the checkpoint trained last."""

import json
import os
import shutil
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import run_each_in_process

from gnmt_tf import model_files
from gnmt_tf.cli.average import average_checkpoints
from gnmt_tf.quantization import int8 as quantization

pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test


@pytest.fixture(scope="module")
def averaged_exports(trained_number_model, tmp_path_factory):
    """The fixture model averaged over its last two checkpoints, exported in int8 as a SavedModel and as
    TFLite through the command line: (model directory, {format: (version directory, stdout)})."""
    model_dir = str(tmp_path_factory.mktemp("averaged") / "model")
    shutil.copytree(trained_number_model[0], model_dir)
    average_checkpoints(model_dir, last=2, log=lambda message: None)
    base = tmp_path_factory.mktemp("averaged_exports")
    formats = ("saved_model", "tflite")
    commands = [([sys.executable, "-m", "export", "--model-dir", model_dir, "--output", str(base / name),
                  "--format", name, "--quantize", "int8", "--checkpoint", "averaged", "--bleu-sentences", "30"], None)
                for name in formats]
    exports = {}
    for name, result in zip(formats, run_each_in_process(*commands)):
        assert result.returncode == 0, (name, result.stderr[-3000:])
        exports[name] = (str(base / name / "1"), result.stdout)
    return model_dir, exports


def _kernel_codes(model_dir, which):
    """eq. 12's int8 codes (one scale per output unit) of each quantized kernel of a checkpoint."""
    model, _, _ = model_files.load_model_dir(model_dir, which=which)
    return [np.asarray(quantization.quantize(kernel, "per_row", axis=0)[0])
            for kernel in quantization.quantized_kernel_variables(model)]


def _differing(averaged, latest):
    """The latest checkpoint's codes that differ from the averaged ones (those that tell the two apart)."""
    return [codes for codes, mean in zip(latest, averaged) if not np.array_equal(codes, mean)]


@pytest.mark.parametrize("name", ["saved_model", "tflite"])
def test_the_cli_exports_the_averaged_checkpoint_in_int8(averaged_exports, name):
    model_dir, exports = averaged_exports
    version, stdout = exports[name]
    averaged_path = model_files.find_checkpoint(model_dir, "averaged")
    assert f"exporting {averaged_path} (--checkpoint averaged)" in stdout
    assert "checked: dev BLEU float" in stdout  # the exporter's int8 gate ran against these weights
    with open(os.path.join(version, "export.json"), encoding="utf-8") as handle:
        recorded = json.load(handle)
    assert (recorded["checkpoint"], recorded["checkpoint_choice"], recorded["quantize"]) == (
        averaged_path, "averaged", "int8")

    averaged, latest = _kernel_codes(model_dir, "averaged"), _kernel_codes(model_dir, "latest")
    assert len(_differing(averaged, latest)) >= len(latest) // 2  # the two checkpoints really differ
    stored = _stored_int8_arrays(version, name)
    assert all(stored(codes) for codes in averaged)
    assert not any(stored(codes) for codes in _differing(averaged, latest))


def _stored_int8_arrays(version, name):
    """A test of whether an int8 kernel's codes are stored in the export: among the SavedModel's
    variables, or among the TFLite model's constant buffers (laid out [output, input] there)."""
    if name == "saved_model":
        reader = tf.train.load_checkpoint(os.path.join(version, "variables", "variables"))
        held = {reader.get_tensor(key).tobytes() for key, dtype in reader.get_variable_to_dtype_map().items()
                if dtype == tf.int8}
        return lambda codes: codes.tobytes() in held
    with open(os.path.join(version, "translator.tflite"), "rb") as handle:
        blob = handle.read()
    return lambda codes: np.ascontiguousarray(codes.T).tobytes() in blob
