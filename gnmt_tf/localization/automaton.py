"""The placeholder pattern set as one deterministic finite automaton over UTF-8 bytes, as NumPy tables.

The exported model (SavedModel, TFLite) has to find placeholders as :mod:`placeholders` does, inside
the TensorFlow graph, where there is no regular expression op. This module compiles a
:class:`~placeholders.PatternSet` into one DFA whose tables the graph indexes with gathers: from
every byte position it runs the automaton and keeps the longest end at which a state accepts.
Pure Python and NumPy; TensorFlow is not imported. :func:`find_spans` is the same run in plain
Python, the reference the graph code and the tests compare with.

Construction
------------
1. Each class's pattern is read by Python's own parser (``re._parser``, ``sre_parse`` before 3.11),
   so that the automaton reads a pattern exactly as ``re`` does (escapes, flags, ``(?x)``).
2. Every single-character item (a literal, a class like ``[^{}\\s]``, ``.``, ``\\d \\s \\w``) becomes the
   set of code points it matches, as code point ranges. Literals, ranges and negation are taken from
   the parse; ``\\d \\s \\w`` (Unicode-aware for ``str`` patterns, ASCII-only under ``(?a)``) are found by
   running ``re`` once over a string of every code point (cached; 10 to 40 ms each). Under
   IGNORECASE, ASCII literals and ranges get their case partners from one such run over ``[A-Za-z]``
   (Python also folds in ``İ ı ſ`` and the Kelvin sign ``K``), and a non-ASCII literal or range its own
   run: the sets are exactly the code points ``re`` would match, non-ASCII case folding included.
3. A code point range becomes the UTF-8 byte-range sequences that spell exactly its characters (the
   split RE2 and Rust's utf8-ranges make), surrogates U+D800..U+DFFF left out (UTF-8 text has none);
   so a match never starts at a continuation byte nor ends inside a character.
4. A Thompson NFA over bytes per class (repeats ``{m,n}`` unrolled; greedy and lazy quantifiers alike:
   an automaton recognises a language, the longest rule chooses the length), then one DFA of all
   classes by subset construction; a DFA state accepts for the classes whose pattern matches the
   bytes read so far, and ``accepting`` keeps the first of them (the one ``find_placeholders`` lets
   win a tie).
5. Moore's minimisation (the accepting labels kept apart), so that every state but the dead one can
   still reach an accepting state; then the byte values that every state treats alike share a
   column of ``transitions``. Renumbered: 0 dead, 1 start, the rest breadth-first.

Limits
------
Refused with a ValueError naming the class (:func:`automaton_problem` gives the reason for one
pattern): lookahead and lookbehind, backreferences, anchors (``^ $ \\A \\Z \\b \\B``), conditional groups,
possessive quantifiers and atomic groups (no regular language, or not the same one), a pattern
whose language holds the empty string (a placeholder has at least one character), and a pattern
set too large for the tables (more than :data:`MAX_NFA_STATES` NFA states, e.g. ``x{1,100000}``, or
:data:`MAX_DFA_STATES` DFA states).

Where the automaton and ``re`` may differ
-----------------------------------------
Across classes both take the longest match at a start, the first class on a tie. Within a class
``re.match`` takes the first alternative that fits and is lazy where the pattern says ``*?``, the
automaton the longest match of the class's language: ``a|ab`` gives ``a`` to ``re`` and ``ab`` here;
``%.+?%`` gives ``%a%`` of ``%a%b%`` to ``re`` and the whole here. The built-in patterns are written so
that their first match is their longest (longer alternatives first, greedy quantifiers, no two ways to
end), and on this machine's catalogs (61,608 English msgids) every string's placeholders agree; an
extra pattern whose first fitting alternative is shorter than a later one, or that uses a lazy
quantifier, is matched longer by the exported model than by :func:`placeholders.find_placeholders`.
"""

from __future__ import annotations

import functools
import operator
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from gnmt_tf.localization.placeholders import DEFAULT_PATTERNS, PatternClass, PatternSet

try:  # Python 3.11 moved the regex parser into the re package
    from re import _constants as _sre
    from re import _parser as _sre_parse
except ImportError:  # pragma: no cover - older Pythons
    import sre_constants as _sre  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

