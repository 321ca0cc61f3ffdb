"""Format placeholders and markup of software messages: find them, mask them for the model, restore them.

Pure Python (the standard library's ``re``): the reference that the data pipeline, the tests and the
in-graph version of the exported model are checked against. TensorFlow is not imported.

Why
---
Many strings of a gettext catalog carry format directives or markup (29% of this machine's English
msgids, almost all printf), and a translation must keep every one exactly: a dropped or an extra ``%s``
crashes the program that formats the string. Each placeholder is replaced by a reserved slot token
before the model sees the text (:func:`mask`) and put back in the translation (:func:`restore`);
:func:`check` compares the placeholders of a source and of a translation, class by class.

The pattern set
---------------
Six classes, each a named regular expression (:data:`BUILTIN_CLASSES`, in priority order, then a guard):

``printf``
    C's printf directives as gettext's ``c-format`` knows them: ``%s %d %lu %zu %.2f %-10s %+d %'d``,
    ``%*d``, the POSIX positions ``%1$s %2$d`` (``%*3$d`` too), flags ``-+#0'``, width, precision,
    length modifiers (``hh h ll l L q j z t``, glibc's old ``Z``, MSVC's ``I64 I32``) and the
    conversion: any ASCII letter, the C ones and those of the printf-like formats the catalogs hold
    as well, which must survive as much (glibc's ``%m``, strftime's ``%Y %H:%M``, ld's ``%P %F %X``,
    bash's ``%q %b``); binutils' ``%pA %pB %pT`` (section, file, ...) are one directive each;
    ``%<PRIu64>``, as xgettext writes the ``<inttypes.h>`` macros in a .po file. ``%%`` (the escaped
    percent) is a placeholder of this class too: a c-format translation must keep it doubled, and a
    model left to copy it could write one ``%``, which printf would read as the start of a directive.
    Not matched: the space flag (``% d``). On the machine's catalogs (61,608 English msgids) every
    ``%`` followed by a space and a conversion letter was prose ("50% done", "99% of the time",
    "ARG1 % ARG2"), never a directive; ``% d`` stays text.
``python_mapping``
    Python's %-mapping: ``%(name)s %(count)d %(x).2f`` (bash's ``%(fmt)T`` too); git's ``%(atom)`` with
    no conversion after it is not one.
``brace``
    Python's ``str.format`` fields ``{} {0} {name} {0:.2f} {name!r} {obj.attr} {a[0]}``; Java
    MessageFormat / ICU typed arguments ``{0,number,#.##} {1, date}`` (the types are ICU's: number,
    date, time, choice, spellout, ordinal, duration); ICU ``plural``, ``select`` and ``selectordinal``
    constructs, ``{count, plural, one {# file} other {# files}}``, as ONE placeholder, bodies included
    (three brace levels deep; the bodies then stay in the source language: ICU messages are rare in
    gettext catalogs, none on this machine). Mustache, Jinja and Angular's ``{{name}}`` ``{{ count }}``
    is one placeholder (so is str.format's escaped ``{{word}}``, which is kept as it is either way); a
    lone ``{{`` or ``}}`` is text. A brace with white space after it (``{ a, b }``, code in prose) is
    text.
``shell``
    ``${var}`` (shell, JavaScript template literals, dpkg's ``${Package}``). Not ``$var`` nor ``$1``:
    in the catalogs every one of them is prose about the shell (``$PATH``, bash's ``$1``) or
    assembler syntax (``.idata$5``), which a translator may quote differently.
``markup``
    HTML/XML/Pango tags and comments: a closing tag ``</b>``, a self-closing one ``<br/> <image/>``,
    a tag with attributes ``<a href="{url}"> <span weight='bold'>`` (one placeholder, the placeholders
    inside its quoted values included), ``<!-- comments -->``, and a bare opening tag ``<b>`` only for
    the presentational elements of :data:`BARE_TAG_NAMES` (in any case: ``<BR>``). Why the list: the catalogs hold ten times
    more command-line metavariables than tags (``<file>``, ``<name>``, ``<commit>``: 1,900 against
    ~40), and translators translate those (git's French ``<fichier>``). Boolean attributes
    (``<input disabled>``) are not recognised.
``entity``
    Character references: ``&amp; &lt; &nbsp; &#123; &#x1F600;``. A mnemonic marker (``&File``) or an
    ampersand in a name (``AT&T``) has no ``;`` and stays text, as GTK's ``_File`` does.

One guard follows them, ``printf_lookalike``: ``%`` and three capitals or more (top's ``%CPU``,
``%MEM``, csplit's ``%REGEXP%``) is text, not the directive ``%C`` followed by ``PU`` (a guard is
matched like a class, and what it matches stays text).

Matching is leftmost-longest over the string: the placeholder that starts first wins; of those that
start at the same character, the longest; of equally long ones, the class that comes first. Within a
class a pattern matches as Python's ``re`` does (the first alternative that fits; the built-in ones put
their longer alternatives first and quantifiers are greedy, so that is their longest match). The
patterns use no lookaround and no backreference: each is a regular language, which the in-graph
version can compile into one automaton (RE2 reads them, but its ``\s`` is ASCII white space only).

The functions take a :class:`PatternSet` (:data:`DEFAULT_PATTERNS`: the built-in classes). Extensible:
``localization.extra_placeholder_patterns`` of the config (:func:`pattern_set`) adds classes after
the built-in ones, named ``extra_placeholder_patterns[i]``; e.g. ``%[0-9]+`` for Qt's
``%1``, of which the catalogs here hold none. The exported model runs all classes as one automaton
(:mod:`gnmt_tf.localization.automaton`), which refuses lookarounds, backreferences and anchors and
takes each class's longest match, so an extra pattern should put its longer alternatives first and
use no lazy quantifier, as the built-in ones do, for the model to find what these functions find.

Masking and restoring
---------------------
:func:`mask` replaces the Nth placeholder of a string (N = 1, 2, ... in order of appearance, at most
:data:`MAX_SLOTS`) by the slot token ``chr(SLOT_BASE + N)``, a private-use character (U+F0011 ...
U+F0020) that no catalog text contains (the wordpiece tokenizer's own private-use character, U+F0000,
is not one of them). Repeated placeholders get a slot each: ``%s and %s`` is slot 1 and slot 2, so a
constrained search asks for every slot token exactly once and the restoring is positional. A
placeholder beyond the 16th stays text (the model sees it as it is; :func:`check` still counts it).

The slot token is a word of its own for a tokenizer that splits on white space: mask puts one space
between the token and a neighbouring character that is not white space (Unicode's White_Space, what
the tokenizer splits on), and records which sides it glued to (``Placeholder.glued_before``,
``glued_after``). Writing SN for slot token N: ``"(%s):"`` becomes ``"( S1 ):"``, ``"<b>bold</b>"``
``"S1 bold S2"``, ``"%s%s"`` ``"S1 S2"`` (one space between two tokens).

:func:`restore` puts each slot's text back and removes, on each side of the token that the source
glued to, one space next to the token if the translation has one there: the translation gets the
source's glue around each placeholder and keeps its own spacing everywhere else. So
``restore(mask(s).text, mask(s).placeholders) == s`` for every string (one without reserved
characters: :func:`mask` refuses those). The price: the glue is the source language's. An English
``"%s:"`` gives ``"%s:"`` in French too, where French typography writes ``"%s :"`` (with whitespace
tokenization the model's output cannot say which it meant). The glue is each placeholder's own, side
by side: ``"%s%s"`` translated ``"S2 S1"`` gives ``"%s %s"`` (nothing was glued after S2 nor before
S1). A slot token the placeholders do not know (a number beyond them) is dropped with one space next
to it.

For training, :func:`mask_pair` masks a source and its reference translation together: the target's
placeholders get the slots of their counterparts in the source (``"%s of %d"`` / ``"%d de %s"`` becomes
``"S1 of S2"`` / ``"S2 de S1"``), so that a model learns where each slot of a source goes.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace
from typing import Iterable, List, Optional, Sequence, Tuple

# --------------------------------------------------------------------------------- the pattern set
# C printf. Positions "%2$" (and "*2$" for width and precision), flags without the space (see the
# module docstring), width, precision, length modifier, conversion. The conversion alternatives put the
# longer forms first ("pB" before "p"), so that the first match is the longest.
_POSITION = r"(?:[0-9]+\$)?"
_STAR = r"\*" + _POSITION
PRINTF = (
    r"%%"
    r"|%" + _POSITION + r"[-+#0']*(?:[0-9]+|" + _STAR + r")?(?:\.(?:[0-9]+|" + _STAR + r")?)?"
    r"(?:hh|ll|I64|I32|[hlLqjztZ])?"
    r"(?:p[A-Z]|<PRI[A-Za-z0-9_]+>|[A-Za-z@])"
)
PYTHON_MAPPING = r"%\([^()\n]*\)[-+#0]*(?:[0-9]+|\*)?(?:\.(?:[0-9]+|\*)?)?[hlL]?[A-Za-z]"
_FIELD = r"(?:[0-9]+|[A-Za-z_][0-9A-Za-z_]*)(?:\.[A-Za-z_][0-9A-Za-z_]*|\[[^\[\]{}]*\])*"
_ICU_BODY = r"(?:[^{}]|\{(?:[^{}]|\{[^{}]*\})*\})*"  # plural/select bodies: braces three levels deep
BRACE = (
    r"\{\s*[0-9A-Za-z_]+\s*,\s*(?:plural|selectordinal|select)\s*," + _ICU_BODY + r"\}"
    r"|\{\s*[0-9A-Za-z_]+\s*,\s*(?:number|date|time|choice|spellout|ordinal|duration)\s*(?:,[^{}]*)?\}"
    r"|\{\{\s*[^{}\s][^{}]*\}\}"
    r"|\{(?:" + _FIELD + r")?(?:![rsa])?(?::[^{}]*)?\}"
)
SHELL = r"\$\{[^{}\n]+\}"
# Presentational HTML and Pango elements whose bare opening tag is markup. Not "code", "mark", "time",
# "link", "object", "table", ...: as bare tags the catalogs use those names as metavariables.
BARE_TAG_NAMES = ("a", "b", "big", "br", "em", "hr", "i", "li", "ol", "p", "s", "small", "span", "strike",
                  "strong", "sub", "sup", "tt", "u", "ul")
_TAG_NAME = r"[A-Za-z][0-9A-Za-z_:.-]*"
_ATTRIBUTE = r"\s+[0-9A-Za-z_:.-]+\s*=\s*(?:\"[^\"]*\"|'[^']*'|[^\s\"'<>=`]+)"
MARKUP = (
    r"<!--(?:[^-]|-[^-])*-->"
    r"|<" + _TAG_NAME + r"(?:" + _ATTRIBUTE + r")+\s*/?>"
    r"|<" + _TAG_NAME + r"\s*/>"
    r"|</" + _TAG_NAME + r"\s*>"
    r"|<(?i:" + "|".join(sorted(BARE_TAG_NAMES, key=len, reverse=True)) + r")\s*>"
)
ENTITY = r"&(?:[A-Za-z][0-9A-Za-z]{1,31}|#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6});"
# Not a placeholder: "%" and a word of three capitals or more, a column header or a metavariable ("%CPU",
# "%MEM", csplit's "%REGEXP%"), which printf would read as "%C" and the text "PU". Being the longer match
# at that "%", it keeps the whole word text (translators translate some: "%EXP_RAT%"). Two capitals can be
# a directive: "%LG" is a long double's "%G".
PRINTF_LOOKALIKE = r"%[A-Z]{3,}"


@dataclass(frozen=True)
class PatternClass:
    """One class of placeholders: its name (as :func:`check` reports it) and its compiled pattern.

    A class that is not ``is_placeholder`` is a guard: text that looks like a placeholder but is not
    one. It takes part in the leftmost-longest matching, so that a placeholder inside it is not matched,
    and what it matches stays text."""

    name: str
    regex: "re.Pattern[str]"
    is_placeholder: bool = True


BUILTIN_CLASSES: Tuple[PatternClass, ...] = tuple(
    PatternClass(name, re.compile(pattern))
    for name, pattern in (
        ("printf", PRINTF),
        ("python_mapping", PYTHON_MAPPING),
        ("brace", BRACE),
        ("shell", SHELL),
        ("markup", MARKUP),
        ("entity", ENTITY),
    )
) + (PatternClass("printf_lookalike", re.compile(PRINTF_LOOKALIKE), is_placeholder=False),)
EXTRA_FIELD = "extra_placeholder_patterns"  # the config field, and the name of the extra classes
# Texts an extra pattern is tried on to see whether it matches an empty string somewhere.
_EMPTY_MATCH_PROBES = ("", "x", " ", "%s", "{0}", "<b>", "a b.")


def extra_pattern_problem(pattern: str) -> Optional[str]:
    """Why ``pattern`` cannot be an extra placeholder class, or None: it must compile and must not match
    an empty string (an empty placeholder would be a slot token standing for nothing)."""
    try:
        regex = re.compile(pattern)
    except re.error as err:
        return f"is not a valid regular expression: {err}"
    for probe in _EMPTY_MATCH_PROBES:
        if any(match.end() == match.start() for match in regex.finditer(probe)):
            return f"matches the empty string (in {probe!r}); a placeholder must be at least one character"
    return None


class PatternSet:
    """Pattern classes in priority order: of equally long matches at one character, the class that
    comes first wins."""

    def __init__(self, classes: Iterable[PatternClass]):
        self.classes: Tuple[PatternClass, ...] = tuple(classes)
        self.candidates = _joined(self.classes)

    def __repr__(self) -> str:
        return f"PatternSet({', '.join(pattern_class.name for pattern_class in self.classes)})"


def _joined(classes: Sequence[PatternClass]) -> Optional["re.Pattern[str]"]:
    """One pattern of all the classes' alternatives: its search finds, in one pass, the first character
    where some class matches (most strings have no placeholder). None when the classes cannot be joined
    so (a capturing group, whose backreference numbers would shift, or flags that must come first)."""
    if any(pattern_class.regex.groups for pattern_class in classes):
        return None
    try:
        return re.compile("|".join(f"(?:{pattern_class.regex.pattern})" for pattern_class in classes))
    except re.error:
        return None


DEFAULT_PATTERNS = PatternSet(BUILTIN_CLASSES)


def pattern_set(extra_patterns: Sequence[str] = ()) -> PatternSet:
    """The built-in classes, then one class per extra pattern (the config's
    ``localization.extra_placeholder_patterns``, in its order). Raises ValueError for a pattern that
    :func:`extra_pattern_problem` refuses."""
    extras = []
    for index, pattern in enumerate(extra_patterns):
        problem = extra_pattern_problem(pattern)
        if problem is not None:
            raise ValueError(f"{EXTRA_FIELD}[{index}]: {pattern!r} {problem}")
        extras.append(PatternClass(f"{EXTRA_FIELD}[{index}]", re.compile(pattern)))
    return PatternSet(BUILTIN_CLASSES + tuple(extras))


# --------------------------------------------------------------------------------- finding
@dataclass(frozen=True)
class Found:
    """One placeholder occurrence: ``text[start:end]``, of class ``kind``."""

    kind: str
    start: int
    end: int
    text: str


def find_placeholders(text: str, patterns: PatternSet = DEFAULT_PATTERNS) -> List[Found]:
    """Every placeholder of ``text``, left to right, not overlapping, leftmost-longest (module docstring)."""
    found: List[Found] = []
    position = 0
    while True:
        start = _next_start(text, position, patterns)
        if start is None:
            return found
        longest = _longest_at(text, start, patterns.classes)
        if longest is None:  # only empty matches there (an extra pattern's): nothing starts here
            position = start + 1
            continue
        pattern_class, end = longest
        if pattern_class.is_placeholder:
            found.append(Found(pattern_class.name, start, end, text[start:end]))
        position = end


def _next_start(text: str, position: int, patterns: PatternSet) -> Optional[int]:
    """The first index at or after ``position`` where a class matches, or None."""
    if position > len(text):
        return None
    if patterns.candidates is not None:
        hit = patterns.candidates.search(text, position)
        return None if hit is None else hit.start()
    hits = (pattern_class.regex.search(text, position) for pattern_class in patterns.classes)
    return min((hit.start() for hit in hits if hit is not None), default=None)


def _longest_at(text: str, start: int, patterns: Sequence[PatternClass]) -> Optional[Tuple[PatternClass, int]]:
    """The class with the longest non-empty match at ``start`` (the first of equally long ones), and its end."""
    best: Optional[Tuple[PatternClass, int]] = None
    for pattern_class in patterns:
        match = pattern_class.regex.match(text, start)
        if match is not None and match.end() > start and (best is None or match.end() > best[1]):
            best = (pattern_class, match.end())
    return best


# --------------------------------------------------------------------------------- masking
MAX_SLOTS = 16  # placeholders masked per string; the ones after stay text
SLOT_BASE = 0xF0010  # slot N (1-based) is chr(SLOT_BASE + N): U+F0011 ... U+F0020, Unicode private use
SLOT_TOKENS = tuple(chr(SLOT_BASE + slot) for slot in range(1, MAX_SLOTS + 1))
_SLOT_TOKEN = re.compile("[" + SLOT_TOKENS[0] + "-" + SLOT_TOKENS[-1] + "]")
# Unicode's White_Space property: what the tokenizer splits words on (gnmt_tf.data.tokenizer.WHITESPACE,
# repeated here so that this module imports no TensorFlow; a test compares the two).
WHITESPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
_SPACE = " "  # what mask puts between a slot token and a neighbour, and restore removes


def slot_token(slot: int) -> str:
    """The reserved character standing for the ``slot``-th placeholder (1-based)."""
    if not 1 <= slot <= MAX_SLOTS:
        raise ValueError(f"slot must be in 1..{MAX_SLOTS}, got {slot}")
    return SLOT_TOKENS[slot - 1]


# The word-initial mark of the wordpiece vocabulary (gnmt_tf.data.tokenizer.WORD_MARK, repeated to import no
# TensorFlow): a slot token, a word of its own, is its word-initial piece.
_WORD_MARK = "\u2581"


def missing_slot_tokens(pieces: Sequence[str]) -> List[str]:
    """The slot tokens a wordpiece vocabulary (paper-form ``pieces``) lacks a piece of: a model reading and
    writing masked text needs both forms of each (the word-initial one it reads and writes, the continuation
    one its search must be able to ban)."""
    present = set(pieces)
    return [token for token in SLOT_TOKENS if _WORD_MARK + token not in present or token not in present]


@dataclass(frozen=True)
class Placeholder:
    """A masked placeholder: its text, its class, and whether the source glued it to the character
    before / after it (a character that is not white space), i.e. where mask added a space."""

    text: str
    kind: str
    glued_before: bool
    glued_after: bool


@dataclass(frozen=True)
class Masked:
    """A masked string: ``text`` holds slot token N where ``placeholders[N - 1]`` was."""

    text: str
    placeholders: Tuple[Placeholder, ...]


TERM = "term"  # the kind of a glossary term's occurrence
# A term is matched as a word: no letter, digit, underscore or other non-ASCII character right before or after
# it (the in-graph matcher reads bytes, and every byte of a non-ASCII character counts as a word byte).
_WORD_CHARACTER = "A-Za-z0-9_\u0080-\U0010ffff"


def mask(text: str, patterns: PatternSet = DEFAULT_PATTERNS, glossary: Sequence[Tuple[str, str]] = ()) -> Masked:
    """``text`` with its first :data:`MAX_SLOTS` placeholders replaced by slot tokens, each a word of its
    own (module docstring). Raises ValueError if ``text`` already holds a slot token's character.

    ``glossary``: (source term, target term) pairs. An occurrence of a source term (as a word,
    case-sensitive) is masked like a placeholder and restored as its target term: the translation holds
    the required term wherever the model puts the slot. A term competes with the placeholders by the
    leftmost-longest rule, after them (it wins a tie with none); of two entries with one source term,
    the first."""
    reserved = _SLOT_TOKEN.search(text)
    if reserved is not None:
        raise ValueError(
            f"text holds U+{ord(reserved.group(0)):04X}, a character reserved for placeholder slots, at "
            f"{reserved.start()}: it cannot be masked (no catalog text holds one)"
        )
    targets = {}
    for term, target in glossary:
        targets.setdefault(term, target)
    terms = [PatternClass(TERM, re.compile(f"(?<![{_WORD_CHARACTER}]){re.escape(term)}(?![{_WORD_CHARACTER}])"))
             for term in targets if term]
    masked = find_placeholders(text, PatternSet(patterns.classes + tuple(terms)) if terms else patterns)
    masked = [replace(found, text=targets[found.text]) if found.kind == TERM else found
              for found in masked[:MAX_SLOTS]]
    if not masked:
        return Masked(text, ())
    pieces: List[str] = []
    placeholders: List[Placeholder] = []
    cursor = 0
    for slot, found in enumerate(masked, start=1):
        after = masked[slot].start if slot < len(masked) else None  # where the next masked one starts
        # Glued: a neighbour that is not white space, or another placeholder (then one space parts them).
        glued_before = found.start > 0 and (found.start == cursor and slot > 1 or _touches(text, found.start - 1))
        glued_after = found.end < len(text) and (found.end == after or _touches(text, found.end))
        pieces.append(text[cursor:found.start])
        if glued_before and not (slot > 1 and found.start == cursor):  # the previous token put that space
            pieces.append(_SPACE)
        pieces.append(slot_token(slot))
        if glued_after:
            pieces.append(_SPACE)
        placeholders.append(Placeholder(found.text, found.kind, glued_before, glued_after))
        cursor = found.end
    pieces.append(text[cursor:])
    return Masked("".join(pieces), tuple(placeholders))


def _touches(text: str, index: int) -> bool:
    """Whether the character at ``index`` would run into a slot token next to it (it is no white space)."""
    return text[index] not in WHITESPACE


def restore(translation: str, placeholders: Sequence[Placeholder]) -> str:
    """``translation`` (a masked text, or the model's translation of one) with every slot token replaced
    by its placeholder's text, and the spaces mask added removed: on each side the source glued, one
    space right next to the token, if there is one. An unknown slot token is removed with one space
    next to it (the one after it, else the one before)."""
    tokens = list(_SLOT_TOKEN.finditer(translation))
    if not tokens:
        return translation
    replacements = {}  # index in translation -> its replacement: a placeholder's text, or "" (removed)
    for token in tokens:
        at = token.start()
        placeholder = _placeholder_of(token.group(0), placeholders)
        if placeholder is not None:
            replacements[at] = placeholder.text
            sides = [at - 1] * placeholder.glued_before + [at + 1] * placeholder.glued_after
        else:  # a slot the source has not: dropped, with one space next to it (the one after, else before)
            replacements[at] = ""
            sides = [at + 1] if _is_space(translation, at + 1) else [at - 1]
        for side in sides:
            if _is_space(translation, side):
                replacements[side] = ""
    pieces = []
    cursor = 0
    for index in sorted(replacements):
        pieces += [translation[cursor:index], replacements[index]]
        cursor = index + 1
    pieces.append(translation[cursor:])
    return "".join(pieces)


def mask_pair(source: str, target: str, patterns: PatternSet = DEFAULT_PATTERNS) -> Tuple[Masked, Masked]:
    """A training pair masked: the source by :func:`mask`, and the target with the slot token of each
    source placeholder it holds, where it holds it, so that a model learns to write slot N where the
    translation puts the source's Nth placeholder.

    A target placeholder (left to right) takes the slot of its counterpart in the source: a source
    placeholder not taken yet of its class and its text, printf directives compared without their ``N$``
    positions as :func:`check` compares them; one with the very same text if there is one (a target's
    ``%2$s`` takes a source's ``%2$s``), else the first in slot order. So for the source ``"%s %s"`` the
    target ``"%2$s %1$s"`` is masked ``"S1 S2"``, not ``"S2 S1"``: both slots restore to ``%s``, the
    restored text is the same either way. A target placeholder without a counterpart stays text (one the
    source lacks, or whose counterparts are all taken or beyond the source's :data:`MAX_SLOTS`); a source
    slot the target does not take is simply missing from it.

    The target's slot tokens are words of their own as :func:`mask` makes them, with the target's own
    glue: its ``placeholders`` has one entry per source slot, the target's placeholder for each slot it
    holds (its text, class and glue) and the source's for the others (which its text does not hold),
    so that ``restore(masked_target.text, masked_target.placeholders) == target``.

    Raises ValueError if the source or the target holds a slot token's character.
    """
    masked_source = mask(source, patterns)
    reserved = _SLOT_TOKEN.search(target)
    if reserved is not None:
        raise ValueError(
            f"target holds U+{ord(reserved.group(0)):04X}, a character reserved for placeholder slots, at "
            f"{reserved.start()}: the pair cannot be masked (no catalog text holds one)"
        )
    chosen = _counterpart_slots(masked_source.placeholders, find_placeholders(target, patterns))
    text, own = _masked_at_slots(target, chosen)
    placeholders = list(masked_source.placeholders)
    for slot, placeholder in own:
        placeholders[slot - 1] = placeholder
    return masked_source, Masked(text, tuple(placeholders))


def _counterpart_slots(slots: Sequence[Placeholder], found: Sequence[Found]) -> List[Tuple[Found, int]]:
    """The target placeholders (``found``, in order) that have a counterpart among the source's ``slots``,
    each with its counterpart's slot (:func:`mask_pair`)."""
    free = list(range(1, len(slots) + 1))  # the slots not taken yet, in order
    chosen = []
    for placeholder in found:
        key = _keys(placeholder.kind, [placeholder.text])[0]
        matching = [slot for slot in free if slots[slot - 1].kind == placeholder.kind
                    and _keys(placeholder.kind, [slots[slot - 1].text])[0] == key]
        if matching:
            slot = next((slot for slot in matching if slots[slot - 1].text == placeholder.text), matching[0])
            free.remove(slot)
            chosen.append((placeholder, slot))
    return chosen


def _masked_at_slots(text: str,
                     chosen: Sequence[Tuple[Found, int]]) -> Tuple[str, List[Tuple[int, Placeholder]]]:
    """``text`` with each chosen placeholder replaced by the token of its slot, spaced as :func:`mask`
    spaces its tokens; and each slot's placeholder, with its glue in ``text``."""
    pieces: List[str] = []
    placeholders: List[Tuple[int, Placeholder]] = []
    cursor = 0
    for index, (found, slot) in enumerate(chosen):
        follows = index > 0 and found.start == cursor  # right after the previous token, which put the space
        after = chosen[index + 1][0].start if index + 1 < len(chosen) else None
        glued_before = found.start > 0 and (follows or _touches(text, found.start - 1))
        glued_after = found.end < len(text) and (found.end == after or _touches(text, found.end))
        pieces.append(text[cursor:found.start])
        if glued_before and not follows:
            pieces.append(_SPACE)
        pieces.append(slot_token(slot))
        if glued_after:
            pieces.append(_SPACE)
        placeholders.append((slot, Placeholder(found.text, found.kind, glued_before, glued_after)))
        cursor = found.end
    pieces.append(text[cursor:])
    return "".join(pieces), placeholders


def _placeholder_of(token: str, placeholders: Sequence[Placeholder]) -> Optional[Placeholder]:
    slot = ord(token) - SLOT_BASE
    return placeholders[slot - 1] if slot <= len(placeholders) else None


def _is_space(text: str, index: int) -> bool:
    return 0 <= index < len(text) and text[index] == _SPACE


# --------------------------------------------------------------------------------- checking
@dataclass(frozen=True)
class ClassDifference:
    """How a translation's placeholders of one class differ from its source's.

    ``missing``: in the source more often than in the translation (source order); ``extra``: the other
    way round (translation order); ``reordered``: the placeholders both hold come in another order.
    Printf directives are compared without their ``N$`` positions, as msgfmt --check compares them: a
    translation may write ``%2$d ... %1$s`` for ``%s ... %d``. ``order_breaks``: printf would give
    the translation's directives the arguments in another order than the source's (``%d ... %s`` for
    ``%s ... %d``: the number is read as a string, a crash); a reordering with positions, of named
    placeholders or of tags may be what the target language needs. Syntax cannot tell printf from the
    formats whose directives take no argument (strftime's ``%b %e``, ld's ``%P %F``): reordering those
    is flagged too, although it is fine.
    """

    kind: str
    missing: Tuple[str, ...]
    extra: Tuple[str, ...]
    reordered: bool
    order_breaks: bool

    def messages(self) -> List[str]:
        """One line per kind of difference, for a warning or a report."""
        lines = []
        if self.missing:
            lines.append(f"{self.kind}: missing {', '.join(self.missing)}")
        if self.extra:
            lines.append(f"{self.kind}: extra {', '.join(self.extra)}")
        if self.order_breaks:
            lines.append(f"{self.kind}: arguments taken in another order")
        elif self.reordered:
            lines.append(f"{self.kind}: reordered")
        return lines


@dataclass(frozen=True)
class PlaceholderCheck:
    """The differences, one per class that differs, in the pattern set's order."""

    differences: Tuple[ClassDifference, ...]

    @property
    def ok(self) -> bool:
        """Every placeholder of the source in the translation, as often, and no other (in any order)."""
        return not any(d.missing or d.extra for d in self.differences)

    @property
    def order_breaks(self) -> bool:
        """Printf arguments taken in another order (see :class:`ClassDifference`)."""
        return any(d.order_breaks for d in self.differences)

    def messages(self) -> List[str]:
        return [line for difference in self.differences for line in difference.messages()]


def check(source: str, translation: str, patterns: PatternSet = DEFAULT_PATTERNS) -> PlaceholderCheck:
    """Compare the placeholders of ``source`` and ``translation`` class by class (all of them, masked or
    not: the limit of :data:`MAX_SLOTS` does not apply)."""
    source_found = find_placeholders(source, patterns)
    translation_found = find_placeholders(translation, patterns)
    differences = []
    for pattern_class in (pattern_class for pattern_class in patterns.classes if pattern_class.is_placeholder):
        ours = [found.text for found in source_found if found.kind == pattern_class.name]
        theirs = [found.text for found in translation_found if found.kind == pattern_class.name]
        difference = _compare(pattern_class.name, ours, theirs)
        if difference is not None:
            differences.append(difference)
    return PlaceholderCheck(tuple(differences))


_POSITION_MARK = re.compile(r"[0-9]+\$")  # "2$" in %2$d, and in a width or precision *3$
_POSITIONED = re.compile(r"%([0-9]+)\$")
_NO_ARGUMENT = ("%%", "%m")  # directives printf gives no argument (glibc's %m prints errno's message)


def _compare(kind: str, source: List[str], translation: List[str]) -> Optional[ClassDifference]:
    source_keys, translation_keys = _keys(kind, source), _keys(kind, translation)
    common = Counter(source_keys) & Counter(translation_keys)
    missing = [text for text, key in _beyond(zip(source, source_keys), common)]
    extra = [text for text, key in _beyond(zip(translation, translation_keys), common)]
    reordered = _within(source_keys, common) != _within(translation_keys, common)
    order_breaks = (kind == "printf" and not (missing or extra)
                    and _argument_order(source) != _argument_order(translation))
    if not (missing or extra or reordered or order_breaks):
        return None
    return ClassDifference(kind, tuple(missing), tuple(extra), reordered, order_breaks)


def _keys(kind: str, texts: List[str]) -> List[str]:
    """What the comparison compares: printf directives without their positions, the others as they are."""
    return [_POSITION_MARK.sub("", text) for text in texts] if kind == "printf" else list(texts)


def _argument_order(directives: List[str]) -> List[str]:
    """Printf directives (without positions) in the order printf gives them their arguments: by their
    ``N$`` in a format that has positions, else as written."""
    taking = [text for text in directives if text not in _NO_ARGUMENT]
    positioned = [text for text in taking if _POSITIONED.match(text)]
    if positioned:
        taking = sorted(positioned, key=lambda text: int(_POSITIONED.match(text).group(1)))
    return _keys("printf", taking)


def _within(keys: List[str], allowed: Counter) -> List[str]:
    """``keys`` keeping each key's first ``allowed[key]`` occurrences."""
    left = Counter(allowed)
    kept = []
    for key in keys:
        if left[key] > 0:
            left[key] -= 1
            kept.append(key)
    return kept


def _beyond(pairs: Iterable[Tuple[str, str]], allowed: Counter) -> List[Tuple[str, str]]:
    """The (text, key) pairs whose key is beyond its first ``allowed[key]`` occurrences."""
    left = Counter(allowed)
    beyond = []
    for text, key in pairs:
        if left[key] > 0:
            left[key] -= 1
        else:
            beyond.append((text, key))
    return beyond
