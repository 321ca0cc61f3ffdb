"""Translation quality per CPU minute: ours against the peers, in one sitting, chosen on dev, reported on test.

    python benchmarks/quality_benchmark.py --minutes 10 --runs 2 --ours default --lstm lr0.002:LR=0.002
    python benchmarks/quality_benchmark.py --minutes 10 --runs 2 \\
        --ours default --ours dropout0.2:model.dropout=0.2 \\
        --lstm lr0.001:LR=0.001 --lstm lr0.002:LR=0.002
    python benchmarks/quality_benchmark.py --minutes 60 --runs 2 --pairs runs/heldout/catalogs_en_fr.tsv --ours default --lstm lr0.002:LR=0.002
    python benchmarks/quality_benchmark.py --summary 2026-11-28T22:10:00      # the table of a recorded sitting

The pairs (the built-in English->French catalogs, or ``--pairs TSV``) are split three ways by
:func:`gnmt_tf.data.split_held_out`, no variant of a source string in two splits: every system trains
on the train split, checkpoints are chosen and settings compared on the dev split, and the test split
chooses nothing: it gives the figures the docs report.

Each system is given its settings (``--ours LABEL[:KEY=VALUE,...]`` config overrides, ``--lstm`` and
``--transformer LABEL[:KEY=VALUE,...]`` settings of the peer runner ``../shared/peers/onmtpy/run.sh``);
every system must be given as many settings as the others (the same tuning effort). One sitting trains
every setting of every system ``--runs`` times, alternating systems (run 1 of each, then run 2 of each,
...), each for the same minutes and threads, so that the machine's drift falls on all of them. Each
run is recorded in the results file as soon as it is scored, with its date, commit, CPU and command.

Scoring: ours from its shipped weights (``best/``, chosen on dev) with the config's beam search, as
``python -m gnmt_tf.evaluate`` scores them, and greedily; a peer from its newest complete save (the
runner saves every ``SAVE_EVERY`` steps: the steps trained after it are recorded as unscored). BLEU
(sacrebleu) on the whole split and on its sentences of 12 source words or more.

The summary picks, per system, the setting with the best mean dev BLEU, and reports that setting's
test BLEU: the mean over runs with the lowest and highest run (a single run: its 95% bootstrap
interval over the test sentences instead, which leaves the noise of training out). A lead counts only
when one system's spread lies wholly above the other's; otherwise it is "no difference".
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from harness import command_line, commit, cpu_description, load, record

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
PEER = os.path.join(ROOT, "..", "shared", "peers", "onmtpy", "run.sh")
PEERS = {"lstm": {"ARCH": "rnn"}, "transformer": {"ARCH": "transformer"}}
SYSTEMS = ("ours", *PEERS)
LONG_WORDS = 12  # "long" sentences: at least this many source words
SPLITS = ("train", "dev", "test")

Pair = Tuple[str, str]


class Trial(NamedTuple):
    """One setting of one system: its label and its settings (config overrides, or peer runner settings)."""

    system: str
    label: str
    settings: Dict[str, str]


def parse_trial(system: str, text: str) -> Trial:
    """``LABEL`` or ``LABEL:KEY=VALUE,KEY=VALUE`` as a :class:`Trial` of ``system``."""
    label, _, rest = text.partition(":")
    if not re.fullmatch(r"[A-Za-z0-9._=-]+", label):
        raise ValueError(f"--{system} {text!r}: the label must be letters, digits and . _ = - only")
    settings = {}
    for item in filter(None, rest.split(",")):
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise ValueError(f"--{system} {text!r}: {item!r} is not KEY=VALUE")
        settings[key] = value
    return Trial(system, label, settings)


def interleaved(given: Dict[str, List[Trial]]) -> List[Trial]:
    """The systems' settings in the order a sitting runs them: the first setting of each system, then the
    second of each, ...: no system's runs bunched at one end of the sitting."""
    depth = max((len(trials) for trials in given.values()), default=0)
    return [trials[i] for i in range(depth) for trials in given.values() if i < len(trials)]


