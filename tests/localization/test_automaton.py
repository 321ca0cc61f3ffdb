"""gnmt_tf.localization.automaton: the pattern set as one DFA over UTF-8 bytes must find what
gnmt_tf.localization.placeholders finds (hand-written cases of every class, a seeded fuzz), refuse
what it cannot run, and keep the invariants the in-graph run relies on.

Pure Python and NumPy: no TensorFlow, no model.
"""

import random
import re

import numpy as np
import pytest

from gnmt_tf.localization import automaton as automaton_module
from gnmt_tf.localization.automaton import Automaton, automaton_problem, compile_patterns, find_spans
from gnmt_tf.localization.placeholders import (
    BUILTIN_CLASSES,
    DEFAULT_PATTERNS,
    ENTITY,
    SHELL,
    PatternClass,
    PatternSet,
    find_placeholders,
    pattern_set,
)

pytestmark = pytest.mark.draws_nothing_random  # no TensorFlow here: conftest's reseeding is not needed


def byte_offset(text, index):
    return len(text[:index].encode("utf-8"))


def expected_spans(text, patterns=DEFAULT_PATTERNS):
    """find_placeholders' answer in byte offsets: (kind, byte start, byte end)."""
    return [(found.kind, byte_offset(text, found.start), byte_offset(text, found.end))
            for found in find_placeholders(text, patterns)]


def automaton_spans(text, patterns=DEFAULT_PATTERNS):
    """The automaton's answer, guards dropped, in the same form."""
    return [(patterns.classes[index].name, start, end)
            for start, end, index in find_spans(compile_patterns(patterns), text.encode("utf-8"))
            if patterns.classes[index].is_placeholder]


# ------------------------------------------------------------------------- agreement with placeholders
HAND_WRITTEN = [
    # printf: conversions, flags, width, precision, positions, length modifiers, %%, the extensions
    "%s %d %lu %lld %zu %hhd %I64u %Zd %.2f %5.1f %-10s %+d %'d %*d %-*.*s %#08lx %Lf %n",
    "%1$s %2$d %*3$d %.*2$s; reordered: %2$s then %1$s",
    "100%% done, %m, %%s is not %s", "%<PRIu64> bytes, %<PRIx32>, %<PRI", "%F%P: %pB(%pA): %H:%M",
    "% d and 50% done, %", "%hh %ll %I6 %I32",
    # the guard: %CPU stays text, %LG is a directive
    "%CPU %MEM %REGEXP% %LG %%CPU %Cx",
    # python mapping, git's %(atom)
    "%(name)s %(count)d %(x).2f %(fmt)T %(atom) %(a\nb)s",
    # brace: fields, conversions, format specs, ICU, mustache
    "{} {0} {name} {0:.2f} {name!r} {obj.attr} {a[0]} {a!r:>{w}}",
    "{0,number,#.##} {1, date} {count, plural, one {# file} other {# files}}",
    "{g, select, f {{n} elle} other {x}} {n, plural, one {a {b {c {d}}}} other {}}",
    "{n, selectordinal, one {#st} other {#th}} {n,\u2003plural, one {#} other {#}}",
    "{{ name }} {{count}} {{ }} {{ a {{ x }} }} {{", "{ a, b } {nom_fichier_é} {é} {0 } {x!q}",
    # shell
    "${var} ${Package} $PATH $1 ${} ${a\nb} ${a}b}",
    # markup: tags, attributes with placeholders inside, comments, bare tags, metavariables, case
    '<a href="{url}">%s</a> <span weight=\'bold\'>x</span> <br/> <image/> <BR> <file> <Span >',
    "<!-- comment --> <!----> <!-- a - b --> <!-- x --->", "<b>été</b> <i>ä</i> <ſpan> <İ> <ı>",
    "<a\xa0href=\"x\"> </b\u3000> <a x=1 y='2' z=\"3\"/> <a x=y/> <input disabled> <a b=\"x>y\">",
    # entities
    "&amp; &lt; &nbsp; &#123; &#x1F600; &File AT&T &#; &#x; &abcdefghijklmnopqrstuvwxyzabcdefg;",
    # non-ASCII around and inside, Unicode white space where patterns use \s
    "Fichier « %s » introuvable : %d octets", "日本語 %s 日本語 {名前} <b>中</b> &amp;中",
    "{{\u2003name }} {{\xa0x\xa0}} <b\u2003>",
    # nothing, and the empty string
    "A plain sentence without any placeholder.", "",
]


@pytest.mark.parametrize("text", HAND_WRITTEN)
def test_automaton_finds_what_find_placeholders_finds(text):
    assert automaton_spans(text) == expected_spans(text)


