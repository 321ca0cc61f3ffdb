"""Glossaries: the required translation of terms, as ``source term<TAB>target term`` lines.

A glossary is given per request (``Translator.translate(..., glossary=...)``, ``python -m
gnmt_tf.translate --glossary FILE``, the SavedModel's ``translate_with_glossary`` signature) to a model
trained with ``localization.placeholders``: each occurrence of a source term, as a word, is masked as a
slot token like a placeholder, the beam search writes that slot exactly once, and the slot is restored
as the target term (:func:`gnmt_tf.localization.placeholders.mask`). So every required term is in the
translation, where the model puts it, and a sentence without a term translates as without a glossary.
"""

from __future__ import annotations

from typing import List, Tuple

Entry = Tuple[str, str]


class GlossaryError(ValueError):
    """A glossary file that cannot be read: the message names the file and line."""


def read_glossary(path: str) -> List[Entry]:
    """The (source term, target term) entries of a UTF-8 file of ``source<TAB>target`` lines; blank lines and
    lines starting with ``#`` are skipped, spaces around each term are dropped."""
    entries = []
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise GlossaryError(f"{path}: cannot read the glossary: {err}") from None
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = [field.strip() for field in line.split("\t")]
        if len(fields) != 2 or not all(fields):
            raise GlossaryError(f"{path}:{number}: expected 'source term<TAB>target term', got {line!r}")
        entries.append((fields[0], fields[1]))
    if not entries:
        raise GlossaryError(f"{path}: the glossary has no entry")
    return entries
