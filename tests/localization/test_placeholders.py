"""gnmt_tf.localization.placeholders: the pattern set on hand-written cases and on the machine's catalogs,
masking and restoring (the round trip over every English msgid), the placeholder check.

Pure Python: no TensorFlow, no model.
"""

import ast
import glob
import os
import re
import struct

import pytest

from gnmt_tf.localization.placeholders import (
    BUILTIN_CLASSES,
    DEFAULT_PATTERNS,
    MAX_SLOTS,
    Masked,
    Placeholder,
    check,
    find_placeholders,
    mask,
    mask_pair,
    pattern_set,
    restore,
    slot_token,
)

pytestmark = pytest.mark.draws_nothing_random  # no TensorFlow here: conftest's reseeding is not needed

LOCALE_DIR = "/usr/share/locale/fr/LC_MESSAGES"
TOKENIZER = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                         "gnmt_tf", "data", "tokenizer.py")


def shown(text):
    """A masked text with its slot tokens written ⟨N⟩, for readable expectations."""
    return "".join(f"⟨{ord(c) - ord(slot_token(1)) + 1}⟩" if slot_token(1) <= c <= slot_token(MAX_SLOTS) else c
                   for c in text)


def unshown(text):
    """The inverse of :func:`shown`: ⟨N⟩ back to slot token N."""
    return re.sub(r"⟨(\d+)⟩", lambda match: slot_token(int(match.group(1))), text)


def found(text, patterns=DEFAULT_PATTERNS):
    return [(f.kind, f.text) for f in find_placeholders(text, patterns)]


# ------------------------------------------------------------------------------------ the pattern set
@pytest.mark.parametrize("text, expected", [
    # printf: conversions, length modifiers, flags, width, precision, positions, %% and the extensions
    ("%s %d %i %u %lu %ld %lld %zu %x %X %o %c %f %p %e %g %n",
     ["%s", "%d", "%i", "%u", "%lu", "%ld", "%lld", "%zu", "%x", "%X", "%o", "%c", "%f", "%p", "%e", "%g", "%n"]),
    ("%.2f %5.1f %-10s %+d %'d %*d %-*.*s %#08lx %hhd %jd %Lf %I64u %Zd",
     ["%.2f", "%5.1f", "%-10s", "%+d", "%'d", "%*d", "%-*.*s", "%#08lx", "%hhd", "%jd", "%Lf", "%I64u", "%Zd"]),
    ("%1$s %2$d %*3$d %.*2$s", ["%1$s", "%2$d", "%*3$d", "%.*2$s"]),
    ("100%% done, %m", ["%%", "%m"]),
    ("%F%P: %pB(%pA): %<PRIu64> bytes at %H:%M", ["%F", "%P", "%pB", "%pA", "%<PRIu64>", "%H", "%M"]),
])
def test_printf_directives_are_placeholders(text, expected):
    assert found(text) == [("printf", directive) for directive in expected]


@pytest.mark.parametrize("text, expected", [
    ("%(name)s has %(count)d files, %(x).2f%%",
     [("python_mapping", "%(name)s"), ("python_mapping", "%(count)d"), ("python_mapping", "%(x).2f"),
      ("printf", "%%")]),
    ("{0} {name} {0:.2f} {name!r} {} {obj.attr} {a[0]} {:>10}",
     [("brace", f) for f in ("{0}", "{name}", "{0:.2f}", "{name!r}", "{}", "{obj.attr}", "{a[0]}", "{:>10}")]),
    ("{0,number,#.##} on {1, date}", [("brace", "{0,number,#.##}"), ("brace", "{1, date}")]),
    ("{{name}} has {{ count }} files", [("brace", "{{name}}"), ("brace", "{{ count }}")]),
    ("You have {count, plural, one {# file} other {# files in {dir}}}.",
     [("brace", "{count, plural, one {# file} other {# files in {dir}}}")]),
    ("${var} and ${HOME:-/root}", [("shell", "${var}"), ("shell", "${HOME:-/root}")]),
    ("<b>bold</b><br/><br /><BR><i>x</i><!-- note --><span weight='bold'>y</span>",
     [("markup", t) for t in ("<b>", "</b>", "<br/>", "<br />", "<BR>", "<i>", "</i>", "<!-- note -->",
                              "<span weight='bold'>", "</span>")]),
    ("&amp; &lt; &#123; &#x1F600; &nbsp;", [("entity", e) for e in ("&amp;", "&lt;", "&#123;", "&#x1F600;", "&nbsp;")]),
])
def test_each_class_recognises_its_placeholders(text, expected):
    assert found(text) == expected


