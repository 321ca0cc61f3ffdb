"""Every benchmark's results file is a list of runs, each with the sitting it was measured in.

``harness.write_report`` appends a run (the report plus its date, commit, CPU and command) to
``{"benchmark": SCRIPT, "runs": [...]}``, never rewriting an earlier run; the files kept in
benchmarks/results/ all have that shape, so a doc cites a figure as ``runs[N]....``.
"""

import datetime
import glob
import json
import os
import re

import pytest

from helpers import ROOT, load_benchmark

RESULTS = sorted(glob.glob(os.path.join(ROOT, "benchmarks", "results", "*.json")))
SITTING = ("date", "commit", "cpu", "command")


@pytest.fixture
def harness():
    return load_benchmark("harness")


def script(name):
    return os.path.join(ROOT, "benchmarks", f"{name}.py")


def test_a_report_is_appended_as_a_run_with_its_sitting(harness, tmp_path):
    path = str(tmp_path / "results" / "x.json")
    first = harness.write_report(path, {"results": [{"threads": 1, "ms": 2.5}]}, script("decode_benchmark"),
                                 ["--threads", "1", "--output", path])
    with open(path, encoding="utf-8") as handle:
        after_one = json.load(handle)
    second = harness.write_report(path, {"results": [{"threads": 2, "ms": 1.5}]}, script("decode_benchmark"),
                                  ["--threads", "2", "--output", os.path.join(ROOT, "runs", "x.json")])
    with open(path, encoding="utf-8") as handle:
        results = json.load(handle)

    assert results["benchmark"] == "decode_benchmark"
    assert results["runs"] == [first, second]
    assert results["runs"][0] == after_one["runs"][0]  # the earlier run untouched
    for run in results["runs"]:
        assert set(SITTING) <= set(run)
        assert datetime.datetime.fromisoformat(run["date"]).isoformat(timespec="seconds") == run["date"]
        assert re.fullmatch(r"[0-9a-f]{7,}(\+changes)?", run["commit"])
        assert run["cpu"] == harness.cpu_description()
    assert [run["results"][0]["threads"] for run in results["runs"]] == [1, 2]
    assert first["command"] == f"python benchmarks/decode_benchmark.py --threads 1 --output {path}"
    # A path inside the checkout is written relative to it, as the command is typed from the checkout.
    assert second["command"] == "python benchmarks/decode_benchmark.py --threads 2 --output runs/x.json"


def test_an_interrupted_write_leaves_the_old_file(harness, tmp_path, monkeypatch):
    path = str(tmp_path / "x.json")
    harness.write_report(path, {"figure": 1}, script("decode_benchmark"), [])
    with open(path, "rb") as handle:
        before = handle.read()

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    def half_written(results, handle, **kwargs):
        handle.write(json.dumps(results)[:20])
        raise KeyboardInterrupt

    for stage, broken in (("replace", killed), ("dump", half_written)):
        with monkeypatch.context() as patch:
            patch.setattr(harness.os if stage == "replace" else harness.json, stage, broken)
            with pytest.raises(KeyboardInterrupt):
                harness.write_report(path, {"figure": 2}, script("decode_benchmark"), [])
        with open(path, "rb") as handle:
            assert handle.read() == before, stage
        assert os.listdir(tmp_path) == ["x.json"], stage  # no half-written file left beside it


def test_a_file_of_another_shape_or_benchmark_is_not_overwritten(harness, tmp_path):
    flat, other = tmp_path / "flat.json", tmp_path / "other.json"
    flat.write_text(json.dumps({"results": [1]}))
    harness.write_report(str(other), {"figure": 1}, script("shortlist_benchmark"), [])
    for path in (flat, other):
        before = path.read_text()
        with pytest.raises(ValueError, match="give another --output") as refused:
            harness.write_report(str(path), {"figure": 2}, script("decode_benchmark"), [])
        assert path.read_text() == before
        kept = re.search(r"this run is in (\S+)$", str(refused.value)).group(1)
        with open(kept, encoding="utf-8") as handle:  # the run measured is kept apart, not lost
            assert json.load(handle)["runs"][0]["figure"] == 2


def test_the_quality_benchmark_records_through_the_harness():
    quality = load_benchmark("quality_benchmark")
    for name in ("commit", "record", "load"):
        assert getattr(quality, name).__module__ == "harness"


@pytest.mark.parametrize("path", RESULTS, ids=os.path.basename)
def test_every_results_file_is_a_list_of_runs_with_their_sitting(path):
    with open(path, encoding="utf-8") as handle:
        results = json.load(handle)
    assert isinstance(results, dict) and isinstance(results.get("runs"), list) and results["runs"]
    assert os.path.exists(script(results["benchmark"])), "the benchmark is the script that writes the file"
    for number, run in enumerate(results["runs"]):
        where = f"runs[{number}]"
        assert set(SITTING) <= set(run), where
        assert datetime.datetime.fromisoformat(run["date"]).isoformat(timespec="seconds") == run["date"], where
        assert re.fullmatch(r"[0-9a-f]{7,}(\+changes)?", run["commit"]), where
        assert run["cpu"] is None or isinstance(run["cpu"], dict), where
        command = run["command"]
        assert command is None or command.startswith(f"python benchmarks/{results['benchmark']}.py"), where
        assert command is None or ROOT not in command, where


def test_every_benchmark_script_keeps_its_results_through_the_harness():
    """No script writes its results file itself: they all append through harness.write_report."""
    for path in glob.glob(os.path.join(ROOT, "benchmarks", "*_benchmark.py")):
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        if os.path.basename(path) == "quality_benchmark.py":
            assert "record(" in text
            continue
        assert "write_report(" in text, path
        assert not re.search(r"json\.dump\(", text), path


def test_paths_kept_in_results_are_not_machine_paths(harness):
    """The model paths the artifact, Pareto and TFLite profile benchmarks record: relative to the checkout or
    the home folder, never this machine's absolute path."""
    home = os.path.expanduser("~")
    assert harness.portable_path(os.path.join(ROOT, "runs", "en-fr")) == os.path.join("runs", "en-fr")
    assert harness.portable_path("runs/en-fr") == "runs/en-fr"
    if home not in ("", "/") and not ROOT.startswith(home + os.sep):
        assert harness.portable_path(os.path.join(home, "models", "x.tflite")) == "~/models/x.tflite"
    for script_name in ("artifact_benchmark", "pareto_benchmark", "tflite_profile_benchmark"):
        with open(script(script_name), encoding="utf-8") as handle:
            assert "portable_path(" in handle.read(), script_name
