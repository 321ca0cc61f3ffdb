"""Reading parallel text (pure Python; TensorFlow is not imported).

:func:`read_tsv`, :func:`read_aligned` and the dispatcher :func:`read_parallel` turn
files into a list of ``(source, target)`` strings plus a :class:`LoadReport` that
counts every line that was skipped and why.  Bad lines are skipped and counted, never
silently lost and never fatal; only problems that make the whole input meaningless
(a missing file, aligned files of different lengths, nothing usable at all) raise
:class:`DataError`.  :func:`split_dev` holds out a deterministic dev split, :func:`split_held_out` a dev and a test split.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

from gnmt_tf.data.variants import variant_key

Pair = Tuple[str, str]
PathLike = Union[str, "os.PathLike[str]"]

DEFAULT_MAX_WORDS = 1000
"""Sanity limit on whitespace-separated words per side when reading. The real length
filter is applied later, on wordpieces (``data.max_length``); this one only keeps
pathological lines (a whole document on one line) out of memory and out of the
tokenizer."""

# Skip reasons, as they appear in LoadReport.skipped and in its summary.
SKIP_BLANK = "blank line"
SKIP_NO_TAB = "no tab"
SKIP_COLUMNS = "too many columns"
SKIP_EMPTY = "empty side"
SKIP_UTF8 = "invalid UTF-8"
SKIP_LONG = "too long"
SKIP_DUPLICATE = "duplicate"

_GZIP_MAGIC = b"\x1f\x8b"


class DataError(ValueError):
    """Input data is missing, inconsistent or contains nothing usable."""


# --------------------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------------------
@dataclass
class LoadReport:
    """What reading one input did: lines read, pairs kept, lines skipped by reason."""

    source: str
    lines: int = 0
    kept: int = 0
    skipped: Dict[str, int] = field(default_factory=dict)
    unit: str = "lines"

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())

    def summary(self) -> str:
        """E.g. "read 1,204 lines from data.tsv: kept 1,190 pairs; skipped 14 (no tab: 3, ...)"."""
        text = f"read {self.lines:,} {self.unit} from {self.source}: kept {self.kept:,} pairs; "
        if not self.skipped_total:
            return text + "skipped none"
        reasons = ", ".join(f"{reason}: {count:,}" for reason, count in self.skipped.items())
        return text + f"skipped {self.skipped_total:,} ({reasons})"


# --------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------
def read_tsv(
    path: PathLike, max_words: int = DEFAULT_MAX_WORDS, dedupe: bool = False
) -> Tuple[List[Pair], LoadReport]:
    """Read ``source<TAB>target`` lines (plain or gzip-compressed).

    Each line is decoded on its own, so one line of invalid UTF-8 costs that line
    only.  Skipped and counted: blank lines, lines without a tab, lines with more
    than one tab, pairs with an empty (whitespace-only) side, lines of invalid UTF-8,
    sides of more than ``max_words`` words and, with ``dedupe``, repeated pairs.
    Surrounding whitespace (and the "\\r" of Windows line ends) is stripped from
    each side.

    Raises :class:`DataError` if the file is missing or yields no pair at all.
    """
    path = os.fspath(path)
    report = LoadReport(source=path)
    pairs: List[Pair] = []
    seen: Optional[Set[Pair]] = set() if dedupe else None
    with _open_binary(path) as handle:
        for number, raw in enumerate(handle):
            report.lines += 1
            line = _decode(raw, first=number == 0)
            if line is None:
                report.skip(SKIP_UTF8)
                continue
            if not line.strip():
                report.skip(SKIP_BLANK)
                continue
            columns = line.split("\t")
            if len(columns) < 2:
                report.skip(SKIP_NO_TAB)
                continue
            if len(columns) > 2:
                report.skip(SKIP_COLUMNS)
                continue
            _keep(columns[0], columns[1], max_words, seen, pairs, report)
    _require_some(pairs, report)
    return pairs, report


def read_aligned(
    source_path: PathLike, target_path: PathLike, max_words: int = DEFAULT_MAX_WORDS, dedupe: bool = False
) -> Tuple[List[Pair], LoadReport]:
    """Read two aligned files (plain or gzip): line i of one translates line i of the other.

    The per-line checks of :func:`read_tsv` apply, except that tabs are ordinary
    characters here; a line pair that is blank on both sides counts as a blank line,
    blank on one side as an empty side.

    Raises :class:`DataError` if a file is missing, if the files have different
    numbers of lines (the alignment is then unknowable, so this is fatal), or if no
    pair is left.
    """
    source_path, target_path = os.fspath(source_path), os.fspath(target_path)
    report = LoadReport(source=f"{source_path}, {target_path}", unit="line pairs")
    pairs: List[Pair] = []
    seen: Optional[Set[Pair]] = set() if dedupe else None
    with _open_binary(source_path) as source_file, _open_binary(target_path) as target_file:
        for number, (raw_source, raw_target) in enumerate(zip_longest(source_file, target_file)):
            if raw_source is None or raw_target is None:
                # One file ended early: count the rest of the longer one for the message.
                source_lines = number + (0 if raw_source is None else 1 + sum(1 for _ in source_file))
                target_lines = number + (0 if raw_target is None else 1 + sum(1 for _ in target_file))
                raise DataError(
                    f"aligned files have different numbers of lines: {source_path} has {source_lines:,} "
                    f"lines, {target_path} has {target_lines:,}; line i of one must translate line i "
                    f"of the other"
                )
            report.lines += 1
            source = _decode(raw_source, first=number == 0)
            target = _decode(raw_target, first=number == 0)
            if source is None or target is None:
                report.skip(SKIP_UTF8)
                continue
            if not source.strip() and not target.strip():
                report.skip(SKIP_BLANK)
                continue
            _keep(source, target, max_words, seen, pairs, report)
    _require_some(pairs, report)
    return pairs, report


def read_parallel(
    spec: Union[PathLike, Sequence[PathLike]],
    *,
    max_words: int = DEFAULT_MAX_WORDS,
    dedupe: bool = False,
    split: str = "train",
    source_lang: str = "en",
    target_lang: Optional[str] = None,
) -> Tuple[List[Pair], LoadReport]:
    """Read parallel text from any supported kind of input.

    ``spec`` is one of:

    * a single file (``.tsv``, ``.tsv.gz`` or any other name): ``source<TAB>target`` lines;
    * ``"SRC_PATH,TGT_PATH"`` or a tuple/list of two paths: aligned files;
    * ``"tfds:NAME"`` or ``"tfds:NAME:SPLIT"``, e.g. ``"tfds:wmt14_translate/fr-en"`` or
      ``"tfds:wmt14_translate/de-en:validation"``: a tensorflow-datasets translation set
      (``split`` is used when the spec names none; the language keys are
      ``source_lang`` and ``target_lang``, the latter guessed from a ``xx-yy`` config
      name when not given).

    ``max_words`` and ``dedupe`` are as in :func:`read_tsv`.
    """
    if isinstance(spec, (tuple, list)):
        if len(spec) != 2:
            raise DataError(
                f"aligned input needs exactly two paths (source, target), got {len(spec)}: {spec!r}"
            )
        return read_aligned(spec[0], spec[1], max_words=max_words, dedupe=dedupe)
    spec = os.fspath(spec)
    if spec.startswith("tfds:"):
        name, _, spec_split = spec[len("tfds:"):].partition(":")
        return _read_tfds(name, spec_split or split, source_lang, target_lang, max_words, dedupe)
    if "," in spec and not os.path.exists(spec):
        parts = [part.strip() for part in spec.split(",")]
        if len(parts) != 2 or not all(parts):
            raise DataError(f"expected 'SOURCE_FILE,TARGET_FILE' for aligned files, got {spec!r}")
        return read_aligned(parts[0], parts[1], max_words=max_words, dedupe=dedupe)
    return read_tsv(spec, max_words=max_words, dedupe=dedupe)


# ----- tensorflow-datasets (optional; needs the package and internet, so untested here) -----
def _read_tfds(
    name: str, split: str, source_lang: str, target_lang: Optional[str], max_words: int, dedupe: bool
) -> Tuple[List[Pair], LoadReport]:
    try:
        import tensorflow_datasets as tfds
    except ImportError:
        raise DataError(
            f"tfds:{name} needs tensorflow-datasets, which is not installed: pip install "
            f"\"gnmt_tf[tfds]\" (or pip install tensorflow-datasets; it downloads and prepares the data on first use, which needs "
            f"internet and, for WMT, tens of GB of disk); or pass your own files instead"
        ) from None
    if target_lang is None:
        # "wmt14_translate/fr-en" -> languages {"fr", "en"}; the target is the one that is not the source.
        languages = name.rpartition("/")[2].split("-")
        others = [lang for lang in languages if lang != source_lang]
        if len(languages) != 2 or len(others) != 1:
            raise DataError(f"tfds:{name}: cannot tell the target language from the name; pass target_lang")
        target_lang = others[0]
    try:
        dataset = tfds.load(name, split=split)
    except Exception as err:  # tfds raises many types (network, unknown name, bad split)
        raise DataError(
            f"could not load tfds:{name} split {split!r} (needs internet on first use): {err}"
        ) from None
    report = LoadReport(source=f"tfds:{name}:{split}", unit="examples")
    pairs: List[Pair] = []
    seen: Optional[Set[Pair]] = set() if dedupe else None
    for example in tfds.as_numpy(dataset):
        report.lines += 1
        source, target = _decode(example[source_lang]), _decode(example[target_lang])
        if source is None or target is None:
            report.skip(SKIP_UTF8)
            continue
        _keep(source, target, max_words, seen, pairs, report)
    _require_some(pairs, report)
    return pairs, report


# ----- shared helpers -----
def _open_binary(path: str):
    """Open for reading bytes, decompressing gzip (recognised by its magic bytes, any name)."""
    if not os.path.exists(path):
        raise DataError(f"file not found: {path}")
    if os.path.isdir(path):
        raise DataError(f"expected a file, got a directory: {path}")
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == _GZIP_MAGIC:
        return _GzipLines(path)
    return open(path, "rb")


class _GzipLines:
    """A gzip file as an iterator of lines that reports corruption as DataError."""

    def __init__(self, path: str):
        self.path = path
        self.handle = gzip.open(path, "rb")

    def __enter__(self) -> "_GzipLines":
        return self

    def __exit__(self, *exc) -> None:
        self.handle.close()

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self.handle
        except (OSError, EOFError) as err:  # gzip.BadGzipFile is an OSError
            raise DataError(f"{self.path}: corrupt or truncated gzip data: {err}") from None


def _decode(raw: bytes, first: bool = False) -> Optional[str]:
    """One line as text without its line end, or None if it is not valid UTF-8."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    text = text.rstrip("\r\n")
    if first and text.startswith("\ufeff"):  # a byte-order mark is not part of the sentence
        text = text[1:]
    return text