def test_hand_written_cases_hold_placeholders_of_every_class():
    """The cases above are no vacuous comparison: every class is found in them, and the guard too."""
    kinds = {kind for text in HAND_WRITTEN for kind, _, _ in automaton_spans(text)}
    assert kinds == {pattern_class.name for pattern_class in BUILTIN_CLASSES if pattern_class.is_placeholder}
    guard = [index for index, pattern_class in enumerate(BUILTIN_CLASSES) if not pattern_class.is_placeholder]
    assert find_spans(compile_patterns(), b"%CPU %s") == [(0, 4, guard[0]), (5, 7, 0)]


@pytest.mark.parametrize("text, expected", [
    ('<a href="{url}">%s</a>', [("markup", '<a href="{url}">'), ("printf", "%s"), ("markup", "</a>")]),
    ("{nom_fichier_é}", []),
    ("<b>été</b>", [("markup", "<b>"), ("markup", "</b>")]),
    ("{{\u2003name }}", [("brace", "{{\u2003name }}")]),
    ("%CPU %%CPU", [("printf", "%%")]),
])
def test_automaton_spans_on_known_answers(text, expected):
    data = text.encode("utf-8")
    assert [(kind, data[start:end].decode("utf-8")) for kind, start, end in automaton_spans(text)] == expected


