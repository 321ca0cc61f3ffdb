"""Decoding speed against the peer at the same model size, on the same test sentences.

    python benchmarks/peer_decode_benchmark.py                 # 2+2 layers of 256, 10 minutes each
    python benchmarks/peer_decode_benchmark.py --minutes 5 --threads 1

Trains ours (the ``small`` config cut to the peer's size: 2 encoder + 2 decoder layers of 256
units, bottom encoder layer bi-directional) and the peer OpenNMT-py
(``../shared/peers/onmtpy/run.sh`` with ``LAYERS=2 UNITS=256``: bi-LSTM encoder, additive
attention) for the same minutes on the built-in English->French training pairs, one after
the other with the same threads, then decodes the held-out test split (quality_benchmark's
split) with both: beam 4, the GNMT penalties with alpha = beta = 0.2, batches of 32.
The peer reports its own decoding time (``onmt_translate -report_time``: translation only,
model loading excluded); ours is timed the same way (the model loaded and the graph traced on
a first batch beforehand). Source words/s = whitespace words of the test sources / seconds.
Writes ``results/peer_decode.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from harness import write_report  # noqa: E402
from quality_benchmark import Trial, read_pairs, run_peer, score, thread_env, train_ours, write_splits  # noqa: E402

SIZE = ["model.encoder_layers=2", "model.decoder_layers=2", "model.units=256"]
DECODING = {"beam_width": 4, "alpha": 0.2, "beta": 0.2}
BATCH = 32


def decode_worker(model_dir: str, test: str, threads: int) -> dict:
    """Ours on ``test``: the timed decode of every sentence, in a process of its own."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    from gnmt_tf import model_files
    from gnmt_tf.inference.translator import Translator

    pairs = read_pairs(test)
    sources = [source for source, _ in pairs]
    model, tokenizer, config = model_files.load_model_dir(model_dir)
    translator = Translator(model, tokenizer, config.decoding, batch_size=BATCH, precompute_target_inputs=True)
    translator.translate(sources[:BATCH], **DECODING)  # tracing, outside the timed decode
    start = time.perf_counter()
    hypotheses = [t.text for t in translator.translate(sources, **DECODING)]
    seconds = time.perf_counter() - start
    words = sum(len(source.split()) for source in sources)
    return {
        "decode_seconds": round(seconds, 2), "decode_src_words_per_s": round(words / seconds, 1),
        "concurrent_batches": translator.concurrent_batches,
        "output_words_per_sentence": round(sum(len(h.split()) for h in hypotheses) / len(hypotheses), 2),
        "reference_words_per_sentence": round(sum(len(t.split()) for _, t in pairs) / len(pairs), 2),
        "beam 4, alpha=beta=0.2": score(hypotheses, pairs),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--minutes", type=float, default=10, help="training minutes of each system")
    parser.add_argument("--threads", type=int, default=2, help="threads of each system, training and decoding")
    parser.add_argument("--workdir", default=os.path.join(ROOT, "runs", "peer_decode_benchmark"))
    parser.add_argument("--output", default=os.path.join(HERE, "results", "peer_decode.json"))
    parser.add_argument("--decode-worker", nargs=2, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.decode_worker:
        print(json.dumps(decode_worker(*args.decode_worker, args.threads)))
        return 0

    os.makedirs(args.workdir, exist_ok=True)
    splits = write_splits(os.path.join(args.workdir, "splits"))
    test = splits["test"]
    ours_dir = os.path.join(args.workdir, f"ours-2x256-{args.minutes:g}min")
    peer_dir = os.path.join(args.workdir, f"peer-2x256-{args.minutes:g}min")
    if os.path.isdir(os.path.join(ours_dir, "best")):  # a finished run of an earlier sitting
        print(f"ours: using the trained {ours_dir}", flush=True)
    else:
        print(f"training ours (2+2x256) for {args.minutes:g} minutes, {args.threads} thread(s)", flush=True)
        train_ours(ours_dir, args.minutes, args.threads, SIZE, splits)
    print(f"training and decoding the peer (2+2x256) for {args.minutes:g} minutes", flush=True)
    peer_run = run_peer(Trial("lstm", "2x256", {"LAYERS": "2", "UNITS": "256"}), peer_dir, args.minutes, args.threads,
                        splits)
    peer = {**peer_run["reported"], "bleu": peer_run["test"]["beam"]["whole"]["bleu"]}
    print("decoding with ours", flush=True)
    worker = subprocess.run(
        [sys.executable, __file__, "--threads", str(args.threads), "--decode-worker", ours_dir, test],
        env=thread_env(args.threads), cwd=ROOT, capture_output=True, text=True, timeout=3600,
    )
    if worker.returncode != 0:
        raise SystemExit(f"our decoding failed:\n{worker.stderr[-3000:]}")
    ours = json.loads(worker.stdout.strip().splitlines()[-1])
    result = {
        "benchmark": "decoding speed against OpenNMT-py at 2+2x256, same test sentences",
        "settings": {"minutes": args.minutes, "threads": args.threads, "test_sentences": len(read_pairs(test)),
                     "batch": BATCH, **DECODING, "load_average_at_end": os.getloadavg()},
        "ours": ours, "peer": peer,
        "speed_ratio": round(ours["decode_src_words_per_s"] / peer["decode_src_words_per_s"], 2),
    }
    write_report(args.output, result, __file__, argv)
    print(f"ours {ours['decode_src_words_per_s']} source words/s (BLEU "
          f"{ours['beam 4, alpha=beta=0.2']['whole']['bleu']}), peer {peer['decode_src_words_per_s']} "
          f"(BLEU {peer['bleu']}): {result['speed_ratio']}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
