"""python -m gnmt_tf.distill (gnmt_tf.training.distillation): each sentence's student target is the teacher's
n-best entry nearest the reference by sentence BLEU; a run killed at any moment goes on where it stopped
and ends with the file an uninterrupted run writes; a run of other inputs or of teachers that cannot
translate together is refused; the teacher's dev and test pairs stay out of the student's data."""

import json
import os
import shutil

import pytest
import sacrebleu
from helpers import FRENCH_NUMBERS, number_word_pairs, run_in_process

from gnmt_tf import model_files
from gnmt_tf.cli import distill as distill_command
from gnmt_tf.data.catalogs import CatalogReport
from gnmt_tf.training.distillation import choose, sentence_bleu_metric

pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test

CHUNK = 8
SEARCH = ["--n-best", "4", "--beamsize", "1e9", "--chunk", str(CHUNK)]  # no pruning: real 4-best lists


def write_pairs(path, pairs):
    path.write_text("".join(f"{source}\t{target}\n" for source, target in pairs), encoding="utf-8")
    return str(path)


def command(model_dir, output, *extra):
    return ["python", "-m", "gnmt_tf.distill", "--model-dir", str(model_dir), "--output", str(output),
            *SEARCH, *extra]


def wrong_first_word(target):
    """The target with its first word another number: a reference the teacher does not give."""
    first, *rest = target.split()
    return " ".join([FRENCH_NUMBERS[(FRENCH_NUMBERS.index(first) + 1) % 10], *rest])


def wrong_references(pairs):
    return [(source, wrong_first_word(target)) for source, target in pairs]


class Interrupt:
    """An ``after_chunk`` that stops the run as a kill would, once ``chunks`` chunks are on disk."""

    def __init__(self, chunks):
        self.chunks, self.seen = chunks, 0

    def __call__(self, progress):
        self.seen += 1
        if self.seen == self.chunks:
            raise KeyboardInterrupt


def interrupted(argv, chunks):
    """Run the command (in this process) until ``chunks`` chunks are written, then stop it."""
    args = distill_command.build_parser().parse_args(argv[3:])
    with pytest.raises(KeyboardInterrupt):
        distill_command.distill(args, after_chunk=Interrupt(chunks))


def test_the_choice_is_the_best_sentence_bleu_ties_going_to_the_higher_rank():
    metric = sentence_bleu_metric()
    reference = "trois un quatre cinq"
    # The exact reference, ranked third, beats the teacher's first two.
    exact = ["trois un quatre", "un trois quatre cinq", "trois un quatre cinq"]
    assert choose(reference, exact, metric).target == "trois un quatre cinq"
    # Two entries that score alike: the higher-ranked one.
    tied = ["trois un", "trois un quatre six", "trois un quatre deux"]
    scores = [sacrebleu.sentence_bleu(candidate, [reference]).score for candidate in tied]
    assert scores[1] == scores[2] > scores[0]
    choice = choose(reference, tied, metric)
    assert choice.target == "trois un quatre six"
    assert (choice.one_best.score, choice.chosen.score) == (scores[0], scores[1])
    # No entry: the reference.
    assert choose(reference, [], metric).target == reference


