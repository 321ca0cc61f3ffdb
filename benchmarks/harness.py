"""What every benchmark here shares: one worker process per TensorFlow thread count.

TensorFlow fixes its thread pools when it starts, so each thread setting is
measured in a fresh process: ``SCRIPT --worker --threads N ...`` prints its
results as JSON on the last line of stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List, Tuple


class WorkerFailed(RuntimeError):
    """A worker process exited with an error (its stderr tail is the message)."""


def run_in_worker_process(script: str, threads: int, worker_args: List[str], timeout: float = 7200) -> Tuple[Any, Dict]:
    """Run one worker; returns (its JSON answer, the run's duration and load averages).

    The load average (1, 5, 15 min) before and after is recorded because other
    processes on the machine skew timings (it includes the worker's own threads).
    """
    command = [sys.executable, os.path.abspath(script), "--worker", "--threads", str(threads), *worker_args]
    print(f"measuring with {threads} thread(s) ...", file=sys.stderr, flush=True)
    load_before, started = os.getloadavg(), time.time()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise WorkerFailed(done.stderr[-3000:])
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    info = {
        "threads": threads,
        "minutes": round((time.time() - started) / 60, 1),
        "load_average_before": [round(v, 2) for v in load_before],
        "load_average_after": [round(v, 2) for v in os.getloadavg()],
    }
    return answer, info


def write_report(path: str, report: Dict) -> None:
    """Write a benchmark's results file (JSON), making its folder, and say where."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=2)
    print(f"wrote {path}", file=sys.stderr)
