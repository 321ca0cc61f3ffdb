"""From the most accurate model to the fastest: test BLEU against words/s of every system and artifact, in one sitting.

    python benchmarks/pareto_benchmark.py --test runs/pareto/teacher1/test.tsv \\
        --system teacher1=runs/pareto/teacher1 --system teacher2=runs/pareto/teacher2 \\
        --system ensemble=runs/pareto/teacher1+runs/pareto/teacher2 \\
        --system last4=runs/pareto/teacher1@last4 --system student=runs/pareto/student
    python benchmarks/pareto_benchmark.py --summary          # the last sitting's table, for the docs (or: --summary S1 S2)
    python benchmarks/pareto_benchmark.py --quick --system tiny=/tmp/tiny   # minutes; writes to /tmp

A system (``--system NAME=SPEC``) is what docs/ensembles_and_students.md ships: ``DIR`` a single
model (a distilled student is one), ``DIR1+DIR2+...`` an ensemble of several model directories,
``DIR@lastK`` the ensemble of the newest K checkpoints of one directory; a member may name its
checkpoint, ``DIR@best`` (default), ``DIR@latest`` or ``DIR@averaged``.

For each system and each artifact (``--artifacts``: SavedModel float and int8, TFLite float and int8
by default; the names of benchmarks/artifact_benchmark.py), each step in a fresh worker process
with a timeout, a failed one recorded as an error while the sitting goes on:

* export: ``export.exporters.export``, what ``python -m export`` runs, its checks included (a float
  export must translate a few dev sentences as the model does), except that an int8 export is not
  refused for its dev BLEU drop: the check's float and int8 dev BLEU are recorded, with whether the
  drop is within the exporter's default tolerance;
* speed, one worker per ``--threads`` count (TensorFlow fixes its thread pools at start): the artifact
  loaded as its users load it (``artifact_benchmark.load_translate``), then the first ``--sentences``
  test sources in batches of 32 (sorted by length) and the first ``--batch1-sentences`` one by one,
  each translated twice, the second pass reported: words/s are whitespace words of the translations
  per second;
* test BLEU, in the worker with the most threads (threads do not change the translations): the whole
  ``--test`` split in batches of 32, scored by ``gnmt_tf.inference.evaluation.evaluate`` (sacrebleu,
  as ``python -m gnmt_tf.evaluate``), with a 95% bootstrap interval over the test sentences.

Every system is scored on the same test file; one whose model directory keeps another test split
(a model not made with ``--vocab-and-splits-from`` the others) may have trained on these pairs, and
the row says so. Each (system, artifact) is appended to the results file as a run as soon as it is
measured, with the sitting it belongs to (``sitting``: when the sitting started), so an interrupted
sitting keeps what it measured. At the end the sitting's table is printed and its picture drawn:
test BLEU against words/s (log scale) at batch 1 with the most threads, filled markers (batch 32:
hollow), the Pareto frontier (the points no other point beats on both) joined by a line.
"""

from __future__ import annotations

import argparse
import filecmp
import hashlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from artifact_benchmark import ARTIFACTS, import_tf, load_translate, peak_rss_mb, two_passes
from harness import answer_job, load, portable_path, run_job_in_worker, write_report

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BENCHMARK = "pareto_benchmark"
DEFAULT_ARTIFACTS = ("saved_model_float", "saved_model_int8", "tflite_float", "tflite_int8")
EXPORTABLE = tuple(name for name, spec in ARTIFACTS.items() if spec["format"] != "keras")
CHECKPOINT_CHOICES = ("best", "latest", "averaged")
NAME = re.compile(r"[A-Za-z0-9._-]+")


# ================================================================================== systems
class System(NamedTuple):
    """One system of the sitting: its label, model directories and which checkpoint of each."""

    name: str
    model_dirs: Tuple[str, ...]
    checkpoints: Tuple[str, ...]  # one per model directory: best, latest or averaged
    last_checkpoints: Optional[int] = None  # DIR@lastK: the newest K checkpoints of the one directory

    @property
    def kind(self) -> str:
        if self.last_checkpoints:
            return "last_checkpoints"
        return "ensemble" if len(self.model_dirs) > 1 else "single"

    def export_members(self) -> Dict:
        """What ``gnmt_tf.cli.common.ensemble_members`` reads (``--model-dir``, ``--checkpoint``,
        ``--last-checkpoints``), as the export command would be given it."""
        return {"model_dir": list(self.model_dirs),
                "checkpoint": None if self.last_checkpoints else list(self.checkpoints),
                "last_checkpoints": self.last_checkpoints}