def _keep(
    source: str, target: str, max_words: int, seen: Optional[Set[Pair]], pairs: List[Pair], report: LoadReport
) -> None:
    """Apply the per-pair checks shared by every reader; append the pair if it passes."""
    source, target = source.strip(), target.strip()
    if not source or not target:
        report.skip(SKIP_EMPTY)
        return
    if len(source.split()) > max_words or len(target.split()) > max_words:
        report.skip(SKIP_LONG)
        return
    if seen is not None:
        if (source, target) in seen:
            report.skip(SKIP_DUPLICATE)
            return
        seen.add((source, target))
    pairs.append((source, target))
    report.kept += 1


def _require_some(pairs: List[Pair], report: LoadReport) -> None:
    if not pairs:
        raise DataError(f"no usable sentence pairs found in {report.source} ({report.summary()})")


# --------------------------------------------------------------------------------------
# Dev split
# --------------------------------------------------------------------------------------
def split_dev(
    pairs: Sequence[Pair], fraction: float, max_pairs: int, seed: int
) -> Tuple[List[Pair], List[Pair]]:
    """Hold out about ``fraction`` of the pairs (at most ``max_pairs``) as a dev split.

    The side a pair lands on depends only on a SHA-1 hash of ``seed`` and its
    source's :func:`~gnmt_tf.data.variants.variant_key`, never on its position, so the
    split is the same whatever the order of ``pairs``, and a source with several
    translations or variants (``_File``/``&File``, case, a trailing ``…``, ``%s``/``%d``:
    common in gettext catalogs) is entirely on one side: the dev set never scores a
    sentence the model was trained on.  When more than ``max_pairs`` pairs qualify,
    those with the smallest hashes are kept, still whole sources at a time.  Both lists
    keep the input order.  Returns ``(train_pairs, dev_pairs)``.
    """
    return _hold_out(pairs, fraction, max_pairs, str(seed))


