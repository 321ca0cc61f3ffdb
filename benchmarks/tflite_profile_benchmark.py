"""Where a TFLite translator's time goes: the interpreter sampled by Linux ``perf``, grouped by kind of work.

    python benchmarks/tflite_profile_benchmark.py --models float=runs/tflite_float/1/translator.tflite \\
        int8=runs/tflite_int8/1/translator.tflite --sentences runs/en-fr/dev.tsv
    # writes benchmarks/results/tflite_profile.json

LiteRT's Python interpreter has no op profiler, but its shared library keeps its symbol table,
so sampling the process with ``perf record -g`` (cpu-clock, call graphs) names the kernel
each sample was in. For each model and batch size a worker process
(:class:`export.tflite.TFLiteTranslator`, ``--threads`` interpreter threads) translates the
first ``--count`` source sentences of the TSV once to warm up, then again and again for
``--seconds``; ``perf`` samples it all along. Only the samples taken inside the
interpreter's ``Subgraph::Invoke`` are kept (not start-up, Python or the warm-up's model
loading), and each is put in the first group (``GROUPS``) that matches a frame of its call
stack, walking from the innermost frame out. The groups that are the model's arithmetic
(the matrix products, the LSTM and attention element-wise work, the softmax) are summed
as ``model_arithmetic_percent``; the rest is search bookkeeping and interpreter overhead.

Needs ``perf`` (Debian: linux-perf) and a kernel that lets it sample (``perf_event_paranoid``
<= 2 for a process of one's own).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Sequence

from harness import portable_path, write_report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (group, is the model's arithmetic, regular expression on a frame's symbol). First match wins,
# walking a sample's stack from its innermost frame out, so a copy made by the while loop counts
# as a copy and a GEMM called from anywhere as a product.
GROUPS = (
    ("matrix products", True, r"gemm|igemm|packw|qp8|qd8|FullyConnected|BatchMatMul"),
    ("tokenizer and detokenizer (tensorflow-text)", False,
     r"tensorflow::text|FastWordpiece|WhitespaceTokenize|tflite::ops::custom"),
    ("beam search top-k", False, r"topk"),
    ("softmax and log-softmax", True, r"[Ss]oftmax|scalar_exp_op|scalar_log_op"),
    ("element-wise (LSTM gates, attention; XNNPACK)", True,
     r"xnn_f32_v|xnn_qs8_v|xnn_f32_raddstore|xnn_f32_rmax|xnn_compute_elementwise|xnn_compute_reduce|"
     r"xnn_f32_rsum|xnn_f32_rminmax"),
    ("interpreter: re-planning tensors whose shapes change", False,
     r"ArenaPlanner|SimpleMemoryArena|InitializeTensorReleaseMap|ResizeTensor|SubgraphPrepare|"
     r"PrepareOpsAndTensors|AllocateTensors|xnn_reshape|xnn_setup|xnn_create|xnn_delete|Prepare\b|"
     r"malloc|_int_free|cfree|unlink_chunk|operator new|operator delete|TfLiteTensorRealloc|"
     r"TfLiteIntArray"),
    ("while loop: passing the loop state", False, r"while_kernel|CopyTensorsShapeAndType|CopyTensorsData"),
    ("search bookkeeping (gather, select, compare, concat, ...)", False,
     r"reference_ops|optimized_ops|tflite::ops::builtin|Eigen"),
    ("memory copies", False, r"memmove|memcpy|memset"),
)
INSIDE = ("tflite::Subgraph::Invoke",)


def group_of(stack: Sequence[str]) -> str:
    """The group of one sample: its stack's frames innermost first."""
    for frame in stack:
        for name, _, pattern in GROUPS:
            if re.search(pattern, frame):
                return name
    return "other"


def samples(perf_data: str):
    """Every sample's stack (symbols, innermost first) from ``perf script``."""
    text = subprocess.run(["perf", "script", "-i", perf_data, "-F", "ip,sym"], capture_output=True,
                          text=True, check=True).stdout
    return stacks_of(text)


def stacks_of(perf_script_text: str):
    """The stacks of ``perf script -F ip,sym`` output: one block a sample, one ``address symbol``
    line a frame, innermost first."""
    for block in perf_script_text.split("\n\n"):
        stack = [re.sub(r"^[0-9a-f]+\s+", "", line.strip()) for line in block.strip().splitlines()]
        if stack and stack[0]:
            yield stack


