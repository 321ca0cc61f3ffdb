"""gnmt_tf.localization.po_translation: which entries of a catalog are filled, from which strings, with
which flags, and what is left exactly as it was. The translate function here is a stand-in that
marks what it translated (``<text>``); tests/cli/test_translate_po.py translates with a model."""

import shutil
import subprocess

import pytest

from gnmt_tf.localization.po import parse_po
from gnmt_tf.localization.po_translation import fill_catalog, plural_forms_of

pytestmark = pytest.mark.draws_nothing_random  # no TensorFlow here: conftest's reseeding is not needed

HEADER = '''msgid ""
msgstr ""
"Language: xx\\n"
"Content-Type: text/plain; charset=UTF-8\\n"
"Plural-Forms: nplurals=3; plural=(n==1 ? 0 : n<5 ? 1 : 2);\\n"
'''

TRANSLATED = '''
#: a.c:1
msgid "Open"
msgstr "Ouvrir"
'''
FUZZY = '''
#, fuzzy, c-format
msgid "Close %s"
msgstr "Fermer"
'''
UNTRANSLATED = '''
#. the menu entry
#: a.c:2
#, python-format, no-wrap
msgctxt "menu"
msgid "Save %(name)s"
msgstr ""
'''
PLURAL = '''
msgid "One file"
msgid_plural "Many files"
msgstr[0] ""
msgstr[1] ""
'''
OBSOLETE = '''
#~ msgid "Gone"
#~ msgstr ""
'''
CATALOG = HEADER + TRANSLATED + FUZZY + UNTRANSLATED + PLURAL + OBSOLETE


class StandIn:
    """A translate function that records its calls and writes <line> for each line."""

    def __init__(self):
        self.calls = []

    def __call__(self, lines):
        self.calls.append(list(lines))
        return [f"<{line}>" for line in lines]


def fill(text, **options):
    catalog = parse_po(text, "in.po")
    translate = StandIn()
    report = fill_catalog(catalog, translate, **options)
    return catalog, report, translate


def test_empty_msgstrs_are_filled_fuzzy_and_the_rest_is_left_byte_for_byte():
    catalog, report, translate = fill(CATALOG)
    assert translate.calls == [["Save %(name)s", "One file", "Many files"]]  # one call, each line once
    assert (report.filled, report.kept, report.skipped) == (2, 2, 2)
    assert report.summary() == ("catalog: filled 2 entries (marked fuzzy), kept 2 (translated or fuzzy "
                                "already), skipped 2 (header, obsolete)")
    expected_untranslated = '''
#. the menu entry
#: a.c:2
#, fuzzy, python-format, no-wrap
msgctxt "menu"
msgid "Save %(name)s"
msgstr "<Save %(name)s>"
'''
    expected_plural = '''
#, fuzzy
msgid "One file"
msgid_plural "Many files"
msgstr[0] "<One file>"
msgstr[1] "<Many files>"
msgstr[2] "<Many files>"
'''
    # nplurals=3 in the header: msgstr[2] is added, from msgid_plural like msgstr[1]
    expected = HEADER + TRANSLATED + FUZZY + expected_untranslated + expected_plural + OBSOLETE
    assert catalog.to_text() == expected


def test_without_plural_forms_a_plural_entry_gets_two_msgstrs():
    catalog, _, _ = fill('msgid "One file"\nmsgid_plural "Many files"\nmsgstr[0] ""\n')
    assert catalog.entries[0].msgstr_plural == ["<One file>", "<Many files>"]


def test_only_the_empty_forms_of_a_partly_translated_plural_entry_are_filled():
    catalog, report, _ = fill(HEADER + '\nmsgid "a"\nmsgid_plural "as"\n'
                                       'msgstr[0] "un"\nmsgstr[1] ""\nmsgstr[2] "des"\n')
    entry = catalog.entries[1]
    assert entry.msgstr_plural == ["un", "<as>", "des"] and entry.is_fuzzy and report.filled == 1