def parse_system(text: str) -> System:
    """``[NAME=]DIR[@CHECKPOINT](+DIR[@CHECKPOINT])*`` or ``[NAME=]DIR@lastK`` as a :class:`System`; without a
    name, the text itself (slashes made dashes) names it."""
    name, equals, spec = text.partition("=")
    if not equals:
        name, spec = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-"), text
    if not NAME.fullmatch(name or ""):
        raise ValueError(f"--system {text!r}: the name must be letters, digits and . _ - only")
    members = spec.split("+")
    if not all(members):
        raise ValueError(f"--system {text!r}: an empty model directory")
    model_dirs, checkpoints, last = [], [], None
    for member in members:
        directory, at, which = member.rpartition("@") if "@" in member else (member, "", "best")
        lastk = re.fullmatch(r"last([1-9][0-9]*)", which)
        if lastk:
            if len(members) > 1:
                raise ValueError(f"--system {text!r}: @lastK makes an ensemble of one directory's checkpoints; "
                                 f"it does not combine with +")
            last = int(lastk.group(1))
        elif which not in CHECKPOINT_CHOICES:
            raise ValueError(f"--system {text!r}: {which!r} is not a checkpoint: use "
                             f"{', '.join(CHECKPOINT_CHOICES)} or lastK")
        model_dirs.append(directory)
        checkpoints.append("best" if lastk else which)
    return System(name, tuple(model_dirs), tuple(checkpoints), last)


# ================================================================================== workers
def worker_export(job: Dict, threads: int) -> Dict:
    """Export one system as one artifact, as ``python -m export`` does; its size, time and checks."""
    import_tf(threads)
    from types import SimpleNamespace

    from export.exporters import METADATA_FILE, ExportRequest, directory_bytes, export
    from gnmt_tf.cli.common import ensemble_members

    spec = ARTIFACTS[job["artifact"]]
    model_dirs, checkpoints = ensemble_members(SimpleNamespace(**job["members"]))
    log: List[str] = []
    request = ExportRequest(
        model_dir=model_dirs[0], output=job["output"], version=1, checkpoint=checkpoints[0],
        ensemble_with=tuple(zip(model_dirs[1:], checkpoints[1:])), quantize=spec["quantize"],
        int8_products=spec.get("int8_products", "float"), xla=spec.get("xla", False),
        use_shortlist=True if spec.get("shortlist") else None,
        bleu_tolerance=math.inf,  # recorded below, not enforced: a sitting measures every artifact
        bleu_sentences=job["int8_check_sentences"] or ExportRequest.bleu_sentences, log=log.append)
    started = time.perf_counter()
    path = export(request, spec["format"])
    out = {"path": path, "size_bytes": directory_bytes(path), "seconds": round(time.perf_counter() - started, 1),
           "log": log, "checkpoints": exported_checkpoints(os.path.join(path, METADATA_FILE))}
    if spec["quantize"] == "int8":
        out["int8_dev_check"] = int8_dev_check(log, ExportRequest.bleu_tolerance)
    return out


def exported_checkpoints(metadata_path: str) -> List[str]:
    """The checkpoints an export was made from, as its ``export.json`` lists them (portable paths)."""
    with open(metadata_path, encoding="utf-8") as handle:
        metadata = json.load(handle)
    paths = [metadata.get("checkpoint")] + [member.get("checkpoint") for member in metadata.get("ensemble_with", [])]
    return [portable_path(path) for path in paths if path]


INT8_CHECK = re.compile(r"dev BLEU float (?P<float>[0-9.]+), int8 (?P<int8>[0-9.]+)")