def split_held_out(pairs: Sequence[Pair], dev_fraction: float, dev_max_pairs: int, test_fraction: float,
                   test_max_pairs: int, seed: int) -> Tuple[List[Pair], List[Pair], List[Pair]]:
    """Train, dev and test splits, no variant of a source in two of them (see :func:`split_dev`).

    The test split is held out first, by a hash of its own, and takes part in nothing: no training,
    no choice of a checkpoint or a setting. The dev split is then :func:`split_dev` of the rest with
    the same ``seed``, so it is the dev split of the whole, less the pairs the test split took.
    Returns ``(train_pairs, dev_pairs, test_pairs)``, each in the input order.
    """
    rest, test = _hold_out(pairs, test_fraction, test_max_pairs, f"{seed}:test")
    train, dev = split_dev(rest, dev_fraction, dev_max_pairs, seed)
    return train, dev, test


def _hold_out(pairs: Sequence[Pair], fraction: float, max_pairs: int, salt: str) -> Tuple[List[Pair], List[Pair]]:
    """(kept, held out): about ``fraction`` of the sources' variant groups, by a hash salted with ``salt``."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    if max_pairs < 0:
        raise ValueError(f"max_pairs must be >= 0, got {max_pairs}")
    scores = [_hash_unit(salt, variant_key(source)) for source, _ in pairs]
    threshold = _admission_threshold(sorted(score for score in scores if score < fraction), max_pairs)
    kept: List[Pair] = []
    held_out: List[Pair] = []
    for pair, score in zip(pairs, scores):
        (held_out if score <= threshold else kept).append(pair)
    return kept, held_out


def _admission_threshold(candidates: List[float], max_pairs: int) -> float:
    """The largest score admitted when whole groups of equal score (= one source) are admitted in
    increasing order while they fit in ``max_pairs``; -1 when none fits."""
    threshold = -1.0
    admitted = 0
    index = 0
    while index < len(candidates):
        end = index
        while end < len(candidates) and candidates[end] == candidates[index]:
            end += 1
        if admitted + (end - index) > max_pairs:
            break
        admitted += end - index
        threshold = candidates[index]
        index = end
    return threshold


def _hash_unit(salt: str, text: str) -> float:
    """A stable pseudo-random number in [0, 1) from salt and text (unlike hash(), same in every run)."""
    digest = hashlib.sha1(f"{salt}\x00{text}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64
