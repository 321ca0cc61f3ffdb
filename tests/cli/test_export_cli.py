"""python -m export: --beam-width and --xla change what is exported, as the loaded SavedModel shows; usage errors.

(The int8 options, --int8-products included, are exported and checked in tests/export/test_export_int8.py.)
"""

import os
import sys

import pytest
import tensorflow as tf
from helpers import run_in_process

from gnmt_tf.decoding.options import no_pruning
from gnmt_tf.model_files import load_model_dir

pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test

SENTENCES = ["three one four", "", "nine", "two five eight nine", "seven six"]


def xla_unavailable():
    """Why XLA cannot compile on this machine's CPU, or None."""
    try:
        tf.function(lambda x: x * 2.0, jit_compile=True)(tf.constant([1.0]))
    except Exception as err:  # any failure to compile: the XLA export cannot be checked here
        return f"XLA does not compile on this CPU: {type(err).__name__}: {err}"[:300]
    return None


@pytest.fixture(scope="module")
def narrow(trained_number_model, tmp_path_factory):
    """One export with --beam-width 2 and (where XLA compiles here) --xla, loaded once: (version dir, loaded).

    The two options are independent (the beam width is a static setting of the searches, XLA
    compiles their step), and each is checked on its own below, so one export serves both tests
    instead of one export (trace, save, check) each, run in this process (no TensorFlow start).
    """
    model_dir, _ = trained_number_model
    base = str(tmp_path_factory.mktemp("export_cli") / "narrow")
    xla = [] if xla_unavailable() else ["--xla"]
    result = run_in_process([sys.executable, "-m", "export", "--model-dir", model_dir, "--output", base,
                             "--format", "saved_model", "--beam-width", "2", *xla])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "checked: 10 sentences translate identically" in result.stdout  # 8 dev sentences + 2 edge cases
    version = os.path.join(base, "1")
    return version, tf.saved_model.load(version)


@pytest.fixture(scope="module")
def float_export(exported_number_model):
    """The session's float export (the config's beam width, no XLA), loaded once for this file's tests."""
    return tf.saved_model.load(exported_number_model)


# every n-best list is as long as the beam allows
WIDE_OPEN = dict(alpha=0.0, beta=0.0, beamsize=no_pruning())


@pytest.fixture(scope="module")
def python_beam_2(trained_number_model):
    """The Python beam search with beam width 2 (float, no XLA): the n-best lists of width 2 (WIDE_OPEN) of
    the non-empty SENTENCES, and the best translations of SENTENCES; one Translator for both."""
    from gnmt_tf.inference.translator import Translator

    model_dir, _ = trained_number_model
    model, tokenizer, config = load_model_dir(model_dir)
    translator = Translator(model, tokenizer, config.decoding)
    nonempty = [s for s in SENTENCES if s]
    return (translator.translate_nbest(nonempty, n_best=2, beam_width=2, **WIDE_OPEN),
            translator.translate(SENTENCES, beam_width=2))


def nbest(loaded, sentences, **options):
    settings = {"alpha": 0.2, "beta": 0.2, "beamsize": 3.0, **options}
    outputs = loaded.signatures["translate_nbest"](
        sentences=tf.constant(sentences), **{name: tf.constant(value, tf.float32) for name, value in settings.items()})
    return {name: value.numpy() for name, value in outputs.items()}


def test_beam_width_2_is_built_into_the_export(narrow, float_export, python_beam_2):
    _, narrow = narrow
    default = float_export  # the config's beam width, 4
    expected_lists, expected_best = python_beam_2
    sentences = [s for s in SENTENCES if s]
    narrow_lists, default_lists = (nbest(loaded, sentences, **WIDE_OPEN) for loaded in (narrow, default))
    assert narrow_lists["translations"].shape == (len(sentences), 2)  # n-best lists of width 2
    assert default_lists["translations"].shape == (len(sentences), 4)
    assert (narrow_lists["lengths"] > 0).all()  # two finished hypotheses each
    # The same n-best lists as the Python beam search with beam width 2.
    for row, hypotheses in enumerate(expected_lists):
        assert [t.decode() for t in narrow_lists["translations"][row]] == [h.text for h in hypotheses]
        assert narrow_lists["scores"][row].tolist() == pytest.approx([h.score for h in hypotheses], abs=1e-4)
    # serving_default searches with the same beam.
    served = narrow.signatures["serving_default"](sentences=tf.constant(SENTENCES))["translations"].numpy()
    assert [t.decode() for t in served] == [t.text for t in expected_best]


