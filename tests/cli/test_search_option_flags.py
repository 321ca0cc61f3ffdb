"""--alpha, --beta and --beamsize of translate, evaluate and score: a value that is not a finite float32 >= 0
is a usage error naming the flag (exit 2, before any model is read); good values, 0 included, still work."""

import json
import sys

import pytest
from helpers import run_in_process

from gnmt_tf import model_files
from gnmt_tf.inference.translator import Translator

# (as typed, as the message writes it)
BAD_VALUES = [("nan", "nan"), ("NaN", "nan"), ("inf", "inf"), ("Infinity", "inf"), ("1e400", "inf"),
              ("-inf", "-inf"), ("-1", "-1"), ("-0.5", "-0.5"), ("-5", "-5")]
FLAGS = {"gnmt_tf.translate": ("alpha", "beta", "beamsize"), "gnmt_tf.evaluate": ("alpha", "beta", "beamsize"),
         "gnmt_tf.score": ("alpha", "beta")}
REQUIRED = {"gnmt_tf.translate": [], "gnmt_tf.evaluate": ["--test", "nowhere.tsv"], "gnmt_tf.score": []}
CASES = [(command, flag, typed, shown) for command, flags in FLAGS.items() for flag in flags
         for typed, shown in BAD_VALUES]


@pytest.mark.parametrize("command, flag, typed, shown", CASES,
                         ids=[f"{c.split('.')[1]}-{f}={t}" for c, f, t, _ in CASES])
def test_a_bad_option_is_a_usage_error_naming_the_flag(command, flag, typed, shown):
    hint = " (1e9 never prunes)" if flag == "beamsize" else ""
    result = run_in_process([sys.executable, "-m", command, "--model-dir", "no_such_dir", *REQUIRED[command],
                             f"--{flag}={typed}"], "one\n")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines()[-1] == (
        f"{command.replace('gnmt_tf.', 'python -m gnmt_tf.')}: error: argument --{flag}: "
        f"must be a finite float32 >= 0, got {shown}{hint}")


BATCHING = [("batch-size", "0", "must be an integer >= 1, got 0"),
            ("concurrent-batches", "-1", "must be an integer >= 1, got -1"),
            ("concurrent-batches", "two", "invalid int value: 'two'")]


@pytest.mark.parametrize("command", sorted(FLAGS))
@pytest.mark.parametrize("flag, typed, message", BATCHING, ids=[f"{f}={t}" for f, t, _ in BATCHING])
def test_batching_flags_take_positive_integers(command, flag, typed, message):
    result = run_in_process([sys.executable, "-m", command, "--model-dir", "no_such_dir", *REQUIRED[command],
                             f"--{flag}={typed}"], "one\n")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines()[-1] == (
        f"{command.replace('gnmt_tf.', 'python -m gnmt_tf.')}: error: argument --{flag}: {message}")


def test_good_options_after_refused_ones_translate_and_beamsize_0_is_greedy(trained_number_model, tmp_path):
    """beamsize 0 keeps only each hypothesis' best token and drops what scores below the best finished
    hypothesis: one live hypothesis, extended by its most probable token, which is greedy search."""
    model_dir, _ = trained_number_model
    sentences = ["three one four", "nine nine", "zero five two eight six"]
    model, tokenizer, config = model_files.load_model_dir(model_dir)
    greedy = Translator(model, tokenizer, config.decoding).greedy(sentences)
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
