"""What every benchmark here shares: one worker process per TensorFlow thread count, and its results file.

TensorFlow fixes its thread pools when it starts, so each thread setting is
measured in a fresh process: ``SCRIPT --worker --threads N ...`` prints its
results as JSON on the last line of stdout.

A benchmark's results file is a list of runs, ``{"benchmark": SCRIPT NAME, "runs": [...]}``: each run
(:func:`write_report`) is appended with the date, commit, CPU and command it was measured with, and
earlier runs are never rewritten (a doc cites one as ``runs[N]...``).
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SITTING = ("date", "commit", "cpu", "command")  # what write_report adds to a report: where it was measured


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


def answer_job(job_json: str, threads: int, workers: Dict) -> int:
    """The worker side of :func:`run_job_in_worker`: run the job's task and print its result as JSON."""
    job = json.loads(job_json)
    print(json.dumps(workers[job.pop("task")](job, threads)))
    return 0


def run_job_in_worker(script: str, job: Dict, threads: int, timeout: float) -> Tuple[Dict, Dict]:
    """:func:`run_in_worker_process` of ``SCRIPT --worker --threads N --job JSON``, for a sitting that must go
    on past a failed worker: a worker that fails or times out answers ``{"error": ...}`` instead of raising."""
    try:
        return run_in_worker_process(script, threads, ["--job", json.dumps(job)], timeout=timeout)
    except WorkerFailed as err:
        return {"error": str(err)[-1500:]}, {"threads": threads}
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}, {"threads": threads}


def commit() -> str:
    """The checkout's commit (``git rev-parse --short HEAD``), ``+changes`` if tracked files were changed."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    head = git("rev-parse", "--short", "HEAD")
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def command_line(script: Optional[str] = None, argv: Optional[Sequence[str]] = None) -> str:
    """The command that ran, as typed from the checkout: ``python benchmarks/X.py ARGS``, a path inside the
    checkout relative to it, one in the home folder as ``~/...`` (no machine paths in a results file)."""
    script = sys.argv[0] if script is None else script
    argv = sys.argv[1:] if argv is None else argv
    return "python " + " ".join(_shell_word(word) for word in [os.path.abspath(script), *argv])


def _shell_word(word: str) -> str:
    """``word`` quoted for the shell, an absolute path made relative to the checkout or the home folder."""
    name, equals, value = word.partition("=")
    if equals and name.startswith("-") and os.path.isabs(value):  # --option=PATH
        return shlex.quote(name + equals) + _shell_word(value)
    path = portable_path(word)
    return "~/" + shlex.quote(path[2:]) if path.startswith("~/") and path != word else shlex.quote(path)


def portable_path(path: str) -> str:
    """``path`` as a results file keeps it: relative to the checkout when inside it, ``~/...`` when in the
    home folder, as given otherwise (no machine paths in a results file)."""
    if not os.path.isabs(path):
        return path
    if path == ROOT or path.startswith(ROOT + os.sep):
        return os.path.relpath(path, ROOT)
    home = os.path.expanduser("~")
    if home not in ("", "/") and path.startswith(home + os.sep):
        return "~/" + path[len(home) + 1:]
    return path


def load(path: str, benchmark: Optional[str] = None, **header) -> Dict:
    """The results file at ``path``: ``{"benchmark": NAME, ..., "runs": [...]}``; when there is none yet, an
    empty one of ``benchmark`` with ``header``'s fields. A file of another shape or benchmark is an error,
    not something to overwrite."""
    if not os.path.exists(path):
        return {"benchmark": benchmark, **header, "runs": []}
    with open(path, encoding="utf-8") as handle:
        results = json.load(handle)
    if not isinstance(results, dict) or not isinstance(results.get("runs"), list):
        raise ValueError(f"{path} is not a results file ({{\"benchmark\": ..., \"runs\": [...]}}): "
                         f"give another --output")
    if benchmark is not None and results.get("benchmark") != benchmark:
        raise ValueError(f"{path} holds the runs of {results.get('benchmark')!r}, not of {benchmark!r}: "
                         f"give another --output")
    return results


def record(path: str, run: Dict, benchmark: Optional[str] = None, **header) -> int:
    """Append one run to the results file (written whole, then renamed: a kill leaves the old file); returns
    the number of runs it now holds."""
    results = load(path, benchmark, **header)
    results["runs"].append(run)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    temporary = path + ".tmp"
    try:
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=1, ensure_ascii=False)
            handle.write("\n")
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
    return len(results["runs"])


def last_run(path: str, benchmark: Optional[str] = None) -> Optional[Dict]:
    """The newest run of the results file at ``path`` (None without one): what ``--update`` builds on."""
    runs = load(path, benchmark)["runs"]
    return runs[-1] if runs else None


def write_report(path: str, report: Dict, script: Optional[str] = None,
                 argv: Optional[Sequence[str]] = None) -> Dict:
    """Append ``report`` as a run to the benchmark's results file, with the sitting it was measured in: its
    ``date`` (ISO, to the second), ``commit`` (:func:`commit`), ``cpu`` (:func:`cpu_description`) and
    ``command`` (:func:`command_line` of ``script`` and ``argv``, by default this process'). The file is
    ``{"benchmark": SCRIPT NAME, "runs": [...]}``, earlier runs untouched; returns the run."""
    script = sys.argv[0] if script is None else script
    run = {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "commit": commit(),
           "cpu": cpu_description(), "command": command_line(script, argv), **report}
    benchmark = os.path.splitext(os.path.basename(script))[0]
    try:
        count = record(path, run, benchmark)
    except ValueError as error:  # not a results file of this benchmark: keep the run (hours of work) apart
        kept = f"{os.path.splitext(path)[0]}.{run['date'][:19].replace(':', '')}.json"
        record(kept, run, benchmark)
        raise ValueError(f"{error}; this run is in {kept}") from error
    print(f"wrote {path} (run {count})", file=sys.stderr)
    return run
