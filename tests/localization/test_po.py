"""gnmt_tf.localization.po: gettext catalogs read into their fields, written back byte for byte, written
anew as gettext's tools write them, and malformed ones refused at the right line.

The expected texts of the writing tests were checked against ``msgcat`` (GNU gettext 0.21), which
writes the same lines.
"""

import glob
import os
import shutil
import subprocess

import pytest

from gnmt_tf.localization.po import Catalog, Entry, PoError, parse_po, read_po, unescape, wrap_string

pytestmark = pytest.mark.draws_nothing_random  # no TensorFlow here: conftest's reseeding is not needed

EVERY_CONSTRUCT = r'''# French translation of demo.
# Copyright (C) 2024 Someone
#
#, fuzzy
msgid ""
msgstr ""
"Project-Id-Version: demo 1.0\n"
"Language: fr\n"
"Content-Type: text/plain; charset=UTF-8\n"
"Plural-Forms: nplurals=2; plural=(n > 1);\n"

# A translator's comment
#. An extracted comment
#: src/main.c:12 src/main.c:40
#: src/other.c:7
#, c-format, no-wrap
msgid "Open %s"
msgstr "Ouvrir %s"

#, fuzzy
#| msgctxt "old context"
#| msgid "Save"
#| msgid_plural ""
#| "Saves"
msgctxt "menu"
msgid "Save _As"
msgstr ""
"Enregistrer "
"_sous"

msgid "%d file"
msgid_plural "%d files"
msgstr[0] "%d fichier"
msgstr[1] "%d fichiers"

msgid "Tab\there, quote \" backslash \\ bell \a end\n"
msgstr "octal \101\102 hex \x43 utf-8 bytes \303\251"

#~ msgid "Gone"
#~ msgstr "Parti"

#, fuzzy
#~| msgid "Older"
#~ msgid "Old"
#~ msgstr "Vieux"
'''


@pytest.fixture(scope="module")
def catalog():
    return parse_po(EVERY_CONSTRUCT, "demo.po")


def test_every_construct_is_read_into_its_fields(catalog):
    header, message, fuzzy, plural, escapes, gone, old = catalog.entries
    assert header.is_header and header.flags == ["fuzzy"] and header.line == 1
    assert header.translator_comments == ["French translation of demo.", "Copyright (C) 2024 Someone", ""]
    assert catalog.header_field("Language") == "fr" and catalog.nplurals == 2 and catalog.charset == "UTF-8"
    assert (message.msgid, message.msgstr, message.line) == ("Open %s", "Ouvrir %s", 12)
    assert message.translator_comments == ["A translator's comment"]
    assert message.extracted_comments == ["An extracted comment"]
    assert message.references == ["src/main.c:12", "src/main.c:40", "src/other.c:7"]
    assert message.flags == ["c-format", "no-wrap"] and not message.is_fuzzy
    assert fuzzy.is_fuzzy and fuzzy.msgctxt == "menu" and fuzzy.msgid == "Save _As"
    assert fuzzy.msgstr == "Enregistrer _sous"  # continuation lines joined
    assert (fuzzy.previous_msgctxt, fuzzy.previous_msgid, fuzzy.previous_msgid_plural) == (
        "old context", "Save", "Saves")
    assert plural.is_plural and (plural.msgid, plural.msgid_plural) == ("%d file", "%d files")
    assert plural.msgstr_plural == ["%d fichier", "%d fichiers"] and plural.msgstr == ""
    assert escapes.msgid == 'Tab\there, quote " backslash \\ bell \a end\n'
    assert escapes.msgstr == "octal AB hex C utf-8 bytes \u00e9"  # escaped bytes decoded as UTF-8
    assert gone.obsolete and (gone.msgid, gone.msgstr) == ("Gone", "Parti")
    assert old.obsolete and old.is_fuzzy and old.previous_msgid == "Older" and old.msgstr == "Vieux"
    assert [entry.msgid for entry in catalog.messages()] == ["Open %s", "Save _As", "%d file",
                                                             escapes.msgid]