def int8_dev_check(log: Sequence[str], tolerance: float) -> Dict:
    """The int8 export's dev BLEU check, read from its log line, against the exporter's default ``tolerance``
    (the sitting exported with none); the line itself when it cannot be read."""
    lines = [line for line in log if "dev BLEU" in line]
    found = INT8_CHECK.search(lines[-1]) if lines else None
    if not found:
        return {"log": lines[-1] if lines else None, "tolerance": tolerance}
    float_bleu, int8_bleu = float(found["float"]), float(found["int8"])
    drop = round(float_bleu - int8_bleu, 2)
    return {"float_bleu": float_bleu, "int8_bleu": int8_bleu, "drop": drop, "tolerance": tolerance,
            "within_tolerance": drop <= tolerance}


class ArtifactTranslator:
    """An exported artifact's ``translate`` (texts in, texts out) as ``gnmt_tf.inference.evaluation.evaluate``
    reads a translator: batches of ``batch_size`` sentences of similar length, and its decoding settings."""

    def __init__(self, translate, batch_size: int, decoding):
        self._translate, self.batch_size, self.decoding = translate, batch_size, decoding

    def translate(self, sentences: Sequence[str]):
        from artifact_benchmark import length_batches
        from gnmt_tf.inference.results import Translation

        texts = [""] * len(sentences)
        for indices, chunk in length_batches(list(sentences), self.batch_size):
            for index, text in zip(indices, self._translate(chunk)):
                texts[index] = text
        return [Translation(text) for text in texts]


def read_test_pairs(path: str) -> List[Tuple[str, str]]:
    """The test split as ``python -m gnmt_tf.evaluate --test`` reads it (every line a pair, or an error)."""
    from gnmt_tf.cli.evaluate import read_test_set
    from gnmt_tf.cli.text_files import ENCODING_ERRORS

    return read_test_set(path, ENCODING_ERRORS["strict"])


def score_test_split(translate, pairs, batch_size: int, config_path: str, hypotheses_path: Optional[str]) -> Dict:
    """BLEU of the artifact on ``pairs`` through the project's evaluation, with its bootstrap interval."""
    from gnmt_tf.config import load_config
    from gnmt_tf.inference.evaluation import evaluate
    from quality_benchmark import bootstrap_interval

    # An export decodes with its first model directory's config (export.exporters.export).
    translator = ArtifactTranslator(translate, batch_size, load_config(config_path).decoding)
    evaluation = evaluate(translator, pairs)  # a warm-up batch first, as gnmt-evaluate
    hypotheses = evaluation.hypotheses
    if hypotheses_path:
        with open(hypotheses_path, "w", encoding="utf-8") as handle:
            handle.writelines(hypothesis + "\n" for hypothesis in hypotheses)
    words = sum(len(hypothesis.split()) for hypothesis in hypotheses)
    return {"bleu": round(evaluation.bleu.score, 2),
            "bleu_95": bootstrap_interval(hypotheses, [" ".join(target.split()) for _, target in pairs]),
            "text": evaluation.bleu.text, "signature": evaluation.bleu.signature, "search": evaluation.search,
            "sentences": len(pairs), "batch": batch_size, "seconds": round(evaluation.seconds, 1),
            "words_per_second": round(words / evaluation.seconds, 1)}


def worker_measure(job: Dict, threads: int) -> Dict:
    """One artifact at one thread count: its speed passes over the test sources, and with job["bleu"] its
    test BLEU."""
    tf = import_tf(threads)
    name = job["artifact"]
    pairs = read_test_pairs(job["test"])
    sources = [source for source, _ in pairs]
    started = time.perf_counter()
    translate = load_translate(tf, name, {"paths": {name: job["path"]}}, threads)
    load_seconds = time.perf_counter() - started
    started = time.perf_counter()
    translate(sources[:1])
    out = {"threads": threads, "load_seconds": round(load_seconds, 2),
           "first_call_seconds": round(time.perf_counter() - started, 3), "passes": []}
    for batch, count in job["passes"]:
        out["passes"].append(two_passes(translate, sources[:count], batch))
        print(f"  {name} threads={threads} batch={batch}: "
              f"{out['passes'][-1]['second_pass']['words_per_second']} words/s", file=sys.stderr, flush=True)
    if job["bleu"]:
        scored = pairs[: job["test_sentences"]] if job["test_sentences"] else pairs
        out["test_bleu"] = score_test_split(translate, scored, job["bleu_batch"], job["config"], job["hypotheses"])
        print(f"  {name}: test BLEU {out['test_bleu']['bleu']}", file=sys.stderr, flush=True)
    out["peak_rss_mb"] = peak_rss_mb()
    return out


