"""benchmarks/pareto_benchmark.py without training or exporting: how systems are named on the command line,
which points are on the Pareto frontier, and the table, notes and picture of a recorded sitting."""

import itertools
import json
import random

import pytest

from helpers import load_benchmark


@pytest.fixture(scope="module")
def tool():
    return load_benchmark("pareto_benchmark")


def test_a_system_is_a_model_an_ensemble_or_the_last_checkpoints_of_one(tool):
    System = tool.System
    assert tool.parse_system("teacher1=runs/a") == System("teacher1", ("runs/a",), ("best",))
    assert tool.parse_system("ens=runs/a+runs/b@latest") == System("ens", ("runs/a", "runs/b"), ("best", "latest"))
    assert tool.parse_system("last4=runs/a@last4") == System("last4", ("runs/a",), ("best",), 4)
    assert tool.parse_system("runs/student") == System("runs-student", ("runs/student",), ("best",))
    assert [tool.parse_system(text).kind for text in ("a=x", "a=x+y", "a=x@last2")] == [
        "single", "ensemble", "last_checkpoints"]
    for bad in ("a=x@last2+y", "a=x@newest", "a=x+", "a b=x", "=x"):
        with pytest.raises(ValueError):
            tool.parse_system(bad)


def test_a_system_reaches_the_export_as_the_export_command_would_be_given_it(tool):
    from types import SimpleNamespace

    from gnmt_tf.cli.common import ensemble_members

    ensemble = tool.parse_system("e=runs/a+runs/b@averaged").export_members()
    assert ensemble_members(SimpleNamespace(**ensemble)) == (["runs/a", "runs/b"], ["best", "averaged"])
    # the newest K checkpoints: the export command's --last-checkpoints, which takes no --checkpoint
    assert tool.parse_system("l=runs/a@last3").export_members() == {
        "model_dir": ["runs/a"], "checkpoint": None, "last_checkpoints": 3}


def _dominated(point, points):
    return any(other[0] >= point[0] and other[1] >= point[1] and other != point for other in points)


def test_the_frontier_is_every_point_no_other_point_beats_on_both(tool):
    rng = random.Random(0)
    for size in itertools.chain(range(6), [20, 50] * 20):
        points = [(rng.randint(1, 6), rng.randint(1, 6)) for _ in range(size)]  # many ties
        expected = [i for i, point in enumerate(points) if not _dominated(point, points)]
        assert tool.pareto_frontier(points) == expected, points


def _row(system, artifact, bleu, b1_t2, errors=(), **extra):
    return {"sitting": "2026-12-01T10:00:00", "commit": "abc1234", "cpu": {"model": "a CPU"},
            "system": system, "artifact": artifact, "size_mb": 10.0,
            "test": {"path": "runs/p/test.tsv", "pairs": 1000, "own_test_splits": {f"runs/{system}": "same"}},
            "settings": {"threads": [1, 2], "batches": [1, 32]},
            "words_per_second": {"b1_t1": 50.0, "b1_t2": b1_t2, "b32_t1": 300.0, "b32_t2": 400.0},
            "test_bleu": {"bleu": bleu, "bleu_95": [bleu - 1, bleu + 1]}, "errors": list(errors), **extra}


def _sitting():
    check = {"float_bleu": 30.0, "int8_bleu": 29.2, "drop": 0.8, "tolerance": 0.5, "within_tolerance": False}
    failed = _row("ensemble", "tflite_float", 34.0, 20.0, errors=[{"task": "export", "error": "Traceback\nboom"}])
    del failed["test_bleu"], failed["words_per_second"], failed["size_mb"]
    student = _row("student", "tflite_int8", 30.0, 300.0)
    student["test"]["own_test_splits"] = {"runs/student": "other"}
    return [_row("teacher", "saved_model_float", 32.0, 100.0),
            _row("teacher", "saved_model_int8", 29.0, 90.0, export={"int8_dev_check": check}),  # dominated
            _row("ensemble", "saved_model_float", 34.0, 50.0), failed, student]