def test_a_catalog_read_and_written_unchanged_is_the_same_text(catalog):
    assert catalog.to_text() == EVERY_CONSTRUCT
    assert read_po_bytes(EVERY_CONSTRUCT.encode("utf-8")).to_bytes() == EVERY_CONSTRUCT.encode("utf-8")


def read_po_bytes(data, path="demo.po"):
    return parse_po(data, path)


def test_a_changed_part_is_rewritten_and_the_others_keep_their_lines():
    catalog = parse_po(EVERY_CONSTRUCT, "demo.po")
    message, fuzzy, plural = catalog.entries[1:4]
    message.mark_fuzzy()
    fuzzy.msgstr = "Enregistrer _sous…"
    plural.msgstr_plural[1] = "%d fichiers supprimés"
    expected = (EVERY_CONSTRUCT
                .replace("#, c-format, no-wrap\n", "#, fuzzy, c-format, no-wrap\n")
                .replace('msgstr ""\n"Enregistrer "\n"_sous"\n', 'msgstr "Enregistrer _sous…"\n')
                .replace('msgstr[1] "%d fichiers"\n', 'msgstr[1] "%d fichiers supprimés"\n'))
    assert catalog.to_text() == expected


def test_a_new_flag_goes_where_gettext_writes_flags():
    catalog = parse_po('#. note\n#: a.c:1\nmsgctxt "c"\nmsgid "a"\nmsgstr ""\n', "x.po")
    entry = catalog.entries[0]
    entry.flags.append("python-format")
    entry.mark_fuzzy()
    assert catalog.to_text() == ('#. note\n#: a.c:1\n#, fuzzy, python-format\n'
                                 'msgctxt "c"\nmsgid "a"\nmsgstr ""\n')


NOT_WRAPPED = "A message of more than seventy-nine characters that no-wrap keeps on its one line."
LONG = ("The file could not be saved because the disk is full; free some space on the disk and try again, or "
        "save it elsewhere.")


def test_entries_built_in_python_are_written_as_gettext_writes_them():
    header = Entry(msgstr="Project-Id-Version: demo 1.0\nContent-Type: text/plain; charset=UTF-8\n"
                          "Plural-Forms: nplurals=2; plural=(n > 1);\n")
    entries = [
        header,
        Entry(msgid=LONG, msgstr="Le disque est plein ; libérez de l'espace « maintenant » et réessayez, "
                                 "ou enregistrez ailleurs.",
              references=[f"src/some/rather/long/path/file_{i}.c:{100 * i}" for i in (1, 2)] + ["a.c:1"],
              extracted_comments=["Translators: keep it short"], translator_comments=["A note", ""],
              flags=["c-format"]),
        Entry(msgid='Usage: demo [OPTION]... FILE\n\t-h, --help\tshow "this" help\n  -v  print C:\\path\n'),
        Entry(msgid=NOT_WRAPPED, msgctxt="a context", flags=["no-wrap"]),
        Entry(msgid="%d file was removed from the archive that you opened a moment ago in the other window",
              msgid_plural="%d files were removed from the archive", msgstr_plural=["", ""]),
        Entry(msgid="See https://www.example.org/documentation/manual/chapter-seven/section-three.html now"),
        Entry(msgid="x" * 100, msgstr="short"),
        Entry(msgid="Bell\a end", msgstr="Cloche\a fin", previous_msgid="previous " + LONG, flags=["fuzzy"]),
        Entry(msgid="Old " + LONG, msgstr="Ancien", obsolete=True, previous_msgid="older"),
    ]
    assert Catalog(entries=entries).to_text() == r'''msgid ""
msgstr ""
"Project-Id-Version: demo 1.0\n"
"Content-Type: text/plain; charset=UTF-8\n"
"Plural-Forms: nplurals=2; plural=(n > 1);\n"

# A note
#
#. Translators: keep it short
#: src/some/rather/long/path/file_1.c:100
#: src/some/rather/long/path/file_2.c:200 a.c:1
#, c-format
msgid ""
"The file could not be saved because the disk is full; free some space on the "
"disk and try again, or save it elsewhere."
msgstr ""
"Le disque est plein ; libérez de l'espace « maintenant » et réessayez, ou "
"enregistrez ailleurs."

msgid ""
"Usage: demo [OPTION]... FILE\n"
"\t-h, --help\tshow \"this\" help\n"
"  -v  print C:\\path\n"
msgstr ""

#, no-wrap
msgctxt "a context"
msgid "A message of more than seventy-nine characters that no-wrap keeps on its one line."
msgstr ""

msgid ""
"%d file was removed from the archive that you opened a moment ago in the "
"other window"
msgid_plural "%d files were removed from the archive"
msgstr[0] ""
msgstr[1] ""

msgid ""
"See https://www.example.org/documentation/manual/chapter-seven/section-three."
"html now"
msgstr ""

msgid "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
msgstr "short"

#, fuzzy
#| msgid ""
#| "previous The file could not be saved because the disk is full; free some "
#| "space on the disk and try again, or save it elsewhere."
msgid "Bell\a end"
msgstr "Cloche\a fin"

#~| msgid "older"
#~ msgid ""
#~ "Old The file could not be saved because the disk is full; free some space "
#~ "on the disk and try again, or save it elsewhere."
#~ msgstr "Ancien"
'''


