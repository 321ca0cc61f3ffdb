"""Exports load and translate in TF Serving's runtime, which is older than the TensorFlow they are made with.

TF Serving 2.20.0 links TensorFlow 2.20 and tensorflow-text 2.20 (export/serving_runtime.py). The
session's float SavedModel and both int8 ones are loaded in a Python environment of those two
packages only (nothing of gnmt_tf), their three signatures are called there on dev sentences, and
the answers are compared with what this process, the TensorFlow that exported them, gets from the
same SavedModels: the same strings, the same numbers up to float rounding. The environment is built
once per machine (cached); the suite starts its build with the session (tests/conftest.py). Also
here: the committed op list is what that runtime registers, and the exporter refuses any op outside
it, as that runtime refuses to load it.
"""

import os
import re

import numpy as np
import pytest
import tensorflow as tf
from serving_helpers import savedmodel_signatures

from export import serving_runtime
from export.exporters import ExportError, require_serving_ops
from export.serving_runtime import (
    PYTHON_ONLY_OPS,
    RuntimeUnavailable,
    call_in_runtime,
    ensure_venv,
    serving_ops,
    unregistered_ops,
)

OPTIONS = {"alpha": 0.6, "beta": 0.0, "beamsize": 2.0}  # not the tiny config's 0.2, 0.2, 3.0
DEV_SENTENCES = 16


pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test


class Holder(tf.Module):
    """A SavedModel with one op inside a loop body (a function of the graph's library, not the graph)."""

    def __init__(self, op):
        super().__init__()
        self.op = op

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def serve(self, images):
        def body(i, sizes):
            return i + 1, sizes + tf.size(self.op(images[i]))

        _, sizes = tf.while_loop(lambda i, _: i < tf.size(images), body, [0, 0])
        return {"sizes": sizes}


def save_holder(op, directory):
    module = Holder(op)
    tf.saved_model.save(module, str(directory), signatures={"serving_default": module.serve})
    return str(directory)


@pytest.fixture(scope="module")
def jxl_export(tmp_path_factory):
    """A SavedModel that decodes JPEG XL: DecodeJxl is new in TensorFlow 2.21, so 2.20 cannot load it."""
    return save_holder(tf.io.decode_jxl, tmp_path_factory.mktemp("jxl") / "1")


# ------------------------------------------------------------------------------------ the op check
def test_the_op_check_refuses_an_op_the_runtime_lacks_wherever_it_is(jxl_export, tmp_path):
    assert "DecodeJxl" not in serving_ops() and len(serving_ops()) > 1500
    with pytest.raises(ExportError, match=r"uses 1 op that TF Serving 2\.20\.0 \(TensorFlow 2\.20 with "
                                          r"tensorflow-text 2\.20\) does not register.*DecodeJxl \(in while_body"):
        require_serving_ops(jxl_export)
    # Another op, allowed by the list, refused once it is taken out of it: the whole library is read.
    png = save_holder(tf.io.decode_png, tmp_path / "png")
    require_serving_ops(png)
    missing = unregistered_ops(png, serving_ops() - {"DecodePng"})
    assert list(missing) == ["DecodePng"] and all(place.startswith("while_body") for place in missing["DecodePng"])
    two = r"uses 2 ops .*DecodePng \(in while_body.*; StatelessWhile \(in __inference_serve"
    with pytest.raises(ExportError, match=two):
        require_serving_ops(png, serving_ops() - {"DecodePng", "StatelessWhile"})


def test_the_op_check_refuses_python_callbacks(tmp_path):
    """tf.numpy_function runs in the Python that built the graph; TF Serving has none."""
    assert PYTHON_ONLY_OPS.isdisjoint(serving_ops())
    python_export = save_holder(lambda image: tf.numpy_function(np.char.upper, [image], tf.string), tmp_path / "py")
    assert set(unregistered_ops(python_export)) == {"PyFunc"}
    with pytest.raises(ExportError, match="PyFunc"):
        require_serving_ops(python_export)


