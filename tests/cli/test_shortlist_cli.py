"""python -m gnmt_tf.shortlist: usage errors, the file it writes and the coverage it reports; translate and
evaluate with --shortlist / --no-shortlist."""

import json
import re
import shutil
import sys

import numpy as np
import pytest
from helpers import number_word_pairs, run_each_in_process, run_in_process, write_number_training_tsv

from gnmt_tf import model_files
from gnmt_tf.vocab import EOS_ID

pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test

COMMAND = [sys.executable, "-m", "gnmt_tf.shortlist"]


@pytest.fixture(scope="module")
def untrained_model_dir(tmp_path_factory):
    """A model directory as python -m gnmt_tf.train starts it (config, vocabulary, dev split), no checkpoint:
    all the shortlist needs."""
    from number_model import tiny_number_setup

    directory = tmp_path_factory.mktemp("shortlist_cli")
    _, model_dir, _, dev_pairs, _ = tiny_number_setup(directory, steps=10)
    model_files.write_dev_split(model_dir, dev_pairs)
    return model_dir, write_number_training_tsv(directory / "train.tsv")


def test_usage_errors(untrained_model_dir, tmp_path):
    model_dir, _ = untrained_model_dir
    missing, bad_k, bad_n, not_found, not_a_model = (
        run_in_process(COMMAND + args) for args in (
            [], ["--model-dir", model_dir, "--top-k", "0"], ["--model-dir", model_dir, "--frequent", "-1"],
            ["--model-dir", str(tmp_path / "nothing")], ["--model-dir", str(tmp_path)]))
    assert missing.returncode == 2 and "the following arguments are required: --model-dir" in missing.stderr
    assert bad_k.returncode == 2 and "argument --top-k: must be an integer >= 1, got 0" in bad_k.stderr
    assert bad_n.returncode == 2 and "--frequent must be 0 or more, got -1" in bad_n.stderr
    assert not_found.returncode == 2 and "model directory not found" in not_found.stderr
    assert not_a_model.returncode == 2 and "is not a gnmt_tf model directory" in not_a_model.stderr
    assert not model_files.has_shortlist(model_dir)  # nothing written by a refused run


def test_writes_the_shortlist_and_reports_its_coverage(untrained_model_dir):
    model_dir, train_tsv = untrained_model_dir
    result = run_in_process(COMMAND + ["--model-dir", model_dir, "--train", train_tsv, "--top-k", "2",
                                       "--frequent", "1"])
    assert result.returncode == 0, result.stderr[-2000:]
    config, tokenizer = model_files.load_metadata(model_dir)
    shortlist = model_files.read_shortlist(model_dir, vocab_size=tokenizer.vocab_size)
    assert (shortlist.top_k, shortlist.frequent) == (2, 1)
    assert shortlist.table.shape == (tokenizer.vocab_size, 2)

    # The pairs of the dev split are left out of the training data, as train does.
    dev_pairs = model_files.read_dev_split(model_dir)
    training = number_word_pairs(2000, seed=1, min_len=1)
    held_out = sum(pair in set(dev_pairs) for pair in training)
    assert held_out > 0 and f"left out {held_out:,} pairs of the dev split" in result.stdout

    # The coverage printed: NumPy's union of the table rows of each dev source (+ EOS), the
    # max(frequent, beam width) most frequent pieces and EOS, against the reference's pieces.
    def ids(text):
        return [tokenizer.pieces.index(p) for word in text.split() for p in tokenizer.segment_word(word)]

    common = set(shortlist.ranking[: max(1, config.decoding.beam_width)].tolist()) | {EOS_ID}
    covered = total = 0
    sizes = []
    for source, reference in dev_pairs:
        allowed = set(shortlist.table[ids(source) + [EOS_ID]].ravel().tolist()) | common
        sizes.append(len(allowed))
        covered += sum(piece in allowed for piece in ids(reference))
        total += len(ids(reference))
    summary = [line for line in result.stdout.splitlines() if line.startswith("summary:")]
    assert len(summary) == 1, result.stdout
    assert f"{100 * covered / total:.2f}% of {total:,}" in summary[0]
    assert f"allowed ids on average {np.mean(sizes):.0f} per dev sentence" in summary[0]
    assert re.search(r"in all\)", result.stdout)  # the time it took is reported


def test_translate_and_evaluate_with_and_without_the_shortlist(trained_number_model, tmp_path):
    """A learned shortlist of the word-for-word number task covers every output: same translations on and off;
    a model directory without one refuses --shortlist."""
    model_dir, _ = trained_number_model
    copy = str(tmp_path / "model")
    shutil.copytree(model_dir, copy)
    train_tsv = write_number_training_tsv(tmp_path / "t.tsv")
    built = run_in_process(COMMAND + ["--model-dir", copy, "--train", train_tsv, "--top-k", "3",
                                      "--frequent", "0"])
    assert built.returncode == 0, built.stderr[-2000:]
    lines = "three one four\n\nnine eight\nzero one two three\n"
    translate = [sys.executable, "-m", "gnmt_tf.translate", "--model-dir", copy]
    evaluate = [sys.executable, "-m", "gnmt_tf.evaluate", "--model-dir", copy, "--test", f"{copy}/test.tsv",
                "--json"]
    on, off, evaluate_on, evaluate_off, refused = run_each_in_process(
        (translate + ["--shortlist"], lines), (translate + ["--no-shortlist"], lines),
        (evaluate + ["--shortlist"], None), (evaluate, None),
        ([sys.executable, "-m", "gnmt_tf.translate", "--model-dir", model_dir, "--shortlist"], lines))
    for result in (on, off, evaluate_on, evaluate_off):
        assert result.returncode == 0, result.stderr[-2000:]
    assert on.stdout == off.stdout and off.stdout.splitlines()[0] == "trois un quatre"
    with_shortlist, without = json.loads(evaluate_on.stdout), json.loads(evaluate_off.stdout)
    assert with_shortlist["shortlist"] is True
    assert without["shortlist"] is False  # decoding.use_shortlist's default: off
    assert with_shortlist["bleu"] == without["bleu"]
    assert refused.returncode == 2 and "has no vocabulary shortlist" in refused.stderr
