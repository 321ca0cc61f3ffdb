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
from typing import Any, Dict, List, Optional, Tuple


# The instructions that decide a training step's speed here: float32 products run on AVX2 or AVX-512,
# bfloat16 ones at about twice the rate only with AVX-512 BF16 or AMX (gnmt_tf/training/precision.py).
SPEED_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16")


def cpu_description(cpuinfo: str = "/proc/cpuinfo") -> Dict:
    """The CPU's model name and which of :data:`SPEED_FLAGS` it has, recorded with each result:
    the same command runs about twice as fast on a CPU with AVX-512 BF16 as on one with AVX2 alone,
    so a figure says nothing without the machine it was measured on."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:  # not Linux: nothing to read
        return {"model": None, "flags": None}
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                  if line.startswith("model name")), None)
    flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines()
                      if line.startswith("flags")), []))
    return {"model": model, "flags": [flag for flag in SPEED_FLAGS if flag in flags]}


class WorkerFailed(RuntimeError):
    """A worker process exited with an error (its stderr tail is the message)."""


def run_in_worker_process(script: str, threads: int, worker_args: List[str], timeout: float = 7200,
                          env: Optional[Dict[str, str]] = None) -> Tuple[Any, Dict]:
    """Run one worker, with ``env`` added to this process' environment; returns (its JSON answer, the
    run's duration and load averages).

    The load average (1, 5, 15 min) before and after is recorded because other
    processes on the machine skew timings (it includes the worker's own threads).
    """
    command = [sys.executable, os.path.abspath(script), "--worker", "--threads", str(threads), *worker_args]
    print(f"measuring with {threads} thread(s) ...", file=sys.stderr, flush=True)
    load_before, started = os.getloadavg(), time.time()
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **env} if env else None)
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
