"""python -m gnmt_tf.translate --po: a gettext catalog in, the same catalog out with its empty msgstrs
translated by the model and marked fuzzy.

The catalog's messages are probe sentences of the fixture model (English digit words, which it
translates exactly into French ones: tests/number_model.py), so the expected catalog is written out
here in full, byte for byte.
"""

import shutil
import subprocess
import sys

import pytest
from helpers import ENGLISH_NUMBERS, FRENCH_NUMBERS, run_in_process

pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test

TEMPLATE_HEADER = r'''# Numbers.
#, fuzzy
msgid ""
msgstr ""
"Project-Id-Version: numbers 1.0\n"
"Language: \n"
"Content-Type: text/plain; charset=CHARSET\n"
"Plural-Forms: nplurals=INTEGER; plural=EXPRESSION;\n"
'''
HEADER = r'''# Numbers.
#, fuzzy
msgid ""
msgstr ""
"Project-Id-Version: numbers 1.0\n"
"Language: fr\n"
"Content-Type: text/plain; charset=UTF-8\n"
"Plural-Forms: nplurals=2; plural=(n > 1);\n"
'''
KEPT = r'''
#. Translated already: left as it is.
msgid "seven six"
msgstr "sept six"

#, fuzzy
msgid "two"
msgstr "deux ?"
'''
OBSOLETE = r'''
#~ msgid "zero"
#~ msgstr "zéro"
'''
UNTRANSLATED = r'''
#: src/main.c:12
#, python-format
msgid "three one four"
msgstr ""

msgctxt "menu"
msgid "nine"
msgstr ""

msgid "one"
msgid_plural "two five eight"
msgstr[0] ""
msgstr[1] ""

msgid ""
"eight six\n"
"  nine eight\n"
msgstr ""
'''
TRANSLATED = r'''
#: src/main.c:12
#, fuzzy, python-format
msgid "three one four"
msgstr "trois un quatre"

#, fuzzy
msgctxt "menu"
msgid "nine"
msgstr "neuf"

#, fuzzy
msgid "one"
msgid_plural "two five eight"
msgstr[0] "un"
msgstr[1] "deux cinq huit"

#, fuzzy
msgid ""
"eight six\n"
"  nine eight\n"
msgstr ""
"huit six\n"
"  neuf huit\n"
'''


def translate_po(model_dir, *args):
    return run_in_process([sys.executable, "-m", "gnmt_tf.translate", "--model-dir", model_dir, *args])


@pytest.fixture(scope="module")
def template_run(trained_number_model, tmp_path_factory):
    """The command on a .pot: (result, path of the output catalog)."""
    model_dir, _ = trained_number_model
    directory = tmp_path_factory.mktemp("translate_po")
    (directory / "numbers.pot").write_text(TEMPLATE_HEADER + KEPT + UNTRANSLATED + OBSOLETE, encoding="utf-8")
    output = directory / "fr.po"
    result = translate_po(model_dir, "--po", str(directory / "numbers.pot"), "--po-language", "fr",
                          "--output", str(output))
    assert result.returncode == 0, result.stderr[-3000:]
    return result, output


def test_the_empty_msgstrs_are_translated_and_marked_fuzzy_the_rest_is_left_as_it_was(template_run):
    result, output = template_run
    # The header made a PO header (Language and French plural forms from --po-language, charset UTF-8),
    # still fuzzy and untranslated; the translated and fuzzy entries byte for byte; flags, references,
    # contexts, line structure and the obsolete entry kept.
    assert output.read_text(encoding="utf-8") == HEADER + KEPT + TRANSLATED + OBSOLETE
    assert result.stdout == ""
    assert result.stderr.splitlines()[-1] == (
        "catalog: filled 4 entries (marked fuzzy), kept 2 (translated or fuzzy already), skipped 2 (header, "
        "obsolete), header: set Content-Type, Language, Plural-Forms")
    assert "translated 6 lines of 6" in result.stderr  # each distinct line once, in one call


def test_msgfmt_check_accepts_the_translated_catalog(template_run):
    if shutil.which("msgfmt") is None:
        pytest.skip("msgfmt (GNU gettext) is not installed")
    _, output = template_run
    check = subprocess.run(["msgfmt", "--check", "-o", "/dev/null", str(output)], capture_output=True,
                           text=True)
    assert check.returncode == 0, check.stderr


class WordForWord:
    """A stand-in for the model's translator, for what the command does around it: the number task's
    reference translation, word for word, of each line it is given; it records its batches."""

    max_input_length = 250

    def __init__(self):
        self.batches = []

    def translate(self, lines, **options):
        from gnmt_tf.inference.results import Translation

        self.batches.append(list(lines))
        return [Translation(" ".join(FRENCH_NUMBERS[ENGLISH_NUMBERS.index(word)] for word in line.split()))
                for line in lines]


def test_retranslate_fuzzy_translates_the_fuzzy_entries_again_to_stdout(template_run, monkeypatch):
    from gnmt_tf.cli import common

    _, translated = template_run
    stand_in = WordForWord()
    monkeypatch.setattr(common, "load_translator", lambda args: (stand_in, None, None))
    result = translate_po("runs/en-fr", "--po", str(translated), "--po-retranslate", "fuzzy",
                          "--chunk-size", "4")
    assert result.returncode == 0, result.stderr[-3000:]
    # every fuzzy entry again ("deux ?" too), the header never; "seven six" is not fuzzy: kept
    assert result.stdout == HEADER + KEPT.replace('"deux ?"', '"deux"') + TRANSLATED + OBSOLETE
    assert "filled 5 entries (marked fuzzy), kept 1 " in result.stderr.splitlines()[-1]
    assert [len(batch) for batch in stand_in.batches] == [4, 3]  # 7 distinct lines, --chunk-size at a time
    assert "translated 4 lines of 7" in result.stderr and "translated 7 lines of 7" in result.stderr


@pytest.mark.parametrize("catalog, line, message", [
    ('msgid "one"\nmsgstr "un"\n\nmsgid "two"\nmsgstr "deux\n', 5, "unterminated string"),
    ('msgid "one"\nmsgstr "un"\nmsgstr "deux"\n', 3, "a second msgstr"),
])
def test_a_malformed_catalog_is_one_error_line_naming_file_and_line(catalog, line, message, tmp_path):
    path, output = tmp_path / "broken.po", tmp_path / "out.po"
    path.write_text(catalog, encoding="utf-8")
    # no such model directory: the catalog is read first, and its error is the one told
    result = translate_po(str(tmp_path / "no-model"), "--po", str(path), "--output", str(output))
    assert result.returncode == 2
    [error] = result.stderr.splitlines()
    assert error.startswith(f"error: {path}:{line}: ") and message in error
    assert not output.exists() and result.stdout == ""


@pytest.mark.parametrize("args, message", [
    (["--po", "in.po", "--input", "in.txt"], "give --po or --input, not both"),
    (["--po", "in.po", "--n-best", "2"], "--n-best and --plot-attention are for lines"),
    (["--po-retranslate", "all"], "--po-retranslate and --po-language need --po"),
])
def test_options_that_do_not_go_with_po_are_usage_errors(args, message):
    result = translate_po("runs/none", *args)
    assert result.returncode == 2 and message in result.stderr