def test_a_tag_holding_placeholders_is_one_placeholder():
    """Leftmost-longest: the tag starts first, so the {url} and %s inside its attribute are not matched."""
    assert found('<a href="{url}">%s</a>') == [("markup", '<a href="{url}">'), ("printf", "%s"), ("markup", "</a>")]
    assert found("<a href='%s' title=\"a > b\">") == [("markup", "<a href='%s' title=\"a > b\">")]
    assert found("${%s}") == [("shell", "${%s}")]


def test_the_longest_match_wins_then_the_first_class():
    assert found("%(name)s") == [("python_mapping", "%(name)s")]
    assert found("%%s") == [("printf", "%%")]  # an escaped percent, then the text "s"
    assert found("%pBx") == [("printf", "%pB")]
    ties = pattern_set([r"%s", r"%s\b"])  # an extra class matching what printf matches: printf comes first
    assert found("%s", ties) == [("printf", "%s")]


@pytest.mark.parametrize("text", [
    "50% done", "99% of the time", "ARG1 % ARG2", "Allow volume above 100%", "(% used)",  # no space flag
    "%CPU", "%MEM", "%REGEXP%[OFFSET]",  # the printf_lookalike guard
    "AT&T syntax", "Audio & Video", "&File", "Re&do", "R&D; next", "a && b",  # no entity without ';'
    "_File", "Save _As…", "snake_case",  # mnemonics are text
    "{ COMMANDS ; }", "{a, b}", "{hex sequences}", "if (x) { y; }", "{{ }}",  # braces in prose
    "a < b and c > d", "<file>", "--compare <name>...", "<Enter>", "x<y>z",  # metavariables, comparisons
    "$PATH", "$1 and $2", ".idata$5",  # only ${...} is a shell placeholder
    "Open the file",
])
def test_text_that_only_looks_like_a_placeholder_stays_text(text):
    assert found(text) == []
    assert mask(text) == Masked(text, ())


def test_the_built_in_patterns_are_regular_languages():
    """No lookaround, no backreference: the in-graph version can run each as an automaton."""
    for pattern_class in BUILTIN_CLASSES:
        assert not re.search(r"\(\?<?[=!]|\\[1-9]", pattern_class.regex.pattern), pattern_class.name
        assert pattern_class.regex.groups == 0, pattern_class.name
    assert DEFAULT_PATTERNS.candidates is not None


def test_extra_patterns_add_classes_after_the_built_in_ones():
    qt = pattern_set([r"%[0-9]+", r"(\[\[)\w+\]\]"])  # a capturing group: searched class by class
    assert qt.candidates is None
    assert found("%1 of %2: %s [[name]]", qt) == [
        ("extra_placeholder_patterns[0]", "%1"), ("extra_placeholder_patterns[0]", "%2"), ("printf", "%s"),
        ("extra_placeholder_patterns[1]", "[[name]]")]
    assert found("%1 of %2") == []
    with pytest.raises(ValueError, match=r"extra_placeholder_patterns\[1\]: 'x\*' matches the empty string"):
        pattern_set([r"%[0-9]+", "x*"])
    with pytest.raises(ValueError, match=r"extra_placeholder_patterns\[0\]: '\[' is not a valid regular expression"):
        pattern_set(["["])


# ------------------------------------------------------------------------------------ masking
@pytest.mark.parametrize("text, masked", [
    ("%s:", "⟨1⟩ :"),
    ("(%s)", "( ⟨1⟩ )"),
    ("<b>bold</b>", "⟨1⟩ bold ⟨2⟩"),
    ("%s%s", "⟨1⟩ ⟨2⟩"),  # one space between two tokens
    ("Copy %s to %s", "Copy ⟨1⟩ to ⟨2⟩"),
    ("'%s'…", "' ⟨1⟩ '…"),
    ("x\u00a0%s\t", "x\u00a0⟨1⟩\t"),  # Unicode white space is a word boundary already
    ("%s\x1c", "⟨1⟩ \x1c"),  # U+001C is not White_Space (str.isspace() says it is)
    ('<a href="{url}">%s</a>', "⟨1⟩ ⟨2⟩ ⟨3⟩"),
])
def test_mask_makes_every_slot_token_a_word(text, masked):
    result = mask(text)
    assert shown(result.text) == masked
    assert restore(result.text, result.placeholders) == text