WORKERS = {"export": worker_export, "measure": worker_measure}


# ================================================================================== the sitting
def speed_passes(args) -> List[Tuple[int, int]]:
    """(batch, sentences) of each speed pass: batch 1 translates fewer sentences, one call each."""
    return [(batch, args.batch1_sentences if batch == 1 else args.sentences) for batch in args.batches]


def speed_key(batch: int, threads: int) -> str:
    """The key of a row's ``words_per_second`` at this batch and thread count: ``b1_t2``."""
    return f"b{batch}_t{threads}"


def speed_label(key: str) -> str:
    """``b1_t2`` as words: "batch 1, 2 threads"."""
    batch, threads = re.fullmatch(r"b(\d+)_t(\d+)", key).groups()
    return f"batch {batch}, {threads} thread{'s' if threads != '1' else ''}"


def portable_text(text: str, workdir: str) -> str:
    """``text`` (an export's log line, a worker's error) without this machine's paths, as a results file keeps
    it: the work directory as ``WORKDIR``, the checkout's paths relative to it, the home folder as ``~``."""
    text = text.replace(os.path.abspath(workdir), "WORKDIR").replace(ROOT + os.sep, "")
    home = os.path.expanduser("~")
    return text.replace(home + os.sep, "~/") if home not in ("", "/") else text


