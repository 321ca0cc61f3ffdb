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
