"""Decoding speed of the in-graph beam search, against this machine's roofline.

    python benchmarks/decode_benchmark.py                 # writes benchmarks/results/decode.json

For each config (default: small and the paper's 8x1024 / 32k model, random
weights) it decodes batches of 1 and 16 sentences with beam 4 for a fixed
output length (EOS is suppressed until the length limit, so every run does
the same work), single-threaded and with all cores, and reports sentences/s
and words/s (generated wordpieces of the best hypothesis per second).

Roofline: per decoder step and hypothesis row it counts the multiply-adds
(LSTM layers, attention, softmax) and the bytes that must be read (every
decoder weight once per step whatever the batch, plus each row's attention
keys and values). With this machine's measured matmul throughput and memory
bandwidth (measured here, same threads), the decoder steps cannot take less
than max(flops / peak, bytes / bandwidth); ``roofline_fraction`` is that
bound divided by the measured time of the whole decode (encoder and search
bookkeeping included, so the fraction is conservative). Batch 1 x beam 4 is
bound by weight bandwidth, batch 16 x beam 4 by arithmetic.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

from harness import WorkerFailed, run_in_worker_process, write_report

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--configs", nargs="+", default=["small", "gnmt_wmt14_enfr"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, os.cpu_count() or 1])
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--source-length", type=int, default=10, help="source wordpieces, EOS included")
    parser.add_argument("--output-length", type=int, default=20, help="decoder steps per sentence")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default=os.path.join(HERE, "results", "decode.json"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# ---------------------------------------------------------------------------------- machine
def measure_machine(tf):
    """Matmul throughput (GFLOP/s) and read bandwidth (GB/s) with the current thread settings."""
    n = 2048
    a = tf.random.normal((n, n))
    b = tf.random.normal((n, n))
    matmul = tf.function(lambda: tf.reduce_sum(tf.matmul(a, b)))
    matmul()
    best = min(_timed(matmul) for _ in range(5))
    gflops = 2 * n**3 / best / 1e9
    big = tf.random.normal((256 * 1024 * 1024 // 4,))  # 256 MiB
    total = tf.function(lambda: tf.reduce_sum(big))
    total()
    best = min(_timed(total) for _ in range(5))
    bandwidth = big.shape[0] * 4 / best / 1e9
    return {"matmul_gflops": round(gflops, 1), "read_bandwidth_gb_per_s": round(bandwidth, 1)}


def _timed(fn):
    started = time.perf_counter()
    fn().numpy()
    return time.perf_counter() - started


# ---------------------------------------------------------------------------------- roofline
def decoder_step_cost(model_config, source_length, rows):
    """(multiply-adds, bytes read) of one decoder step for ``rows`` hypotheses (float32)."""
    m = model_config
    H, A, V, E = m.units, m.attention_units, m.vocab_size, m.embedding_width
    encoder_width = m.units if m.encoder_layers > 1 else 2 * m.direction_units
    bottom_in = E + (encoder_width if m.input_feeding else 0)
    lstm_weights = 4 * H * (bottom_in + H) + (m.decoder_layers - 1) * 4 * H * (H + encoder_width + H)
    attention_weights = H * A + A
    softmax_weights = H * V + V
    per_row_macs = (
        lstm_weights
        + attention_weights
        + source_length * A  # score vector over the projected keys
        + source_length * encoder_width  # context
        + softmax_weights
    )
    weight_bytes = 4 * (lstm_weights + attention_weights + softmax_weights)
    row_bytes = 4 * (source_length * (A + encoder_width) + E)  # keys, values, one embedding row
    return per_row_macs * rows, weight_bytes + row_bytes * rows


# ---------------------------------------------------------------------------------- worker
def run_worker(args) -> list:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, ROOT)
    import numpy as np
    import tensorflow as tf

    threads = args.threads[0]
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    from gnmt_tf.decoding.beam import beam_search
    from gnmt_tf.decoding.options import no_pruning
    from gnmt_tf.config import load_config
    from gnmt_tf.layers.recurrence import STEPWISE
    from gnmt_tf.layers.weights import FLOAT_READER
    from gnmt_tf.models.gnmt import GNMT
    from gnmt_tf.vocab import EOS_ID

    machine = measure_machine(tf)
    results = []
    for config_name in args.configs:
        config = load_config(config_name).model
        model = GNMT(config)
        model.build()
        model.set_clip_delta(1.0)
        K = args.beam_width
        ratio = args.output_length / args.source_length
        suppress_eos = tf.one_hot(EOS_ID, config.vocab_size) * -1e9

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
        def decode(source_ids):
            # Kernels read once, as the translator's search reads them.
            weights = FLOAT_READER.reading_once(model.product_kernels(), rows=tf.shape(source_ids)[0] * K)

            def step(state, tokens):
                logits, attention, state = model.step(state, tokens, weights)
                return logits + suppress_eos, attention, state  # fixed output length

            memory = model.encode(source_ids, weights, training=False, recurrence=STEPWISE)  # as a search
            out = beam_search(step, model.initial_state(memory), memory.mask, K, alpha=0.2, beta=0.2,
                              beamsize=no_pruning(), max_length_ratio=ratio)
            return out.lengths

        rng = np.random.default_rng(0)
        for batch in args.batches:
            source = rng.integers(4, config.vocab_size, size=(batch, args.source_length)).astype(np.int32)
            source[:, -1] = EOS_ID
            source = tf.constant(source)
            lengths = decode(source).numpy()  # trace + warm up
            assert (lengths == args.output_length).all(), lengths
            seconds = sorted(_timed(lambda: decode(source)) for _ in range(args.repeats))[args.repeats // 2]
            macs, bytes_read = decoder_step_cost(config, args.source_length, batch * K)
            compute_time = 2 * macs / (machine["matmul_gflops"] * 1e9)
            memory_time = bytes_read / (machine["read_bandwidth_gb_per_s"] * 1e9)
            roofline = args.output_length * max(compute_time, memory_time)
            results.append({
                "config": config_name,
                "parameters": int(sum(int(np.prod(w.shape)) for w in model.trainable_weights)),
                "threads": threads,
                "batch": batch,
                "beam_width": K,
                "source_length": args.source_length,
                "output_length": args.output_length,
                "seconds_median": round(seconds, 4),
                "sentences_per_second": round(batch / seconds, 2),
                "words_per_second": round(batch * args.output_length / seconds, 1),
                "decoder_step_mflop": round(2 * macs / 1e6, 1),
                "decoder_step_mbytes": round(bytes_read / 1e6, 1),
                "bound": "arithmetic" if compute_time > memory_time else "weight bandwidth",
                "roofline_seconds": round(roofline, 4),
                "roofline_fraction": round(roofline / seconds, 3),
                "machine": machine,
            })
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
        del model
    return results


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(run_worker(args)))
        return 0
    worker_args = ["--configs", *args.configs, "--batches", *map(str, args.batches),
                   "--beam-width", str(args.beam_width), "--source-length", str(args.source_length),
                   "--output-length", str(args.output_length), "--repeats", str(args.repeats)]
    rows, workers = [], []
    for threads in args.threads:
        try:
            answer, info = run_in_worker_process(__file__, threads, worker_args, timeout=3600)
        except WorkerFailed as err:
            print(err, file=sys.stderr)
            return 1
        rows.extend(answer)
        workers.append(info)
    report = {
        "benchmark": "beam search decoding, fixed output length, random weights",
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "workers": workers,
        "results": rows,
    }
    write_report(args.output, report, __file__, argv)
    for r in rows:
        print(
            f"{r['config']:>16} threads={r['threads']} batch={r['batch']:>2}: {r['sentences_per_second']:7.2f} sent/s "
            f"{r['words_per_second']:8.1f} words/s  roofline {r['roofline_fraction']:.0%} ({r['bound']})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