def file_digest(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()[:16]


def own_test_splits(system: System, test: str) -> Dict[str, str]:
    """Per model directory: whether it keeps this very test split ("same"), another one ("other": the
    model may have trained on these pairs) or none."""
    found = {}
    for directory in dict.fromkeys(system.model_dirs):
        kept = os.path.join(directory, "test.tsv")
        found[portable_path(os.path.abspath(directory))] = (
            "none" if not os.path.exists(kept) else "same" if filecmp.cmp(kept, test, shallow=False) else "other")
    return found


class Sitting:
    """The settings and clock of one sitting, and the row of one (system, artifact)."""

    def __init__(self, args, argv):
        self.args, self.argv = args, argv
        self.started = time.time()
        self.id = time.strftime("%Y-%m-%dT%H:%M:%S")
        self.threads = sorted(args.threads)
        self.test = os.path.abspath(args.test)
        self.test_pairs = len(read_test_pairs(self.test))

    def progress(self, text: str) -> None:
        print(f"[{(time.time() - self.started) / 60:5.1f} min] {text}", file=sys.stderr, flush=True)

    def settings(self) -> Dict:
        a = self.args
        return {"artifacts": a.artifacts, "threads": self.threads, "batches": a.batches, "sentences": a.sentences,
                "batch1_sentences": a.batch1_sentences, "bleu_batch": a.bleu_batch, "bleu_threads": self.threads[-1],
                "int8_check_sentences": a.int8_check_sentences, "quick": a.quick}

    def measure(self, system: System, artifact: str, workdir: str, where: str = "") -> Dict:
        """The row of ``system`` as ``artifact``: export, then a worker per thread count (``where``: the row's
        place in the sitting, for the progress lines)."""
        base = os.path.join(workdir, system.name, artifact)
        shutil.rmtree(base, ignore_errors=True)  # this sitting's own directory: version 1 again
        row = self.new_row(system, artifact)
        self.progress(f"{where}{system.name} as {artifact}: exporting")
        path = self.export(row, system, base, workdir)
        if path is None:
            return row
        row["speed"], row["words_per_second"] = [], {}
        for threads in self.threads:
            bleu = threads == self.threads[-1]  # threads do not change the translations: scored once
            self.progress(f"{where}{system.name} as {artifact}: {threads} thread(s)" + (", test BLEU" if bleu else ""))
            self.time_and_score(row, system, path, threads, base + ".test.hyp" if bleu else None, workdir)
        return row

    def new_row(self, system: System, artifact: str) -> Dict:
        """What a row records before anything is measured: the system, the artifact, the test split, the settings."""
        return {"sitting": self.id, "system": system.name, "kind": system.kind,
                "model_dirs": [portable_path(os.path.abspath(d)) for d in system.model_dirs],
                "checkpoint_choice": f"last{system.last_checkpoints}" if system.last_checkpoints
                else list(system.checkpoints),
                "artifact": artifact,
                "test": {"path": portable_path(self.test), "sha256_16": file_digest(self.test),
                         "pairs": self.test_pairs, "own_test_splits": own_test_splits(system, self.test)},
                "settings": self.settings(), "errors": [], "workers": []}

    def export(self, row: Dict, system: System, base: str, workdir: str) -> Optional[str]:
        """Export the row's artifact below ``base`` in a worker; its version directory, None when it failed."""
        exported, info = run_job_in_worker(__file__, {
            "task": "export", "artifact": row["artifact"], "output": base, "members": system.export_members(),
            "int8_check_sentences": self.args.int8_check_sentences}, self.threads[-1], self.args.timeout_minutes * 60)
        row["workers"].append({"task": "export", **info})
        if "error" in exported:
            row["errors"].append({"task": "export", "error": portable_text(exported["error"], workdir)})
            return None
        row["export"] = {key: value for key, value in exported.items() if key not in ("path", "log")}
        row["export"]["log"] = [portable_text(line, workdir) for line in exported["log"]]
        row["size_mb"] = round(exported["size_bytes"] / 1e6, 1)
        return exported["path"]

    def time_and_score(self, row: Dict, system: System, path: str, threads: int, hypotheses: Optional[str],
                       workdir: str) -> None:
        """The artifact at ``path`` timed with ``threads`` in a worker (and, given a ``hypotheses`` file to write,
        scored on the test split), into ``row``."""
        a = self.args
        answer, info = run_job_in_worker(__file__, {
            "task": "measure", "artifact": row["artifact"], "path": path, "test": self.test,
            "passes": speed_passes(a), "bleu": hypotheses is not None, "test_sentences": a.test_sentences,
            "bleu_batch": a.bleu_batch, "config": os.path.join(system.model_dirs[0], "config.yaml"),
            "hypotheses": hypotheses}, threads, a.timeout_minutes * 60)
        row["workers"].append({"task": "measure", **info})
        if "error" in answer:
            row["errors"].append({"task": "measure", "threads": threads,
                                  "error": portable_text(answer["error"], workdir)})
            return
        if "test_bleu" in answer:
            row["test_bleu"] = answer.pop("test_bleu")
        row["speed"].append(answer)
        for measured in answer["passes"]:
            row["words_per_second"][speed_key(measured["batch"], threads)] = measured["second_pass"]["words_per_second"]

    def run(self, systems: Sequence[System], workdir: str) -> str:
        """Every system as every artifact, each row recorded as it is measured; returns the sitting's id."""
        for number, system in enumerate(systems, 1):
            for count, artifact in enumerate(self.args.artifacts, 1):
                where = f"system {number}/{len(systems)}, artifact {count}/{len(self.args.artifacts)}: "
                row = self.measure(system, artifact, workdir, where)
                write_report(self.args.output, row, __file__, self.argv)
                bleu = row.get("test_bleu", {}).get("bleu", "-")
                self.progress(f"{system.name} as {artifact}: test BLEU {bleu}, words/s {row.get('words_per_second')}"
                              + (f", {len(row['errors'])} error(s)" if row["errors"] else ""))
        return self.id


# ================================================================================== the summary
def pareto_frontier(points: Sequence[Tuple[float, float]]) -> List[int]:
    """The indices of the points (speed, accuracy; larger is better in both) that no other point dominates:
    none is at least as good in both and better in one. Equal points do not dominate each other."""
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], -points[i][1]))
    frontier, best_accuracy, last = [], -math.inf, None
    for i in order:  # fastest first: a point is on the frontier if it beats every faster point's accuracy
        if points[i][1] > best_accuracy or points[i] == last:
            frontier.append(i)
            best_accuracy, last = max(best_accuracy, points[i][1]), points[i]
    return sorted(frontier)


def sitting_rows(path: str, sittings: Sequence[str] = ()) -> List[Dict]:
    """The runs of the given sittings in the results file, in recorded order (default: the newest run's
    sitting). Several sittings make one table and picture: systems measured by invocations one after
    another on the same machine and test split (e.g. some systems with fewer artifacts)."""
    runs = load(path, BENCHMARK)["runs"]
    if not runs:
        raise SystemExit(f"no runs in {path}: measure a sitting first")
    wanted = set(sittings) or {runs[-1].get("sitting")}
    missing = wanted - {run.get("sitting") for run in runs}
    if missing:
        raise SystemExit(f"no runs of sitting {', '.join(sorted(missing))} in {path}")
    return [run for run in runs if run.get("sitting") in wanted]


