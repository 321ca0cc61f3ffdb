"""Two or more exports of one checkpoint timed against each other, round robin in one process.

    python benchmarks/round_robin_benchmark.py --sentences runs/en-fr/dev.tsv \\
        before=exports/before/gnmt/1 after=exports/after/gnmt/1 --output results/round_robin.json

On a shared or virtual machine the speed of the CPU itself drifts by tens of percent from one
minute to the next, which swamps a 10-20% change timed in separate runs. Here every model
(a SavedModel version directory, loaded as TF Serving does, or a TFLite export's directory or
``.tflite`` file) is loaded into one process; each round translates the same sentences with
every model in turn, so drift hits all of them alike, and each model keeps its best round.
The first pass of each model is untimed (tracing, allocation) and gives the translations, which
are compared between models of the same format and weights kind (``identical_to``).

For each ``--batches`` size, batches of the first ``--count`` source sentences of the TSV, sorted
by length as the Python API batches them (batch 1: the shortest quarter of them). ``--threads``: TensorFlow's
intra- and inter-op threads, and the TFLite interpreter's.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable, Dict, List

from harness import write_report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(path: str, threads: int):
    """A function: list of sentences -> list of translations (bytes), for a SavedModel or a TFLite export."""
    tflite = path if path.endswith(".tflite") else os.path.join(path, "translator.tflite")
    if os.path.exists(tflite):
        from export.tflite import TFLiteTranslator

        translator = TFLiteTranslator(tflite, num_threads=threads)
        return lambda batch: [t.text.encode("utf-8") for t in translator.translate(batch)]
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops the SavedModel uses)

    translate = tf.saved_model.load(path).signatures["serving_default"]
    return lambda batch: list(translate(sentences=tf.constant(batch, tf.string))["translations"].numpy())


def measure(translators: Dict[str, Callable[[List[str]], List]], sources: List[str], batch_sizes: List[int],
            rounds: int) -> List[Dict]:
    """Per batch size and translator: best sentences/s over ``rounds`` round-robin rounds, and which
    other translators gave the same translations (on an untimed first pass)."""
    results: List[Dict] = []
    for batch in batch_sizes:
        count = len(sources) if batch > 1 else max(1, len(sources) // 4)
        batches = [sources[i : i + batch] for i in range(0, count, batch)]
        outputs = {label: [t for b in batches for t in translate(b)] for label, translate in translators.items()}
        best = {label: 0.0 for label in translators}
        for _ in range(rounds):
            for label, translate in translators.items():
                start = time.perf_counter()
                for b in batches:
                    translate(b)
                best[label] = max(best[label], count / (time.perf_counter() - start))
        for label in translators:
            same = [other for other in translators if other != label and outputs[other] == outputs[label]]
            results.append({"model": label, "batch": batch, "sentences": count,
                            "sentences_per_second": round(best[label], 2), "identical_to": same})
            print(f"batch {batch:3d}  {label:24s} {best[label]:8.2f} sentences/s"
                  f"{'  same translations as ' + ', '.join(same) if same else ''}")
    return results


def main(argv=None) -> Dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", metavar="LABEL=PATH", help="exports to compare, two or more")
    parser.add_argument("--sentences", required=True, help="a TSV whose first column holds the sources")
    parser.add_argument("--count", type=int, default=96)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--output", default=os.path.join(ROOT, "benchmarks", "results", "round_robin.json"))
    args = parser.parse_args(argv)
    models = dict(arg.split("=", 1) for arg in args.models if "=" in arg)
    if len(models) < 2 or len(models) != len(args.models):
        parser.error("give two or more models as LABEL=PATH, with distinct labels")
    missing = [path for path in models.values() if not os.path.exists(path)]
    if missing:
        parser.error(f"no such export: {', '.join(missing)}")

    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    sys.path.insert(0, ROOT)
    with open(args.sentences, encoding="utf-8") as handle:
        sources = [line.split("\t")[0] for line in handle if line.strip()][: args.count]
    sources.sort(key=len)  # as the Python API batches them
    translators = {label: load(path, args.threads) for label, path in models.items()}
    load_average_before = os.getloadavg()
    results = measure(translators, sources, args.batches, args.rounds)
    report = {
        "benchmark": "exports of one checkpoint, round robin in one process, best of the rounds",
        "models": models, "threads": args.threads, "rounds": args.rounds, "sentences_file": args.sentences,
        "load_average_before": [round(x, 2) for x in load_average_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "results": results,
    }
    write_report(args.output, report, __file__, argv)
    return report


if __name__ == "__main__":
    main()