MAX_NFA_STATES = 200_000  # beyond these, a pattern set is refused (a build would take seconds or more)
MAX_DFA_STATES = 10_000  # a table of 10,000 states by ~200 columns would weigh 8 MB in the model


@dataclass(frozen=True, eq=False)
class Automaton:
    """A DFA over UTF-8 bytes recognising every class of a pattern set (module docstring).

    Run from a start byte: ``state = transitions[state, byte_classes[byte]]`` from state 1; state 0 is
    dead (no match continues); ``accepting[state] >= 0`` means the bytes read so far are a match of
    class ``patterns.classes[accepting[state]]``. The arrays are read-only.
    """

    byte_classes: np.ndarray  # int32 [256]: byte value -> column of `transitions`
    transitions: np.ndarray  # int32 [states, columns]: next state; 0 dead, 1 start
    accepting: np.ndarray  # int32 [states]: first class matching the bytes read so far, -1 if none
    longest_match: int  # the most bytes a match can span, -1 if unbounded


class _Unsupported(Exception):
    """A pattern the automaton cannot represent: ``reason`` says why ("uses a lookahead, ..."), and
    ``class_index`` which class of the set (None: the set as a whole)."""

    def __init__(self, reason: str, class_index: Optional[int] = None):
        super().__init__(reason)
        self.reason, self.class_index = reason, class_index


# ----------------------------------------------------------------------------- public interface
def compile_patterns(patterns: PatternSet = DEFAULT_PATTERNS) -> Automaton:
    """The automaton of ``patterns`` (cached per set of (name, pattern, flags, is_placeholder)).

    Raises ValueError naming the class whose pattern the automaton cannot represent."""
    return _compiled(tuple(_signature(pattern_class) for pattern_class in patterns.classes))


def automaton_problem(pattern: str) -> Optional[str]:
    """Why ``pattern`` (an extra placeholder class) cannot be compiled into the automaton, or None.

    Judged alone: with the other classes a pattern could still make the set too large, which
    :func:`compile_patterns` then says."""
    try:
        regex = re.compile(pattern)
    except re.error as err:
        return f"is not a valid regular expression: {err}"
    try:
        _build((("extra", regex.pattern, regex.flags, True),))
    except _Unsupported as err:
        return err.reason
    return None


def find_spans(automaton: Automaton, data: bytes) -> List[Tuple[int, int, int]]:
    """(byte_start, byte_end, class_index) of every match leftmost-longest selects in ``data``, left to
    right, not overlapping; guards included (the caller drops them, their text stays text)."""
    columns = automaton.byte_classes[np.frombuffer(bytes(data), dtype=np.uint8)].tolist()
    transitions, accepting = _as_lists(automaton)
    spans = []
    start = 0
    while start < len(columns):
        match = _longest_from(transitions, accepting, columns, start)
        if match is None:
            start += 1
        else:
            spans.append((start, match[0], match[1]))
            start = match[0]
    return spans


@functools.lru_cache(maxsize=4)
def _as_lists(automaton: Automaton) -> Tuple[List[List[int]], List[int]]:
    """The tables as Python lists, which index ten times faster than arrays one element at a time."""
    return automaton.transitions.tolist(), automaton.accepting.tolist()


def _longest_from(transitions, accepting, columns, start) -> Optional[Tuple[int, int]]:
    """(end, class) of the longest non-empty match starting at ``start``, or None."""
    state, longest = 1, None
    for position in range(start, len(columns)):
        state = transitions[state][columns[position]]
        if state == 0:
            break
        if accepting[state] >= 0:
            longest = (position + 1, accepting[state])
    return longest


def _signature(pattern_class: PatternClass) -> Tuple[str, str, int, bool]:
    """What the automaton of a class depends on: the cache key, and what ``_build`` reads."""
    regex = pattern_class.regex
    return (pattern_class.name, regex.pattern, regex.flags, pattern_class.is_placeholder)


@functools.lru_cache(maxsize=16)
def _compiled(signature: Tuple[Tuple[str, str, int, bool], ...]) -> Automaton:
    try:
        return _build(signature)
    except _Unsupported as err:
        if err.class_index is None:
            raise ValueError(f"the placeholder pattern set {err.reason}") from None
        name, pattern = signature[err.class_index][:2]
        raise ValueError(f"placeholder class {name!r}: the pattern {pattern!r} {err.reason}") from None