def test_the_choice_is_sacrebleus_sentence_bleu_argmax():
    metric = sentence_bleu_metric()
    pairs = number_word_pairs(60, seed=3, min_len=1)
    for index in range(0, 60, 4):
        reference = pairs[index][1]
        candidates = [target for _, target in pairs[index + 1:index + 4]] + [reference[: len(reference) // 2]]
        scores = [sacrebleu.sentence_bleu(candidate, [reference]).score for candidate in candidates]
        assert choose(reference, candidates, metric).target == candidates[scores.index(max(scores))]


def test_a_killed_run_resumes_to_the_uninterrupted_runs_file(trained_number_model, tmp_path):
    model_dir, _ = trained_number_model
    train = write_pairs(tmp_path / "train.tsv", number_word_pairs(40, seed=5, min_len=2))
    whole, resumed = tmp_path / "whole.tsv", tmp_path / "resumed.tsv"
    run = run_in_process(command(model_dir, whole, "--train", train))
    assert run.returncode == 0, run.stderr
    expected = whole.read_bytes()
    assert expected.count(b"\n") > 3 * CHUNK

    interrupted(command(model_dir, resumed, "--train", train), chunks=2)
    progress = json.loads((tmp_path / "resumed.tsv.progress.json").read_text())
    assert progress["lines"] == 2 * CHUNK and resumed.read_bytes() == expected[:progress["bytes"]]
    with open(resumed, "a", encoding="utf-8") as handle:
        handle.write("seven three\tsept tr")  # a kill mid-write: a partial line
    run = run_in_process(command(model_dir, resumed, "--train", train))
    assert run.returncode == 0, run.stderr
    assert f"resuming {resumed} after {2 * CHUNK}" in run.stderr
    assert resumed.read_bytes() == expected
    assert not os.path.exists(f"{resumed}.progress.json")
    summaries = [json.loads(open(f"{path}.summary.json").read()) for path in (whole, resumed)]
    for summary in summaries:
        del summary["output"], summary["minutes"]
    assert summaries[0] == summaries[1] and summaries[0]["sentences"] == expected.count(b"\n")


def test_a_changed_input_is_refused_unless_restarted(trained_number_model, tmp_path):
    model_dir, _ = trained_number_model
    pairs = wrong_references(number_word_pairs(20, seed=6, min_len=2))
    output = tmp_path / "distilled.tsv"
    interrupted(command(model_dir, output, "--train", write_pairs(tmp_path / "a.tsv", pairs)), chunks=1)
    written = output.read_bytes()
    source, target = pairs[-1]
    changed = write_pairs(tmp_path / "b.tsv", pairs[:-1] + [(source, wrong_first_word(target))])

    run = run_in_process(command(model_dir, output, "--train", changed))
    assert run.returncode == 2
    assert "records a distillation of other pairs" in run.stderr and "--restart" in run.stderr
    assert output.read_bytes() == written
    run = run_in_process(command(model_dir, output, "--train", changed, "--restart"))
    assert run.returncode == 0, run.stderr
    assert len(output.read_text(encoding="utf-8").splitlines()) == 20
    assert json.loads(open(f"{output}.summary.json").read())["sentences"] == 20


def test_more_entries_than_the_beam_holds_is_a_usage_error(tmp_path):
    run = run_in_process(["python", "-m", "gnmt_tf.distill", "--model-dir", str(tmp_path), "--output",
                          str(tmp_path / "out.tsv"), "--n-best", "8", "--beam-width", "4"])
    assert run.returncode == 2 and "--n-best 8 exceeds --beam-width 4" in run.stderr


def test_teachers_of_different_vocabularies_are_refused(trained_number_model, tmp_path):
    model_dir, _ = trained_number_model
    other = tmp_path / "other"
    shutil.copytree(model_dir, other)
    lines = (other / "wordpieces.txt").read_text(encoding="utf-8").split("\n")
    lines[10], lines[11] = lines[11], lines[10]
    (other / "wordpieces.txt").write_text("\n".join(lines), encoding="utf-8")
    train = write_pairs(tmp_path / "train.tsv", number_word_pairs(10, seed=7))
    run = run_in_process(command(model_dir, tmp_path / "out.tsv", "--model-dir", str(other), "--train",
                                 train))
    assert run.returncode == 2
    assert f"{model_dir} and {other} cannot translate as one ensemble" in run.stderr
    assert not os.path.exists(tmp_path / "out.tsv")


def test_the_targets_are_the_teachers_and_its_held_out_pairs_stay_out(trained_number_model, tmp_path,
                                                                      monkeypatch):
    from gnmt_tf.inference.evaluation import load_translator

    model_dir, _ = trained_number_model
    pairs = wrong_references(number_word_pairs(30, seed=8, min_len=3))
    held_out = model_files.read_dev_split(model_dir)[:4] + model_files.read_test_split(model_dir)[:4]
    built_in = held_out[:4] + pairs[:15] + held_out[4:] + pairs[15:]
    report = CatalogReport("en", "fr", "catalogs", pairs=len(built_in))
    monkeypatch.setattr("gnmt_tf.data.catalogs.load_catalog_pairs", lambda **languages: (built_in, report))
    output = tmp_path / "distilled.tsv"
    run = run_in_process(command(model_dir, output))  # no --train: the built-in data
    assert run.returncode == 0, run.stderr

    lines = [line.split("\t") for line in output.read_text(encoding="utf-8").splitlines()]
    assert [source for source, _ in lines] == [source for source, _ in pairs]  # no dev or test pair, in order
    translator, _, _ = load_translator(model_dir, "best")
    one_best = translator.translate([source for source, _ in pairs], beam_width=4, beamsize=1e9)
    from_teacher = sum(target == translation.text for (_, target), translation in zip(lines, one_best))
    assert from_teacher >= 0.8 * len(pairs)
    summary = json.loads(open(f"{output}.summary.json").read())
    assert summary["changed"] == sum(target != reference for (_, target), (_, reference) in zip(lines, pairs))
    assert summary["changed"] >= 0.8 * len(pairs)
    assert summary["bleu_distilled"] >= summary["bleu_teacher_1best"]
