"""benchmarks/round_robin_benchmark.py: usage errors, and a real (tiny) run on the fixture export."""

import json
import os
import subprocess
import sys

import pytest

from helpers import load_benchmark

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def tool():
    return load_benchmark("round_robin_benchmark")


@pytest.mark.parametrize("models", [["only=/tmp"], ["a=/tmp", "/tmp"], ["a=/no/such/export", "b=/tmp"]])
def test_bad_model_lists_are_usage_errors(tool, tmp_path, models):
    with pytest.raises(SystemExit) as stopped:
        tool.main(models + ["--sentences", str(tmp_path / "dev.tsv"), "--output", str(tmp_path / "out.json")])
    assert stopped.value.code == 2
    assert not (tmp_path / "out.json").exists()


def test_two_copies_of_one_export_translate_alike(exported_number_model, trained_number_model, tmp_path):
    model_dir, _ = trained_number_model
    output = tmp_path / "round_robin.json"
    # In a process of its own: it sets TensorFlow's thread counts, which only a fresh process can.
    subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "round_robin_benchmark.py"),
                    f"first={exported_number_model}", f"second={exported_number_model}", "--sentences",
                    os.path.join(model_dir, "dev.tsv"), "--count", "6", "--batches", "1", "3", "--rounds", "1",
                    "--output", str(output)], check=True, timeout=300, capture_output=True)
    report = json.loads(output.read_text())
    assert [(r["model"], r["batch"]) for r in report["results"]] == [
        ("first", 1), ("second", 1), ("first", 3), ("second", 3)]
    assert all(r["sentences_per_second"] > 0 for r in report["results"])
    assert [r["identical_to"] for r in report["results"]] == [["second"], ["first"]] * 2
    assert [r["sentences"] for r in report["results"]] == [1, 1, 6, 6]