# What the fuzz draws from: single characters rich in placeholder syntax, a few non-ASCII ones (é, the
# long s that IGNORECASE folds to s, no-break and em spaces that \s matches), pieces of placeholders,
# so that long ones (ICU, attributes, comments) are assembled often enough, and whole placeholders,
# which their neighbours extend, cut or shadow.
FUZZ_CHARACTERS = list("%{}$<>&;#/'\"=!:.,-_ \n0123456789") + list("abcdefghijklmnopqrstuvwxyz") + list(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ") + ["é", "ſ", "\xa0", "\u2003", "日"]
FUZZ_PIECES = [
    "%", "{", "}", "<", ">", "</", "/>", "<!--", "-->", "&", ";", "&#x", "${", "%(", ")", "{{", "}}",
    "1$", "*", ".", "ll", "hh", "I64", "pA", "<PRI", "CPU", "plural", "select", "number", ", ", "one {",
    "other {", "#", "span", "b", "a", " href=", "'", '"', "!r", ":", "x", "[0]", "amp",
]
FUZZ_PLACEHOLDERS = [
    "%s", "%1$d", "%%", "%(n)d", "{}", "{0}", "{n:>3}", "{{ x }}", "${x}", "<b>", "</b>", "<br/>",
    '<a href="x">', "<!-- c -->", "&amp;", "&#x4F;", "{n, plural, one {#} other {# x}}",
]


def fuzz_texts(count, seed):
    draw = random.Random(seed)
    for _ in range(count):
        pieces = [draw.choice(draw.choices([FUZZ_CHARACTERS, FUZZ_PIECES, FUZZ_PLACEHOLDERS], [5, 4, 1])[0])
                  for _ in range(draw.randint(0, 14))]
        yield "".join(pieces)


def test_automaton_agrees_with_find_placeholders_on_random_texts():
    found_any = 0
    for text in fuzz_texts(5000, seed=20261129):
        expected = expected_spans(text)
        assert automaton_spans(text) == expected, text
        found_any += bool(expected)
    assert found_any > 2000  # the fuzz does reach placeholders (in half of the texts)


# ------------------------------------------------------------------------- extra patterns and refusals
def test_an_extra_pattern_is_compiled_and_found():
    patterns = pattern_set(["%[0-9]+"])
    text = "%1 of %23, %s and %%9"
    assert automaton_spans(text, patterns) == expected_spans(text, patterns)
    assert [kind for kind, _, _ in automaton_spans(text, patterns)] == [
        "extra_placeholder_patterns[0]", "extra_placeholder_patterns[0]", "printf", "printf"]


def test_extra_patterns_fold_non_ascii_case_as_re_does():
    patterns = pattern_set(["#(?i:é)", "(?i)@[à-ä]+"])
    text = "#É #é #e #È @ÀÄà @z"
    assert automaton_spans(text, patterns) == expected_spans(text, patterns)
    assert len(automaton_spans(text, patterns)) == 3


def test_the_automaton_takes_a_class_s_longest_match_where_re_takes_its_first():
    """The documented difference (module docstring): only for alternatives whose first fit is shorter."""
    patterns = pattern_set(["@a|@ab"])
    assert [found.text for found in find_placeholders("@ab", patterns)] == ["@a"]
    assert find_spans(compile_patterns(patterns), b"@ab") == [(0, 3, len(BUILTIN_CLASSES))]


@pytest.mark.parametrize("pattern, reason", [
    ("(?=a)b", "lookahead"), ("a(?<!b)", "negative lookbehind"), (r"(a)\1", "backreference"),
    ("^a", "anchor ^"), (r"a\b", r"anchor \b"), (r"(a)?(?(1)b|c)", "conditional group"),
    ("a++", "possessive quantifier"), ("(?>a)", "atomic group"), ("x*", "empty string"),
    ("(", "not a valid regular expression"),
])
def test_automaton_problem_says_why(pattern, reason):
    problem = automaton_problem(pattern)
    assert problem is not None and reason in problem


def test_automaton_problem_refuses_a_pattern_too_large(monkeypatch):
    # The real limit, 200,000 states, takes half a second to reach.
    monkeypatch.setattr(automaton_module, "MAX_NFA_STATES", 1000)
    assert "too large" in automaton_problem("a{1,3000}")
    assert automaton_problem("a{1,300}") is None


@pytest.mark.parametrize("pattern", ["%[0-9]+", r"\$[A-Z_]+\$", r"(?i:%[a-z]\w*)", r"@\s+\d{2,3}"])
def test_automaton_problem_accepts_regular_patterns(pattern):
    assert automaton_problem(pattern) is None


def test_compile_refuses_a_class_it_cannot_run_and_names_it():
    patterns = PatternSet(BUILTIN_CLASSES + (PatternClass("ahead", re.compile("(?=a)b")),))
    with pytest.raises(ValueError, match=r"'ahead'.*lookahead, which the exported model cannot run"):
        compile_patterns(patterns)


# ------------------------------------------------------------------------- the tables
@pytest.mark.parametrize("patterns", [DEFAULT_PATTERNS, pattern_set(["%[0-9]+"])], ids=["builtin", "extra"])
def test_table_invariants(patterns):
    automaton = compile_patterns(patterns)
    states, columns = automaton.transitions.shape
    for array in (automaton.byte_classes, automaton.transitions, automaton.accepting):
        assert array.dtype == np.int32 and not array.flags.writeable
    assert automaton.byte_classes.shape == (256,) and automaton.accepting.shape == (states,)
    assert set(automaton.byte_classes.tolist()) == set(range(columns))  # every column is some byte's
    assert automaton.transitions.min() >= 0 and automaton.transitions.max() < states
    assert not automaton.transitions[0].any() and automaton.accepting[0] == -1  # 0: dead, absorbing
    assert automaton.accepting[1] == -1  # no empty match at the start
    assert -1 <= automaton.accepting.min() and automaton.accepting.max() < len(patterns.classes)
    # minimal and compressed: no two states alike (row and label), no two columns alike
    rows = np.column_stack([automaton.accepting, automaton.transitions])
    assert len(np.unique(rows, axis=0)) == states
    assert np.unique(automaton.transitions, axis=1).shape[1] == columns


def test_builtin_table_size():
    """The exported model carries this table: a few hundred states, about a hundred byte columns."""
    states, columns = compile_patterns().transitions.shape
    assert states < 1000 and columns < 160


def test_compile_is_cached_per_pattern_content():
    assert compile_patterns(PatternSet(BUILTIN_CLASSES)) is compile_patterns(DEFAULT_PATTERNS)
    assert compile_patterns(pattern_set(["%[0-9]+"])) is compile_patterns(pattern_set(["%[0-9]+"]))


def test_longest_match():
    entity = PatternSet([PatternClass("entity", re.compile(ENTITY))])
    # "&", a letter and 31 letters or digits, ";" (longer than "&#" 7 digits ";" and "&#x" 6 hex digits ";")
    assert compile_patterns(entity).longest_match == 1 + 1 + 31 + 1
    four = PatternSet([PatternClass("four", re.compile("ab|c{2,4}|é{2}"))])  # cccc, or éé in UTF-8
    assert compile_patterns(four).longest_match == 4
    assert compile_patterns(PatternSet([PatternClass("shell", re.compile(SHELL))])).longest_match == -1
    assert compile_patterns().longest_match == -1  # e.g. [^{}]* in the brace class


def test_every_scalar_value_is_one_character():
    """UTF-8: each code point where the encoded length changes, and around the surrogates, is read as
    one character whole; a lone continuation byte or a byte UTF-8 never uses starts nothing."""
    automaton = compile_patterns(PatternSet([PatternClass("not a", re.compile("[^a]"))]))
    for code_point in (0, 0x7F, 0x80, 0x7FF, 0x800, 0xFFF, 0x1000, 0xD7FF, 0xE000, 0xFFFF, 0x10000,
                       0x3FFFF, 0x40000, 0xFFFFF, 0x100000, 0x10FFFF):
        data = chr(code_point).encode("utf-8")
        assert find_spans(automaton, data) == [(0, len(data), 0)], hex(code_point)
    assert find_spans(automaton, b"a") == []
    assert find_spans(automaton, b"\x80\xbf\xc0\xc1\xf5\xff\xed\xa0\x80") == []  # \xed\xa0\x80: a surrogate


def test_find_spans_on_nothing():
    assert find_spans(compile_patterns(), b"") == []
    assert isinstance(compile_patterns(), Automaton)