def _build(signature: Tuple[Tuple[str, str, int, bool], ...]) -> Automaton:
    """The automaton of the classes of ``signature`` ((name, pattern, flags, is_placeholder) each)."""
    nfa = _Nfa()
    start = nfa.state()
    accepts = []  # per class, its NFA accepting state
    for index, (_, pattern, flags, _) in enumerate(signature):
        try:
            entry, exit_ = _class_fragment(nfa, pattern, flags)
        except _Unsupported as err:
            raise _Unsupported(err.reason, index) from None
        nfa.epsilon[start].append(entry)
        accepts.append(exit_)
    table, accepting = _determinise(nfa, start, accepts)
    table, accepting = _renumbered(*_minimise(table, accepting))
    transitions, byte_classes = _merged_columns(table, nfa.byte_columns())
    return Automaton(
        byte_classes=_frozen(byte_classes),
        transitions=_frozen(transitions),
        accepting=_frozen(accepting),
        longest_match=_longest_match(transitions, accepting),
    )


def _frozen(array: np.ndarray) -> np.ndarray:
    array = np.ascontiguousarray(array, dtype=np.int32)
    array.setflags(write=False)  # shared through the cache: nobody may change it
    return array


# ----------------------------------------------------------------------------- code point sets
# A set of code points: sorted, disjoint, non-adjacent inclusive ranges ((low, high), ...).
CodePoints = Tuple[Tuple[int, int], ...]
MAX_CODE_POINT = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)


def _normalised(ranges) -> CodePoints:
    merged: List[List[int]] = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    return tuple((low, high) for low, high in merged)


def _complement(code_points: CodePoints) -> CodePoints:
    gaps, next_low = [], 0
    for low, high in code_points:
        if low > next_low:
            gaps.append((next_low, low - 1))
        next_low = high + 1
    if next_low <= MAX_CODE_POINT:
        gaps.append((next_low, MAX_CODE_POINT))
    return tuple(gaps)


def _without_surrogates(code_points: CodePoints) -> CodePoints:
    return _normalised(piece for low, high in code_points
                       for piece in ((low, min(high, SURROGATES[0] - 1)), (max(low, SURROGATES[1] + 1), high))
                       if piece[0] <= piece[1])


@functools.lru_cache(maxsize=1)
def _every_character() -> str:
    """Every Unicode scalar value once, in order: the text the category and case scans run over."""
    scalars = np.concatenate([np.arange(SURROGATES[0]), np.arange(SURROGATES[1] + 1, MAX_CODE_POINT + 1)])
    return scalars.astype("<u4").tobytes().decode("utf-32-le")


@functools.lru_cache(maxsize=None)
def _scanned(source: str, flags: int) -> CodePoints:
    """The code points the one-character regex ``source`` matches under ``flags``, as ``re`` decides."""
    found = "".join(re.compile(source, flags).findall(_every_character()))
    code_points = np.frombuffer(found.encode("utf-32-le"), dtype="<u4").astype(np.int64)
    if code_points.size == 0:
        return ()
    breaks = np.flatnonzero(np.diff(code_points) != 1)
    lows = np.concatenate([code_points[:1], code_points[breaks + 1]])
    highs = np.concatenate([code_points[breaks], code_points[-1:]])
    return tuple(zip(lows.tolist(), highs.tolist()))


_FLAGS_OF_CHARACTERS = re.IGNORECASE | re.ASCII  # the flags that change which characters an item matches
_CATEGORIES = {  # category -> (its positive escape, negated)
    _sre.CATEGORY_DIGIT: (r"\d", False), _sre.CATEGORY_NOT_DIGIT: (r"\d", True),
    _sre.CATEGORY_SPACE: (r"\s", False), _sre.CATEGORY_NOT_SPACE: (r"\s", True),
    _sre.CATEGORY_WORD: (r"\w", False), _sre.CATEGORY_NOT_WORD: (r"\w", True),
}


def _category(category, flags: int) -> CodePoints:
    if category not in _CATEGORIES:
        raise _Unsupported(f"uses the character category {category}, which the automaton does not know")
    escape, negated = _CATEGORIES[category]
    positive = _scanned(escape, flags & re.ASCII)  # case does not change \d \s \w
    return _complement(positive) if negated else positive


