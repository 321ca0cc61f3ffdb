"""The option rules of the command lines, one table per entry point: alpha, beta and beamsize must be
finite float32 values >= 0 (gnmt_tf.decoding.options), the beam width and the batching flags integers
>= 1. A bad value is a usage error naming the flag, with the same one-line message everywhere (exit 2,
before TensorFlow starts and before any model is read); good values, 0 included, reach the command."""

import importlib
import json
import sys

import pytest
from helpers import run_in_process

from gnmt_tf import model_files
from gnmt_tf.cli import scaffold
from gnmt_tf.decoding.options import SEARCH_OPTIONS
from gnmt_tf.inference.translator import Translator

pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test

# (as typed, as the message writes it)
BAD_NUMBERS = [("nan", "nan"), ("NaN", "nan"), ("inf", "inf"), ("Infinity", "inf"), ("1e400", "inf"),
               ("-inf", "-inf"), ("-1", "-1"), ("-0.5", "-0.5"), ("-5", "-5")]


def search_option_cases(names):
    """(flag, as typed, the message): every bad number for each search option."""
    return [(name, typed, f"must be a finite float32 >= 0, got {shown}" + (" (1e9 never prunes)" if name == "beamsize"
                                                                              else ""))
            for name in names for typed, shown in BAD_NUMBERS]


def positive_int_cases(*names):
    return [(name, typed, message) for name in names for typed, message in (
        ("0", "must be an integer >= 1, got 0"), ("-1", "must be an integer >= 1, got -1"),
        ("two", "invalid int value: 'two'"), ("1.5", "invalid int value: '1.5'"))]


SEARCH = search_option_cases(SEARCH_OPTIONS)
GOOD = [("alpha", "0", 0.0), ("beta", "1.5", 1.5), ("beamsize", "0", 0.0), ("beamsize", "1e9", 1e9)]
# module: (the arguments it needs besides the flag, its bad values, good values and where they land)
ENTRY_POINTS = {
    "gnmt_tf.translate": (["--model-dir", "no_such_dir"],
                          SEARCH + positive_int_cases("beam-width", "batch-size", "concurrent-batches"),
                          GOOD + [("beam-width", "3", 3), ("batch-size", "1", 1)]),
    "gnmt_tf.evaluate": (["--model-dir", "no_such_dir", "--test", "nowhere.tsv"],
                         SEARCH + positive_int_cases("beam-width", "batch-size", "concurrent-batches"),
                         GOOD + [("beam-width", "3", 3), ("concurrent-batches", "1", 1)]),
    "gnmt_tf.score": (["--model-dir", "no_such_dir"],
                      search_option_cases(("alpha", "beta")) + positive_int_cases("batch-size", "concurrent-batches"),
                      GOOD[:2]),
    "export": (["--model-dir", "no_such_dir", "--output", "nowhere", "--format", "saved_model"],
               positive_int_cases("beam-width"), [("beam-width", "2", 2)]),
    "serving.client": (["--rest", "http://127.0.0.1:9"], SEARCH + positive_int_cases("batch-size"),
                       GOOD + [("batch-size", "7", 7)]),
}


@pytest.mark.parametrize("module", sorted(ENTRY_POINTS))
def test_bad_values_are_one_usage_error_line_before_tensorflow_starts(module, monkeypatch):
    def no_start(verbose=False):
        raise AssertionError("a bad value must end the command before TensorFlow starts")

    monkeypatch.setattr(scaffold, "start_tensorflow", no_start)
    monkeypatch.setattr("serving.client.start_tensorflow", no_start)
    required, bad, good = ENTRY_POINTS[module]
    results = {(flag, typed): run_in_process([sys.executable, "-m", module, *required, f"--{flag}={typed}"], "one\n")
               for flag, typed, _ in bad}
    got = {case: (result.returncode, result.stdout, result.stderr.splitlines()[-1]) for case, result in results.items()}
    assert got == {(flag, typed): (2, "", f"python -m {module}: error: argument --{flag}: {message}")
                   for flag, typed, message in bad}

    parser = importlib.import_module(f"{module}.__main__" if module == "export" else module).COMMAND.build_parser()
    passed = {(flag, typed): getattr(parser.parse_args([*required, f"--{flag}", typed]), flag.replace("-", "_"))
              for flag, typed, _ in good}
    assert passed == {(flag, typed): value for flag, typed, value in good}


def test_good_options_after_refused_ones_translate_and_beamsize_0_is_greedy(trained_number_model, tmp_path):
    """beamsize 0 keeps only each hypothesis' best token and drops what scores below the best finished
    hypothesis: one live hypothesis, extended by its most probable token, which is greedy search."""
    model_dir, _ = trained_number_model
    sentences = ["three one four", "nine nine", "zero five two eight six"]
    model, tokenizer, config = model_files.load_model_dir(model_dir)
    greedy = [t.text for t in Translator(model, tokenizer, config.decoding).greedy(sentences)]
    translate = ["-m", "gnmt_tf.translate", "--model-dir", model_dir, "--alpha", "0", "--beta", "0"]
    refused = run_in_process([sys.executable, *translate, "--beamsize", "-5"], "\n".join(sentences) + "\n")
    assert refused.returncode == 2
    zero = run_in_process([sys.executable, *translate, "--beamsize", "0"], "\n".join(sentences) + "\n")
    assert zero.returncode == 0, zero.stderr[-2000:]
    assert zero.stdout.splitlines() == greedy

    test = tmp_path / "test.tsv"
    test.write_text("three one four\ttrois un quatre\nnine nine\tneuf neuf\n", encoding="utf-8")
    evaluate = ["-m", "gnmt_tf.evaluate", "--model-dir", model_dir, "--test", str(test), "--json"]
    assert run_in_process([sys.executable, *evaluate, "--beamsize", "inf"]).returncode == 2
    result = run_in_process([sys.executable, *evaluate, "--beamsize", "1e9"])
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)  # valid JSON: no Infinity any more
    assert report["beamsize"] == 1e9 and report["sentences"] == 2
    assert (report["batch_size"], report["concurrent_batches"]) == (32, 2)  # the defaults

    score = ["-m", "gnmt_tf.score", "--model-dir", model_dir, "--alpha", "0", "--beta", "0"]
    pairs = "three one four\ttrois un quatre\n"
    assert run_in_process([sys.executable, *score[:-1], "NaN"], pairs).returncode == 2
    scored = run_in_process([sys.executable, *score], pairs)
    assert scored.returncode == 0, scored.stderr[-2000:]
    eq14, log_prob, _ = scored.stdout.split("\t")
    assert float(log_prob) < 0
    assert float(eq14) == pytest.approx(float(log_prob), abs=1e-4)  # alpha = beta = 0: eq. 14 is log P