def profile(stacks) -> Dict:
    """Shares of the groups among the samples (stacks) taken inside the interpreter."""
    counts, total, inside = collections.Counter(), 0, 0
    for stack in stacks:
        total += 1
        if any(marker in frame for frame in stack for marker in INSIDE):
            inside += 1
            counts[group_of(stack)] += 1
    if not inside:
        raise RuntimeError(f"no sample was inside the interpreter ({total} samples): is perf allowed to sample?")
    arithmetic = {name for name, is_arithmetic, _ in GROUPS if is_arithmetic}
    groups = {name: round(100.0 * count / inside, 1) for name, count in counts.most_common()}
    return {
        "samples": total,
        "samples_in_interpreter": inside,
        "groups_percent": groups,
        "model_arithmetic_percent": round(sum(v for k, v in groups.items() if k in arithmetic), 1),
    }


def worker(args) -> None:
    """Translate the sentences for ``--seconds`` after a warm-up; prints sentences/s as JSON."""
    sys.path.insert(0, ROOT)
    from export.tflite import TFLiteTranslator

    sentences = read_sources(args.sentences, args.count)
    translator = TFLiteTranslator(args.model, num_threads=args.threads)
    batches = [sentences[i : i + args.batch] for i in range(0, len(sentences), args.batch)]
    for batch in batches:
        translator.translate(batch)
    started, done = time.perf_counter(), 0
    while time.perf_counter() - started < args.seconds:
        for batch in batches:
            translator.translate(batch)
            done += len(batch)
    print(json.dumps({"sentences_per_second": round(done / (time.perf_counter() - started), 2)}))


def read_sources(path: str, count: int) -> List[str]:
    with open(path, encoding="utf-8") as handle:
        sources = [line.split("\t")[0] for line in handle if line.strip()]
    if not sources:
        raise SystemExit(f"error: {path} has no sentences")
    return sources[:count]


def labelled(spec: str):
    """``LABEL=PATH`` -> (label, path); a bare path is its own label."""
    label, separator, path = spec.partition("=")
    return (label, path) if separator and label and path else (spec, spec)


def measure(label: str, model: str, batch: int, args, directory: str) -> Dict:
    perf_data = os.path.join(directory, "perf.data")
    command = ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(args.frequency), "-g", "-o", perf_data, "--",
               sys.executable, os.path.abspath(__file__), "--worker", "--model", model, "--batch", str(batch),
               "--sentences", args.sentences, "--count", str(args.count), "--seconds", str(args.seconds),
               "--threads", str(args.threads)]
    print(f"profiling {model} at batch {batch} ...", file=sys.stderr, flush=True)
    load_before = os.getloadavg()
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.seconds * 10 + 600)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return {"label": label, "model": portable_path(model), "batch": batch, "threads": args.threads, **answer, **profile(samples(perf_data)),
            "load_average_before": [round(v, 2) for v in load_before],
            "load_average_after": [round(v, 2) for v in os.getloadavg()]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", metavar="[LABEL=]PATH",
                        help="translator.tflite files (python -m export --format tflite), each optionally "
                             "labelled for the results (the label is the path otherwise)")
    parser.add_argument("--sentences", required=True, help="a TSV whose first column is the source sentences")
    parser.add_argument("--count", type=int, default=96, help="sentences translated per pass (default: %(default)s)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16], help="batch sizes (default: 1 16)")
    parser.add_argument("--threads", type=int, default=1, help="interpreter threads (default: %(default)s)")
    parser.add_argument("--seconds", type=float, default=30.0, help="sampled seconds per run (default: %(default)s)")
    parser.add_argument("--frequency", type=int, default=499, help="samples per second (default: %(default)s)")
    parser.add_argument("--output", default=os.path.join(ROOT, "benchmarks", "results", "tflite_profile.json"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    if not args.models:
        parser.error("--models is required")
    models = [labelled(spec) for spec in args.models]
    missing = [path for _, path in models if not os.path.isfile(path)]
    if missing:
        parser.error("no such model: " + ", ".join(missing))
    if shutil.which("perf") is None:
        print("error: this benchmark needs Linux perf (Debian: apt install linux-perf)", file=sys.stderr)
        return 1
    results = []
    for label, model in models:
        for batch in args.batches:
            with tempfile.TemporaryDirectory() as directory:
                try:
                    results.append(measure(label, model, batch, args, directory))
                except (RuntimeError, subprocess.TimeoutExpired) as error:  # recorded; the others go on
                    results.append({"label": label, "model": portable_path(model), "batch": batch,
                                    "error": str(error)[-2000:]})
            print(json.dumps(results[-1]), file=sys.stderr)
    write_report(args.output, {"runs": results, "sentences": args.sentences, "count": args.count,
                               "seconds": args.seconds}, __file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