def _literal_range(low: int, high: int, flags: int) -> CodePoints:
    """The code points matching any of ``low..high`` (a literal when equal), case folded under IGNORECASE."""
    if not flags & re.IGNORECASE:
        return ((low, high),)
    if high < 0x80:  # ASCII: the letters' partners from one cached scan
        partners = _ascii_case_partners(flags & _FLAGS_OF_CHARACTERS)
        folded = [(c, c) for letter in range(low, high + 1) for c in partners.get(letter, ())]
        return _normalised([(low, high)] + folded)
    source = f"[{re.escape(chr(low))}-{re.escape(chr(high))}]"
    return _normalised(_scanned(source, flags & _FLAGS_OF_CHARACTERS) + ((low, high),))


@functools.lru_cache(maxsize=None)
def _ascii_case_partners(flags: int) -> Dict[int, Tuple[int, ...]]:
    """ASCII letter -> the code points ``re`` matches it with under ``flags`` (IGNORECASE): 'k' -> 'K',
    'k' and the Kelvin sign U+212A; 's' -> 'S', 's' and the long s U+017F."""
    candidates = [chr(c) for low, high in _scanned("[A-Za-z]", flags) for c in range(low, high + 1)]
    return {letter: tuple(ord(c) for c in candidates if re.fullmatch(re.escape(chr(letter)), c, flags))
            for letter in list(range(ord("A"), ord("Z") + 1)) + list(range(ord("a"), ord("z") + 1))}


def _character_set(op, argument, flags: int) -> CodePoints:
    """The code points of a one-character item of a parsed pattern (LITERAL, NOT_LITERAL, ANY or IN)."""
    if op is _sre.LITERAL:
        return _literal_range(argument, argument, flags)
    if op is _sre.NOT_LITERAL:
        return _complement(_literal_range(argument, argument, flags))
    if op is _sre.ANY:
        return ((0, MAX_CODE_POINT),) if flags & re.DOTALL else _complement(((ord("\n"), ord("\n")),))
    negated = bool(argument) and argument[0][0] is _sre.NEGATE
    items = argument[1:] if negated else argument
    members = _normalised(piece for item in items for piece in _class_member(item, flags))
    return _complement(members) if negated else members


def _class_member(item, flags: int) -> CodePoints:
    op, argument = item
    if op is _sre.LITERAL:
        return _literal_range(argument, argument, flags)
    if op is _sre.RANGE:
        return _literal_range(argument[0], argument[1], flags)
    if op is _sre.CATEGORY:
        return _category(argument, flags)
    raise _Unsupported(f"uses {op} in a character class, which the automaton does not know")


# ----------------------------------------------------------------------------- UTF-8
@functools.lru_cache(maxsize=None)
def _utf8_sequences(code_points: CodePoints) -> Tuple[Tuple[Tuple[int, int], ...], ...]:
    """Byte-range sequences whose byte strings are exactly the UTF-8 encodings of ``code_points``."""
    return tuple(sequence for low, high in _without_surrogates(code_points)
                 for sequence in _utf8_range_sequences(low, high))


def _utf8_range_sequences(low: int, high: int) -> List[Tuple[Tuple[int, int], ...]]:
    """The standard split (RE2, Rust's utf8-ranges): cut ``low..high`` where the encoded length changes,
    then where a continuation byte would not run over its whole 0x80..0xBF, until the first and last
    code points of each piece differ byte by byte within ranges that every piece member fills."""
    for length_limit in (0x7F, 0x7FF, 0xFFFF):
        if low <= length_limit < high:
            return _utf8_range_sequences(low, length_limit) + _utf8_range_sequences(length_limit + 1, high)
    if high <= 0x7F:
        return [((low, high),)]
    for continuation_bytes in (1, 2, 3):
        tail = (1 << (6 * continuation_bytes)) - 1  # the bits these continuation bytes carry
        if low & ~tail != high & ~tail:
            if low & tail != 0:
                return _utf8_range_sequences(low, low | tail) + _utf8_range_sequences((low | tail) + 1, high)
            if high & tail != tail:
                cut = high & ~tail
                return _utf8_range_sequences(low, cut - 1) + _utf8_range_sequences(cut, high)
    return [tuple(zip(chr(low).encode("utf-8"), chr(high).encode("utf-8")))]


