"""python -m export: --beam-width and --xla change what is exported, as the loaded SavedModel shows; usage errors.

(The int8 options, --int8-products included, are exported and checked in tests/export/test_export_int8.py.)
"""

import os
import sys

import pytest
import tensorflow as tf
from helpers import run_each_in_process

from gnmt_tf.decoding.options import no_pruning
from gnmt_tf.model_files import load_model_dir

SENTENCES = ["three one four", "", "nine", "two five eight nine", "seven six"]

# name: the options of each export this file checks, made once (in this process: no TensorFlow start each)
EXPORTS = {"beam_2": ["--beam-width", "2"], "xla": ["--xla"]}


def xla_unavailable():
    """Why XLA cannot compile on this machine's CPU, or None."""
    try:
        tf.function(lambda x: x * 2.0, jit_compile=True)(tf.constant([1.0]))
    except Exception as err:  # any failure to compile: the XLA export cannot be checked here
        return f"XLA does not compile on this CPU: {type(err).__name__}: {err}"[:300]
    return None


@pytest.fixture(scope="module")
def exports(trained_number_model, tmp_path_factory):
    model_dir, _ = trained_number_model
    base = tmp_path_factory.mktemp("export_cli")
    wanted = {name: options for name, options in EXPORTS.items() if name != "xla" or not xla_unavailable()}
    commands = [([sys.executable, "-m", "export", "--model-dir", model_dir, "--output", str(base / name),
                  "--format", "saved_model", *options], None) for name, options in wanted.items()]
    paths = {}
    for name, result in zip(wanted, run_each_in_process(*commands)):
        assert result.returncode == 0, (name, result.stderr[-3000:])
        assert "checked: 10 sentences translate identically" in result.stdout  # 8 dev sentences + 2 edge cases
        paths[name] = os.path.join(base, name, "1")
    return paths


@pytest.fixture(scope="module")
def float_export(exported_number_model):
    """The session's float export (the config's beam width, no XLA), loaded once for this file's tests."""
    return tf.saved_model.load(exported_number_model)


def nbest(loaded, sentences, **options):
    settings = {"alpha": 0.2, "beta": 0.2, "beamsize": 3.0, **options}
    outputs = loaded.signatures["translate_nbest"](
        sentences=tf.constant(sentences), **{name: tf.constant(value, tf.float32) for name, value in settings.items()})
    return {name: value.numpy() for name, value in outputs.items()}


def test_beam_width_2_is_built_into_the_export(exports, float_export, trained_number_model):
    from gnmt_tf.inference.translator import Translator

    model_dir, _ = trained_number_model
    narrow = tf.saved_model.load(exports["beam_2"])
    default = float_export  # the config's beam width, 4
    sentences = [s for s in SENTENCES if s]
    wide_open = dict(alpha=0.0, beta=0.0, beamsize=no_pruning())  # every list is as long as the beam allows
    narrow_lists, default_lists = nbest(narrow, sentences, **wide_open), nbest(default, sentences, **wide_open)
    assert narrow_lists["translations"].shape == (len(sentences), 2)  # n-best lists of width 2
    assert default_lists["translations"].shape == (len(sentences), 4)
    assert (narrow_lists["lengths"] > 0).all()  # two finished hypotheses each
    # The same n-best lists as the Python beam search with beam width 2.
    model, tokenizer, config = load_model_dir(model_dir)
    expected = Translator(model, tokenizer, config.decoding).translate_nbest(sentences, n_best=2, beam_width=2,
                                                                             **wide_open)
    for row, hypotheses in enumerate(expected):
        assert [t.decode() for t in narrow_lists["translations"][row]] == [h.text for h in hypotheses]
        assert narrow_lists["scores"][row].tolist() == pytest.approx([h.score for h in hypotheses], abs=1e-4)
    # serving_default searches with the same beam.
    served = narrow.signatures["serving_default"](sentences=tf.constant(SENTENCES))["translations"].numpy()
    translations = Translator(model, tokenizer, config.decoding).translate(SENTENCES, beam_width=2)
    assert [t.decode() for t in served] == [t.text for t in translations]


def xla_compiled_functions(version_dir):
    """Names of the SavedModel's functions marked for XLA compilation (tf.function(jit_compile=True))."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(version_dir, "saved_model.pb"), "rb") as handle:
        saved.ParseFromString(handle.read())
    functions = saved.meta_graphs[0].graph_def.library.function
    return [f.signature.name for f in functions if "_XlaMustCompile" in f.attr and f.attr["_XlaMustCompile"].b]


def test_xla_export_compiles_its_steps_and_translates_like_the_float_export(exports, exported_number_model,
                                                                          float_export):
    if "xla" not in exports:
        pytest.skip(xla_unavailable())
    assert xla_compiled_functions(exports["xla"])  # the decoding step is compiled with XLA ...
    assert not xla_compiled_functions(exported_number_model)  # ... and only with --xla
    xla = tf.saved_model.load(exports["xla"]).signatures["serving_default"]
    plain = float_export.signatures["serving_default"]
    compiled = xla(sentences=tf.constant(SENTENCES))  # one batch: XLA compiles each new shape once
    expected = plain(sentences=tf.constant(SENTENCES))
    assert compiled["translations"].numpy().tolist() == expected["translations"].numpy().tolist()
    assert compiled["translations"].numpy()[0] == b"trois un quatre"
    assert compiled["scores"].numpy() == pytest.approx(expected["scores"].numpy(), abs=1e-4)
    # Its warm-up compiles every shape bucket (tests/export/test_bucket_warmup.py): both search
    # graphs at every bucket's number of sentences.
    from export.warmup import read_warmup_requests
    from gnmt_tf.decoding.buckets import ShapeBuckets

    warmed = {(r.model_spec.signature_name, tf.make_ndarray(r.inputs["sentences"]).size)
              for r in read_warmup_requests(exports["xla"])}
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
    monkeypatch.setattr("gnmt_tf.model_files.load_model_dir", no_loading)
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
