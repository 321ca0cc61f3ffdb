"""Which catalog strings are variants of one another (pure Python; TensorFlow is not imported).

Software-message catalogs hold the same string many times with small differences: a mnemonic
marker (GTK's ``_File``, Qt's ``&File``), another case, a trailing ``…`` or ``:``, another format
specifier (``%s`` / ``%d`` / ``{0}``), other white space. A held-out split that hashes the raw
source puts such variants on both sides, and the model is then scored on sentences it has seen.
:func:`variant_key` maps every variant of a string to one key; :func:`gnmt_tf.data.split_dev`
hashes that key, so all variants of a string land on the same side of the split.
"""

from __future__ import annotations

import re
import unicodedata

# printf (C, with positions %1$s and flags), Python's %-mapping %(name)s, Python/ICU/Java braces
# {0} {name} {0,number}, shell/JavaScript ${var}. A doubled %% is text, not a placeholder: it is
# matched first so that "%% d" is not read as "%" and the specifier "% d".
FORMAT_SPECIFIER = re.compile(
    r"%%"
    r"|%(?:\d+\$)?(?:\([^)]*\))?[-+ #0']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t)?"
    r"[diouxXeEfFgGaAcspn@]"
    r"|\$\{[^{}]*\}"
    r"|\{[^{}]*\}"
)
# A mnemonic marker: "_" or "&" right before a letter or digit that starts or continues a word
# ("_Open", "Save _As", "&File", "Re&do"), but not an entity ("&amp;") nor an identifier's
# inner underscore after a letter ("snake_case" keeps it: "case" is no mnemonic).
MNEMONIC = re.compile(r"(?:(?<![\w&])_|&(?![#\w]+;))(?=\w)")
TRAILING_PUNCTUATION = re.compile(r"[\s.…:!?;,]+$")
PLACEHOLDER_MARK = "\x00"


def variant_key(text: str) -> str:
    """One key for all the variants of a catalog string: Unicode compatibility forms folded (NFKC),
    format specifiers replaced by one mark, mnemonic markers removed, case folded, white space
    collapsed, trailing punctuation and white space dropped."""
    text = unicodedata.normalize("NFKC", text)
    text = FORMAT_SPECIFIER.sub(lambda match: match[0] if match[0] == "%%" else PLACEHOLDER_MARK, text)
    text = MNEMONIC.sub("", text)
    text = " ".join(text.split()).casefold()
    return TRAILING_PUNCTUATION.sub("", text)
