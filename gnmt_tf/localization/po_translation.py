"""Machine-translate a gettext catalog: fill its empty msgstrs and mark those entries fuzzy for review.

What :func:`fill_catalog` does to a :class:`~gnmt_tf.localization.po.Catalog`:

* every empty msgstr of a current entry is filled: a plural entry's msgstr[0] from its msgid and
  msgstr[1] ... msgstr[n-1] from its msgid_plural, n being the header's ``Plural-Forms: nplurals``
  (2 when the header does not say);
* each entry it filled is marked fuzzy (the flag added before the others, which stay: ``c-format``,
  ``python-format``, ``no-wrap``, ...): a translator reviews it, and ``msgfmt`` leaves it out of the
  compiled catalog until then;
* an entry that has a translation, or is fuzzy already, is left as it is, unless ``retranslate``
  says ``"fuzzy"`` (translate the fuzzy entries again) or ``"all"`` (every entry); the header and
  obsolete entries are never translated; comments, references, msgctxt stay;
* a header that still holds a template's values (a .pot's ``charset=CHARSET``,
  ``nplurals=INTEGER``) is made valid: charset UTF-8, Plural-Forms of ``language`` (a table of
  common languages; else gettext's default, two forms, ``n != 1``), ``Language: language`` where it
  is empty. The header keeps its fuzzy flag: its translator and team lines are still the template's.

A message is translated line by line (the model translates sentences): each line of it, without
the spaces around it, is one input of ``translate``, and the translation keeps the message's
newlines and those spaces, so that a help text keeps its layout. The text is otherwise given to
the model as it is (format directives and accelerators included).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from gnmt_tf.localization.po import Catalog, Entry

RETRANSLATE_CHOICES = ("fuzzy", "all")
DEFAULT_NPLURALS = 2  # gettext's own, when a catalog does not say
GERMANIC_PLURAL_FORMS = "nplurals=2; plural=(n != 1);"  # gettext's default rule

# The Plural-Forms of common languages, as the gettext manual lists them ("Plural forms").
PLURAL_FORMS = {
    **{language: GERMANIC_PLURAL_FORMS for language in (
        "bg", "ca", "da", "de", "el", "en", "eo", "es", "et", "eu", "fi", "gl", "hu", "it", "nb", "nl", "nn",
        "no", "pt", "sv")},
    **{language: "nplurals=2; plural=(n > 1);" for language in ("fr", "pt_BR")},
    **{language: "nplurals=1; plural=0;" for language in ("id", "ja", "ko", "th", "vi", "zh")},
    **{language: "nplurals=3; plural=(n%10==1 && n%100!=11 ? 0 : n%10>=2 && n%10<=4 && (n%100<10 || "
                 "n%100>=20) ? 1 : 2);" for language in ("hr", "ru", "sr", "uk")},
    "pl": "nplurals=3; plural=(n==1 ? 0 : n%10>=2 && n%10<=4 && (n%100<10 || n%100>=20) ? 1 : 2);",
    "cs": "nplurals=3; plural=(n==1) ? 0 : (n>=2 && n<=4) ? 1 : 2;",
    "sk": "nplurals=3; plural=(n==1) ? 0 : (n>=2 && n<=4) ? 1 : 2;",
    "sl": "nplurals=4; plural=(n%100==1 ? 0 : n%100==2 ? 1 : n%100==3 || n%100==4 ? 2 : 3);",
}

Translate = Callable[[Sequence[str]], List[str]]


@dataclass
class FillReport:
    """What :func:`fill_catalog` did, entry by entry."""

    filled: int = 0  # entries given machine translations (and the fuzzy flag)
    kept: int = 0  # entries translated or fuzzy already, left as they were
    skipped: int = 0  # the header and obsolete entries
    empty: int = 0  # entries whose every translation came back empty: left as they were
    header_changes: Tuple[str, ...] = ()  # the header fields set: "Content-Type", "Plural-Forms", ...

    def summary(self) -> str:
        """One line: "catalog: filled 12 entries (marked fuzzy), kept 3 (...), skipped 2 (...)"."""
        parts = [f"filled {self.filled:,} {'entry' if self.filled == 1 else 'entries'} (marked fuzzy)",
                 f"kept {self.kept:,} (translated or fuzzy already)",
                 f"skipped {self.skipped:,} (header, obsolete)"]
        if self.empty:
            parts.append(f"left {self.empty:,} untranslated (empty translations)")
        if self.header_changes:
            parts.append(f"header: set {', '.join(self.header_changes)}")
        return "catalog: " + ", ".join(parts)


def fill_catalog(catalog: Catalog, translate: Translate, retranslate: Optional[str] = None,
                 language: Optional[str] = None) -> FillReport:
    """Fill ``catalog`` in place (see the module's docstring); ``translate`` maps texts to translations."""
    if retranslate not in (None,) + RETRANSLATE_CHOICES:
        raise ValueError(f"retranslate must be one of {RETRANSLATE_CHOICES} or None, got {retranslate!r}")
    report = FillReport(header_changes=tuple(complete_template_header(catalog, language)))
    nplurals = catalog.nplurals or DEFAULT_NPLURALS
    work: List[Tuple[Entry, List[int]]] = []
    for entry in catalog.entries:
        if entry.obsolete or entry.is_header:
            report.skipped += 1
            continue
        slots = slots_to_fill(entry, nplurals, retranslate)
        if slots:
            work.append((entry, slots))
        else:
            report.kept += 1
    table = _translation_table([source_of(entry, slot) for entry, slots in work for slot in slots], translate)
    for entry, slots in work:
        if fill_entry(entry, slots, table):
            report.filled += 1
        else:
            report.empty += 1
    return report


def slots_to_fill(entry: Entry, nplurals: int, retranslate: Optional[str] = None) -> List[int]:
    """The msgstr indices of ``entry`` to translate (msgstr: 0): its empty ones, all of them when
    ``retranslate`` asks for it, none of a fuzzy entry unless ``retranslate`` is "fuzzy" or "all"."""
    count = max(nplurals, len(entry.msgstr_plural)) if entry.is_plural else 1
    translations = entry.translations + [""] * (count - len(entry.translations))
    if retranslate == "all" or (entry.is_fuzzy and retranslate == "fuzzy"):
        return list(range(count))
    if entry.is_fuzzy:
        return []
    return [index for index, text in enumerate(translations) if not text]


def source_of(entry: Entry, slot: int) -> str:
    """What msgstr[slot] translates: the msgid for the singular (0), the msgid_plural for the others."""
    return entry.msgid_plural if slot and entry.is_plural else entry.msgid


def fill_entry(entry: Entry, slots: Sequence[int], table: Dict[str, str]) -> bool:
    """Set the msgstrs of ``slots`` from ``table`` (line -> translation) and mark the entry fuzzy; False
    (the entry untouched) when every one of them would be empty."""
    translations = {slot: translate_message(source_of(entry, slot), table) for slot in slots}
    if not any(translations.values()):
        return False
    if entry.is_plural:
        entry.msgstr_plural.extend([""] * (max(slots) + 1 - len(entry.msgstr_plural)))
        for slot, text in translations.items():
            entry.msgstr_plural[slot] = text
    else:
        entry.msgstr = translations[0]
    entry.mark_fuzzy()
    return True


_LINE = re.compile(r"^(\s*)(.*?)(\s*)$", re.S)


def message_lines(text: str) -> List[Tuple[str, str, str]]:
    """(leading spaces, text, trailing spaces) of each line of a message."""
    return [_LINE.match(line).groups() for line in text.split("\n")]


def translate_message(text: str, table: Dict[str, str]) -> str:
    """``text`` with each line's words replaced by their translation in ``table``, its newlines and the
    spaces around each line kept."""
    lines = message_lines(text)
    return "\n".join(lead + (table[core] if core else "") + trail for lead, core, trail in lines)


def _translation_table(messages: Sequence[str], translate: Translate) -> Dict[str, str]:
    """Each distinct line of ``messages`` -> its translation, from one call of ``translate`` (which batches
    them); nothing is called for no lines."""
    lines = list(dict.fromkeys(core for message in messages for _, core, _ in message_lines(message) if core))
    if not lines:
        return {}
    translations = translate(lines)
    if len(translations) != len(lines):
        raise RuntimeError(f"translate gave {len(translations)} translations of {len(lines)} lines")
    return dict(zip(lines, translations))


# ------------------------------------------------------------------------------------------ the header
def complete_template_header(catalog: Catalog, language: Optional[str] = None) -> List[str]:
    """Give a header that still holds a template's values what a PO file needs (see the module's docstring);
    returns the names of the fields it set."""
    header = catalog.header
    if header is None:
        return []
    changed = []
    if re.search(r"charset=CHARSET\b", catalog.header_field("Content-Type") or ""):
        catalog.set_header_field("Content-Type", "text/plain; charset=UTF-8")
        changed.append("Content-Type")
    if language and not catalog.header_field("Language"):
        catalog.set_header_field("Language", language)
        changed.append("Language")
    plural_forms = catalog.header_field("Plural-Forms")
    if plural_forms is not None and catalog.nplurals is None:  # nplurals=INTEGER; plural=EXPRESSION;
        known = language or catalog.header_field("Language") or ""
        catalog.set_header_field("Plural-Forms", plural_forms_of(known))
        changed.append("Plural-Forms")
    return changed


def plural_forms_of(language: str) -> str:
    """The Plural-Forms of ``language`` ("fr", "pt_BR", "pt-BR", "de_DE"); gettext's default if unknown."""
    language = language.replace("-", "_")
    return PLURAL_FORMS.get(language) or PLURAL_FORMS.get(language.split("_")[0]) or GERMANIC_PLURAL_FORMS