# ----------------------------------------------------------------------------- Thompson NFA
class _Nfa:
    """A Thompson NFA over bytes under construction: per state, its epsilon moves and its byte moves."""

    def __init__(self):
        self.epsilon: List[List[int]] = []  # state -> states reached without reading
        self.moves: List[List[Tuple[int, int, int]]] = []  # state -> (low byte, high byte, next state)

    def state(self) -> int:
        if len(self.epsilon) >= MAX_NFA_STATES:
            raise _Unsupported(f"is too large for the exported model's automaton "
                               f"(over {MAX_NFA_STATES} NFA states)")
        self.epsilon.append([])
        self.moves.append([])
        return len(self.epsilon) - 1

    def byte_columns(self) -> np.ndarray:
        """Byte value -> column: bytes no move tells apart share one (int32 [256], numbered from 0)."""
        cuts = np.zeros(257, dtype=bool)
        for moves in self.moves:
            for low, high, _ in moves:
                cuts[low] = cuts[high + 1] = True
        return (np.cumsum(cuts[:256]) - 1).astype(np.int32)


Fragment = Tuple[int, int]  # (entry state, exit state) of a piece of NFA


def _class_fragment(nfa: _Nfa, pattern: str, flags: int) -> Fragment:
    parsed = _sre_parse.parse(pattern, flags)
    # The pattern's flags, with those of a leading (?i) or (?x) that apply to all of it.
    global_flags = parsed.state.flags if hasattr(parsed, "state") else parsed.pattern.flags
    return _sequence(nfa, list(parsed), global_flags)


def _sequence(nfa: _Nfa, items, flags: int) -> Fragment:
    entry = exit_ = nfa.state()
    for op, argument in items:
        item_entry, item_exit = _item(nfa, op, argument, flags)
        nfa.epsilon[exit_].append(item_entry)
        exit_ = item_exit
    return entry, exit_


def _item(nfa: _Nfa, op, argument, flags: int) -> Fragment:
    if op in (_sre.LITERAL, _sre.NOT_LITERAL, _sre.ANY, _sre.IN):
        return _characters(nfa, _character_set(op, argument, flags))
    if op is _sre.BRANCH:
        return _alternatives(nfa, argument[1], flags)
    if op is _sre.SUBPATTERN:
        _, added, removed, items = argument
        return _sequence(nfa, list(items), (flags | added) & ~removed)
    if op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT):  # greedy or lazy: the same language
        low, high, items = argument
        return _repeat(nfa, low, high, list(items), flags)
    raise _Unsupported(_refusal(op, argument))


_ANCHORS = {
    _sre.AT_BEGINNING: "^", _sre.AT_BEGINNING_STRING: r"\A", _sre.AT_END: "$", _sre.AT_END_STRING: r"\Z",
    _sre.AT_BOUNDARY: r"\b", _sre.AT_NON_BOUNDARY: r"\B",
}


_REFUSED_CONSTRUCTS = {  # by opcode name: ATOMIC_GROUP and POSSESSIVE_REPEAT exist from Python 3.11 on
    "GROUPREF": "a backreference", "GROUPREF_EXISTS": "a conditional group",
    "ATOMIC_GROUP": "an atomic group", "POSSESSIVE_REPEAT": "a possessive quantifier",
}


def _refusal(op, argument) -> str:
    """Why the automaton cannot run ``op``: the reason automaton_problem and the ValueError give."""
    if op in (_sre.ASSERT, _sre.ASSERT_NOT):
        kind = "lookahead" if argument[0] > 0 else "lookbehind"
        what = f"a {'negative ' if op is _sre.ASSERT_NOT else ''}{kind}"
    elif op is _sre.AT:
        what = f"the anchor {_ANCHORS.get(argument, str(argument))}"
    else:
        what = _REFUSED_CONSTRUCTS.get(str(op), str(op))
    return f"uses {what}, which the exported model cannot run"


def _characters(nfa: _Nfa, code_points: CodePoints) -> Fragment:
    """Entry to exit over the UTF-8 encoding of one of ``code_points``; sequences share their prefixes."""
    entry, exit_ = nfa.state(), nfa.state()
    after_prefix = {(): entry}  # a prefix of byte ranges -> the state reached after it
    for sequence in _utf8_sequences(code_points):
        for length in range(1, len(sequence)):
            prefix = sequence[:length]
            if prefix not in after_prefix:
                after_prefix[prefix] = nfa.state()
                low, high = sequence[length - 1]
                nfa.moves[after_prefix[prefix[:-1]]].append((low, high, after_prefix[prefix]))
        low, high = sequence[-1]
        nfa.moves[after_prefix[sequence[:-1]]].append((low, high, exit_))
    return entry, exit_