@pytest.fixture(scope="module")
def exports(exported_number_model, int8_exports):
    """The session's SavedModel exports: float, int8 (dequantized once), int8 x int8 products."""
    _, int8 = int8_exports
    return {"float": exported_number_model, "int8": int8["saved_model"],
            "int8_products": int8["saved_model_int8_products"]}


def test_the_real_exports_use_only_the_runtime_s_ops(exports):
    for name, path in exports.items():
        assert unregistered_ops(path) == {}, name
        require_serving_ops(path)
        used = {node.op for nodes in serving_runtime.saved_model_nodes(path).values() for node in nodes}
        # The in-graph tokenizer's tensorflow-text ops are among them, so the list holds those too.
        assert any(op.startswith("FastWordpiece") for op in used), (name, sorted(used))


# ------------------------------------------------------------------------------------ in the runtime
@pytest.fixture(scope="module")
def runtime_python():
    """The Python of TF Serving's runtime (built now, or waited for, unless the session's build finished)."""
    try:
        return ensure_venv()
    except RuntimeUnavailable as error:
        pytest.skip(f"TF Serving's runtime (tensorflow=={serving_runtime.TENSORFLOW}.*, tensorflow-text=="
                    f"{serving_runtime.TENSORFLOW_TEXT}.*) could not be installed here: {error}")


def test_an_environment_is_in_place_only_once_complete(tmp_path):
    """A failed build leaves nothing; the remains of an interrupted one are built over, never used."""
    path = tmp_path / "runtime"
    interrupted = tmp_path / "runtime.partial"
    (interrupted / "bin").mkdir(parents=True)  # looks like an environment, but was never completed
    # pip without an index cannot find TensorFlow 2.20 (an offline machine, without asking PyPI)
    with pytest.raises(RuntimeUnavailable, match=r"(?s)pip install --no-index tensorflow==2\.20\.\* tensorflow-text=="
                                                 r"2\.20\.\* failed .*No matching distribution"):
        ensure_venv(str(path), requirements=["--no-index", *serving_runtime.REQUIREMENTS])
    assert sorted(os.listdir(tmp_path)) == ["runtime.lock"]
    path.mkdir()  # an existing environment is taken as it is, without building
    assert ensure_venv(str(path)) == str(path / "bin" / "python")


@pytest.fixture(scope="module")
def calls(trained_number_model):
    """Every signature of the exports on dev sentences (and an empty one): what TF Serving users call."""
    from gnmt_tf import model_files

    model_dir, _ = trained_number_model
    sentences = [source for source, _ in model_files.read_dev_split(model_dir)[:DEV_SENTENCES]] + ["", "three one four"]
    return [{"signature": "serving_default", "inputs": {"sentences": sentences}},
            {"signature": "translate_with_options", "inputs": {"sentences": sentences, **OPTIONS}},
            {"signature": "translate_nbest", "inputs": {"sentences": sentences, **OPTIONS}}]


@pytest.fixture(scope="module")
def warmup_request(exports):
    """What the check command asks the runtime for the float export: its warm-up requests, by directory."""
    directory = exports["float"]
    return {directory: {"path": os.path.abspath(directory), "calls": serving_runtime.warmup_calls(directory)}}


@pytest.fixture(scope="module")
def runtime_answers(runtime_python, exports, calls, jxl_export, warmup_request):
    """One process of the runtime loads every export (and the JPEG XL one) and answers the calls.

    The float export is also asked the check command's warm-up requests there (after the calls), so
    that one TensorFlow start and one load serve both; ``"warmup_answers"`` holds what
    :func:`serving_runtime.call_in_runtime` returns for the check command's own request.
    """
    [(directory, warmup)] = warmup_request.items()
    requests = {name: {"path": path, "calls": calls} for name, path in exports.items()}
    requests["float"]["calls"] = calls + warmup["calls"]
    requests["jxl"] = {"path": jxl_export, "calls": []}
    runtime = call_in_runtime(runtime_python, requests)
    answered = runtime["answers"]["float"]
    runtime["warmup_answers"] = dict(runtime, answers={directory: answered if "error" in answered else
                                                      {"outputs": answered["outputs"][len(calls):]}})
    if "error" not in answered:
        answered["outputs"] = answered["outputs"][:len(calls)]
    return runtime