def check_equal_effort(trials: Sequence[Trial]) -> None:
    """Every system given as many settings as the others: the same tuning effort."""
    counts = {system: sum(trial.system == system for trial in trials) for system in SYSTEMS}
    given = {system: count for system, count in counts.items() if count}
    if len(set(given.values())) > 1:
        raise ValueError(f"each system must be given as many settings as the others (the same tuning effort), "
                         f"got {given}")


# ----------------------------------------------------------------------------- data
def read_pairs(path: str) -> List[Pair]:
    with open(path, encoding="utf-8") as handle:
        return [tuple(line.rstrip("\n").split("\t", 1)) for line in handle if "\t" in line]


def write_splits(workdir: str, pairs_path: Optional[str] = None) -> Dict[str, str]:
    """The train, dev and test splits of the pairs as TSV files in ``workdir`` (white space folded):
    {split: path}. The built-in catalogs by default, or the pairs of ``pairs_path``; split by
    :func:`gnmt_tf.data.split_held_out` with the sizes and seed of the ``small`` config."""
    from gnmt_tf.config import load_config
    from gnmt_tf.data import split_held_out
    from gnmt_tf.data.catalogs import load_catalog_pairs
    from gnmt_tf.data.readers import read_tsv

    pairs = read_tsv(pairs_path)[0] if pairs_path else load_catalog_pairs(target_lang="fr", source_lang="en")[0]
    pairs = [(" ".join(source.split()), " ".join(target.split())) for source, target in pairs]
    data, seed = load_config("small").data, load_config("small").training.seed
    splits = split_held_out(pairs, data.dev_fraction, data.dev_max_pairs, data.test_fraction, data.test_max_pairs,
                            seed)
    os.makedirs(workdir, exist_ok=True)
    paths = {}
    for name, chosen in zip(SPLITS, splits):
        paths[name] = os.path.join(workdir, f"{name}.tsv")
        with open(paths[name], "w", encoding="utf-8") as handle:
            handle.writelines(f"{source}\t{target}\n" for source, target in chosen)
    return paths


# ----------------------------------------------------------------------------- scoring
def score(hypotheses: Sequence[str], pairs: Sequence[Pair]) -> Dict:
    """BLEU with its brevity penalty and length ratio on the whole split and on its long sentences."""
    from sacrebleu.metrics import BLEU

    def part(indices):
        if not indices:
            return None
        result = BLEU().corpus_score([hypotheses[i] for i in indices], [[pairs[i][1] for i in indices]])
        return {"sentences": len(indices), "bleu": round(result.score, 2), "bp": round(result.bp, 3),
                "ratio": round(result.sys_len / max(result.ref_len, 1), 3)}

    long = [i for i, (source, _) in enumerate(pairs) if len(source.split()) >= LONG_WORDS]
    whole = part(list(range(len(pairs))))
    if whole:
        whole["bleu_95"] = bootstrap_interval(hypotheses, [target for _, target in pairs])
    return {"whole": whole, "long": part(long)}


def bootstrap_interval(hypotheses: Sequence[str], references: Sequence[str], resamples: int = 1000,
                       seed: int = 0) -> List[float]:
    """The 2.5th and 97.5th percentiles of corpus BLEU over ``resamples`` resamplings of the sentences
    (Koehn 2004): the noise of scoring on this many sentences, for a system run once."""
    import numpy as np
    from sacrebleu.metrics import BLEU

    bleu = BLEU()
    # sacrebleu's own per-sentence sufficient statistics (what its paired bootstrap resamples): summed
    # over a resample, they give that resample's corpus BLEU.
    stats = np.array(bleu._extract_corpus_statistics(list(hypotheses), [list(references)]))
    rng = np.random.default_rng(seed)
    scores = [bleu._compute_score_from_stats(list(stats[rng.integers(0, len(stats), len(stats))].sum(axis=0))).score
              for _ in range(resamples)]
    return [round(float(np.percentile(scores, 2.5)), 2), round(float(np.percentile(scores, 97.5)), 2)]