def sittings_of(rows: Sequence[Dict]) -> str:
    """The sittings of ``rows``, for a table's or a picture's title."""
    return ", ".join(dict.fromkeys(row["sitting"] for row in rows))


def bleu_of(row: Dict) -> Optional[float]:
    return row.get("test_bleu", {}).get("bleu")


def frontier_rows(rows: Sequence[Dict], key: str) -> List[Dict]:
    """The rows on the Pareto frontier of test BLEU against words/s at ``key`` (rows without both left out)."""
    measured = [row for row in rows if bleu_of(row) is not None and row.get("words_per_second", {}).get(key)]
    points = [(row["words_per_second"][key], bleu_of(row)) for row in measured]
    return [measured[i] for i in pareto_frontier(points)]


def frontier_key(rows: Sequence[Dict]) -> str:
    """Where the picture and the table's frontier are read: batch 1 (one user waiting), the most threads."""
    settings = rows[0]["settings"]
    return speed_key(1 if 1 in settings["batches"] else min(settings["batches"]), max(settings["threads"]))


def markdown(rows: Sequence[Dict]) -> str:
    """The sitting's table (system, artifact, test BLEU, words/s per batch and threads, size), then its notes."""
    settings = rows[0]["settings"]
    keys = [speed_key(batch, threads) for batch in settings["batches"] for threads in settings["threads"]]
    on_frontier = {id(row) for row in frontier_rows(rows, frontier_key(rows))}
    first = rows[0]
    lines = [f"sitting {sittings_of(rows)}, commit {first.get('commit')}, "
             f"{(first.get('cpu') or {}).get('model')}; test {first['test']['path']} "
             f"({first['test']['pairs']} pairs); words/s: b = batch, t = threads", "",
             "| system | artifact | test BLEU | " + " | ".join(f"words/s {key.replace('_', '/')}" for key in keys)
             + f" | size MB | Pareto ({frontier_key(rows).replace('_', '/')}) |",
             "|---" * (len(keys) + 5) + "|"]
    for row in rows:
        speeds = [_figure(row.get("words_per_second", {}).get(key), "{:.0f}") for key in keys]
        lines.append(f"| {row['system']} | {row['artifact']} | {_figure(bleu_of(row), '{:.2f}')} | "
                     + " | ".join(speeds) + f" | {_figure(row.get('size_mb'), '{:.1f}')} | "
                     f"{'yes' if id(row) in on_frontier else ''} |")
    notes = notes_of(rows)
    return "\n".join(lines + ([""] + notes if notes else []))