def test_the_runtime_is_tf_serving_s_and_has_nothing_of_gnmt_tf(runtime_answers):
    assert runtime_answers["tensorflow"].startswith("2.20.") and runtime_answers["tensorflow_text"].startswith("2.20.")
    assert not tf.__version__.startswith("2.20.")  # another TensorFlow than the one that exported
    assert not runtime_answers["gnmt_tf_importable"] and runtime_answers["project_modules"] == []


def test_the_runtime_refuses_to_load_the_op_the_check_refuses(runtime_answers):
    """What the op list stands for: DecodeJxl, outside it, is an op that TensorFlow 2.20 cannot load."""
    error = runtime_answers["answers"]["jxl"]["error"]
    assert "DecodeJxl" in error and "not registered" in error.lower(), error


@pytest.mark.parametrize("name", ["float", "int8", "int8_products"])
def test_each_export_answers_in_the_runtime_as_in_the_exporting_tensorflow(name, exports, calls, runtime_answers):
    answer = runtime_answers["answers"][name]
    assert "error" not in answer, answer.get("error")
    here = savedmodel_signatures(exports[name])
    for call, there in zip(calls, answer["outputs"], strict=True):
        expected = here(call["signature"], call["inputs"]["sentences"],
                        **{key: value for key, value in call["inputs"].items() if key != "sentences"})
        assert set(there) == set(expected), call["signature"]
        for output, value in expected.items():
            if value.dtype.kind in "SO":  # the strings exactly
                assert there[output] == np.vectorize(bytes.decode, otypes=[object])(value).tolist(), (
                    call["signature"], output)
            else:  # the numbers up to float rounding (another TensorFlow build, other kernels)
                np.testing.assert_allclose(np.asarray(there[output], value.dtype), value, rtol=1e-5, atol=1e-5,
                                           err_msg=f"{call['signature']} {output}")
    translations = answer["outputs"][0]["translations"]
    assert translations[-2:] == ["", "trois un quatre"]  # real translations, not only equal ones


def test_the_committed_op_list_is_what_the_runtime_registers(runtime_answers):
    """Regenerating it (python -m export.serving_runtime write-ops) would change nothing."""
    assert set(runtime_answers["ops"]) - PYTHON_ONLY_OPS == serving_ops()
    assert PYTHON_ONLY_OPS <= set(runtime_answers["ops"])  # left out on purpose, not absent


def test_the_check_command_replays_the_warmup_requests_in_the_runtime(runtime_python, exports, warmup_request,
                                                                      runtime_answers, monkeypatch, capsys):
    """python -m export.serving_runtime check VERSION_DIR: the load check by hand.

    Its request to the runtime is answered by the module's one runtime process (runtime_answers),
    which was asked that very request (checked here): a TensorFlow 2.20 start and a load less. The
    command's work, reading the warm-up requests, replaying them here and comparing, runs as it is.
    """
    venv = os.path.dirname(os.path.dirname(runtime_python))
    asked = []

    def answered_by_the_module_s_runtime(python, exports_asked, timeout=serving_runtime.RUN_TIMEOUT):
        asked.append((python, exports_asked))
        return runtime_answers["warmup_answers"]

    monkeypatch.setattr(serving_runtime, "call_in_runtime", answered_by_the_module_s_runtime)
    assert serving_runtime.main(["check", "--path", venv, exports["float"]]) == 0
    assert asked == [(runtime_python, warmup_request)]
    assert len(warmup_request[exports["float"]]["calls"]) == 5
    [line] = capsys.readouterr().out.splitlines()
    assert re.fullmatch(rf"{re.escape(exports['float'])}: the same translations of 5 warm-up requests in "
                        rf"TensorFlow 2\.20\.\d+ with tensorflow-text 2\.20\.\d+ as in TensorFlow "
                        rf"{re.escape(tf.__version__)}", line), line