def _alternatives(nfa: _Nfa, branches, flags: int) -> Fragment:
    entry, exit_ = nfa.state(), nfa.state()
    for branch in branches:
        branch_entry, branch_exit = _sequence(nfa, list(branch), flags)
        nfa.epsilon[entry].append(branch_entry)
        nfa.epsilon[branch_exit].append(exit_)
    return entry, exit_


def _repeat(nfa: _Nfa, low: int, high: int, items, flags: int) -> Fragment:
    """``items{low,high}`` unrolled: ``low`` copies, then a loop (unbounded) or nested optional copies."""
    entry = exit_ = nfa.state()
    for _ in range(low):
        exit_ = _then(nfa, exit_, _sequence(nfa, items, flags))
    if high == _sre.MAXREPEAT:
        loop_entry, loop_exit = _sequence(nfa, items, flags)
        nfa.epsilon[exit_].append(loop_entry)
        nfa.epsilon[loop_exit].append(exit_)  # exit_ is both the loop's head and the repeat's exit
        return entry, exit_
    end = nfa.state()
    for _ in range(high - low):  # x{0,3} as (x(x(x)?)?)?: fewer paths than three independent x?
        nfa.epsilon[exit_].append(end)
        exit_ = _then(nfa, exit_, _sequence(nfa, items, flags))
    nfa.epsilon[exit_].append(end)
    return entry, end


def _then(nfa: _Nfa, exit_: int, fragment: Fragment) -> int:
    nfa.epsilon[exit_].append(fragment[0])
    return fragment[1]


# ----------------------------------------------------------------------------- subset construction
def _determinise(nfa: _Nfa, start: int, accepts: Sequence[int]) -> Tuple[np.ndarray, np.ndarray]:
    """The DFA of the NFA from ``start`` over byte columns: (table [states, columns], first class accepting
    [states]). NFA state sets are Python ints used as bit sets; DFA state 0 is the empty set (dead)."""
    columns = nfa.byte_columns()
    closure = _closures(nfa)
    rows = _column_rows(nfa, columns, closure)
    consuming = sum(1 << state for state in rows)
    accept_bits = [1 << state for state in accepts]
    start_set = closure(start)
    if start_set & sum(accept_bits):
        first = next(k for k, bit in enumerate(accept_bits) if start_set & bit)
        raise _Unsupported("matches the empty string; a placeholder must be at least one character", first)
    number_of = {0: 0, start_set: 1}
    sets, table = [0, start_set], [[0] * (int(columns.max()) + 1)]
    while len(table) < len(sets):
        following = [0] * len(table[0])
        for state in _members(sets[len(table)] & consuming):
            following = list(map(operator.or_, following, rows[state]))
        row = []
        for next_set in following:
            if next_set not in number_of:
                number_of[next_set] = len(sets)
                sets.append(next_set)
            row.append(number_of[next_set])
        table.append(row)
        if len(sets) > MAX_DFA_STATES:
            raise _Unsupported(f"is too large for the exported model's automaton "
                               f"(over {MAX_DFA_STATES} DFA states)")
    accepting = [next((k for k, bit in enumerate(accept_bits) if dfa_set & bit), -1) for dfa_set in sets]
    return np.array(table, dtype=np.int32), np.array(accepting, dtype=np.int32)


def _members(bits: int):
    """The indices of the bits set in ``bits``, lowest first."""
    while bits:
        lowest = bits & -bits
        yield lowest.bit_length() - 1
        bits ^= lowest


def _closures(nfa: _Nfa):
    """state -> the bit set of the states its epsilon moves reach (itself included), memoised."""
    @functools.lru_cache(maxsize=None)
    def closure(state: int) -> int:
        reached, stack = 1 << state, [state]
        while stack:
            for target in nfa.epsilon[stack.pop()]:
                if not reached >> target & 1:
                    reached |= 1 << target
                    stack.append(target)
        return reached
    return closure