def thread_env(threads: int) -> Dict[str, str]:
    return dict(os.environ, TF_NUM_INTRAOP_THREADS=str(threads), TF_NUM_INTEROP_THREADS=str(threads),
                OMP_NUM_THREADS=str(threads), TF_CPP_MIN_LOG_LEVEL="2")


# ----------------------------------------------------------------------------- our system
def train_ours(model_dir: str, minutes: float, threads: int, overrides: Sequence[str], splits: Dict[str, str]) -> None:
    """``python -m gnmt_tf.train`` on the train split, choosing its checkpoint on the dev split."""
    command = [sys.executable, "-m", "gnmt_tf.train", "--model-dir", model_dir, "--max-minutes", str(minutes),
               "--quiet", "--train", splits["train"], "--dev", splits["dev"]]
    for override in overrides:
        command += ["--set", override]
    with open(model_dir + ".log", "w", encoding="utf-8") as log:
        done = subprocess.run(command, env=thread_env(threads), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"training ours failed: see {model_dir}.log")


def evaluate_worker(model_dir: str, dev: str, test: str) -> Dict:
    """Ours on dev and test from the shipped weights, beam (as gnmt-evaluate) and greedy (in a worker process)."""
    from gnmt_tf.inference.evaluation import evaluate, load_translator

    translator, _, checkpoint = load_translator(model_dir, "best")
    results = {"checkpoint": os.path.relpath(checkpoint, model_dir)}
    for split, path in (("dev", dev), ("test", test)):
        pairs = read_pairs(path)
        beam, greedy = evaluate(translator, pairs), evaluate(translator, pairs, greedy=True)
        results[split] = {"beam": score(beam.hypotheses, pairs), "greedy": score(greedy.hypotheses, pairs)}
        results["search"] = beam.search
    return results


def run_ours(trial: Trial, run_dir: str, minutes: float, threads: int, splits: Dict[str, str]) -> Dict:
    overrides = [f"{key}={value}" for key, value in trial.settings.items()]
    train_ours(run_dir, minutes, threads, overrides, splits)
    command = [sys.executable, os.path.abspath(__file__), "--evaluate-worker", run_dir, splits["dev"], splits["test"]]
    done = subprocess.run(command, env=thread_env(threads), capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"scoring {run_dir} failed: {done.stderr[-3000:]}")
    scores = json.loads(done.stdout.strip().splitlines()[-1])
    return {"steps": trained_steps(run_dir + ".log"), "checkpoint": scores.pop("checkpoint"),
            "decoding": scores.pop("search"), "dev": scores["dev"], "test": scores["test"]}


def trained_steps(log_path: str) -> Optional[int]:
    with open(log_path, encoding="utf-8") as handle:
        stops = [line for line in handle if line.startswith("stopped at step")]
    return int(stops[-1].split()[3].rstrip(":")) if stops else None


# ----------------------------------------------------------------------------- the peers
def run_peer(trial: Trial, out: str, minutes: float, threads: int, splits: Dict[str, str]) -> Dict:
    """Train a peer on the train split and translate dev and test (one file, dev first) from its newest save."""
    dev, test = read_pairs(splits["dev"]), read_pairs(splits["test"])
    both = out + ".dev+test.tsv"
    with open(both, "w", encoding="utf-8") as handle:
        handle.writelines(f"{source}\t{target}\n" for source, target in dev + test)
    env = dict(os.environ, **PEERS[trial.system], **trial.settings)
    command = ["bash", PEER, splits["train"], splits["dev"], both, out, str(int(round(minutes))), str(threads)]
    with open(out + ".log", "w", encoding="utf-8") as log:
        done = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"the {trial.system} peer failed: see {out}.log")
    hypotheses = peer_hypotheses(out)
    with open(os.path.join(out, "results.json"), encoding="utf-8") as handle:
        reported = {key: value for key, value in json.load(handle).items() if key not in ("settings", "bleu", "chrf")}
    last = last_peer_step(os.path.join(out, "work", "train.log"))
    saved = reported["steps"]
    return {"steps": saved, "unscored_steps": None if last is None else max(0, last - saved), "reported": reported,
            "decoding": "beam 4 (the runner's penalties)",
            "dev": {"beam": score(hypotheses[:len(dev)], dev)}, "test": {"beam": score(hypotheses[len(dev):], test)}}