def _figure(value, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def notes_of(rows: Sequence[Dict]) -> List[str]:
    """What the table does not show: failed steps, int8 exports beyond the exporter's tolerance, systems
    whose model directory keeps another test split."""
    notes = []
    for row in rows:
        where = f"{row['system']} as {row['artifact']}"
        for error in row.get("errors", []):
            last_line = (error["error"].strip().splitlines() or [""])[-1]
            notes.append(f"- {where}: {error['task']} failed: {last_line[:200]}")
        check = row.get("export", {}).get("int8_dev_check")
        if check and check.get("within_tolerance") is False:
            notes.append(f"- {where}: loses {check['drop']} dev BLEU to int8 (float {check['float_bleu']}, int8 "
                         f"{check['int8_bleu']}), more than the exporter's tolerance {check['tolerance']}")
    for row in {row["system"]: row for row in rows}.values():
        others = [d for d, kept in row["test"].get("own_test_splits", {}).items() if kept == "other"]
        if others:
            notes.append(f"- {row['system']}: {', '.join(others)} keeps another test split: it may have trained "
                         f"on pairs of this one")
    return notes


# ================================================================================== the picture
MARKERS = {"saved_model_float": "o", "saved_model_int8": "s", "tflite_float": "^", "tflite_int8": "D"}


def pareto_figure(rows: Sequence[Dict]):
    """Test BLEU against words/s (log scale): a point per system (colour) and artifact (marker) at batch 1 with
    the most threads (filled; its 95% bootstrap interval as a bar), at batch 32 hollow; the batch-1 frontier
    joined and labelled (labels on every point would cover each other: an artifact's float and int8 often
    score alike)."""
    from matplotlib.lines import Line2D

    from gnmt_tf.plots import _new_figure

    key = frontier_key(rows)
    threads = max(rows[0]["settings"]["threads"])
    batched = [other for other in (speed_key(batch, threads) for batch in rows[0]["settings"]["batches"])
               if other != key]
    figure = _new_figure(8.0, 5.5)
    axes = figure.add_subplot()
    systems = list(dict.fromkeys(row["system"] for row in rows))
    colours = {system: f"C{i % 10}" for i, system in enumerate(systems)}
    for row in rows:
        bleu, speeds = bleu_of(row), row.get("words_per_second", {})
        if bleu is None:
            continue
        colour, marker = colours[row["system"]], MARKERS.get(row["artifact"], "P")
        for other in batched[-1:]:
            if speeds.get(other):
                axes.scatter(speeds[other], bleu, marker=marker, facecolors="none", edgecolors=colour, zorder=3)
        if speeds.get(key):
            low, high = row["test_bleu"].get("bleu_95") or (bleu, bleu)
            axes.errorbar(speeds[key], bleu, yerr=[[bleu - low], [high - bleu]], color=colour, alpha=0.4, lw=1)
            axes.scatter(speeds[key], bleu, marker=marker, color=colour, zorder=4)
    frontier = sorted(frontier_rows(rows, key), key=lambda row: row["words_per_second"][key])
    axes.plot([row["words_per_second"][key] for row in frontier], [bleu_of(row) for row in frontier],
              color="0.5", ls="--", lw=1, zorder=2)
    for row in frontier:
        axes.annotate(f"{row['system']} {row['artifact']}", (row["words_per_second"][key], bleu_of(row)),
                      xytext=(4, 4), textcoords="offset points", fontsize=7)
    axes.set_xscale("log")
    axes.set_xlabel(f"words/s at {speed_label(key)}" + (f" (hollow: {speed_label(batched[-1])})" if batched else ""))
    axes.set_ylabel(f"test BLEU ({rows[0]['test']['path']})")
    axes.set_title(f"From the most accurate to the fastest: sitting {sittings_of(rows)}", fontsize=10)
    axes.grid(True, which="both", alpha=0.3)
    handles = [Line2D([], [], color=colours[s], marker="o", ls="", label=s) for s in systems]
    handles += [Line2D([], [], color="0.3", marker=m, ls="", label=a) for a, m in MARKERS.items()
                if any(row["artifact"] == a for row in rows)]
    axes.legend(handles=handles, fontsize=7, loc="best")
    return figure


def draw(rows: Sequence[Dict], path: str) -> None:
    from gnmt_tf.plots import save_figure

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    save_figure(pareto_figure(rows), path)
    print(f"wrote {path}", file=sys.stderr)


# ================================================================================== command line
def _flattened(values, kind=str) -> List:
    """``--threads 1,2`` and ``--threads 1 2`` alike."""
    return [kind(part) for value in values for part in str(value).split(",") if part]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--system", action="append", default=[], metavar="NAME=SPEC",
                        help="a system: DIR, DIR1+DIR2 (an ensemble), DIR@lastK; DIR@best|latest|averaged (repeat)")
    parser.add_argument("--test", help="the test TSV every system is scored on (default: the first system's "
                                       "DIR/test.tsv)")
    parser.add_argument("--test-sentences", type=int, default=None,
                        help="score only the first N test pairs (default: all; --quick: 64)")
    parser.add_argument("--artifacts", nargs="+", default=list(DEFAULT_ARTIFACTS),
                        help=f"comma- or space-separated, of: {', '.join(EXPORTABLE)} (default: %(default)s)")
    parser.add_argument("--threads", nargs="+", default=["1", "2"], help="default 1,2: a worker each")
    parser.add_argument("--batches", nargs="+", default=["1", "32"], help="default 1,32")
    parser.add_argument("--sentences", type=int, default=None,
                        help="test sources of each batched speed pass (default 200; --quick 16)")
    parser.add_argument("--batch1-sentences", type=int, default=None,
                        help="test sources of the batch-1 speed pass (default 100; --quick 8)")
    parser.add_argument("--bleu-batch", type=int, default=32)
    parser.add_argument("--int8-check-sentences", type=int, default=None,
                        help="dev sentences of an int8 export's BLEU check (default: the exporter's, 500; "
                             "--quick 32)")
    parser.add_argument("--timeout-minutes", type=float, default=30, help="per worker (default %(default)s)")
    parser.add_argument("--workdir", default=None,
                        help="where the artifacts (and each one's test translations) are written and kept "
                             "(default: a temporary directory, removed at the end)")
    parser.add_argument("--output", default=None,
                        help="default benchmarks/results/pareto.json (--quick: pareto_quick.json in the temp dir)")
    parser.add_argument("--picture", default=None,
                        help="default docs/pareto.png (--quick: pareto_quick.png in the temp dir; --summary: none)")
    parser.add_argument("--summary", nargs="*", default=None, metavar="SITTING",
                        help="print the table of recorded sittings (default: the newest; several make one "
                             "table and picture) and measure nothing")
    parser.add_argument("--quick", action="store_true", help="few sentences: for development, minutes")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--job", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.threads, args.batches = _flattened(args.threads, int), _flattened(args.batches, int)
    args.artifacts = _flattened(args.artifacts)
    unknown = [name for name in args.artifacts if name not in EXPORTABLE]
    if unknown:
        parser.error(f"--artifacts: unknown {', '.join(unknown)}; choose from {', '.join(EXPORTABLE)}")
    if min(args.threads + args.batches) < 1:
        parser.error("--threads and --batches must be 1 or more")
    temporary = tempfile.gettempdir()
    args.output = args.output or (os.path.join(temporary, "pareto_quick.json") if args.quick
                                  else os.path.join(HERE, "results", "pareto.json"))
    if args.picture is None and args.summary is None:
        args.picture = (os.path.join(temporary, "pareto_quick.png") if args.quick
                        else os.path.join(ROOT, "docs", "pareto.png"))
    args.sentences = args.sentences or (16 if args.quick else 200)
    args.batch1_sentences = args.batch1_sentences or (8 if args.quick else 100)
    args.test_sentences = args.test_sentences or (64 if args.quick else None)
    args.int8_check_sentences = args.int8_check_sentences or (32 if args.quick else None)
    try:
        args.systems = [parse_system(text) for text in args.system]
    except ValueError as error:
        parser.error(str(error))
    if not args.worker and args.summary is None:
        check_systems(parser, args)
    return args