@pytest.mark.parametrize("value, lines", [
    ("", ['msgstr ""']),
    ("a\n", [r'msgstr "a\n"']),
    ("a\nb", ['msgstr ""', r'"a\n"', '"b"']),
    ("\n\n", ['msgstr ""', r'"\n"', r'"\n"']),
    # after `msgstr "`, 70 characters fit in 79 columns with the closing quote; 71 start on the next line
    ("a" * 35 + " " + "b" * 34, ['msgstr "' + "a" * 35 + " " + "b" * 34 + '"']),
    ("a" * 35 + " " + "b" * 35, ['msgstr ""', '"' + "a" * 35 + " " + "b" * 35 + '"']),
    # no break inside an escape, nor right before the final \n
    ("w " * 38 + "\n", ['msgstr ""', '"' + "w " * 37 + '"', r'"w \n"']),
    # no break before French punctuation after its space (" :"), nor before or after "(" in "x( abc"
    ("word " * 13 + "abcddddddd : next", ['msgstr ""', '"' + "word " * 13 + '"', '"abcddddddd : next"']),
    ("word " * 13 + "xxxxx( abc ) next", ['msgstr ""', '"' + "word " * 13 + '"', '"xxxxx( abc ) next"']),
])
def test_wrap_string_breaks_where_gettext_does(value, lines):
    assert wrap_string("msgstr", value) == lines


def test_escapes_that_gettext_reads():
    assert unescape(r'\n\t\b\r\f\v\a\\\"') == '\n\t\b\r\f\v\a\\"'
    assert unescape(r"\101\x42\0") == "AB\x00"
    assert unescape(r"caf\303\251") == "caf\u00e9"
    assert unescape(r"caf\351", charset="ISO-8859-1") == "caf\u00e9"