def peer_hypotheses(out: str) -> List[str]:
    import sentencepiece as spm

    work = os.path.join(out, "work")
    processor = spm.SentencePieceProcessor(model_file=os.path.join(work, "spm.model"))
    with open(os.path.join(work, "test.hyp.sp"), encoding="utf-8") as handle:
        return [processor.decode(line.split()) for line in handle.read().split("\n")[:-1]]


def last_peer_step(train_log: str) -> Optional[int]:
    """The last step the peer's training log reports (it trained past its newest save until killed)."""
    with open(train_log, encoding="utf-8", errors="replace") as handle:
        steps = re.findall(r"Step (\d+)/", handle.read())
    return int(steps[-1]) if steps else None


# ----------------------------------------------------------------------------- the sitting
def sitting(trials: Sequence[Trial], runs: int, minutes: float, threads: int, splits: Dict[str, str],
            workdir: str, output: str, data_name: str) -> str:
    """Every trial ``runs`` times, alternating, each run recorded as soon as it is scored; returns the sitting's id."""
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    common = {"sitting": started, "commit": commit(), "cpu": cpu_description(), "data": data_name,
              "split_sizes": {name: len(read_pairs(path)) for name, path in splits.items()},
              "minutes": minutes, "threads": threads, "command": command_line()}
    for run in range(1, runs + 1):
        for number, trial in enumerate(trials, 1):
            print(f"[{time.strftime('%H:%M')}] run {run}/{runs}, {trial.system} {trial.label} "
                  f"({number}/{len(trials)}): {minutes:g} minutes", file=sys.stderr, flush=True)
            run_dir = os.path.join(workdir, f"{started.replace(':', '')}-{trial.system}-{trial.label}-{run}")
            date = time.strftime("%Y-%m-%dT%H:%M:%S")  # when this run started
            scored = (run_ours if trial.system == "ours" else run_peer)(trial, run_dir, minutes, threads, splits)
            record(output, {**common, "date": date, "system": trial.system,
                            "setting": trial.label, "settings": trial.settings, "run": run, **scored},
                   "quality_benchmark", long_sentences=f">= {LONG_WORDS} source words")
    return started


# ----------------------------------------------------------------------------- the summary
def summary(runs: Sequence[Dict]) -> Dict:
    """Per system: the setting chosen on dev (best mean dev BLEU of its beam), and its test BLEU (mean,
    lowest, highest over runs); then ours against each peer: a lead, or "no difference"."""
    chosen = {}
    for system in dict.fromkeys(run["system"] for run in runs):
        mine = [run for run in runs if run["system"] == system]
        by_setting = {label: [run for run in mine if run["setting"] == label]
                      for label in dict.fromkeys(run["setting"] for run in mine)}
        best = max(by_setting, key=lambda label: statistics.mean(_bleu(run, "dev") for run in by_setting[label]))
        chosen[system] = {"setting": best, **_test_figure(by_setting[best]),
                          "dev_bleu_mean": round(statistics.mean(_bleu(run, "dev") for run in by_setting[best]), 2)}
    leads = {peer: lead(chosen["ours"], chosen[peer]) for peer in chosen if peer != "ours" and "ours" in chosen}
    return {"chosen_on_dev": chosen, "ours_against": leads}


def _test_figure(runs: Sequence[Dict]) -> Dict:
    """A setting's test BLEU: the mean of its runs, with their lowest and highest; for a single run, its
    bootstrap interval stands for the spread."""
    tests = [_bleu(run, "test") for run in runs]
    low, high = (min(tests), max(tests)) if len(tests) > 1 else runs[0]["test"]["beam"]["whole"]["bleu_95"]
    return {"runs": len(tests), "test_bleu_mean": round(statistics.mean(tests), 2), "test_bleu_lowest": low,
            "test_bleu_highest": high, "spread": "runs" if len(tests) > 1 else "bootstrap 95%"}


