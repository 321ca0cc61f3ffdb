"""Sequence-level knowledge distillation (Kim & Rush 2016), as Marian's WNGT 2019 students are trained.

A teacher (one model or an ensemble) translates the training sources into n-best lists, and each
sentence's student target becomes the n-best entry closest to the real reference by sentence BLEU
("interpolated" distillation: the teacher's output, pulled towards the human one). A small student
trained on those pairs learns the teacher's one mode instead of the references' spread of them.

Translating a whole training set takes hours to days, so :class:`Distillation` works in chunks and can
be killed at any moment: after each chunk its lines are appended to the output and synced to disk, then a
small progress file beside the output records how many lines and bytes are complete and a fingerprint of
what made them (the pairs and the teacher). A new run with the same fingerprint cuts the output back to
the recorded bytes (a kill mid-write may leave a partial line) and goes on from there; any other
fingerprint is refused (:class:`ResumeRefused`), so one output never mixes two teachers or data sets.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import time
from typing import Callable, Dict, List, Mapping, NamedTuple, Sequence, Tuple

from sacrebleu.metrics import BLEU
from sacrebleu.metrics.bleu import BLEUScore

from gnmt_tf.model_files import folded

Pair = Tuple[str, str]
# The teacher as a distillation calls it: the sources of one chunk -> each one's n-best texts, best first.
Teacher = Callable[[Sequence[str]], List[List[str]]]
PROGRESS_SUFFIX, SUMMARY_SUFFIX = ".progress.json", ".summary.json"


class ResumeRefused(Exception):
    """The output or its progress file belongs to another distillation; nothing was written."""


def sentence_bleu_metric() -> BLEU:
    """The metric of ``sacrebleu.sentence_bleu`` with its defaults (13a tokenization, exponential smoothing,
    effective order), built once: that function builds one per call, which costs more than the score."""
    return BLEU(effective_order=True)


class Choice(NamedTuple):
    """One sentence's student target and the BLEU statistics the summary adds up."""

    target: str  # the chosen n-best entry, or the reference when the teacher gave none
    one_best: BLEUScore  # the teacher's 1-best ("" when it gave none) against the reference
    chosen: BLEUScore  # the target against the reference


def choose(reference: str, candidates: Sequence[str], metric: BLEU) -> Choice:
    """The candidate with the highest sentence BLEU (``metric``: :func:`sentence_bleu_metric`) against
    ``reference``; on a tie the higher-ranked one, the teacher's preference. No candidate (an empty source,
    or no finished hypothesis): the reference, so that the pair is not lost."""
    if not candidates:
        return Choice(reference, metric.sentence_score("", [reference]),
                      metric.sentence_score(reference, [reference]))
    scores = [metric.sentence_score(candidate, [reference]) for candidate in candidates]
    best = max(range(len(candidates)), key=lambda rank: scores[rank].score)  # max keeps the first of equals
    return Choice(candidates[best], scores[0], scores[best])


@dataclasses.dataclass
class BleuTotals:
    """Corpus BLEU's sufficient statistics (n-gram matches and counts, lengths), summed sentence by
    sentence: kept in the progress file, so that a resumed run's corpus BLEU covers the runs before it."""

    correct: List[int] = dataclasses.field(default_factory=lambda: [0] * BLEU().max_ngram_order)
    total: List[int] = dataclasses.field(default_factory=lambda: [0] * BLEU().max_ngram_order)
    sys_len: int = 0
    ref_len: int = 0

    def add(self, score: BLEUScore) -> None:
        self.correct = [a + b for a, b in zip(self.correct, score.counts)]
        self.total = [a + b for a, b in zip(self.total, score.totals)]
        self.sys_len += score.sys_len
        self.ref_len += score.ref_len

    def corpus_bleu(self) -> float:
        """What :func:`gnmt_tf.metrics.bleu.corpus_bleu` (sacrebleu's corpus BLEU, its defaults) gives for
        the same sentences: corpus BLEU is computed from these sums alone."""
        corpus = BLEU()
        return float(BLEU.compute_bleu(self.correct, self.total, self.sys_len, self.ref_len,
                                       smooth_method=corpus.smooth_method, smooth_value=corpus.smooth_value,
                                       effective_order=corpus.effective_order,
                                       max_ngram_order=corpus.max_ngram_order).score)


