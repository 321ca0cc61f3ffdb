"""The vocabulary shortlist's dev BLEU and speed, on and off: ``python benchmarks/shortlist_benchmark.py``.

For a model directory with a shortlist (``python -m gnmt_tf.shortlist --model-dir DIR``), per batch size:
dev BLEU of the beam search (the config's decoding settings) without and with the shortlist, and
the decoding speed of both, measured interleaved: the dev split is cut into chunks and each chunk
is translated both ways, in alternating order, so that the load of a shared machine weighs on both
alike. Writes ``results/shortlist.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from harness import write_report

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def measure(model_dir: str, batch_size: int, chunk: int) -> dict:
    import numpy as np

    from gnmt_tf import model_files
    from gnmt_tf.inference.translator import Translator
    from gnmt_tf.metrics.bleu import corpus_bleu

    model, tokenizer, config = model_files.load_model_dir(model_dir)
    shortlist = model_files.read_shortlist(model_dir, tokenizer.vocab_size)
    if shortlist is None:
        raise SystemExit(f"{model_dir} has no shortlist: python -m gnmt_tf.shortlist --model-dir {model_dir}")
    pairs = model_files.read_dev_split(model_dir)
    sources, references = [s for s, _ in pairs], [r for _, r in pairs]
    translator = Translator(model, tokenizer, config.decoding, batch_size=batch_size, shortlist=shortlist)
    for use in (False, True):  # trace both searches before timing
        translator.translate(sources[: 2 * batch_size], use_shortlist=use)
    seconds = {False: 0.0, True: 0.0}
    outputs = {False: [], True: []}
    ratios = []
    for index, start in enumerate(range(0, len(sources), chunk)):
        part, took = sources[start:start + chunk], {}
        for use in ((False, True) if index % 2 == 0 else (True, False)):
            began = time.perf_counter()
            outputs[use] += [t.text for t in translator.translate(part, use_shortlist=use)]
            took[use] = time.perf_counter() - began
            seconds[use] += took[use]
        ratios.append(took[False] / took[True])
    result = {"batch_size": batch_size, "sentences": len(sources), "chunks": len(ratios)}
    for use, name in ((False, "off"), (True, "on")):
        result[name] = {"bleu": round(corpus_bleu(outputs[use], references).score, 2),
                        "sentences_per_second": round(len(sources) / seconds[use], 2)}
    result["speedup"] = round(seconds[False] / seconds[True], 3)
    result["chunk_speedups_quartiles"] = [round(float(np.percentile(ratios, q)), 3) for q in (25, 50, 75)]
    result["shortlist"] = {"top_k": shortlist.top_k, "frequent": shortlist.frequent}
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--model-dir", default="runs/en-fr")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--chunk", type=int, default=None,
                        help="sentences per interleaved chunk (default: 20 at batch 1, else 4 batches)")
    parser.add_argument("--output", default=os.path.join(HERE, "results", "shortlist.json"))
    args = parser.parse_args(argv)
    runs = []
    for batch_size in args.batches:
        load_before = os.getloadavg()
        run = measure(args.model_dir, batch_size, args.chunk or (20 if batch_size == 1 else 4 * batch_size))
        run["load_average_before"] = [round(v, 2) for v in load_before]
        print(json.dumps(run), flush=True)
        runs.append(run)
    write_report(args.output, {"benchmark": "shortlist_benchmark", "model_dir": args.model_dir,
                               "cpu_count": os.cpu_count(), "runs": runs}, __file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