def lead(ours: Dict, peer: Dict) -> str:
    """Ours' lead on test, or "no difference" when the two systems' spreads (runs, or one run's bootstrap
    interval) overlap."""
    difference = round(ours["test_bleu_mean"] - peer["test_bleu_mean"], 2)
    if ours["test_bleu_lowest"] > peer["test_bleu_highest"] or peer["test_bleu_lowest"] > ours["test_bleu_highest"]:
        return f"{difference:+.2f} BLEU"
    return f"no difference ({difference:+.2f} BLEU, inside the spread)"


def _bleu(run: Dict, split: str) -> float:
    return run[split]["beam"]["whole"]["bleu"]


def print_summary(runs: Sequence[Dict]) -> None:
    result = summary(runs)
    print(f"sitting {runs[0]['sitting']}, {runs[0]['minutes']:g} minutes, {runs[0]['threads']} thread(s), "
          f"{runs[0]['cpu'].get('model')}, data: {runs[0]['data']}")
    print("| system | setting (chosen on dev) | runs | dev BLEU | test BLEU: mean (spread) |")
    print("|---|---|---|---|---|")
    for system, value in result["chosen_on_dev"].items():
        print(f"| {system} | {value['setting']} | {value['runs']} | {value['dev_bleu_mean']} | "
              f"{value['test_bleu_mean']} ({value['test_bleu_lowest']}-{value['test_bleu_highest']}, "
              f"{value['spread']}) |")
    for peer, text in result["ours_against"].items():
        print(f"ours against {peer}: {text}")


def sitting_runs(path: str, sitting_id: str) -> List[Dict]:
    runs = [run for run in load(path)["runs"] if run["sitting"] == sitting_id]
    if not runs:
        raise SystemExit(f"no runs of sitting {sitting_id} in {path}")
    return runs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10, help="training minutes of every run")
    parser.add_argument("--runs", type=int, default=2,
                        help="runs of every setting (2 or more measure the noise; a single run's spread is its "
                             "bootstrap interval, which leaves out the noise of training)")
    parser.add_argument("--threads", type=int, default=2, help="TensorFlow / PyTorch threads of every system")
    for system in SYSTEMS:
        parser.add_argument(f"--{system}", action="append", default=[], metavar="LABEL[:KEY=VALUE,...]",
                            help=f"a setting of {system} to train (repeatable)")
    parser.add_argument("--pairs", metavar="TSV", help="other pairs than the built-in catalogs (source<TAB>target)")
    parser.add_argument("--workdir", default=os.path.join(ROOT, "runs", "quality_benchmark"))
    parser.add_argument("--output", default=os.path.join(HERE, "results", "quality.json"))
    parser.add_argument("--summary", metavar="SITTING", help="print the summary of a recorded sitting; train nothing")
    parser.add_argument("--evaluate-worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.evaluate_worker:
        print(json.dumps(evaluate_worker(*args.evaluate_worker)))
        return 0
    if args.summary:
        print_summary(sitting_runs(args.output, args.summary))
        return 0
    try:
        given = {system: [parse_trial(system, text) for text in getattr(args, system)] for system in SYSTEMS}
        trials = interleaved(given)
        check_equal_effort(trials)
    except ValueError as err:
        parser.error(str(err))
    if not trials or args.runs < 1:
        parser.error("give at least one setting (--ours, --lstm, --transformer) and --runs 1 or more")
    data_name = os.path.basename(args.pairs) if args.pairs else "built-in en->fr gettext catalogs"
    splits = write_splits(os.path.join(args.workdir, "splits", re.sub(r"\W+", "-", data_name)), args.pairs)
    sitting_id = sitting(trials, args.runs, args.minutes, args.threads, splits, args.workdir, args.output, data_name)
    print_summary(sitting_runs(args.output, sitting_id))
    return 0


if __name__ == "__main__":
    sys.exit(main())