def test_slots_are_numbered_in_order_and_repeated_placeholders_get_one_each():
    result = mask("%s, %d and %s")
    assert shown(result.text) == "⟨1⟩ , ⟨2⟩ and ⟨3⟩"
    assert result.placeholders == (Placeholder("%s", "printf", False, True), Placeholder("%d", "printf", False, False),
                                   Placeholder("%s", "printf", False, False))


def test_placeholders_beyond_the_last_slot_stay_text():
    text = " ".join(f"%{n}$d" for n in range(1, MAX_SLOTS + 5))
    result = mask(text)
    assert len(result.placeholders) == MAX_SLOTS
    assert shown(result.text).endswith(f"⟨{MAX_SLOTS}⟩ %17$d %18$d %19$d %20$d")
    assert restore(result.text, result.placeholders) == text


def test_text_holding_a_slot_character_is_refused():
    with pytest.raises(ValueError, match=re.escape("U+F0011, a character reserved for placeholder slots, at 2")):
        mask("a " + slot_token(1))


# ------------------------------------------------------------------------------------ restoring
@pytest.mark.parametrize("source, translation, expected", [
    ("%s:", "⟨1⟩ :", "%s:"),  # the source's glue, even where French typography puts a space
    ("File: %s", "Fichier : ⟨1⟩", "Fichier : %s"),  # the translation's own spacing is kept
    ("(%s)", "( ⟨1⟩ )", "(%s)"),
    ("<b>bold</b>", "⟨1⟩ gras ⟨2⟩", "<b>gras</b>"),
    ("%2$s of %1$s", "⟨2⟩ de ⟨1⟩", "%1$s de %2$s"),  # reordered: each slot brings its own text
    ("%s%s", "⟨2⟩ ⟨1⟩", "%s %s"),  # glue is per side: nothing was glued after ⟨2⟩ nor before ⟨1⟩
    ("Copy %s", "Copier ⟨1⟩ ⟨1⟩", "Copier %s %s"),  # a repeated token repeats its text
    ("Copy %s", "Copier ⟨5⟩ vers ⟨1⟩", "Copier vers %s"),  # an unknown slot goes, with one space
    ("Copy %s", "Copier ⟨5⟩", "Copier"),
    ("Copy %s to %s", "Copier ⟨1⟩", "Copier %s"),  # a dropped slot is simply missing (check() says so)
    ("Open", "Ouvrir", "Ouvrir"),
])
def test_restore_puts_the_texts_back_with_the_sources_glue(source, translation, expected):
    assert restore(unshown(translation), mask(source).placeholders) == expected


HAND_WRITTEN = [
    "", " ", "%", "%s", " %s ", "%s%s%s", "a%sb", "50% done", "AT&T", "&File", "_File", "<b>%s</b>:",
    "<a href=\"{url}\">%s</a>", "%2$s %1$s", "{0}{1}", "  %s  :  %d  ", "\n%s\n", "x\u00a0%s\u3000y",
    "%(name)s%%", "&amp;&lt;", "${a}${b}", "{count, plural, one {# file} other {# files}}",
]


@pytest.mark.parametrize("text", HAND_WRITTEN)
def test_restore_undoes_mask(text):
    result = mask(text)
    assert restore(result.text, result.placeholders) == text


