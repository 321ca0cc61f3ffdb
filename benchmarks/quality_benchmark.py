"""Translation quality per CPU minute, ours against a peer system, on the built-in data.

    python benchmarks/quality_benchmark.py                       # 10 and 30 minutes, 2 threads, with the peer
    python benchmarks/quality_benchmark.py --minutes 10 --no-peer --set model.dropout=0.2 --tag dropout0.2
    python benchmarks/quality_benchmark.py --side-by-side         # ours and the peer at once, one core each

For each number of minutes it trains the default config (``python -m gnmt_tf.train``, the
built-in English->French catalogs and their dev split) and, unless ``--no-peer``, the peer
OpenNMT-py (``../shared/peers/onmtpy/run.sh``: bi-LSTM with attention, 2+2x256, SentencePiece
8k) on the same training pairs for the same minutes and threads. Both are scored on the same
held-out dev split, on the whole of it and on its sentences of 12 source words or more (catalog
strings are short; long sentences are where outputs come out too short): BLEU, brevity penalty,
length ratio and n-gram precisions, plus the length ratio per source-length bucket. Ours is
decoded greedily, with beam search at alpha = beta = 0, at alpha = beta = 0.2, with the
config's defaults, with the paper-literal finishing rule, and from the average of the last
three checkpoints. ``--side-by-side`` runs both systems at the same time, each pinned to one
core with one thread (same sitting, same conditions, half the wall clock).

Writes ``benchmarks/results/quality.json`` (``--output``); each run is recorded with its settings,
steps and the machine's load average.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEER = os.path.join(ROOT, "..", "shared", "peers", "onmtpy", "run.sh")
LONG_WORDS = 12  # "long" dev sentences: at least this many source words
AVERAGED = 3  # checkpoints averaged (fewer if the run kept fewer)
BUCKETS = ((0, 10), (10, 20), (20, 30), (30, None))  # source words


# ----------------------------------------------------------------------------- scoring
def score(hypotheses: Sequence[str], pairs: Sequence[Tuple[str, str]]) -> Dict:
    """BLEU with its parts on the whole split, its long sentences and per source-length bucket."""
    from sacrebleu.metrics import BLEU

    def part(indices):
        if not indices:
            return None
        result = BLEU().corpus_score([hypotheses[i] for i in indices], [[pairs[i][1] for i in indices]])
        return {
            "sentences": len(indices), "bleu": round(result.score, 2), "bp": round(result.bp, 3),
            "ratio": round(result.sys_len / max(result.ref_len, 1), 3),
            "precisions": [round(p, 1) for p in result.precisions],
        }

    words = [len(source.split()) for source, _ in pairs]
    everything = list(range(len(pairs)))
    buckets = {}
    for low, high in BUCKETS:
        chosen = [i for i in everything if words[i] >= low and (high is None or words[i] < high)]
        name = f"{low}-{high}" if high is not None else f"{low}+"
        buckets[name] = part(chosen)
    return {"whole": part(everything), "long": part([i for i in everything if words[i] >= LONG_WORDS]),
            "by_source_words": buckets}


def read_pairs(path: str) -> List[Tuple[str, str]]:
    with open(path, encoding="utf-8") as handle:
        return [tuple(line.rstrip("\n").split("\t", 1)) for line in handle if "\t" in line]


# ----------------------------------------------------------------------------- our system
def decodings(config) -> List[Tuple[str, str, Dict]]:
    """(name, checkpoint, decoding overrides) of every way ours is scored."""
    d = config.decoding
    return [
        ("greedy", "latest", {"greedy": True}),
        ("beam alpha=beta=0", "latest", {"alpha": 0.0, "beta": 0.0}),
        ("beam alpha=beta=0.2", "latest", {"alpha": 0.2, "beta": 0.2}),
        ("beam alpha=0.6, beta=0.2", "latest", {"alpha": 0.6, "beta": 0.2}),
        ("beam alpha=1.0, beta=0.2", "latest", {"alpha": 1.0, "beta": 0.2}),
        (f"beam defaults (alpha={d.alpha:g}, beta={d.beta:g})", "latest", {}),
        ("beam defaults, eos_rule=every_beam (paper-literal)", "latest", {"eos_rule": "every_beam"}),
        (f"beam defaults, averaged last {AVERAGED} (or all kept) checkpoints", "averaged", {}),
        ("beam defaults, best checkpoint (chosen on this dev split)", "best", {}),
    ]


def evaluate_worker(model_dir: str) -> Dict:
    """Scores of every decoding of the model in ``model_dir`` on its dev.tsv (run in a worker)."""
    from gnmt_tf import model_files
    from gnmt_tf.cli.average import average_checkpoints
    from gnmt_tf.inference.translator import Translator

    pairs = model_files.read_dev_split(model_dir)
    sources = [source for source, _ in pairs]
    config, _ = model_files.load_metadata(model_dir)
    import tensorflow as tf

    kept = len(tf.train.get_checkpoint_state(model_files.checkpoint_dir(model_dir)).all_model_checkpoint_paths)
    averaged = min(AVERAGED, kept)
    if averaged >= 2:
        average_checkpoints(model_dir, last=averaged, log=lambda message: None)
    results, models = {}, {}
    for name, which, options in decodings(config):
        if which not in models:
            try:
                models[which] = model_files.load_model_dir(model_dir, which=which, warn=lambda message: None)
            except model_files.ModelDirError:
                continue
        model, tokenizer, _ = models[which]
        options = dict(options)
        decoding = dataclasses.replace(config.decoding, eos_rule=options.pop("eos_rule", config.decoding.eos_rule))
        translator = Translator(model, tokenizer, decoding, batch_size=32)
        started = time.monotonic()
        hypotheses = translator.greedy(sources) if options.pop("greedy", False) else translator.translate(
            sources, **options)
        entry = score(hypotheses, pairs)
        entry["seconds"] = round(time.monotonic() - started, 1)
        entry["delta"] = model_files.model_delta(model)
        results[name] = entry
        print(f"  {name}: BLEU {entry['whole']['bleu']} (ratio {entry['whole']['ratio']}), long "
              f"{entry['long']['bleu'] if entry['long'] else '-'}", file=sys.stderr, flush=True)
    return results


def thread_env(threads: int) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(TF_NUM_INTRAOP_THREADS=str(threads), TF_NUM_INTEROP_THREADS=str(threads),
               OMP_NUM_THREADS=str(threads), TF_CPP_MIN_LOG_LEVEL="2")
    return env


def pinned(command: List[str], core: Optional[int]) -> List[str]:
    return ["taskset", "-c", str(core), *command] if core is not None else command


def train_ours(model_dir: str, minutes: float, threads: int, overrides: List[str], core: Optional[int]):
    command = [sys.executable, "-m", "gnmt_tf.train", "--model-dir", model_dir, "--max-minutes", str(minutes),
               "--quiet"]
    for override in overrides:
        command += ["--set", override]
    log = open(model_dir + ".log", "w", encoding="utf-8")
    return subprocess.Popen(pinned(command, core), env=thread_env(threads), stdout=log, stderr=subprocess.STDOUT,
                            cwd=ROOT)


def evaluate_ours(model_dir: str, threads: int) -> Dict:
    command = [sys.executable, os.path.abspath(__file__), "--evaluate-worker", model_dir]
    done = subprocess.run(command, env=thread_env(threads), capture_output=True, text=True, cwd=ROOT)
    sys.stderr.write(done.stderr[-4000:])
    if done.returncode != 0:
        raise RuntimeError(f"evaluating {model_dir} failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


def training_summary(model_dir: str) -> Dict:
    """Steps and delta of the last checkpoint, from the training log."""
    summary = {}
    with open(model_dir + ".log", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("stopped at step"):
                summary["steps"] = int(line.split()[3].rstrip(":"))
            elif line.startswith("delta:"):
                summary["delta"] = float(line.split()[1])
    summary.setdefault("delta", 1.0)
    return summary


# ----------------------------------------------------------------------------- the peer
def write_split(workdir: str, config_name: str, overrides: List[str]) -> Tuple[str, str]:
    """The training and dev pairs of the default run, as TSV for the peer (whitespace folded)."""
    from gnmt_tf.data.catalogs import load_catalog_pairs
    from gnmt_tf.config import load_config, parse_overrides
    from gnmt_tf.data import split_dev

    config = load_config(config_name, overrides=parse_overrides(overrides))
    pairs, _ = load_catalog_pairs(target_lang="fr", source_lang="en")
    train, dev = split_dev(pairs, config.data.dev_fraction, config.data.dev_max_pairs, config.training.seed)
    paths = []
    for name, chosen in (("train.tsv", train), ("dev.tsv", dev)):
        path = os.path.join(workdir, name)
        with open(path, "w", encoding="utf-8") as handle:
            for source, target in chosen:
                handle.write(f"{' '.join(source.split())}\t{' '.join(target.split())}\n")
        paths.append(path)
    return paths[0], paths[1]


def start_peer(train: str, dev: str, out: str, minutes: float, threads: int, core: Optional[int]):
    command = ["bash", PEER, train, dev, dev, out, str(int(round(minutes))), str(threads)]
    log = open(out + ".log", "w", encoding="utf-8")
    return subprocess.Popen(pinned(command, core), stdout=log, stderr=subprocess.STDOUT)


def peer_results(out: str, dev: str) -> Dict:
    import sentencepiece as spm

    with open(os.path.join(out, "results.json"), encoding="utf-8") as handle:
        reported = json.load(handle)
    reported.pop("settings", None)
    work = os.path.join(out, "work")
    processor = spm.SentencePieceProcessor(model_file=os.path.join(work, "spm.model"))
    with open(os.path.join(work, "test.hyp.sp"), encoding="utf-8") as handle:
        hypotheses = [processor.decode(line.split()) for line in handle.read().split("\n")[:-1]]
    return {"reported": reported, "beam 4, alpha=beta=0.2": score(hypotheses, read_pairs(dev))}


# ----------------------------------------------------------------------------- the run
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, nargs="+", default=[10, 30], help="training minutes of each run")
    parser.add_argument("--threads", type=int, default=2, help="TensorFlow / PyTorch threads of each system")
    parser.add_argument("--side-by-side", action="store_true",
                        help="train ours and the peer at the same time, one core and one thread each")
    parser.add_argument("--no-peer", action="store_true", help="train and score ours only")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for our runs (repeatable)")
    parser.add_argument("--tag", default="default", help="name of this configuration in the results")
    parser.add_argument("--workdir", default=os.path.join(ROOT, "runs", "quality_benchmark"))
    parser.add_argument("--output", default=os.path.join(HERE, "results", "quality.json"))
    parser.add_argument("--evaluate-worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.evaluate_worker:
        print(json.dumps(evaluate_worker(args.evaluate_worker)))
        return 0
    threads = 1 if args.side_by_side else args.threads
    os.makedirs(args.workdir, exist_ok=True)
    train_tsv, dev_tsv = write_split(args.workdir, "small", args.overrides)
    results = _load(args.output)
    for minutes in args.minutes:
        # The training budget is max_minutes; the peer's is wall clock, start-up included.
        name = f"{args.tag}-{minutes:g}min"
        ours_dir = os.path.join(args.workdir, f"ours-{name}")
        peer_dir = os.path.join(args.workdir, f"peer-{minutes:g}min-{threads}t")
        load_before = os.getloadavg()
        print(f"{name}: training ours{'' if args.no_peer else ' and the peer'} for {minutes:g} minutes "
              f"({threads} thread(s){', side by side' if args.side_by_side else ''})", file=sys.stderr, flush=True)
        ours = train_ours(ours_dir, minutes, threads, args.overrides, 0 if args.side_by_side else None)
        peer = None
        if not args.no_peer:
            if not args.side_by_side:
                ours.wait()
            peer = start_peer(train_tsv, dev_tsv, peer_dir, minutes, threads, 1 if args.side_by_side else None)
        if ours.wait() != 0:
            raise RuntimeError(f"training ours failed: see {ours_dir}.log")
        if peer is not None and peer.wait() != 0:
            raise RuntimeError(f"the peer failed: see {peer_dir}.log")
        entry = {
            "tag": args.tag, "minutes": minutes, "threads": threads, "side_by_side": args.side_by_side,
            "overrides": args.overrides, "load_average_before": [round(v, 2) for v in load_before],
            "ours": {**training_summary(ours_dir), "decodings": evaluate_ours(ours_dir, threads)},
        }
        if peer is not None:
            from gnmt_tf import model_files

            entry["peer"] = peer_results(peer_dir, model_files.dev_split_path(ours_dir))
        results["runs"] = [r for r in results["runs"] if (r["tag"], r["minutes"], r["threads"]) != (
            args.tag, minutes, threads)] + [entry]
        _save(args.output, results)
        _print(entry)
    return 0


def _load(path: str) -> Dict:
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    return {"benchmark": "quality_benchmark", "data": "built-in en->fr gettext catalogs, default dev split",
            "long_sentences": f">= {LONG_WORDS} source words", "cpu_count": os.cpu_count(), "runs": []}


def _save(path: str, results: Dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=1, ensure_ascii=False)
    os.replace(path + ".tmp", path)


def _print(entry: Dict) -> None:
    print(f"\n{entry['tag']}, {entry['minutes']:g} minutes, {entry['threads']} thread(s): "
          f"ours {entry['ours'].get('steps')} steps, delta {entry['ours']['delta']:g}")
    rows = [(f"ours: {name}", value) for name, value in entry["ours"]["decodings"].items()]
    if "peer" in entry:
        rows.append(("peer: OpenNMT-py, beam 4, alpha=beta=0.2", entry["peer"]["beam 4, alpha=beta=0.2"]))
    print("| system, decoding | BLEU (BP, ratio) | long: BLEU (BP, ratio) |")
    print("|---|---|---|")
    for name, value in rows:
        whole, long = value["whole"], value["long"]
        print(f"| {name} | {whole['bleu']} ({whole['bp']}, {whole['ratio']}) | "
              f"{long['bleu']} ({long['bp']}, {long['ratio']}) |" if long else f"| {name} | {whole['bleu']} | - |")


if __name__ == "__main__":
    sys.exit(main())
