"""Every benchmark script still loads against today's package and answers --help.

The benchmarks run for minutes to hours, outside the test suite; a script whose imports fell
behind a refactoring (a helper renamed in quality_benchmark, say) would otherwise be found
broken only by whoever runs it next.
"""

import glob
import os

import pytest

from helpers import ROOT, load_benchmark

SCRIPTS = sorted(os.path.basename(path)[:-3] for path in glob.glob(os.path.join(ROOT, "benchmarks", "*_benchmark.py")))


def test_the_benchmarks_are_found():
    assert "quality_benchmark" in SCRIPTS and "training_throughput_benchmark" in SCRIPTS


@pytest.mark.parametrize("name", SCRIPTS)
def test_benchmark_script_loads_and_prints_its_usage(name, capsys):
    tool = load_benchmark(name)
    with pytest.raises(SystemExit) as stopped:
        tool.main(["--help"])
    assert stopped.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_a_worker_runs_with_the_environment_its_scheme_asks_for(tmp_path):
    """A scheme such as the throughput benchmark's onednn_off differs only in its worker's environment,
    which TensorFlow reads as it loads: the worker process must start with it, and others without."""
    harness = load_benchmark("harness")
    script = tmp_path / "worker.py"
    script.write_text("import json, os\nprint(json.dumps([os.environ.get('TF_ENABLE_ONEDNN_OPTS'), "
                      "os.environ.get('PATH') is not None]))\n")
    answer, info = harness.run_in_worker_process(str(script), 1, [], env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert answer == ["0", True]  # the scheme's variable, and the rest of the environment kept
    answer, _ = harness.run_in_worker_process(str(script), 1, [])
    assert answer == [os.environ.get("TF_ENABLE_ONEDNN_OPTS"), True]
    assert info["threads"] == 1


def test_the_throughput_benchmark_applies_its_overrides_before_any_worker_starts(monkeypatch, capsys):
    """``--set`` changes the config the batches and the models are made from: a value the config
    refuses stops the command with the config's message, and no worker is started."""
    tool = load_benchmark("training_throughput_benchmark")

    def no_worker(*args, **kwargs):
        raise AssertionError("a worker started")

    monkeypatch.setattr(tool, "run_in_worker_process", no_worker)
    assert tool.main(["--schemes", "default", "--set", "data.bucket_width=0"]) == 2
    assert "bucket_width" in capsys.readouterr().err


@pytest.mark.parametrize("scheme", ["baseline", "baseline_bfloat16"])
def test_the_throughput_benchmark_times_older_code_only_with_its_checkout(scheme, capsys):
    """A scheme that runs another checkout's code needs ``--baseline DIR``, and ``--baseline`` needs one."""
    tool = load_benchmark("training_throughput_benchmark")
    with pytest.raises(SystemExit):
        tool.parse_args(["--schemes", "default", scheme])
    assert "--baseline DIR go together" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tool.parse_args(["--schemes", "default", "--baseline", ROOT])
    assert "--baseline DIR go together" in capsys.readouterr().err
    assert tool.parse_args(["--schemes", scheme, "--baseline", ROOT]).baseline == ROOT