def check_systems(parser, args) -> None:
    """Refuse, before any worker, what would fail in every row: no system, a name twice, a directory without a
    model, no test split."""
    if not args.systems:
        parser.error("give at least one --system")
    names = [system.name for system in args.systems]
    if len(set(names)) != len(names):
        parser.error(f"--system names must differ: {', '.join(names)}")
    for system in args.systems:
        for directory in system.model_dirs:
            if not os.path.exists(os.path.join(directory, "config.yaml")):
                parser.error(f"--system {system.name}: no trained model directory at {directory} (python -m "
                             f"gnmt_tf.train writes one)")
    args.test = args.test or os.path.join(args.systems[0].model_dirs[0], "test.tsv")
    if not os.path.exists(args.test):
        parser.error(f"no test split at {args.test}: give --test TSV")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        return answer_job(args.job, args.threads[0], WORKERS)
    if args.summary is not None:
        rows = sitting_rows(args.output, args.summary)
    else:
        sys.path.insert(0, ROOT)
        workdir = args.workdir or tempfile.mkdtemp(prefix="gnmt_pareto_")
        os.makedirs(workdir, exist_ok=True)
        sitting = Sitting(args, argv)
        sitting.progress(f"{len(args.systems)} system(s) x {len(args.artifacts)} artifact(s), artifacts in {workdir}")
        try:
            rows = sitting_rows(args.output, [sitting.run(args.systems, workdir)])
        finally:
            if not args.workdir:
                shutil.rmtree(workdir, ignore_errors=True)
    print(markdown(rows))
    if args.picture:
        sys.path.insert(0, ROOT)
        draw(rows, args.picture)
    return 0


if __name__ == "__main__":
    sys.exit(main())
