"""python -m gnmt_tf.evaluate --hypotheses: the file holds translate's translations, the BLEU printed is
theirs, and the decoding speed is printed with it; a test set it cannot score whole is refused, naming its
file and line."""

import os
import re
import sys

import pytest
import sacrebleu
from helpers import run_each_in_process

pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test


def read_pairs(path):
    with open(path, encoding="utf-8") as handle:
        return [line.rstrip("\n").split("\t") for line in handle if line.strip()]


def test_hypotheses_file_holds_the_translations_the_printed_bleu_scores(trained_number_model, tmp_path):
    model_dir, _ = trained_number_model
    test = os.path.join(model_dir, "test.tsv")
    pairs = read_pairs(test)
    sources, references = [source for source, _ in pairs], [target for _, target in pairs]
    (tmp_path / "sources.txt").write_text("\n".join(sources) + "\n", encoding="utf-8")
    hypotheses = tmp_path / "hypotheses.txt"
    evaluate, translate = run_each_in_process(
        ([sys.executable, "-m", "gnmt_tf.evaluate", "--model-dir", model_dir, "--test", test,
          "--hypotheses", str(hypotheses)], None),
        ([sys.executable, "-m", "gnmt_tf.translate", "--model-dir", model_dir, "--input", str(tmp_path / "sources.txt")],
         None))
    for result in (evaluate, translate):
        assert result.returncode == 0, result.stderr[-2000:]

    written = hypotheses.read_text(encoding="utf-8").split("\n")
    assert written[-1] == "" and len(written[:-1]) == len(pairs) == 100  # one line per test pair
    assert written[:-1] == translate.stdout.split("\n")[:-1]  # what translate gives for those sources

    # The printed line is sacrebleu's corpus BLEU of that file against the references: score, n-gram
    # precisions, brevity penalty and lengths.
    expected = sacrebleu.corpus_bleu(written[:-1], [references])
    assert evaluate.stdout.splitlines()[0] == str(expected)
    assert evaluate.stdout.splitlines()[1] == "signature: nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:" + \
        sacrebleu.__version__
    assert expected.score > 70  # a model that translates: a wrong file or reference order would score near 0
    # And the decoding speed (--json's sentences_per_second and words_per_second, checked in
    # tests/inference/test_translator.py).
    speeds = re.search(r"^decoding: (\S+) sentences/s, (\S+) words/s \(100 sentences in ", evaluate.stdout,
                       re.M)
    assert speeds and float(speeds[1]) > 0 and float(speeds[2]) > 0, evaluate.stdout


@pytest.mark.parametrize("where", ["directory", "missing_parent"])
def test_a_hypotheses_path_it_cannot_write_fails_before_translating(where, trained_number_model, tmp_path, capsys):
    from gnmt_tf.cli.evaluate import main

    model_dir, _ = trained_number_model
    path = tmp_path if where == "directory" else tmp_path / "no" / "such" / "hypotheses.txt"
    assert main(["--model-dir", model_dir, "--test", os.path.join(model_dir, "test.tsv"),
                 "--hypotheses", str(path)]) == 2
    captured = capsys.readouterr()
    [line] = captured.err.splitlines()[-1:]
    assert line.startswith("error: ") and str(path) in line and "Traceback" not in captured.err
    assert captured.out == ""  # no BLEU: it stopped before translating


def test_a_test_set_it_cannot_read_is_an_error_line(trained_number_model, tmp_path, capsys):
    from gnmt_tf.cli.evaluate import main

    model_dir, _ = trained_number_model
    missing = str(tmp_path / "missing.tsv")
    assert main(["--model-dir", model_dir, "--test", missing]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and missing in captured.err and captured.out == ""


# A test set is scored whole: each malformed one is refused, naming its file and line, before any model is
# loaded (the model directory here does not exist).
MALFORMED_TEST_SETS = {
    "wrong column count": ("one\tun\ntwo\tdeux\tzwei\nthree\ttrois\n",
                           "{path} line 2: expected SOURCE<TAB>REFERENCE, found 3 tab-separated column(s)"),
    "every line bad": ("one un\ntwo deux\n",
                       "{path} line 1: expected SOURCE<TAB>REFERENCE, found 1 tab-separated column(s)"),
    "empty file": ("", "{path} has no lines: a test set needs at least one pair"),
    "empty reference": ("one\tun\ntwo\t \n",
                        "{path} line 2: the reference is empty; every line of a test set must be a pair"),
    "blank line": ("one\tun\n\ntwo\tdeux\n",
                   "{path} line 2: expected SOURCE<TAB>REFERENCE, found 1 tab-separated column(s)"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_TEST_SETS))
def test_a_malformed_test_set_is_an_error_naming_the_file_and_line(case, tmp_path, capsys):
    from gnmt_tf.cli.evaluate import main

    text, message = MALFORMED_TEST_SETS[case]
    path = tmp_path / "test.tsv"
    path.write_text(text, encoding="utf-8")
    assert main(["--model-dir", str(tmp_path / "no_model"), "--test", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"error: {message.format(path=path)}"] and captured.out == ""


def test_a_test_set_line_that_is_not_utf8_is_an_error_naming_it(tmp_path, capsys):
    from gnmt_tf.cli.evaluate import main

    path = tmp_path / "test.tsv"
    path.write_bytes(b"one\tun\nthree\ttr\xe8s\n")
    assert main(["--model-dir", str(tmp_path / "no_model"), "--test", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {path} line 2 is not UTF-8 (byte 0xe8 at character 9)")


def test_aligned_test_files_of_different_lengths_are_an_error_naming_both(tmp_path, capsys):
    from gnmt_tf.cli.evaluate import main

    source, target = tmp_path / "test.en", tmp_path / "test.fr"
    source.write_text("one\ntwo\nthree\n", encoding="utf-8")
    target.write_text("un\ndeux\n", encoding="utf-8")
    assert main(["--model-dir", str(tmp_path / "no_model"), "--test", f"{source},{target}"]) == 2
    assert capsys.readouterr().err == (f"error: {source} and {target} differ in length: {target} ends after "
                                       "line 2; line i of one must translate line i of the other\n")


def test_every_form_of_a_test_set_reads_the_same_pairs(tmp_path):
    """A TSV file, the same gzip-compressed with a byte-order mark and Windows line ends, and aligned
    files."""
    import gzip

    from gnmt_tf.cli.evaluate import read_test_set
    from gnmt_tf.cli.text_files import ENCODING_ERRORS

    pairs = [("one two", "un deux"), ("three", "trois")]
    plain, compressed = tmp_path / "test.tsv", tmp_path / "test.tsv.gz"
    source, target = tmp_path / "test.en", tmp_path / "test.fr"
    plain.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    compressed.write_bytes(gzip.compress(("\ufeff" + "".join(f"{s}\t{t}\r\n" for s, t in pairs)).encode()))
    source.write_text("".join(f" {s}\n" for s, _ in pairs), encoding="utf-8")  # surrounding spaces stripped
    target.write_text("".join(f"{t}\n" for _, t in pairs), encoding="utf-8")
    strict = ENCODING_ERRORS["strict"]
    for spec in (plain, compressed, f"{source},{target}"):
        assert read_test_set(str(spec), strict) == pairs, spec
