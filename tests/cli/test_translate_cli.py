"""python -m gnmt_tf.translate: which checkpoint it reads, long inputs, and inputs it cannot read.

The fixture model translates English digit words to French ones. To see which checkpoint a run
used, a copy of the model gets a newest checkpoint that is the same model with the target
wordpieces "▁un" and "▁six" swapped (their embedding rows, softmax columns and biases): exactly
the same network up to the names of two output ids, so it translates every sentence the same
except that "un" and "six" trade places. ``best`` (the default) still holds the original.
"""

import io
import os
import shutil
import sys

import numpy as np
import pytest
from helpers import run_each_in_process
from undecodable_input import outputs_replacing_and_of_replaced

from gnmt_tf import model_files

pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test

SWAPPED = ("\u2581un", "\u2581six")
LONG_LINES = ["one two three four", "nine", "seven six five four three", ""]


def write_swapped_latest(model_dir):
    """Save, as the newest checkpoint of ``model_dir``, its model with the target ids of SWAPPED exchanged."""
    import tensorflow as tf

    model, tokenizer, _ = model_files.load_model_dir(model_dir, which="latest")
    a, b = (tokenizer.pieces.index(piece) for piece in SWAPPED)
    order = np.arange(tokenizer.vocab_size)
    order[[a, b]] = order[[b, a]]
    embeddings = model.target_embedding.embeddings
    softmax = model.decoder.softmax_projection
    embeddings.assign(tf.gather(embeddings, order, axis=0))
    softmax.kernel.assign(tf.gather(softmax.kernel, order, axis=1))
    softmax.bias.assign(tf.gather(softmax.bias, order))
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), model_files.checkpoint_dir(model_dir),
                                         max_to_keep=5)
    manager.save(checkpoint_number=2000)


def swap_words(translation):
    words = {"un": "six", "six": "un"}
    return " ".join(words.get(word, word) for word in translation.split())


def truncated_text(tokenizer, sentence, length):
    """The text of a sentence's first ``length`` wordpieces (what --max-input-length keeps)."""
    pieces = [piece for word in sentence.split() for piece in tokenizer.segment_word(word)][:length]
    text = "".join(pieces).replace("\u2581", " ").strip()
    assert [p for word in text.split() for p in tokenizer.segment_word(word)] == pieces  # same pieces again
    return text


@pytest.fixture(scope="module")
def two_checkpoints(trained_number_model, tmp_path_factory):
    model_dir, _ = trained_number_model
    copy = str(tmp_path_factory.mktemp("translate_cli") / "model")
    shutil.copytree(model_dir, copy)
    write_swapped_latest(copy)
    return copy


# Sentences of at most 3 wordpieces ("▁one", "▁six"): --max-input-length 3 leaves them whole.
SENTENCES = ["one six", "six one", "six six one"]


@pytest.fixture(scope="module")
def runs(two_checkpoints):
    """The command lines this file checks, side by side: name -> CompletedProcess; and the truncated texts.

    ``best`` also translates the texts --max-input-length 3 keeps of LONG_LINES, as the reference
    for ``default``, which runs with --max-input-length 3 on SENTENCES and LONG_LINES.
    """
    tokenizer = model_files.read_tokenizer(two_checkpoints)
    assert all(len(truncated_text(tokenizer, s, 3).split()) == len(s.split()) for s in SENTENCES)
    kept = [truncated_text(tokenizer, line, 3) for line in LONG_LINES]
    translate = [sys.executable, "-m", "gnmt_tf.translate", "--model-dir", two_checkpoints]
    cases = {
        "latest": ([*translate, "--checkpoint", "latest"], SENTENCES),
        "best": ([*translate, "--checkpoint", "best"], SENTENCES + kept),
        "default": ([*translate, "--max-input-length", "3"], SENTENCES + LONG_LINES),
    }
    results = run_each_in_process(*[(argv, "\n".join(lines) + "\n") for argv, lines in cases.values()])
    for name, result in zip(cases, results):
        assert result.returncode == 0, (name, result.stderr[-2000:])
    return {name: result.stdout.split("\n")[:-1] for name, result in zip(cases, results)}, results[2].stderr, kept


def test_checkpoint_latest_best_and_the_default(runs):
    outputs, _, _ = runs
    best = outputs["best"][: len(SENTENCES)]
    assert best == ["un six", "six un", "six six un"]  # the trained model, word for word
    assert outputs["latest"] == [swap_words(line) for line in best] != best
    assert outputs["default"][: len(SENTENCES)] == best  # --checkpoint best is the default


