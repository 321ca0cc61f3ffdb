"""python -m gnmt_tf.score on input it cannot read as pairs: bytes that are not UTF-8 (an error naming the
file and line, or U+FFFD with --encoding-errors replace) and lines that are not SOURCE<TAB>TRANSLATION.

The input is read before the model is loaded: the refusals need no model."""

import io
import sys

import pytest
from undecodable_input import outputs_replacing_and_of_replaced

from gnmt_tf.cli.score import main

pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test

NOT_UTF8 = b"one two\tun deux\nthree \xff\ttrois\n"  # a Latin-1 byte in line 2's source


def last_error_line(capsys):
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    return captured.err.splitlines()[-1]


def test_a_pair_that_is_not_utf8_is_an_error_naming_the_file_and_line(tmp_path, capsys, monkeypatch):
    path = tmp_path / "pairs.tsv"
    path.write_bytes(NOT_UTF8)
    missing_model = str(tmp_path / "no_model")
    assert main(["--model-dir", missing_model, "--input", str(path)]) == 2
    assert last_error_line(capsys) == (
        f"error: {path} line 2 is not UTF-8 (byte 0xff at character 7); convert the input to UTF-8, or pass "
        "--encoding-errors replace to read such bytes as U+FFFD")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(NOT_UTF8), encoding="utf-8"))
    assert main(["--model-dir", missing_model]) == 2
    assert last_error_line(capsys).startswith("error: <stdin> line 2 is not UTF-8")


def test_a_line_that_is_not_a_pair_is_an_error_naming_the_file_and_line(tmp_path, capsys):
    path = tmp_path / "pairs.tsv"
    path.write_text("one\tun\ntwo\tdeux\textra\n", encoding="utf-8")
    assert main(["--model-dir", str(tmp_path / "no_model"), "--input", str(path)]) == 2
    assert last_error_line(capsys) == (
        f"error: {path} line 2: expected SOURCE<TAB>TRANSLATION, found 3 tab-separated column(s)")


def test_encoding_errors_replace_scores_undecodable_bytes_as_u_fffd(trained_number_model, tmp_path):
    model_dir, _ = trained_number_model
    replacing, of_replaced = outputs_replacing_and_of_replaced(main, model_dir, tmp_path, NOT_UTF8,
                                                               "one two\tun deux\nthree \ufffd\ttrois\n")
    assert replacing == of_replaced and len(replacing) == 2
    assert all(line.count("\t") == 2 for line in replacing)  # score, log P(Y|X), length