def test_the_summary_table_marks_the_frontier_and_notes_what_it_cannot_show(tool):
    text = tool.markdown(_sitting())
    lines = text.splitlines()
    assert "| system | artifact | test BLEU | words/s b1/t1 | words/s b1/t2 | words/s b32/t1 | words/s b32/t2 " \
           "| size MB | Pareto (b1/t2) |" in lines
    assert "| teacher | saved_model_float | 32.00 | 50 | 100 | 300 | 400 | 10.0 | yes |" in lines
    assert "| teacher | saved_model_int8 | 29.00 | 50 | 90 | 300 | 400 | 10.0 |  |" in lines
    assert "| ensemble | tflite_float | - | - | - | - | - | - |  |" in lines
    assert "- ensemble as tflite_float: export failed: boom" in lines
    assert any(line.startswith("- teacher as saved_model_int8: loses 0.8 dev BLEU") for line in lines)
    assert any(line.startswith("- student: runs/student keeps another test split") for line in lines)
    assert [row["system"] for row in tool.frontier_rows(_sitting(), "b1_t2")] == ["teacher", "ensemble", "student"]


def test_the_summary_reads_the_newest_sitting_of_the_results_file(tool, tmp_path, capsys):
    harness = load_benchmark("harness")
    path = str(tmp_path / "pareto.json")
    older = dict(_row("old", "tflite_float", 1.0, 1.0), sitting="2026-11-01T00:00:00")
    for row in [older, *_sitting()]:
        harness.record(path, row, "pareto_benchmark")
    assert [row["system"] for row in tool.sitting_rows(path)] == ["teacher", "teacher", "ensemble", "ensemble",
                                                                  "student"]
    assert [row["system"] for row in tool.sitting_rows(path, ["2026-11-01T00:00:00"])] == ["old"]
    both = tool.sitting_rows(path, ["2026-11-01T00:00:00", _sitting()[0]["sitting"]])
    assert [row["system"] for row in both] == ["old", "teacher", "teacher", "ensemble", "ensemble", "student"]
    with pytest.raises(SystemExit, match="no runs of sitting 2026-10-01"):
        tool.sitting_rows(path, ["2026-10-01T00:00:00"])
    assert tool.main(["--summary", "--output", path, "--picture", str(tmp_path / "pareto.png")]) == 0
    assert "| ensemble | saved_model_float | 34.00 |" in capsys.readouterr().out
    assert (tmp_path / "pareto.png").read_bytes().startswith(b"\x89PNG")
    with open(path, encoding="utf-8") as handle:
        assert json.load(handle)["benchmark"] == "pareto_benchmark"


def test_an_int8_export_check_is_read_from_the_exporter_log(tool):
    log = ["writing tflite int8 to x", "checking dev BLEU on 500 sentences (float model vs int8 export)",
           "checked: dev BLEU float 31.20, int8 30.50 (drop +0.70, tolerance inf)"]
    assert tool.int8_dev_check(log, 0.5) == {"float_bleu": 31.2, "int8_bleu": 30.5, "drop": 0.7, "tolerance": 0.5,
                                             "within_tolerance": False}
    assert tool.int8_dev_check(["no such line"], 0.5) == {"log": None, "tolerance": 0.5}


def test_machine_paths_are_left_out_of_what_a_row_keeps(tool):
    from helpers import ROOT

    text = f"exporting {ROOT}/runs/a/best/ckpt-1 to /tmp/w/x/1"
    assert tool.portable_text(text, "/tmp/w") == "exporting runs/a/best/ckpt-1 to WORKDIR/x/1"


def test_the_command_line_refuses_what_would_fail_every_row(tool, tmp_path, capsys):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.yaml").write_text("")
    model = str(tmp_path / "m")
    for argv, message in ((["--system", f"a={model}", "--system", f"a={model}"], "names must differ"),
                          (["--system", "a=/no/such/dir"], "no trained model directory"),
                          (["--system", f"a={model}"], "no test split"),
                          (["--system", f"a={model}", "--artifacts", "keras"], "unknown keras")):
        with pytest.raises(SystemExit):
            tool.parse_args(argv)
        assert message in capsys.readouterr().err
    (tmp_path / "m" / "test.tsv").write_text("a\tb\n")
    args = tool.parse_args(["--system", f"a={model}", "--threads", "1,2", "--artifacts", "tflite_float,tflite_int8"])
    assert (args.threads, args.artifacts, args.test) == ([1, 2], ["tflite_float", "tflite_int8"],
                                                         str(tmp_path / "m" / "test.tsv"))
    assert tool.speed_passes(args) == [(1, 100), (32, 200)]