def test_checkpoint_averaged_before_averaging_is_a_clear_error(two_checkpoints, capsys):
    from gnmt_tf.cli.translate import main

    assert main(["--model-dir", two_checkpoints, "--checkpoint", "averaged"]) == 2
    captured = capsys.readouterr()
    [line] = captured.err.splitlines()
    assert line.startswith("error: ") and "has no averaged checkpoint yet" in line and two_checkpoints in line
    assert "gnmt_tf" in line and "average" in line  # says what to run
    assert captured.out == ""


def test_long_inputs_are_truncated_with_a_warning_naming_the_count(runs):
    outputs, stderr, kept = runs
    warnings = [line for line in stderr.splitlines() if line.startswith("warning:")]
    # "one two three four" and "seven six five four three" have more than 3 wordpieces; the rest fewer.
    assert warnings == ["warning: 2 input line(s) longer than 3 wordpieces were truncated (--max-input-length)"]
    lines = outputs["default"][len(SENTENCES):]
    assert len(lines) == len(LONG_LINES)  # one line per input line, the blank one blank
    assert lines[1] == "neuf" and lines[3] == ""
    # A truncated line translates as its first 3 wordpieces alone do.
    assert lines == outputs["best"][len(SENTENCES):]
    assert kept[0] != LONG_LINES[0] and kept[1] == LONG_LINES[1]


@pytest.mark.parametrize("where", ["directory", "missing", "unreadable"])
def test_an_input_it_cannot_read_is_one_error_line_naming_it(where, trained_number_model, tmp_path, capsys):
    from gnmt_tf.cli.translate import main

    model_dir, _ = trained_number_model
    path = tmp_path / "in.txt"
    if where == "directory":
        path.mkdir()
    elif where == "unreadable":
        path.write_text("one\n", encoding="utf-8")
        path.chmod(0)
        if os.access(path, os.R_OK):
            pytest.skip("this user reads files without read permission (root)")
    output = tmp_path / "out.txt"
    assert main(["--model-dir", model_dir, "--input", str(path), "--output", str(output)]) == 2
    captured = capsys.readouterr()
    [line] = captured.err.splitlines()
    assert line.startswith("error: ") and str(path) in line and "Traceback" not in captured.err
    assert captured.out == "" and not output.exists()


def test_an_output_it_cannot_write_is_one_error_line_naming_it(trained_number_model, tmp_path, capsys):
    from gnmt_tf.cli.translate import main

    model_dir, _ = trained_number_model
    source = tmp_path / "in.txt"
    source.write_text("one\n", encoding="utf-8")
    for output in (tmp_path, tmp_path / "no" / "such" / "out.txt"):
        assert main(["--model-dir", model_dir, "--input", str(source), "--output", str(output)]) == 2
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith("error: ") and str(output) in line


# "three \xff four": a Latin-1 "ÿ" where UTF-8 is expected.
NOT_UTF8 = b"one two\nthree \xff four\nfive\n"


def test_input_that_is_not_utf8_is_an_error_naming_the_file_and_line(trained_number_model, tmp_path, capsys,
                                                                     monkeypatch):
    from gnmt_tf.cli.translate import main

    model_dir, _ = trained_number_model
    path = tmp_path / "latin1.txt"
    path.write_bytes(NOT_UTF8)
    assert main(["--model-dir", model_dir, "--input", str(path), "--output", str(tmp_path / "out.txt")]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines()[-1] == (
        f"error: {path} line 2 is not UTF-8 (byte 0xff at character 7); convert the input to UTF-8, or pass "
        "--encoding-errors replace to read such bytes as U+FFFD")
    assert "Traceback" not in captured.err and (tmp_path / "out.txt").read_text() == ""  # nothing translated

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(NOT_UTF8), encoding="utf-8"))
    assert main(["--model-dir", model_dir]) == 2
    last_line = capsys.readouterr().err.splitlines()[-1]
    assert last_line.startswith("error: <stdin> line 2 is not UTF-8 (byte 0xff")


def test_encoding_errors_replace_reads_undecodable_bytes_as_u_fffd(trained_number_model, tmp_path):
    from gnmt_tf.cli.translate import main

    model_dir, _ = trained_number_model
    replacing, of_replaced = outputs_replacing_and_of_replaced(main, model_dir, tmp_path, NOT_UTF8,
                                                               "one two\nthree \ufffd four\nfive\n")
    assert replacing == of_replaced and len(replacing) == 3 and replacing[2] == "cinq"


def test_the_count_of_translated_lines_is_worded_for_one_and_for_many():
    from gnmt_tf.cli.translate import _lines

    assert (_lines(1), _lines(0), _lines(1234)) == ("1 line", "0 lines", "1,234 lines")