@pytest.mark.parametrize("text, line, message", [
    ('msgid "a"\nmsgstr "b\n', 2, "unterminated string"),
    ('msgid "a"\nmsgstr "b"\n"c\n', 3, "unterminated string"),
    ('msgstr "b"\nmsgid "a"\n', 1, "msgstr before any msgid"),
    ('msgctxt "c"\nmsgstr "b"\n', 2, "msgstr before any msgid"),
    ('msgid "a"\nmsgstring "b"\n', 2, "unknown keyword 'msgstring'"),
    ('msgid "a"\nmsgstr "b\\q"\n', 2, "invalid escape sequence '\\\\q'"),
    ('msgid "a"\nmsgstr "b\\777"\n', 2, "more than a byte"),
    ('msgid "a"\nmsgstr "\\377"\n', 2, "are not UTF-8 text"),
    ('msgid "a"\n\nmsgid "b"\nmsgstr ""\n', 1, "msgid without msgstr: a msgid (line 3) follows it"),
    ('# c\nmsgid "a"\n# d\nmsgstr ""\n', 2, "msgid without msgstr: a comment (line 3) follows it"),
    ('msgid "a"\nmsgstr ""\n\nmsgid "b"\n', 4, "msgid without msgstr: the end of the file follows it"),
    ('msgid "a"\nmsgid_plural "as"\n', 2, "msgid_plural without msgstr: the end of the file"),
    ('msgid "a"\nmsgid_plural "as"\nmsgstr "x"\n', 3, "needs msgstr[0], msgstr[1], ...; found msgstr"),
    ('msgid "a"\nmsgid_plural "as"\nmsgstr[1] "x"\n', 3, "expected msgstr[0], found msgstr[1]"),
    ('msgid "a"\nmsgstr[0] "x"\n', 2, "msgstr[0] in an entry without msgid_plural"),
    ('msgid "a"\nmsgstr "x"\nmsgstr "y"\n', 3, "a second msgstr"),
    ('msgid "a" junk\nmsgstr ""\n', 1, "unexpected 'junk'"),
    ('"a"\nmsgid "a"\nmsgstr ""\n', 1, "a string with no keyword"),
    ('msgid\nmsgstr ""\n', 1, "needs a quoted string"),
    ('msgid "a"\n#~ msgstr "b"\n', 2, "an obsolete (#~) line inside a current entry"),
    ('#| msgstr "a"\nmsgid "a"\nmsgstr ""\n', 1, "#| lines hold msgctxt, msgid or msgid_plural"),
    ('msgid "a"\nmsgstr ""\nmsgid_plural "as"\n', 3, "msgid_plural must come right after its msgid"),
])
def test_a_malformed_catalog_is_refused_naming_the_file_and_line(text, line, message):
    with pytest.raises(PoError) as caught:
        parse_po(text.encode("utf-8"), "broken.po")
    assert caught.value.line == line and message in str(caught.value)
    assert str(caught.value).startswith(f"broken.po:{line}: ")


def test_bytes_that_are_not_the_declared_charset_are_refused_at_their_line(tmp_path):
    path = tmp_path / "latin.po"
    path.write_bytes(b'msgid ""\nmsgstr "Content-Type: text/plain; charset=UTF-8\\n"\n\n'
                     b'msgid "a"\nmsgstr "\xe9"\n')
    with pytest.raises(PoError, match=rf"^{path}:5: not valid UTF-8 .* byte 0xe9$"):
        read_po(str(path))
    path.write_bytes(b'msgid ""\nmsgstr "Content-Type: text/plain; charset=NOPE\\n"\n')
    with pytest.raises(PoError, match=r":2: unknown charset 'NOPE'"):
        read_po(str(path))


def test_the_header_charset_byte_order_mark_and_crlf_line_ends_are_kept():
    latin = ('msgid ""\r\nmsgstr "Content-Type: text/plain; charset=ISO-8859-1\\n"\r\n'
             '\r\nmsgid "a"\r\nmsgstr "\xe9"\r\n')
    catalog = parse_po(latin.encode("latin-1"), "latin.po")
    assert catalog.entries[1].msgstr == "\xe9" and catalog.charset == "ISO-8859-1"
    catalog.entries[1].msgstr = "\xe8"
    catalog.entries.append(Entry(msgid="b", msgstr="\xe0"))
    written = latin.replace('"\xe9"', '"\xe8"') + '\r\nmsgid "b"\r\nmsgstr "\xe0"\r\n'
    assert catalog.to_bytes() == written.encode("latin-1")
    catalog.entries[1].msgstr = "\u20ac"  # not in ISO-8859-1: writing refuses, naming the charset
    with pytest.raises(PoError, match="charset ISO-8859-1 of the header cannot hold"):
        catalog.to_bytes()
    with_bom = "\ufeffmsgid \"a\"\nmsgstr \"\u00e9\"\n".encode("utf-8")
    assert parse_po(with_bom, "bom.po").to_bytes() == with_bom