def xla_compiled_functions(version_dir):
    """Names of the SavedModel's functions marked for XLA compilation (tf.function(jit_compile=True))."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(version_dir, "saved_model.pb"), "rb") as handle:
        saved.ParseFromString(handle.read())
    functions = saved.meta_graphs[0].graph_def.library.function
    return [f.signature.name for f in functions if "_XlaMustCompile" in f.attr and f.attr["_XlaMustCompile"].b]


def test_xla_export_compiles_its_steps_and_translates_like_the_float_search(narrow, exported_number_model,
                                                                          python_beam_2):
    """Like the float search of the same settings (beam width 2): the Python beam search, which the float
    export translates identically to (the exporter's check)."""
    reason = xla_unavailable()
    if reason:
        pytest.skip(reason)
    version, loaded = narrow
    assert xla_compiled_functions(version)  # the decoding step is compiled with XLA ...
    assert not xla_compiled_functions(exported_number_model)  # ... and only with --xla
    _, expected = python_beam_2
    compiled = loaded.signatures["serving_default"](sentences=tf.constant(SENTENCES))
    assert [t.decode() for t in compiled["translations"].numpy()] == [t.text for t in expected]
    assert compiled["translations"].numpy()[0] == b"trois un quatre"
    assert compiled["scores"].numpy() == pytest.approx([t.score for t in expected], abs=1e-4)
    # Its warm-up compiles every shape bucket (tests/export/test_bucket_warmup.py): both search
    # graphs at every bucket's number of sentences.
    from export.warmup import read_warmup_requests
    from gnmt_tf.decoding.buckets import ShapeBuckets

    warmed = {(r.model_spec.signature_name, tf.make_ndarray(r.inputs["sentences"]).size)
              for r in read_warmup_requests(version)}
    assert {(signature, searches) for signature in ("translate_with_options", "translate_nbest")
            for searches in ShapeBuckets().searches} <= warmed


@pytest.mark.parametrize("args, message", [
    (["--format", "onnx"], "error: unknown format 'onnx'; known formats: saved_model, tflite"),
    (["--format", "saved_model", "--version", "0"], "error: --version must be a positive integer, got 0"),
    (["--format", "saved_model", "--quantize", "int8", "--bleu-tolerance", "-1"],
     "error: --bleu-tolerance must be >= 0 and --bleu-sentences >= 1"),
    (["--format", "saved_model", "--quantize", "int8", "--bleu-sentences", "0"],
     "error: --bleu-tolerance must be >= 0 and --bleu-sentences >= 1"),
    (["--format", "tflite", "--xla"], "error: --xla applies to --format saved_model only"),
])
def test_usage_errors_end_before_any_work(args, message, trained_number_model, tmp_path, capsys, monkeypatch):
    from export.__main__ import main

    def no_loading(*args, **kwargs):
        raise AssertionError("a usage error must end before the model is loaded")

    model_dir, _ = trained_number_model
    monkeypatch.setattr("gnmt_tf.model_files.load_checkpoint", no_loading)
    output = tmp_path / "gnmt"
    assert main(["--model-dir", model_dir, "--output", str(output), *args]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [message] and captured.out == ""
    assert not output.exists()


@pytest.mark.parametrize("args, message", [
    (["--format", "saved_model", "--quantize", "int4"], "argument --quantize: invalid choice: 'int4'"),
    (["--format", "saved_model", "--int8-products", "int4"], "argument --int8-products: invalid choice: 'int4'"),
    (["--format", "saved_model", "--checkpoint", "newest"], "argument --checkpoint: invalid choice: 'newest'"),
    ([], "the following arguments are required: --format"),
])
def test_bad_options_exit_2_with_the_usage(args, message, trained_number_model, tmp_path, capsys):
    from export.__main__ import main

    model_dir, _ = trained_number_model
    with pytest.raises(SystemExit) as stop:
        main(["--model-dir", model_dir, "--output", str(tmp_path / "gnmt"), *args])
    assert stop.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("usage: python -m export ") and lines[-1].startswith("python -m export: error: ")
    assert message in lines[-1]
    assert not (tmp_path / "gnmt").exists()
