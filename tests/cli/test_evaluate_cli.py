"""python -m gnmt_tf.evaluate --hypotheses: the file holds translate's translations, the BLEU printed is
theirs, and the decoding speed is printed with it."""

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