def _column_rows(nfa: _Nfa, columns: np.ndarray, closure) -> Dict[int, List[int]]:
    """Reading state -> per column, the closed bit set of the states its byte moves reach."""
    rows = {}
    for state, moves in enumerate(nfa.moves):
        if moves:
            row = [0] * (int(columns.max()) + 1)
            for low, high, target in moves:
                for column in range(columns[low], columns[high] + 1):
                    row[column] |= closure(target)
            rows[state] = row
    return rows


# ----------------------------------------------------------------------------- minimising, renumbering
def _minimise(table: np.ndarray, accepting: np.ndarray) -> Tuple[np.ndarray, np.ndarray, int]:
    """Moore's partition refinement: states split by label, then by their successors' blocks, until
    stable. Returns the blocks' table and labels, numbered in order of their first state (so the dead
    state's block is 0), and the start's block."""
    blocks = np.unique(accepting, return_inverse=True)[1].reshape(-1)
    while True:
        refined = _row_numbers(np.column_stack([blocks, blocks[table]]))
        if refined.max() == blocks.max():
            break
        blocks = refined
    first_states = np.unique(blocks, return_index=True)[1]  # per block, its first state
    rank = np.empty(len(first_states), dtype=np.int64)
    rank[np.argsort(first_states)] = np.arange(len(first_states))
    blocks = rank[blocks]
    representatives = np.sort(first_states)
    return blocks[table[representatives]], accepting[representatives], int(blocks[1])


def _row_numbers(rows: np.ndarray) -> np.ndarray:
    """Per row, a number that equal rows share (0, 1, ...). Each row viewed as one opaque byte string: five
    times faster than np.unique(axis=0), which sorts a structured dtype field by field."""
    rows = np.ascontiguousarray(rows)
    as_bytes = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).reshape(-1)
    return np.unique(as_bytes, return_inverse=True)[1].reshape(-1)


def _renumbered(table: np.ndarray, accepting: np.ndarray, start: int) -> Tuple[np.ndarray, np.ndarray]:
    """Dead state 0, start 1, the others in breadth-first order from the start. A start that cannot
    reach any match (it fell into the dead block) gets a state of its own that leads only to 0."""
    if start == 0:
        return np.zeros((2, table.shape[1]), dtype=np.int64), np.full(2, -1)
    order, seen = [0, start], {0, start}
    walked = 1
    while walked < len(order):  # order grows while it is walked: breadth-first
        for successor in table[order[walked]].tolist():
            if successor not in seen:
                seen.add(successor)
                order.append(successor)
        walked += 1
    new_number = np.empty(len(table), dtype=np.int64)
    new_number[order] = np.arange(len(order))
    return new_number[table[order]], accepting[order]


def _merged_columns(table: np.ndarray, byte_columns: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Columns no state tells apart merged, numbered by their first byte: (table, byte_classes)."""
    column_of_key: Dict[bytes, int] = {}
    byte_classes = np.array([column_of_key.setdefault(table[:, column].tobytes(), len(column_of_key))
                             for column in byte_columns.tolist()], dtype=np.int32)
    first_bytes = [byte_classes.tolist().index(column) for column in range(len(column_of_key))]
    return table[:, byte_columns[first_bytes]], byte_classes


def _longest_match(transitions: np.ndarray, accepting: np.ndarray) -> int:
    """The longest path from the start to an accepting state, -1 if a cycle lies on such a path. After
    minimisation every live state (not 0) reaches an accepting state, so any cycle of live states
    counts. Kahn's topological order over the live states; a state left out of it is on a cycle."""
    successors = [sorted(set(row.tolist()) - {0}) for row in transitions]
    unplaced_predecessors = np.zeros(len(transitions), dtype=np.int64)
    for state in range(1, len(transitions)):
        for successor in successors[state]:
            unplaced_predecessors[successor] += 1
    if unplaced_predecessors[1]:
        return -1  # the start is on a cycle
    ready, depth, longest, placed = [1], {1: 0}, 0, 0
    while ready:
        state = ready.pop()
        placed += 1
        if accepting[state] >= 0:
            longest = max(longest, depth[state])
        for successor in successors[state]:
            depth[successor] = max(depth.get(successor, 0), depth[state] + 1)
            unplaced_predecessors[successor] -= 1
            if unplaced_predecessors[successor] == 0:
                ready.append(successor)
    return longest if placed == len(transitions) - 1 else -1