def test_header_fields_are_set_in_place_or_added():
    catalog = parse_po('msgid ""\nmsgstr ""\n"Language: \\n"\n'
                       '"Plural-Forms: nplurals=INTEGER; plural=EXPRESSION;\\n"\n')
    assert catalog.nplurals is None and catalog.header_field("Language") == ""
    catalog.set_header_field("Language", "fr")
    catalog.set_header_field("Plural-Forms", "nplurals=2; plural=(n > 1);")
    catalog.set_header_field("X-Generator", "gnmt_tf")
    assert catalog.nplurals == 2
    assert catalog.to_text() == ('msgid ""\nmsgstr ""\n"Language: fr\\n"\n'
                                 '"Plural-Forms: nplurals=2; plural=(n > 1);\\n"\n'
                                 '"X-Generator: gnmt_tf\\n"\n')


def test_save_replaces_the_file_whole_or_leaves_it_as_it_was(tmp_path, monkeypatch):
    path = tmp_path / "out.po"
    path.write_text("old\n", encoding="utf-8")
    catalog = parse_po('msgid "a"\nmsgstr "b"\n', "in.po")

    def failing_replace(source, target):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        catalog.save(str(path))
    assert path.read_text(encoding="utf-8") == "old\n" and os.listdir(tmp_path) == ["out.po"]
    monkeypatch.undo()
    catalog.save(str(path))
    assert path.read_text(encoding="utf-8") == 'msgid "a"\nmsgstr "b"\n'
    assert os.listdir(tmp_path) == ["out.po"]
    assert (path.stat().st_mode & 0o777) == 0o666 & ~current_umask()


def current_umask():
    umask = os.umask(0)
    os.umask(umask)
    return umask


# ------------------------------------------------------------------------------------------ real catalogs
FRENCH_CATALOGS = "/usr/share/locale/fr/LC_MESSAGES"
REAL_CATALOGS = 12  # the smallest of more than 2.5 kB (a dozen messages or more): a second, not minutes


def real_catalogs(directory):
    """PO files that msgunfmt makes of this machine's compiled French catalogs, small ones."""
    if shutil.which("msgunfmt") is None:
        pytest.skip("msgunfmt (GNU gettext) is not installed: no real catalogs to convert to PO")
    compiled = sorted(glob.glob(os.path.join(FRENCH_CATALOGS, "*.mo")),
                      key=lambda path: (os.path.getsize(path), path))
    chosen = [path for path in compiled if os.path.getsize(path) > 2500][:REAL_CATALOGS]
    if not chosen:
        pytest.skip(f"no compiled catalogs in {FRENCH_CATALOGS}")
    paths = []
    for mo in chosen:
        po = os.path.join(directory, os.path.basename(mo)[:-3] + ".po")
        subprocess.run(["msgunfmt", mo, "-o", po], check=True, capture_output=True)
        paths.append(po)
    return paths


def test_real_catalogs_round_trip_byte_for_byte_and_reflow_as_gettext_wrote_them(tmp_path):
    paths = real_catalogs(tmp_path)
    for path in paths:
        with open(path, "rb") as handle:
            original = handle.read()
        catalog = read_po(path)
        assert len(catalog.messages()) >= 10, path
        assert catalog.to_bytes() == original, path  # the lines as read
        assert catalog.to_bytes(reflow=True) == original, path  # every line written anew, as gettext does