@pytest.mark.parametrize("retranslate, expected", [
    ("fuzzy", ["Ouvrir", "<Close %s>", "<Save %(name)s>"]),
    ("all", ["<Open>", "<Close %s>", "<Save %(name)s>"]),
])
def test_retranslate_fuzzy_or_all(retranslate, expected):
    catalog, report, _ = fill(CATALOG, retranslate=retranslate)
    assert [entry.msgstr for entry in catalog.entries[1:4]] == expected
    assert all(entry.is_fuzzy for entry in catalog.entries[2:4])
    assert catalog.entries[1].is_fuzzy is (retranslate == "all")
    assert "#, fuzzy, c-format\n" in catalog.to_text()  # the fuzzy entry's flags line, not a second fuzzy
    assert (report.filled, report.kept) == ((3, 1) if retranslate == "fuzzy" else (4, 0))


def test_a_message_is_translated_line_by_line_keeping_its_newlines_and_spaces():
    text = 'msgid ""\n"Usage: demo FILE\\n"\n"\\n"\n"  -h, --help  show help\\n"\nmsgstr ""\n'
    catalog, _, translate = fill(text)
    assert translate.calls == [["Usage: demo FILE", "-h, --help  show help"]]
    assert catalog.entries[0].msgstr == "<Usage: demo FILE>\n\n  <-h, --help  show help>\n"


def test_a_template_header_becomes_a_po_header():
    pot = ('#, fuzzy\nmsgid ""\nmsgstr ""\n"Language: \\n"\n"Content-Type: text/plain; charset=CHARSET\\n"\n'
           '"Plural-Forms: nplurals=INTEGER; plural=EXPRESSION;\\n"\n\nmsgid "a"\nmsgid_plural "as"\n'
           'msgstr[0] ""\nmsgstr[1] ""\n')
    catalog, report, _ = fill(pot, language="fr")
    assert catalog.to_text().startswith('#, fuzzy\nmsgid ""\nmsgstr ""\n"Language: fr\\n"\n'
                                        '"Content-Type: text/plain; charset=UTF-8\\n"\n'
                                        '"Plural-Forms: nplurals=2; plural=(n > 1);\\n"\n\n#, fuzzy\n')
    assert report.header_changes == ("Content-Type", "Language", "Plural-Forms")
    assert catalog.header.msgid == "" and catalog.header.is_fuzzy  # never translated; still to review
    catalog, _, _ = fill(pot)  # no language: gettext's default rule, and Language left empty
    assert catalog.header_field("Plural-Forms") == "nplurals=2; plural=(n != 1);"
    assert catalog.header_field("Language") == ""


def test_plural_forms_of_common_languages():
    assert plural_forms_of("pt-BR") == plural_forms_of("fr") == "nplurals=2; plural=(n > 1);"
    assert plural_forms_of("de_DE") == plural_forms_of("xx") == "nplurals=2; plural=(n != 1);"
    assert plural_forms_of("ja").startswith("nplurals=1;") and plural_forms_of("ru").startswith("nplurals=3;")


def test_an_entry_whose_translations_come_back_empty_is_left_as_it_was():
    catalog = parse_po('msgid "a"\nmsgstr ""\n', "in.po")
    report = fill_catalog(catalog, lambda lines: ["" for _ in lines])
    assert catalog.to_text() == 'msgid "a"\nmsgstr ""\n' and (report.filled, report.empty) == (0, 1)
    assert "left 1 untranslated (empty translations)" in report.summary()


def test_nothing_to_translate_calls_nothing():
    catalog, report, translate = fill(HEADER + TRANSLATED + FUZZY)
    assert translate.calls == [] and (report.filled, report.kept, report.skipped) == (0, 2, 1)


def test_msgfmt_check_accepts_a_filled_template(tmp_path):
    if shutil.which("msgfmt") is None:
        pytest.skip("msgfmt (GNU gettext) is not installed")
    pot = ('#, fuzzy\nmsgid ""\nmsgstr ""\n"Project-Id-Version: demo\\n"\n"Language: \\n"\n'
           '"Content-Type: text/plain; charset=CHARSET\\n"\n'
           '"Plural-Forms: nplurals=INTEGER; plural=EXPRESSION;\\n"\n'
           + FUZZY + UNTRANSLATED.replace("Save %(name)s", "Save %(name)s\\n") + PLURAL)
    catalog, _, _ = fill(pot, language="fr")
    path = tmp_path / "out.po"
    catalog.save(str(path))
    check = ["msgfmt", "--check", "-o", "/dev/null", str(path)]
    result = subprocess.run(check, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    path.write_text(pot, encoding="utf-8")  # the template as it was: msgfmt refuses its header
    assert subprocess.run(check, capture_output=True).returncode != 0
