"""The built-in training data: gettext message catalogs installed on this machine.

Every translated program ships ``/usr/share/locale/<lang>/LC_MESSAGES/<domain>.mo``:
a compiled table from English messages (msgids) to human translations (msgstrs).
Together they are a small English->X parallel corpus (about 70k English->French
pairs on a typical Debian/Ubuntu system): mostly short UI strings, menu entries,
error messages and place/language names, with some full sentences.

How entries become pairs (Python's ``gettext.GNUTranslations`` reads the file):

* the header (msgid "") is skipped;
* a message context, stored as ``"context\\x04msgid"``, is dropped: the pair is the
  msgid and its translation;
* plural messages appear as keys ``(msgid, i)``, one per plural form; only form 0 is
  used, paired with the singular msgid.  Form 0 is the singular in English-like
  plural rules (French, German, ...) and the only form in languages without
  plurals; the English plural (msgid_plural) is not stored in the .mo table, so the
  other forms have no English side to pair with;
* an empty or whitespace-only translation is skipped (untranslated);
* a translation identical to its source is kept: these are mostly place names,
  "OK", "%s: %s" and the like, which are correct translations (copying is part of
  what a translation model has to learn);
* strings are kept raw (embedded newlines, tabs, format specifiers): the
  tokenizer normalises whitespace;
* exact duplicate (source, target) pairs are dropped (several packages ship the
  same catalog, e.g. iso_3166-2 and iso_3166_2); one source with several different
  translations keeps them all, as they are all legitimate;
* a file that cannot be read (bad magic number, unknown charset, ...) is skipped
  and counted.

Files are read in sorted order and entries in file order, so the result is the
same on every run.
"""

from __future__ import annotations

import gettext
import glob
import os
from dataclasses import dataclass, field
from typing import Dict, List, Set, Tuple

from gnmt_tf.data import DataError, Pair

DEFAULT_LOCALE_DIR = "/usr/share/locale"

SKIP_EMPTY_TRANSLATION = "empty translation"
SKIP_EMPTY_SOURCE = "empty source"


@dataclass
class CatalogReport:
    """What :func:`load_catalog_pairs` found and did."""

    source_lang: str
    target_lang: str
    directory: str
    files_found: int = 0
    files_read: int = 0
    failed: Dict[str, str] = field(default_factory=dict)
    """File name -> the error that made it unreadable."""
    entries: int = 0
    """Messages read, header and plural forms other than 0 not counted."""
    skipped: Dict[str, int] = field(default_factory=dict)
    duplicates: int = 0
    pairs: int = 0

    @property
    def files_failed(self) -> int:
        return len(self.failed)

    def summary(self) -> str:
        """E.g. "gettext catalogs for en->fr in /usr/share/locale/fr/LC_MESSAGES: 87 files, ..."."""
        parts = [f"{self.files_read:,} files"]
        if self.failed:
            parts.append(f"{self.files_failed:,} unreadable ({', '.join(sorted(self.failed))})")
        parts.append(f"{self.entries:,} entries")
        parts.extend(f"{count:,} skipped ({reason})" for reason, count in self.skipped.items())
        parts.append(f"{self.duplicates:,} duplicates dropped")
        parts.append(f"{self.pairs:,} pairs")
        what = f"gettext catalogs for {self.source_lang}->{self.target_lang} in {self.directory}"
        return f"{what}: " + ", ".join(parts)