def catalog_msgids(directory=LOCALE_DIR):
    """Every English msgid and msgid_plural of the directory's .mo files (contexts dropped), read with
    struct: gettext's reader keeps no msgid_plural."""
    texts = set()
    for path in sorted(glob.glob(os.path.join(directory, "*.mo"))):
        with open(path, "rb") as handle:
            data = handle.read()
        order = "<" if data[:4] == b"\xde\x12\x04\x95" else ">"
        count, originals, translations = struct.unpack(order + "3I", data[8:20])
        length, offset = struct.unpack(order + "2I", data[translations:translations + 8])  # the header
        charset = re.search(rb"charset=([-\w]+)", data[offset:offset + length])
        encoding = charset.group(1).decode() if charset and charset.group(1) != b"CHARSET" else "utf-8"
        for index in range(count):
            length, offset = struct.unpack(order + "2I", data[originals + 8 * index:originals + 8 * index + 8])
            msgid = data[offset:offset + length].decode(encoding, "replace").rpartition("\x04")[2]
            texts.update(part for part in msgid.split("\x00") if part)
    return sorted(texts)


def test_restore_undoes_mask_for_every_catalog_msgid():
    texts = catalog_msgids()
    if not texts:
        pytest.skip(f"no gettext catalogs in {LOCALE_DIR}")
    with_placeholders = 0
    for text in texts:
        result = mask(text)  # raises if a catalog text held a reserved character
        assert restore(result.text, result.placeholders) == text
        with_placeholders += bool(result.placeholders)
    assert with_placeholders > len(texts) // 10  # about 29% on Debian: a broken finder would find few


