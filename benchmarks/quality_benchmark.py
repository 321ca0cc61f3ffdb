"""Translation quality per CPU minute, ours against two peer systems, on the built-in data or other pairs.

    python benchmarks/quality_benchmark.py --minutes 10 30 60          # ours and both peers, one after another
    python benchmarks/quality_benchmark.py --minutes 10 --peers none --set training.label_smoothing=0.1 --tag smoothing
    python benchmarks/quality_benchmark.py --minutes 10 --no-ours --peers lstm --peer-env LR=0.002 --tag lr0.002
    python benchmarks/quality_benchmark.py --minutes 60 --no-ours --peers none --tag lr0.002 --compare-with default
    python benchmarks/quality_benchmark.py --minutes 60 --peers lstm --pairs runs/heldout/catalogs_en_fr.tsv --tag heldout

For each number of minutes it trains the default config (``python -m gnmt_tf.train``: the built-in
English->French catalogs and their dev split) and each peer through
``../shared/peers/onmtpy/run.sh`` on the same training pairs, for the same minutes and threads, one
after another on a quiet machine:

* ``lstm``: OpenNMT-py's bi-LSTM with attention (2+2x256, SentencePiece 8k), beam 4 with the GNMT
  length and coverage penalties (alpha = beta = 0.2);
* ``transformer``: OpenNMT-py's Transformer (``ARCH=transformer``: 3+3x256, 4 heads, noam schedule,
  label smoothing 0.1), beam 4 with the length penalty alone.

``--peer-env KEY=VALUE`` passes a setting to the peer runner (its rate ``LR``, and ``WARMUP`` /
``BATCH_TOKENS`` for the Transformer): the sweep that gives each peer a fair chance.

Everything is scored on the same held-out dev split, on the whole of it and on its sentences of 12
source words or more: BLEU, brevity penalty, length ratio, n-gram precisions, and the length ratio per
source-length bucket. Ours is decoded with the config's beam search and greedily, from the shipped
weights (``best/``: the weight average the run keeps) and from the raw weights of its last
checkpoint, and from the average of its last checkpoints (``python -m gnmt_tf.average``), all through
:func:`gnmt_tf.inference.evaluation.evaluate`, the code behind ``python -m gnmt_tf.evaluate``.

``--pairs TSV`` trains and scores every system on other pairs instead (split into training and dev the
same way), e.g. the held-out catalogs that ``benchmarks/heldout_catalogs.py`` collects: a check of
``small``'s defaults on text they were not chosen on.

``--compare-with TAG [TAG ...]`` compares a run with the recorded runs of those tags at the same minutes
and threads: what this run lacks (ours, or a peer) is taken from them, e.g. a peer trained alone
against ours from another day. With ``--no-ours --peers none`` nothing is trained: the comparison of
the recorded run of ``--tag`` is computed again. Such a comparison is not of one sitting, and the
entry names the runs it used (``compared_with``).

Writes ``benchmarks/results/quality.json`` (``--output``); each run is recorded with its settings,
steps, tokens/s and the machine's load average.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

from harness import cpu_description

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEER = os.path.join(ROOT, "..", "shared", "peers", "onmtpy", "run.sh")
PEERS = {"lstm": {"ARCH": "rnn"}, "transformer": {"ARCH": "transformer"}}
LONG_WORDS = 12  # "long" dev sentences: at least this many source words
AVERAGED = 3  # checkpoints averaged by python -m gnmt_tf.average (fewer if the run kept fewer)
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
DECODINGS = (  # (name in the results, checkpoint, greedy): the shipped weights are what translate uses
    ("shipped_beam", "best", False),
    ("shipped_greedy", "best", True),
    ("raw_beam", "latest", False),  # the raw weights of the last checkpoint
    ("raw_greedy", "latest", True),
    ("average_beam", "averaged", False),  # the weight average at the end of the run (averaged/)
    ("checkpoint_mean_beam", "checkpoint-mean", False),  # python -m gnmt_tf.average of the last checkpoints
)


def evaluate_worker(model_dir: str) -> Dict:
    """Scores of every decoding of the model in ``model_dir`` on its dev.tsv (run in a worker process)."""
    import tensorflow as tf

    from gnmt_tf import model_files
    from gnmt_tf.cli.average import average_checkpoints
    from gnmt_tf.inference.evaluation import evaluate, load_translator

    pairs = model_files.read_dev_split(model_dir)
    results = {}
    for name, which, greedy in DECODINGS:
        if which == "checkpoint-mean":  # replaces averaged/ (the weight average is scored before)
            kept = len(tf.train.get_checkpoint_state(model_files.checkpoint_dir(model_dir)).all_model_checkpoint_paths)
            if kept < 2:
                continue
            average_checkpoints(model_dir, last=min(AVERAGED, kept), log=lambda message: None)
            which = "averaged"
        if model_files.find_checkpoint(model_dir, which) is None:
            continue
        if name == "average_beam" and model_files.load_metadata(model_dir)[0].training.average_decay is None:
            continue  # averaged/ is a checkpoint mean an earlier scoring wrote (--reuse-ours), not the trainer's
        translator, _, checkpoint = load_translator(model_dir, which)
        evaluation = evaluate(translator, pairs, greedy=greedy)
        entry = score(evaluation.hypotheses, pairs)
        entry.update(search=evaluation.search, checkpoint=os.path.relpath(checkpoint, model_dir),
                     seconds=round(evaluation.seconds, 1), delta=model_files.model_delta(translator.model))
        results[name] = entry
        print(f"  {name}: BLEU {entry['whole']['bleu']} (ratio {entry['whole']['ratio']}), long "
              f"{entry['long']['bleu'] if entry['long'] else '-'}", file=sys.stderr, flush=True)
    return results


def thread_env(threads: int) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(TF_NUM_INTRAOP_THREADS=str(threads), TF_NUM_INTEROP_THREADS=str(threads),
               OMP_NUM_THREADS=str(threads), TF_CPP_MIN_LOG_LEVEL="2")
    return env


def train_ours(model_dir: str, minutes: float, threads: int, overrides: List[str],
               data: Optional[Tuple[str, str]] = None) -> float:
    """Train ours (on the built-in data, or on ``data``: train and dev TSV); returns the wall-clock seconds
    of the command (data loading and evaluation included)."""
    command = [sys.executable, "-m", "gnmt_tf.train", "--model-dir", model_dir, "--max-minutes", str(minutes),
               "--quiet"]
    if data:
        command += ["--train", data[0], "--dev", data[1]]
    for override in overrides:
        command += ["--set", override]
    started = time.monotonic()
    with open(model_dir + ".log", "w", encoding="utf-8") as log:
        done = subprocess.run(command, env=thread_env(threads), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"training ours failed: see {model_dir}.log")
    return time.monotonic() - started


def evaluate_ours(model_dir: str, threads: int) -> Dict:
    command = [sys.executable, os.path.abspath(__file__), "--evaluate-worker", model_dir]
    done = subprocess.run(command, env=thread_env(threads), capture_output=True, text=True, cwd=ROOT)
    sys.stderr.write(done.stderr[-4000:])
    if done.returncode != 0:
        raise RuntimeError(f"evaluating {model_dir} failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


def training_summary(model_dir: str) -> Dict:
    """Steps, speed and delta of the run, from its log and its TensorBoard summaries."""
    summary = {}
    with open(model_dir + ".log", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("stopped at step"):
                summary["steps"] = int(line.split()[3].rstrip(":"))
            elif line.startswith("length filter: "):  # "length filter: N of M training pairs have more than ..."
                summary["length_filter_dropped"] = int(line.split()[2].replace(",", ""))
            elif line.startswith("dev BLEU = "):  # the shipped model's figure, as evaluate gives it
                summary["final_line"] = line.strip()
    try:
        from gnmt_tf.plots import read_training_scalars

        scalars = read_training_scalars(model_dir)
        tokens = [value for _, value in scalars.get("train/source_tokens_per_second", [])]
        if tokens:
            summary["source_tokens_per_second_median"] = round(sorted(tokens)[len(tokens) // 2], 1)
    except Exception as err:  # the summaries are a nicety here; the figures above stand without them
        summary["summaries_error"] = str(err)
    return summary


# ----------------------------------------------------------------------------- the peers
def write_split(workdir: str, overrides: List[str], pairs_path: Optional[str] = None) -> Tuple[str, str]:
    """The training and dev pairs of the run, as TSV (whitespace folded): for the peers, and for ours too
    with ``--pairs``.

    The built-in catalogs by default, split as ``python -m gnmt_tf.train`` splits them (ours then makes
    the same split itself); or the pairs of ``pairs_path``, split the same way (by source sentence, the
    config's seed) into a folder named after the file and a digest of its path.
    """
    from gnmt_tf.config import load_config, parse_overrides
    from gnmt_tf.data import split_dev
    from gnmt_tf.data.catalogs import load_catalog_pairs
    from gnmt_tf.data.readers import read_tsv

    config = load_config("small", overrides=parse_overrides(overrides))
    if pairs_path:
        pairs, _ = read_tsv(pairs_path)
        # Named after the file, and its absolute path's digest: same-named files of two folders differ.
        digest = hashlib.sha1(os.path.abspath(pairs_path).encode("utf-8")).hexdigest()[:8]
        name = re.sub(r"[^A-Za-z0-9._=-]+", "-", os.path.basename(pairs_path))
        workdir = os.path.join(workdir, f"{name}-{digest}.split")
        os.makedirs(workdir, exist_ok=True)
    else:
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


def run_peer(peer: str, env_settings: Dict[str, str], train: str, dev: str, out: str, minutes: float,
             threads: int) -> Dict:
    env = dict(os.environ, **PEERS[peer], **env_settings)
    command = ["bash", PEER, train, dev, dev, out, str(int(round(minutes))), str(threads)]
    with open(out + ".log", "w", encoding="utf-8") as log:
        done = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"the {peer} peer failed: see {out}.log")
    return peer_results(out, dev)


def peer_results(out: str, dev: str) -> Dict:
    import sentencepiece as spm

    with open(os.path.join(out, "results.json"), encoding="utf-8") as handle:
        reported = json.load(handle)
    reported.pop("settings", None)
    work = os.path.join(out, "work")
    processor = spm.SentencePieceProcessor(model_file=os.path.join(work, "spm.model"))
    with open(os.path.join(work, "test.hyp.sp"), encoding="utf-8") as handle:
        hypotheses = [processor.decode(line.split()) for line in handle.read().split("\n")[:-1]]
    return {"reported": reported, "beam": score(hypotheses, read_pairs(dev))}


# ----------------------------------------------------------------------------- the run
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, nargs="+", default=[10, 30, 60], help="training minutes of each run")
    parser.add_argument("--threads", type=int, default=2, help="TensorFlow / PyTorch threads of each system")
    parser.add_argument("--peers", nargs="+", choices=[*PEERS, "none"], default=list(PEERS),
                        help="the peers to train beside ours (default: both)")
    parser.add_argument("--peer-env", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for the peer runner, e.g. LR=0.002 (repeatable)")
    parser.add_argument("--no-ours", action="store_true", help="train and score the peers only (a peer sweep)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="config override for our runs (repeatable)")
    parser.add_argument("--tag", default="default", help="name of this configuration in the results")
    parser.add_argument("--reuse-ours", action="store_true",
                        help="score our model of this tag and minutes as an earlier run left it (it finished "
                             "training, and a peer failed) instead of training it again")
    parser.add_argument("--compare-with", nargs="+", default=[], metavar="TAG",
                        help="compare with the recorded runs of these tags at the same minutes and threads, taking "
                             "ours or a peer from them where this run has none; with --no-ours --peers none, "
                             "train nothing and compare the recorded run of --tag again")
    parser.add_argument("--note", help="what to know about this run besides its settings (other work on the machine, "
                                       "a rerun), recorded with it")
    parser.add_argument("--pairs", metavar="TSV",
                        help="train and score every system on these pairs (source<TAB>target), split into training "
                             "and dev as the built-in data is, instead of the built-in data; e.g. the held-out "
                             "catalogs of benchmarks/heldout_catalogs.py")
    parser.add_argument("--workdir", default=os.path.join(ROOT, "runs", "quality_benchmark"))
    parser.add_argument("--output", default=os.path.join(HERE, "results", "quality.json"))
    parser.add_argument("--evaluate-worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.evaluate_worker:
        print(json.dumps(evaluate_worker(args.evaluate_worker)))
        return 0
    peers = [] if "none" in args.peers else args.peers
    peer_env = dict(setting.split("=", 1) for setting in args.peer_env)
    if args.no_ours and not peers:
        if not args.compare_with:
            parser.error("--no-ours with --peers none trains nothing: give --compare-with TAG to compare a recorded run")
        return compare_recorded(args.output, args.tag, args.minutes, args.threads, args.compare_with, args.note)
    os.makedirs(args.workdir, exist_ok=True)
    train_tsv, dev_tsv = write_split(args.workdir, args.overrides, args.pairs)
    results = _load(args.output)
    for minutes in args.minutes:
        # The peer runner's shell script does not quote its paths: directories are named without spaces.
        name = re.sub(r"[^A-Za-z0-9._=-]+", "-", f"{args.tag}-{minutes:g}min")
        entry = {"tag": args.tag, "minutes": minutes, "threads": args.threads, "overrides": args.overrides,
                 "peer_env": peer_env, "date": time.strftime("%Y-%m-%d"), "cpu": cpu_description(),
                 "load_average_before": [round(v, 2) for v in os.getloadavg()]}
        if args.note:
            entry["note"] = args.note
        if args.pairs:
            entry["pairs"] = {"file": os.path.relpath(os.path.abspath(args.pairs), ROOT),
                              "train": _count_lines(train_tsv), "dev": _count_lines(dev_tsv)}
        key = (args.tag, minutes, args.threads, args.no_ours, tuple(peers), _pairs_file(entry))
        if not args.no_ours:
            ours_dir = os.path.join(args.workdir, f"ours-{name}")
            if args.reuse_ours and os.path.exists(ours_dir + ".log") and "steps" in training_summary(ours_dir):
                print(f"{name}: scoring ours as trained before, in {ours_dir}", file=sys.stderr, flush=True)
                seconds, entry["ours_reused"] = None, True
            else:
                print(f"{name}: training ours for {minutes:g} minutes", file=sys.stderr, flush=True)
                seconds = train_ours(ours_dir, minutes, args.threads, args.overrides,
                                     (train_tsv, dev_tsv) if args.pairs else None)
            entry["ours"] = {**training_summary(ours_dir), "command_seconds": None if seconds is None else round(seconds, 1),
                             "decodings": evaluate_ours(ours_dir, args.threads)}
            _record(args.output, results, key, entry)  # kept even if a peer fails next
        for peer in peers:
            print(f"{name}: training the {peer} peer for {minutes:g} minutes", file=sys.stderr, flush=True)
            out = os.path.join(args.workdir, f"{peer}-{name}-{args.threads}t")
            entry.setdefault("peers", {})[peer] = run_peer(peer, peer_env, train_tsv, dev_tsv, out, minutes,
                                                            args.threads)
            _record(args.output, results, key, entry)
        if args.compare_with:
            entry["compared_with"] = args.compare_with
            entry["comparison"] = cross_comparison(entry, results, args.compare_with)
        elif "ours" in entry and peers:
            entry["comparison"] = comparison(entry)
        entry["load_average_after"] = [round(v, 2) for v in os.getloadavg()]
        _record(args.output, results, key, entry)
        _print(entry)
    return 0


def comparison(entry: Dict) -> Dict:
    """BLEU leads of one run: ours (the shipped weights, the config's beam) over each peer's beam, on the
    whole dev split and on its long sentences, and our beam over our greedy search. The shipped
    weights are ``best/``, chosen on this dev split; the peer's are its last. So the leads of our last
    checkpoint's raw weights (``..._raw_weights``), chosen on nothing, are given too."""
    decodings = entry["ours"]["decodings"]
    leads = {"beam_over_greedy": round(decodings["shipped_beam"]["whole"]["bleu"]
                                       - decodings["shipped_greedy"]["whole"]["bleu"], 2)}
    for peer, value in entry.get("peers", {}).items():
        for weights, suffix in (("shipped_beam", ""), ("raw_beam", "_raw_weights")):
            ours = decodings.get(weights)
            for part in ("whole", "long"):
                if ours and ours[part] and value["beam"][part]:
                    lead = ours[part]["bleu"] - value["beam"][part]["bleu"]
                    leads[f"{part}_lead_over_{peer}{suffix}"] = round(lead, 2)
    return leads


def cross_comparison(entry: Dict, results: Dict, tags: Sequence[str]) -> Dict:
    """:func:`comparison` of ``entry`` where its ours or its peers come from the recorded runs of
    ``tags`` at its minutes and threads: a peer trained alone against ours from another day, or ours
    alone against the peers of other days. Only the side ``entry`` lacks is borrowed, so a figure
    already in another entry (its beam over greedy, a lead over a peer it did not run) is not repeated."""
    others = [_recorded(results, tag, entry["minutes"], entry["threads"]) for tag in tags]
    for other in others:
        if _pairs_file(other) != _pairs_file(entry):
            raise SystemExit(f"tag {other['tag']!r} was trained on {_pairs_file(other) or 'the built-in data'}, this "
                             f"run on {_pairs_file(entry) or 'the built-in data'}: their figures do not compare")
        # Minutes buy steps at the CPU's rate: runs recorded on two different CPUs do not compare.
        # (Runs recorded before the CPU was, have none and are taken as they are.)
        if "cpu" in other and "cpu" in entry and other["cpu"] != entry["cpu"]:
            raise SystemExit(f"tag {other['tag']!r} was trained on another CPU ({_cpu_name(other['cpu'])}) than this "
                             f"run ({_cpu_name(entry['cpu'])}): the same minutes make other steps, their figures do not "
                             f"compare; run the peers here")
    ours = entry.get("ours") or next((other["ours"] for other in others if "ours" in other), None)
    peers = dict(entry.get("peers", {}))
    if not peers:
        for other in others:
            for peer, value in other.get("peers", {}).items():
                peers.setdefault(peer, value)
    if ours is None or not peers:
        raise SystemExit(f"nothing to compare: the runs of tags {[entry['tag'], *tags]} at {entry['minutes']:g} "
                         f"minutes have {'no ours' if ours is None else 'no peer'}")
    leads = comparison({"ours": ours, "peers": peers})
    if "ours" not in entry:
        del leads["beam_over_greedy"]  # the borrowed run's own figure, recorded with it
    return leads


def _cpu_name(cpu: Dict) -> str:
    return f"{cpu.get('model')}, {'/'.join(cpu.get('flags') or []) or 'no listed flags'}"


def compare_recorded(path: str, tag: str, minutes_list: Sequence[float], threads: int,
                     tags: Sequence[str], note: Optional[str] = None) -> int:
    """Compute again the comparison of the recorded runs of ``tag`` against those of ``tags``, and
    replace their note with ``note`` if one is given; trains nothing."""
    results = _load(path)
    for minutes in minutes_list:
        entry = _recorded(results, tag, minutes, threads)
        entry["compared_with"] = list(tags)
        if note:
            entry["note"] = note
        entry["comparison"] = cross_comparison(entry, results, tags)
        _save(path, results)
        _print(entry)
    return 0


def _recorded(results: Dict, tag: str, minutes: float, threads: int) -> Dict:
    found = [run for run in results["runs"]
             if run["tag"] == tag and run["minutes"] == minutes and run["threads"] == threads]
    if len(found) != 1:
        raise SystemExit(f"{len(found)} recorded runs of tag {tag!r} at {minutes:g} minutes and {threads} "
                         f"thread(s) in the results; need exactly one")
    return found[0]


def _record(path: str, results: Dict, key, entry: Dict) -> None:
    """Put ``entry`` in the results in place of an earlier run of the same key (or last), and save them."""
    runs = results["runs"]
    index = next((i for i, run in enumerate(runs) if run is entry or _key(run) == key), len(runs))
    results["runs"] = runs[:index] + [entry] + runs[index + 1:]
    _save(path, results)


def _key(run: Dict):
    return (run["tag"], run["minutes"], run["threads"], "ours" not in run, tuple(run.get("peers", {})),
            _pairs_file(run))


def _pairs_file(run: Dict) -> Optional[str]:
    """The --pairs file a run was trained on (None: the built-in data)."""
    return run.get("pairs", {}).get("file")


def _count_lines(path: str) -> int:
    with open(path, encoding="utf-8") as handle:
        return sum(1 for _ in handle)


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
    print(f"\n{entry['tag']}, {entry['minutes']:g} minutes, {entry['threads']} thread(s)")
    rows = [(f"ours: {name}", value) for name, value in entry.get("ours", {}).get("decodings", {}).items()]
    rows += [(f"{peer} peer, beam", value["beam"]) for peer, value in entry.get("peers", {}).items()]
    print("| system, decoding | BLEU (BP, ratio) | long: BLEU (BP, ratio) |")
    print("|---|---|---|")
    for name, value in rows:
        whole, long = value["whole"], value["long"]
        print(f"| {name} | {whole['bleu']} ({whole['bp']}, {whole['ratio']}) | "
              f"{long['bleu']} ({long['bp']}, {long['ratio']}) |" if long else f"| {name} | {whole['bleu']} | - |")
    for name, lead in entry.get("comparison", {}).items():
        print(f"{name.replace('_', ' ')}: {lead:+.2f} BLEU")


if __name__ == "__main__":
    sys.exit(main())
