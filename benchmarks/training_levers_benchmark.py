"""The training step's levers in the default run: steps made and what they learned, same minutes.

    python benchmarks/training_levers_benchmark.py   # writes benchmarks/results/training_levers.json

Runs ``python -m gnmt_tf.train`` as a user would (the ``small`` config on the built-in data, its
9-minute budget) once per variant, one after the other in this sitting, each in a fresh model
directory:

* ``float32``: the paper's numerics (``training.product_precision=float32``, no XLA);
* ``xla``: the same, the step compiled with XLA (``training.jit_compile=true``);
* ``bfloat16``: bfloat16 operands for the large products (``training.product_precision=bfloat16``).

From each run's output it keeps the steps made, the dev perplexity and dev BLEU of every dev
evaluation (the same float32 evaluation for all: the trainer's, which is ``evaluate``'s) and the
final dev line. The dev perplexity at a common step (the first evaluation, step 1,000 with the
shipped ``eval_every``) is the quality-per-step check; the final figures are quality per minute.
One seed each: a few tenths of BLEU between runs are noise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

from harness import write_report

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VARIANTS = {
    "float32": ["--set", "training.product_precision=float32", "--set", "training.jit_compile=false"],
    "xla": ["--set", "training.product_precision=float32", "--set", "training.jit_compile=true"],
    "bfloat16": ["--set", "training.product_precision=bfloat16", "--set", "training.jit_compile=false"],
}
DEV_EVALUATION = re.compile(r"^step (\d+): dev perplexity ([0-9.]+), dev BLEU ([0-9.]+)", re.M)
FINAL = re.compile(r"^dev BLEU = ([0-9.]+) .*\(BP = ([0-9.]+) ratio = ([0-9.]+) ", re.M)
STOPPED = re.compile(r"^stopped at step (\d+): (.*)$", re.M)


def parse_run(output: str) -> dict:
    """The figures of one training run's output."""
    stopped, final = STOPPED.search(output), FINAL.search(output)
    if not stopped or not final:
        raise ValueError("the run's output has no 'stopped at step' or final 'dev BLEU =' line:\n" + output[-2000:])
    return {
        "steps": int(stopped.group(1)),
        "stop_reason": stopped.group(2),
        "dev_evaluations": [{"step": int(step), "perplexity": float(perplexity), "bleu": float(bleu)}
                            for step, perplexity, bleu in DEV_EVALUATION.findall(output)],
        "final_bleu": float(final.group(1)),
        "final_brevity_penalty": float(final.group(2)),
        "final_length_ratio": float(final.group(3)),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="another config override for every run (repeatable)")
    parser.add_argument("--output", default=os.path.join(HERE, "results", "training_levers.json"))
    args = parser.parse_args(argv)
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.variants:
            command = [sys.executable, "-m", "gnmt_tf.train", "--model-dir", os.path.join(scratch, name),
                       *VARIANTS[name], *[part for value in args.set for part in ("--set", value)]]
            print(f"{name}: {' '.join(command[1:])}", file=sys.stderr, flush=True)
            started = time.time()
            done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=3600)
            if done.returncode != 0:
                print(done.stdout[-2000:] + done.stderr[-3000:], file=sys.stderr)
                return 1
            run = {"variant": name, "overrides": VARIANTS[name] + args.set,
                   "minutes": round((time.time() - started) / 60, 1), **parse_run(done.stdout)}
            runs.append(run)
            print(json.dumps(run), file=sys.stderr, flush=True)
    reference = next((run for run in runs if run["variant"] == "float32"), None)
    for run in runs:
        run["steps_ratio_to_float32"] = round(run["steps"] / reference["steps"], 3) if reference else None
    report = {
        "benchmark": "the default run (small, built-in data, 9 minutes) with each training-step lever",
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "runs": runs,
    }
    write_report(args.output, report, __file__, argv)
    for run in runs:
        first = run["dev_evaluations"][0] if run["dev_evaluations"] else {}
        print(f"{run['variant']:>9}: {run['steps']:5d} steps (x{run['steps_ratio_to_float32']}), dev perplexity "
              f"{first.get('perplexity')} at step {first.get('step')}, final dev BLEU {run['final_bleu']} "
              f"(BP {run['final_brevity_penalty']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