def load_catalog_pairs(
    target_lang: str = "fr", source_lang: str = "en", locale_dir: str = DEFAULT_LOCALE_DIR
) -> Tuple[List[Pair], CatalogReport]:
    """English->``target_lang`` pairs from ``<locale_dir>/<target_lang>/LC_MESSAGES/*.mo``.

    ``target_lang`` is the locale directory's name: "fr", "de", "pt_BR", "zh_CN"
    ("pt-BR" is accepted for "pt_BR").  Only ``source_lang="en"`` is supported, as
    msgids are English.  Returns ``(pairs, report)``; see the module docstring for
    how entries become pairs.

    Raises :class:`DataError` for another source language, or when there are no
    catalogs for ``target_lang`` (the message lists the languages that have some and
    how to pass your own data), or when they hold no usable pair.
    """
    if source_lang != "en":
        raise DataError(
            f"gettext catalogs translate from English (their msgids are English), so the source language "
            f"must be 'en', got {source_lang!r}; for other directions pass your own data with "
            f"--train FILE.tsv --dev FILE.tsv"
        )
    target_lang = target_lang.replace("-", "_")
    directory = os.path.join(locale_dir, target_lang, "LC_MESSAGES")
    files = sorted(glob.glob(os.path.join(glob.escape(directory), "*.mo")))
    if not files:
        raise DataError(_no_catalogs_message(target_lang, locale_dir, directory))

    report = CatalogReport(source_lang, target_lang, directory, files_found=len(files))
    pairs: List[Pair] = []
    seen: Set[Pair] = set()
    for path in files:
        try:
            with open(path, "rb") as handle:
                catalog = gettext.GNUTranslations(handle)._catalog
        except (OSError, ValueError, LookupError, IndexError) as err:
            # OSError: bad magic number / truncated; UnicodeDecodeError (a ValueError) and
            # LookupError: bad or unknown charset; IndexError/ValueError: malformed tables.
            report.failed[os.path.basename(path)] = f"{type(err).__name__}: {err}"
            continue
        report.files_read += 1
        for key, translation in catalog.items():
            if isinstance(key, tuple):  # (msgid, plural form index)
                key, form = key
                if form != 0:
                    continue
            if key == "":  # the header
                continue
            report.entries += 1
            source = key.rpartition("\x04")[2]  # drop a message context "ctx\x04msgid"
            if not source.strip():
                _count(report.skipped, SKIP_EMPTY_SOURCE)
                continue
            if not translation.strip():
                _count(report.skipped, SKIP_EMPTY_TRANSLATION)
                continue
            pair = (source, translation)
            if pair in seen:
                report.duplicates += 1
                continue
            seen.add(pair)
            pairs.append(pair)
    report.pairs = len(pairs)
    if not pairs:
        raise DataError(f"no usable pairs in the gettext catalogs: {report.summary()}")
    return pairs, report


def available_languages(locale_dir: str = DEFAULT_LOCALE_DIR) -> Dict[str, int]:
    """Locale directory names that have ``LC_MESSAGES/*.mo`` files, with their file counts."""
    counts: Dict[str, int] = {}
    try:
        names = sorted(os.listdir(locale_dir))
    except OSError:
        return counts
    for name in names:
        messages = os.path.join(locale_dir, name, "LC_MESSAGES")
        count = len(glob.glob(os.path.join(glob.escape(messages), "*.mo")))
        if count:
            counts[name] = count
    return counts


def _no_catalogs_message(target_lang: str, locale_dir: str, directory: str) -> str:
    languages = available_languages(locale_dir)
    if languages:
        largest = sorted(languages.items(), key=lambda item: (-item[1], item[0]))[:12]
        listed = ", ".join(f"{name} ({count} files)" for name, count in largest)
        more = f" and {len(languages) - len(largest)} more" if len(languages) > len(largest) else ""
        have = f"Languages with catalogs on this machine: {listed}{more}."
    else:
        have = f"No language has gettext catalogs in {locale_dir} on this machine."
    return (
        f"no gettext catalogs (*.mo) for {target_lang!r}: {directory} has none. {have} "
        f"To train on your own data pass --train FILE.tsv --dev FILE.tsv (one 'source<TAB>target' "
        f"pair per line, plain or gzip), or aligned files as --train SRC_FILE,TGT_FILE."
    )


def _count(counts: Dict[str, int], reason: str) -> None:
    counts[reason] = counts.get(reason, 0) + 1