@dataclasses.dataclass
class Progress:
    """What the progress file records after each chunk: the complete lines and bytes of the output, and the
    running figures of the summary."""

    fingerprint: str
    lines: int = 0
    bytes: int = 0
    changed: int = 0  # targets that differ from their reference
    seconds: float = 0.0  # spent distilling, over every run
    one_best: BleuTotals = dataclasses.field(default_factory=BleuTotals)
    chosen: BleuTotals = dataclasses.field(default_factory=BleuTotals)

    def save(self, path: str) -> None:
        """Atomically and synced: the file always describes a complete, synced output prefix."""
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            json.dump(dataclasses.asdict(self), handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(path + ".tmp", path)

    @classmethod
    def load(cls, path: str) -> "Progress":
        with open(path, encoding="utf-8") as handle:
            fields = json.load(handle)
        totals = {name: BleuTotals(**fields.pop(name)) for name in ("one_best", "chosen")}
        return cls(**fields, **totals)


def fingerprint(pairs: Sequence[Pair], teacher: Mapping) -> str:
    """A hash of the pairs (in order) and of the teacher's description: what decides the output's lines."""
    digest = hashlib.sha256(json.dumps(teacher, sort_keys=True).encode("utf-8"))
    for pair in pairs:
        digest.update(json.dumps(pair).encode("utf-8") + b"\n")
    return digest.hexdigest()


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _nothing(progress: Progress) -> None:
    """The default ``after_chunk``: nothing to do between chunks."""


class Distillation:
    """One resumable distillation of ``pairs`` into the TSV file ``output`` (``source<TAB>target``, input
    order), ``chunk`` sentences at a time.

    ``teacher`` translates (:data:`Teacher`); ``about`` describes it (model directories, checkpoints, n-best,
    search) for the fingerprint and the summary; ``after_chunk`` is called with the progress once a chunk is
    on disk (tests stop a run there); ``report`` takes the progress lines.
    """

    def __init__(self, pairs: Sequence[Pair], output: str, teacher: Teacher, about: Mapping, chunk: int = 512,
                 after_chunk: Callable[[Progress], None] = _nothing,
                 report: Callable[[str], None] = _to_stderr, clock: Callable[[], float] = time.monotonic):
        self.pairs, self.output, self.teacher, self.about = list(pairs), output, teacher, about
        self.chunk, self.after_chunk, self.report, self.clock = chunk, after_chunk, report, clock
        self.fingerprint = fingerprint(self.pairs, about)
        self.progress_path, self.summary_path = output + PROGRESS_SUFFIX, output + SUMMARY_SUFFIX

    def run(self, restart: bool = False) -> Dict:
        """Distil what is left (everything with ``restart``); returns the summary, also written beside the
        output."""
        progress = self._start(restart)
        metric = sentence_bleu_metric()
        with open(self.output, "ab") as out:
            for start in range(progress.lines, len(self.pairs), self.chunk):
                progress = self._distill_chunk(progress, self.pairs[start:start + self.chunk], out, metric)
                self.after_chunk(progress)
        return self._finish(progress)

    def _start(self, restart: bool) -> Progress:
        """The progress to go on from, the output cut back to it; a fresh start for ``restart``."""
        if restart or not os.path.exists(self.progress_path):
            if os.path.exists(self.output) and not restart:
                raise ResumeRefused(f"{self.output} exists, and no distillation into it is in progress "
                                    f"({self.progress_path} is missing); --restart overwrites it")
            return self._fresh()
        progress = Progress.load(self.progress_path)
        if progress.fingerprint != self.fingerprint:
            raise ResumeRefused(f"{self.progress_path} records a distillation of other pairs or by another "
                                f"teacher (data, model directories, checkpoints, n-best or search differ); "
                                f"give the same ones to resume it, or --restart to start {self.output} "
                                f"afresh")
        size = os.path.getsize(self.output) if os.path.exists(self.output) else 0
        if size < progress.bytes:
            raise ResumeRefused(f"{self.output} holds {size:,} bytes, fewer than the {progress.bytes:,} "
                                f"{self.progress_path} records as done: it was changed; --restart starts "
                                f"afresh")
        with open(self.output, "ab") as out:  # (created, if a kill came before it was)
            out.truncate(progress.bytes)  # a partial line, or lines synced after the last record
        self.report(f"resuming {self.output} after {progress.lines:,} of {len(self.pairs):,} sentences")
        return progress

    def _fresh(self) -> Progress:
        """The progress file first: a kill before the output is emptied still resumes at line 0."""
        if os.path.exists(self.summary_path):
            os.remove(self.summary_path)
        progress = Progress(self.fingerprint)
        progress.save(self.progress_path)
        open(self.output, "wb").close()
        return progress

    def _distill_chunk(self, progress: Progress, pairs: Sequence[Pair], out, metric: BLEU) -> Progress:
        """Translate, choose, append and sync one chunk, then record it."""
        started = self.clock()
        candidates = self.teacher([source for source, _ in pairs])
        choices = [choose(reference, nbest, metric) for (_, reference), nbest in zip(pairs, candidates)]
        data = "".join("\t".join(folded((source, choice.target))) + "\n"
                       for (source, _), choice in zip(pairs, choices)).encode("utf-8")
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
        for (_, reference), choice in zip(pairs, choices):
            progress.one_best.add(choice.one_best)
            progress.chosen.add(choice.chosen)
            target, reference = folded((choice.target, reference))
            progress.changed += target != reference
        progress.lines += len(pairs)
        progress.bytes += len(data)
        progress.seconds += self.clock() - started
        progress.save(self.progress_path)
        self.report(self._progress_line(progress))
        return progress

    def _progress_line(self, progress: Progress) -> str:
        total, done, minutes = len(self.pairs), progress.lines, progress.seconds / 60
        left = (total - done) * minutes / max(done, 1)
        return (f"distilled {done:,}/{total:,} sentences ({100 * done / max(total, 1):.1f}%), "
                f"{minutes:.1f} min so far, about {left:.1f} min left")

    def _finish(self, progress: Progress) -> Dict:
        """The summary, written atomically; then the progress file goes: the output is complete."""
        summary = {
            "output": self.output,
            "sentences": progress.lines,
            "changed": progress.changed,
            "bleu_teacher_1best": round(progress.one_best.corpus_bleu(), 2),
            "bleu_distilled": round(progress.chosen.corpus_bleu(), 2),
            "minutes": round(progress.seconds / 60, 2),
            "teacher": dict(self.about),
        }
        with open(self.summary_path + ".tmp", "w", encoding="utf-8") as handle:
            json.dump(summary, handle, indent=2)
            handle.write("\n")
        os.replace(self.summary_path + ".tmp", self.summary_path)
        os.remove(self.progress_path)
        return summary
