"""Speed of the int8 matmul of eq. 12 against float32 and bfloat16 on this CPU.

    python benchmarks/int8_matmul_benchmark.py      # writes benchmarks/results/int8_matmul.json
    python benchmarks/int8_matmul_benchmark.py --threads 2 --update   # redo one thread count

For decoding-sized products ``x [rows, K] @ W [K, N]`` (rows 4 and 64: batch 1
and 16 with beam 4; K x N = 1024 x 4096, one paper LSTM layer's gates;
256 x 1024, a small layer; 1024 x 32000, the paper's softmax) it times:

* ``float32``: ``tf.matmul`` in a ``tf.function`` (the model's current path; the baseline);
* ``float32_xla``: the same under ``jit_compile=True``;
* ``int8``: :func:`gnmt_tf.quantization.int8.int8_matmul` (activations quantized on
  the fly, int8 x int8 -> int32, rescale) in a plain ``tf.function``;
* ``int8_xla``: the same under ``jit_compile=True``;
* ``int8_core_xla``: only the int8 x int8 -> int32 product (activations already
  int8, no rescale) under XLA: what on-the-fly quantization costs on top;
* ``bfloat16`` / ``bfloat16_xla``: bfloat16 weights, activations cast to
  bfloat16, product cast back to float32 (oneDNN without XLA).

Two working sets (``--cache``): ``hot`` re-reads one weight matrix, which may
stay in the 32 MiB L3 cache (true of the small model, whose whole decoder is
~20 MB); ``cold`` cycles through enough copies of it that the float32 working
set is ``--cold-mib`` (256 MiB; int8 64 MiB), as a paper-size decoder step
streams ~0.5 GB of weights from memory.

Weights are ``tf.Variable`` s, as in the model. Each product runs inside a
``tf.while_loop`` whose next input depends on the previous output (as
decoding steps do), so per-call dispatch is amortised and XLA cannot hoist
it. The variants of one shape are timed round robin, ``--repeats`` rounds;
``ms`` is the best round per product (the least disturbed by other load on the
machine; ``ms_median`` is also kept) and the speed-ups use it. The load average
before and after each process is recorded (``workers``): other processes on
the machine skew timings. Every thread count runs in its own process
(TensorFlow's thread pools are fixed at initialisation).

Caveat: in a plain ``tf.function`` each op of the loop costs executor
overhead (microseconds), which dominates the smallest products; compare
``int8_xla`` with ``float32_xla`` for the arithmetic alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

from harness import SITTING, WorkerFailed, last_run, run_in_worker_process, write_report

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

VARIANTS = ("float32", "float32_xla", "int8", "int8_xla", "int8_core_xla", "bfloat16", "bfloat16_xla")
SHAPES = ("1024x4096", "256x1024", "1024x32000")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--rows", nargs="+", type=int, default=[4, 64])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), help="KxN, e.g. 1024x4096")
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--cache", nargs="+", default=["hot", "cold"], choices=["hot", "cold"])
    parser.add_argument("--cold-mib", type=float, default=256.0,
                        help="float32 weight working set of the cold runs (the L3 cache here is 32 MiB)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.25, help="target duration of one timed run")
    parser.add_argument("--output", default=os.path.join(HERE, "results", "int8_matmul.json"))
    parser.add_argument("--update", action="store_true",
                        help="append to --output its newest run with only these --threads measured again")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# ---------------------------------------------------------------------------------- worker
def run_worker(args) -> dict:
    threads = args.threads[0]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ["OMP_NUM_THREADS"] = str(threads)
    sys.path.insert(0, ROOT)
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    from gnmt_tf.quantization.int8 import int8_matmul, quantize_activations, quantize_per_output_unit

    rng = np.random.default_rng(0)
    results, accuracy = [], []
    for shape in args.shapes:
        K, N = (int(d) for d in shape.lower().split("x"))
        w_np = rng.uniform(-0.04, 0.04, size=(K, N)).astype(np.float32)  # the paper's init range
        q_np, s_np = quantize_per_output_unit(w_np)
        w16_np = tf.cast(w_np, tf.bfloat16)
        float_mib = K * N * 4 / 2**20
        for cache in args.cache:
            # hot: one weight matrix, re-read every product (it may stay in cache);
            # cold: enough distinct copies that the float32 working set is --cold-mib (as a
            # paper-size decoder step streams ~0.5 GB of weights from memory).
            copies = 1 if cache == "hot" else max(1, int(np.ceil(args.cold_mib / float_mib)))
            w32 = [tf.Variable(w_np) for _ in range(copies)]
            w16 = [tf.Variable(w16_np) for _ in range(copies)]
            w8 = [tf.Variable(q_np) for _ in range(copies)]
            s8 = tf.Variable(s_np)
            products = {
                "float32": [lambda x, w=w: tf.matmul(x, w) for w in w32],
                "int8": [lambda x, w=w: int8_matmul(x, w, s8) for w in w8],
                "int8_core": [lambda x, w=w: tf.cast(tf.linalg.matmul(x, w, output_type=tf.int32), tf.float32)
                              for w in w8],
                "bfloat16": [lambda x, w=w: tf.cast(tf.matmul(tf.cast(x, tf.bfloat16), w), tf.float32)
                             for w in w16],
            }
            for rows in args.rows:
                x_np = rng.uniform(-1.0, 1.0, size=(rows, K)).astype(np.float32)  # |x| <= delta = 1
                if cache == args.cache[0]:
                    exact = x_np.astype(np.float64) @ w_np.astype(np.float64)
                    y8 = int8_matmul(x_np, w8[0], s8).numpy()
                    y16 = products["bfloat16"][0](tf.constant(x_np)).numpy()
                    def relative_rms(y):
                        return round(float(np.sqrt(np.mean((y - exact) ** 2) / np.mean(exact**2))), 5)

                    accuracy.append({
                        "threads": threads, "rows": rows, "K": K, "N": N,
                        "int8_relative_rms_error": relative_rms(y8),
                        "bfloat16_relative_rms_error": relative_rms(y16),
                    })
                flops = 2.0 * rows * K * N
                # Loop trips so that one timed run takes about --seconds at >= 30 GFLOP/s.
                iterations = int(min(5000, max(2, args.seconds / (copies * flops / 30e9))))
                runs = {}
                for variant in args.variants:
                    name, jit = (variant[:-4], True) if variant.endswith("_xla") else (variant, False)
                    x0 = quantize_activations(x_np)[0] if name == "int8_core" else tf.constant(x_np)
                    runs[variant] = _loop(tf, products[name], x0, iterations, jit)
                    runs[variant]()  # trace, compile, warm up
                # Round robin, so that a burst of other load on the machine hits every variant alike.
                times = {variant: [] for variant in args.variants}
                for _ in range(args.repeats):
                    for variant, run in runs.items():
                        started = time.perf_counter()
                        run()
                        times[variant].append((time.perf_counter() - started) / (iterations * copies))
                for variant in args.variants:
                    best, median = min(times[variant]), sorted(times[variant])[len(times[variant]) // 2]
                    results.append({
                        "threads": threads, "cache": cache, "rows": rows, "K": K, "N": N, "variant": variant,
                        "ms": round(best * 1e3, 4), "ms_median": round(median * 1e3, 4),
                        "gflops": round(flops / best / 1e9, 1), "copies": copies, "iterations": iterations,
                    })
                    print(json.dumps(results[-1]), file=sys.stderr, flush=True)
            del w32, w16, w8, s8, products, runs
    return {"results": results, "accuracy": accuracy, "tensorflow": tf.__version__}


def _loop(tf, products, x0, iterations, jit):
    """A callable running every product of ``products`` in turn, ``iterations`` times, each
    input depending on the previous output (as the layers of a decoding step do)."""
    int_input = x0.dtype == tf.int8

    @tf.function(jit_compile=jit)
    def run(x, n):
        def body(i, x):
            for product in products:
                y = product(x)
                feedback = tf.reduce_mean(y, axis=-1, keepdims=True)  # tiny, but a true dependency
                if int_input:
                    x = x + tf.cast(feedback > 1e30, tf.int8)  # adds 0, but depends on y
                else:
                    x = x + 1e-6 * feedback
            return i + 1, x

        _, x = tf.while_loop(lambda i, x: i < n, body, (tf.constant(0), x), parallel_iterations=1)
        return x

    n = tf.constant(iterations)
    return lambda: run(x0, n).numpy()


# ---------------------------------------------------------------------------------- driver
def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(run_worker(args)))
        return 0
    rows, accuracy, workers, tf_version = [], [], [], None
    previous = last_run(args.output, "int8_matmul_benchmark") if args.update else None
    if previous:  # a new run: the newest one's other thread counts, these measured again
        rows = [r for r in previous["results"] if r["threads"] not in args.threads]
        accuracy = [a for a in previous["accuracy"] if a["threads"] not in args.threads]
        workers = [w for w in previous.get("workers", []) if w["threads"] not in args.threads]
        tf_version = previous.get("tensorflow")
    worker_args = ["--rows", *map(str, args.rows), "--shapes", *args.shapes, "--variants", *args.variants,
                   "--cache", *args.cache, "--cold-mib", str(args.cold_mib),
                   "--repeats", str(args.repeats), "--seconds", str(args.seconds)]
    for threads in args.threads:
        try:
            out, info = run_in_worker_process(__file__, threads, worker_args)
        except WorkerFailed as err:
            print(err, file=sys.stderr)
            return 1
        rows.extend(out["results"])
        accuracy.extend(out["accuracy"])
        tf_version = out["tensorflow"]
        workers.append(info)
    for reference in ("float32", "float32_xla"):
        baseline = {_key(r): r["ms"] for r in rows if r["variant"] == reference}
        for r in rows:
            base = baseline.get(_key(r))
            r[f"speedup_vs_{reference}"] = round(base / r["ms"], 2) if base else None
    rows.sort(key=lambda r: (r["threads"], r["cache"] != "hot", r["rows"], r["K"] * r["N"]))
    report = {
        "benchmark": "x [rows, K] @ W [K, N]: float32 vs int8 (eq. 12, activations quantized on the fly) "
                     "vs bfloat16; time per product inside a dependent tf.while_loop",
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "tensorflow": tf_version,
        "workers": sorted(workers, key=lambda w: w["threads"]),
        "results": rows,
        "accuracy": sorted(accuracy, key=lambda a: (a["threads"], a["rows"], a["K"] * a["N"])),
    }
    if previous:
        report["update"] = {"threads": args.threads,
                            "other_threads_from": {key: previous.get(key) for key in SITTING}}
    write_report(args.output, report, __file__, argv)
    for reference in ("float32", "float32_xla"):
        if reference in args.variants:
            print(f"\nspeed-up over {reference}:")
            print(markdown_table(rows, sorted({r["variant"] for r in rows}, key=VARIANTS.index), reference))
    return 0


def _key(r):
    return (r["threads"], r["cache"], r["rows"], r["K"], r["N"])


def markdown_table(rows, variants, reference="float32") -> str:
    """``reference``'s ms, then each variant's speed-up over it, one line per case."""
    others = [v for v in variants if v != reference]
    lines = [f"| threads | cache | rows | K x N | {reference} ms | " + " | ".join(others) + " |",
             "|---|---|---|---|---|" + "---|" * len(others)]
    keys = sorted({_key(r) for r in rows}, key=lambda k: (k[0], k[1] != "hot", k[2], k[3] * k[4]))
    index = {_key(r) + (r["variant"],): r for r in rows}
    field = f"speedup_vs_{reference}"
    for key in keys:
        base = index.get(key + (reference,))
        cells = [f"{index[key + (v,)][field]:.2f}x" if key + (v,) in index else "-" for v in others]
        t, cache, m, k, n = key
        ms = base["ms"] if base else "-"
        lines.append(f"| {t} | {cache} | {m} | {k}x{n} | {ms} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