def test_mask_splits_words_on_the_tokenizers_white_space():
    """The module repeats the tokenizer's WHITESPACE (to import no TensorFlow): read it from its source."""
    with open(TOKENIZER, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    (value,) = [node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
                and any(getattr(target, "id", None) == "WHITESPACE" for target in node.targets)]
    from gnmt_tf.localization.placeholders import WHITESPACE
    assert WHITESPACE == frozenset(ast.literal_eval(value.args[0]))


# ------------------------------------------------------------------------------------ checking
def test_check_reports_missing_extra_and_reordered_placeholders_per_class():
    good = check("Copy %s to <b>%s</b>", "Copier %s vers <b>%s</b>")
    assert good.ok and good.differences == () and good.messages() == []

    broken = check("<b>%s</b> has %d files", "<b>%s a %d %s fichiers")
    assert not broken.ok
    assert broken.messages() == ["printf: extra %s", "markup: missing </b>"]

    swapped = check("%s has %d files", "%d fichiers dans %s")
    assert swapped.ok and swapped.order_breaks  # printf gives %d the string's argument: a crash
    assert swapped.messages() == ["printf: arguments taken in another order"]

    tags = check("<b>%s</b> or <i>%s</i>", "<i>%s</i> ou <b>%s</b>")
    assert tags.ok and not tags.order_breaks and tags.messages() == ["markup: reordered"]

    escaped = check("100%% done", "100% fait")  # a single % is no placeholder: the escaped one is missing
    assert escaped.messages() == ["printf: missing %%"]


@pytest.mark.parametrize("source, translation, messages", [
    ("%1$s has %2$d files", "%2$d fichiers dans %1$s", ["printf: reordered"]),
    ("%s has %d files", "%2$d fichiers dans %1$s", ["printf: reordered"]),  # positions added, as msgfmt allows
    ("%s: %.*s, %m", "%1$s : %m, %3$.*2$s", ["printf: reordered"]),  # %m takes no argument
    ("%1$s has %2$d files", "%2$s a %1$d fichiers", ["printf: arguments taken in another order"]),
    ("%s has %d files", "%1$d a %2$s fichiers", ["printf: arguments taken in another order"]),
    ("%.250s", "%250s", ["printf: missing %.250s", "printf: extra %250s"]),
])
def test_check_compares_printf_directives_as_printf_gives_them_arguments(source, translation, messages):
    assert check(source, translation).messages() == messages


def test_check_counts_placeholders_beyond_the_slots():
    source = " ".join(["%s"] * (MAX_SLOTS + 2))
    assert check(source, " ".join(["%s"] * MAX_SLOTS)).messages() == ["printf: missing %s, %s"]


# ------------------------------------------------------------------------------------ the config section
def test_the_localization_section_is_off_by_default():
    from gnmt_tf.config import GNMTConfig, from_dict, load_config

    assert GNMTConfig().localization.placeholders is False
    assert GNMTConfig().localization.extra_placeholder_patterns == []
    assert load_config("tiny").localization == GNMTConfig().localization  # no shipped config changes
    config = from_dict({"localization": {"placeholders": True, "extra_placeholder_patterns": ["%[0-9]+", "@\\w+@"]}})
    assert config.localization.placeholders is True
    assert found("%1 @name@", pattern_set(config.localization.extra_placeholder_patterns)) == [
        ("extra_placeholder_patterns[0]", "%1"), ("extra_placeholder_patterns[1]", "@name@")]


@pytest.mark.parametrize("section, message", [
    ({"extra_placeholder_patterns": ["%[0-9]+", "(unclosed"]},
     "localization.extra_placeholder_patterns[1]: '(unclosed' is not a valid regular expression: missing ), "
     "unterminated subpattern at position 0"),
    ({"extra_placeholder_patterns": ["[0-9]*"]},
     "localization.extra_placeholder_patterns[0]: '[0-9]*' matches the empty string (in ''); a placeholder "
     "must be at least one character"),
    ({"extra_placeholder_patterns": ["\\b"]},
     "localization.extra_placeholder_patterns[0]: '\\\\b' matches the empty string (in 'x'); a placeholder "
     "must be at least one character"),
    ({"extra_placeholder_patterns": ["%(?=[0-9])[0-9]"]},
     "localization.extra_placeholder_patterns[0]: '%(?=[0-9])[0-9]' uses a lookahead"),
    ({"extra_placeholder_patterns": "%[0-9]+"}, "localization.extra_placeholder_patterns: expected a list"),
    ({"extra_placeholder_patterns": [3]}, "localization.extra_placeholder_patterns[0]: expected a string, got 3"),
    ({"placeholders": "yes"}, "localization.placeholders: expected true or false, got 'yes'"),
    ({"placeholder": True}, "unknown key 'localization.placeholder'; did you mean 'placeholders'?"),
])
def test_the_localization_section_names_the_field_and_the_pattern_it_refuses(section, message):
    from gnmt_tf.config import ConfigError, from_dict

    with pytest.raises(ConfigError) as err:
        from_dict({"localization": section})
    assert str(err.value).startswith(message)


# ------------------------------------------------------------------------------------ training pairs
@pytest.mark.parametrize("source, target, masked_source, masked_target", [
    ("%s of %d", "%d de %s", "⟨1⟩ of ⟨2⟩", "⟨2⟩ de ⟨1⟩"),  # reordered: each takes its counterpart's slot
    ("%s and %s", "%s et %s", "⟨1⟩ and ⟨2⟩", "⟨1⟩ et ⟨2⟩"),  # repeated: in slot order
    ("%s %s", "%2$s %1$s", "⟨1⟩ ⟨2⟩", "⟨1⟩ ⟨2⟩"),  # positions aside, the keys are equal: in slot order
    ("%1$s %2$s", "%2$s %1$s", "⟨1⟩ ⟨2⟩", "⟨2⟩ ⟨1⟩"),  # the very same text first
    ("%s of %d", "%2$d de %1$s", "⟨1⟩ of ⟨2⟩", "⟨2⟩ de ⟨1⟩"),
    ("Copy %s", "Copier %s vers %d", "Copy ⟨1⟩", "Copier ⟨1⟩ vers %d"),  # not in the source: stays text
    ("Copy %s", "%s : copier %s", "Copy ⟨1⟩", "⟨1⟩ : copier %s"),  # more often than in the source
    ("%s", "{0}", "⟨1⟩", "{0}"),  # another class is no counterpart
    ("Copy %s to %s", "Copier %s", "Copy ⟨1⟩ to ⟨2⟩", "Copier ⟨1⟩"),  # not in the target: missing
    ("<b>bold</b> %s", "%s <b>gras</b>", "⟨1⟩ bold ⟨2⟩ ⟨3⟩", "⟨3⟩ ⟨1⟩ gras ⟨2⟩"),
    ('<a href="{url}">here</a>', '<a href="{url}">ici</a>', "⟨1⟩ here ⟨2⟩", "⟨1⟩ ici ⟨2⟩"),
    ("(%s):", "(%s) :", "( ⟨1⟩ ):", "( ⟨1⟩ ) :"),  # each side's own glue
    ("%s%s", "%s%x%s", "⟨1⟩ ⟨2⟩", "⟨1⟩ %x ⟨2⟩"),
    ("%s:%s", "%s%s", "⟨1⟩ : ⟨2⟩", "⟨1⟩ ⟨2⟩"),  # one space between two tokens, as mask puts it
    ("Open", "Ouvrir", "Open", "Ouvrir"),
    ("", "", "", ""),
])
def test_mask_pair_gives_a_target_placeholder_the_slot_of_its_counterpart(source, target, masked_source,
                                                                           masked_target):
    masked = mask_pair(source, target)
    assert (shown(masked[0].text), shown(masked[1].text)) == (masked_source, masked_target)
    assert masked[0] == mask(source)
    assert restore(masked[0].text, masked[0].placeholders) == source
    assert restore(masked[1].text, masked[1].placeholders) == target


def test_the_masked_targets_placeholders_are_its_own_one_per_source_slot():
    _, target = mask_pair("Copy %s to %s:", "Copier (%1$s)")
    assert target.placeholders == (Placeholder("%1$s", "printf", True, True),
                                   Placeholder("%s", "printf", False, True))  # slot 2: the source's


def test_a_pair_holding_a_slot_character_is_refused():
    with pytest.raises(ValueError, match=re.escape("target holds U+F0012, a character reserved")):
        mask_pair("Copy %s", "Copier " + slot_token(2))
    with pytest.raises(ValueError, match=re.escape("text holds U+F0011")):
        mask_pair("Copy " + slot_token(1), "Copier")


def catalog_pairs(directory=LOCALE_DIR):
    """(msgid, msgstr) of the directory's .mo files: each plural form with the msgid_plural, the first
    with the msgid (contexts dropped)."""
    pairs = []
    for path in sorted(glob.glob(os.path.join(directory, "*.mo"))):
        with open(path, "rb") as handle:
            data = handle.read()
        order = "<" if data[:4] == b"\xde\x12\x04\x95" else ">"
        count, originals, translations = struct.unpack(order + "3I", data[8:20])

        def string(table, index):
            length, offset = struct.unpack(order + "2I", data[table + 8 * index:table + 8 * index + 8])
            return data[offset:offset + length]

        charset = re.search(rb"charset=([-\w]+)", string(translations, 0))
        encoding = charset.group(1).decode() if charset and charset.group(1) != b"CHARSET" else "utf-8"
        for index in range(1, count):  # 0 is the header
            sources = string(originals, index).decode(encoding, "replace").rpartition("\x04")[2].split("\x00")
            targets = string(translations, index).decode(encoding, "replace").split("\x00")
            pairs += [(sources[min(form, len(sources) - 1)], target) for form, target in enumerate(targets)]
    return pairs


def test_mask_pair_round_trips_every_catalog_pair_and_slots_keep_their_key():
    """Both sides restore; every slot token of a target stands for a placeholder of the class of the
    source's, and of its key (printf without positions); a target whose placeholders all take the slots
    1, 2, ... in order is masked as mask masks it."""
    pairs = catalog_pairs()
    if not pairs:
        pytest.skip(f"no gettext catalogs in {LOCALE_DIR}")
    with_slots = 0
    for source, target in pairs:
        masked_source, masked_target = mask_pair(source, target)
        assert restore(masked_source.text, masked_source.placeholders) == source
        assert restore(masked_target.text, masked_target.placeholders) == target
        for token in {c for c in masked_target.text if slot_token(1) <= c <= slot_token(MAX_SLOTS)}:
            ours, theirs = (masked.placeholders[ord(token) - ord(slot_token(1))]
                            for masked in (masked_source, masked_target))
            assert ours.kind == theirs.kind
            assert re.sub(r"[0-9]+\$", "", ours.text) == re.sub(r"[0-9]+\$", "", theirs.text)
            assert masked_target.text.count(token) == 1
        alone = mask(target)
        if [c for c in masked_target.text if c >= slot_token(1)] == [c for c in alone.text if c >= slot_token(1)]:
            assert masked_target.text == alone.text
            assert masked_target.placeholders[:len(alone.placeholders)] == alone.placeholders
        with_slots += any(slot_token(1) <= c <= slot_token(MAX_SLOTS) for c in masked_target.text)
    assert with_slots > len(pairs) // 10
