"""gettext PO and POT catalogs: read them, change them, write them back as gettext would.

Standard library only. :func:`read_po` (or :func:`parse_po`) gives a :class:`Catalog`: its
:class:`Entry` list in file order (the header, messages and obsolete ``#~`` entries), each with its
translator comments (``# ``), extracted comments (``#.``), references (``#:``), flags
(``#, fuzzy, c-format``), previous strings (``#|``), ``msgctxt``, ``msgid``, ``msgid_plural`` and
``msgstr`` or ``msgstr[N]``. Strings are the text they stand for: continuation lines joined, C
escapes (``\\n \\t \\" \\\\ \\a \\b \\f \\r \\v``, octal and ``\\x`` hex) resolved.

A malformed file raises :class:`PoError` naming the file and the line: an unterminated string, an
unknown keyword, a bad escape, a ``msgstr`` before its ``msgid``, an entry without ``msgstr``, ...

Writing (:meth:`Catalog.to_text`, :meth:`Catalog.save`) keeps what was read as it was read: a part
of an entry (its comments, flags, or one string) whose value did not change is written with its
original lines, so that a catalog read and written unchanged is the same file, byte for byte. A
part that changed, or an entry built in Python, is written as gettext's own tools write it
(``msgcat``, ``msgmerge``): strings wrapped at 79 columns where the Unicode line breaking rules
allow it, a string with newlines split after each ``\\n`` below an empty first line, flags as
``#, a, b``. ``reflow=True`` writes every entry that way, ignoring the original lines.

The encoding is the header's ``Content-Type: ...; charset=``, UTF-8 when it is missing or still the
template's ``CHARSET``; a UTF-8 byte-order mark and CRLF line ends are kept.
"""

from __future__ import annotations

import codecs
import os
import re
import tempfile
import unicodedata
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

PAGE_WIDTH = 79  # gettext's default --width
FUZZY = "fuzzy"
NO_WRAP = "no-wrap"
DEFAULT_CHARSET = "UTF-8"
TEMPLATE_CHARSET = "CHARSET"  # what xgettext writes into a .pot's Content-Type
BOM = "\ufeff"


class PoError(ValueError):
    """A catalog that cannot be read or written; says which file and, when it is known, which line."""

    def __init__(self, path: str, line: int, message: str):
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")
        self.path, self.line, self.message = path, line, message


# ------------------------------------------------------------------------------------------ the model
@dataclass
class Entry:
    """One entry of a catalog: a message (or the header, msgid ""), current or obsolete."""

    msgid: str = ""
    msgstr: str = ""  # a plural entry's translations are msgstr_plural
    msgid_plural: Optional[str] = None
    msgstr_plural: List[str] = field(default_factory=list)  # msgstr[0], msgstr[1], ...
    msgctxt: Optional[str] = None
    translator_comments: List[str] = field(default_factory=list)  # "# text": "text"
    extracted_comments: List[str] = field(default_factory=list)  # "#. text": "text"
    references: List[str] = field(default_factory=list)  # "#: a.c:1 b.c:2": ["a.c:1", "b.c:2"]
    flags: List[str] = field(default_factory=list)  # "#, fuzzy, c-format": ["fuzzy", "c-format"]
    previous_msgctxt: Optional[str] = None  # "#| msgctxt ..."
    previous_msgid: Optional[str] = None  # "#| msgid ..."
    previous_msgid_plural: Optional[str] = None  # "#| msgid_plural ..."
    obsolete: bool = False  # a "#~" entry
    line: int = 0  # the line of the file it starts on (its first comment or keyword); 0 if built in Python
    # How it was written in the file, to write unchanged parts back as they were (None: built in Python).
    layout: Optional["_Layout"] = field(default=None, repr=False, compare=False)

    @property
    def is_header(self) -> bool:
        return self.msgid == "" and self.msgctxt is None and not self.obsolete

    @property
    def is_plural(self) -> bool:
        return self.msgid_plural is not None

    @property
    def is_fuzzy(self) -> bool:
        return FUZZY in self.flags

    def mark_fuzzy(self) -> None:
        """Add the fuzzy flag (first, where gettext writes it), keeping the other flags."""
        if not self.is_fuzzy:
            self.flags.insert(0, FUZZY)

    @property
    def translations(self) -> List[str]:
        """Its msgstr, or its msgstr[N] in order."""
        return list(self.msgstr_plural) if self.is_plural else [self.msgstr]


@dataclass
class _Layout:
    """An entry's lines as read: (part, raw lines with their line ends) blocks in file order, and the value
    of each part when it was read. Part names: see :func:`_part_values`; BLANK is a line of no part."""

    blocks: List[Tuple[str, List[str]]]
    snapshot: Dict[str, object]


BLANK = "blank"


@dataclass
class Catalog:
    """A PO or POT file's entries in file order, with what writing it back needs."""

    entries: List[Entry] = field(default_factory=list)
    path: str = "<catalog>"
    trailing_lines: List[str] = field(default_factory=list)  # raw lines after the last entry
    newline: str = "\n"  # for the lines written anew: "\r\n" when the file's first line ends so
    byte_order_mark: bool = False

    @property
    def header(self) -> Optional[Entry]:
        return next((entry for entry in self.entries if entry.is_header), None)

    def messages(self) -> List[Entry]:
        """The current entries other than the header: what a translator translates."""
        return [entry for entry in self.entries if not entry.obsolete and not entry.is_header]

    def header_field(self, name: str) -> Optional[str]:
        """The value of a header line ``Name: value`` (None: no header, or no such line)."""
        header = self.header
        return header_fields(header.msgstr).get(name) if header else None

    def set_header_field(self, name: str, value: str) -> None:
        """Set a header line's value in place, or add the line at the end; adds a header if there is none."""
        header = self.header
        if header is None:
            header = Entry()
            self.entries.insert(0, header)
        header.msgstr = with_header_field(header.msgstr, name, value)

    @property
    def charset(self) -> str:
        """The encoding the header names (UTF-8 when it names none, or the template's CHARSET)."""
        content_type = self.header_field("Content-Type") or ""
        match = re.search(r"charset=([^\s;]+)", content_type)
        return match.group(1) if match and match.group(1) != TEMPLATE_CHARSET else DEFAULT_CHARSET

    @property
    def nplurals(self) -> Optional[int]:
        """The header's ``Plural-Forms: nplurals=N``: how many msgstr[N] a plural entry has (None: unsaid)."""
        match = re.search(r"nplurals\s*=\s*(\d+)", self.header_field("Plural-Forms") or "")
        return int(match.group(1)) if match else None

    def to_text(self, reflow: bool = False) -> str:
        """The catalog as PO text; ``reflow``: every entry as gettext writes it, ignoring the lines read."""
        pieces: List[str] = [BOM] if self.byte_order_mark else []
        for index, entry in enumerate(self.entries):
            if index and (reflow or entry.layout is None):
                pieces.append(self.newline)  # gettext's blank line between entries
            pieces.extend(_entry_lines(entry, self.newline, reflow))
        if not reflow:
            pieces.extend(self.trailing_lines)
        return "".join(pieces)

    def to_bytes(self, reflow: bool = False) -> bytes:
        text, charset = self.to_text(reflow), self.charset
        try:
            return text.encode(_codec_name(charset, self.path, 0))
        except UnicodeEncodeError as error:
            character = error.object[error.start]
            raise PoError(self.path, 0, f"charset {charset} of the header cannot hold {character!r}; "
                                        "make it charset=UTF-8") from None

    def save(self, path: str, reflow: bool = False) -> None:
        """Write the catalog to ``path`` atomically: a temporary file beside it, renamed once whole."""
        write_atomically(path, self.to_bytes(reflow))


def header_fields(header_text: str) -> Dict[str, str]:
    """The ``Name: value`` lines of a header's msgstr, by name."""
    fields = {}
    for line in header_text.split("\n"):
        name, colon, value = line.partition(":")
        if colon and name.strip():
            fields[name.strip()] = value.strip()
    return fields


def with_header_field(header_text: str, name: str, value: str) -> str:
    """``header_text`` with the line of ``name`` set to ``value`` (added at the end if missing)."""
    lines = header_text.split("\n")
    for index, line in enumerate(lines):
        if line.partition(":")[0].strip() == name:
            lines[index] = f"{name}: {value}"
            return "\n".join(lines)
    if header_text and not header_text.endswith("\n"):
        header_text += "\n"
    return f"{header_text}{name}: {value}\n"


def write_atomically(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a failure leaves the old file (or none), never half a new one."""
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        # mkstemp makes the file private (0600): give it the mode a plain open() would
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


# ------------------------------------------------------------------------------------------ reading
def read_po(path: str) -> Catalog:
    """The catalog of the PO or POT file ``path``; :class:`PoError` if it is malformed."""
    with open(path, "rb") as handle:
        return parse_po(handle.read(), path)


def parse_po(data, path: str = "<catalog>") -> Catalog:
    """The catalog of PO text (``str``) or of a PO file's bytes (decoded in the header's charset)."""
    catalog = Catalog(path=path)
    charset = DEFAULT_CHARSET
    if isinstance(data, bytes):
        text, charset = _decode(data, path)
    else:
        text = data
    if text.startswith(BOM):
        catalog.byte_order_mark, text = True, text[1:]
    lines = re.findall(r"[^\n]*\n|[^\n]+$", text)
    if lines and lines[0].endswith("\r\n"):
        catalog.newline = "\r\n"
    parser = _Parser(path, charset)
    for number, raw in enumerate(lines, 1):
        parser.feed(number, raw)
    catalog.entries, catalog.trailing_lines = parser.finish()
    return catalog


def _decode(data: bytes, path: str) -> Tuple[str, str]:
    """(the text of a PO file's bytes, the charset): the header's (a UTF-8 byte-order mark wins)."""
    if data.startswith(codecs.BOM_UTF8):
        charset, header_line = DEFAULT_CHARSET, 1
    else:
        charset, header_line = _declared_charset(data)
    try:
        return data.decode(_codec_name(charset, path, header_line)), charset
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise PoError(path, line, f"not valid {charset} (the header's charset): byte "
                                  f"0x{data[error.start]:02x}") from None


def _declared_charset(data: bytes) -> Tuple[str, int]:
    """(the charset the header entry's Content-Type names, its line): the first msgid "" and its msgstr."""
    lines = data.split(b"\n")
    for number, line in enumerate(lines, 1):
        if line.strip() != b'msgid ""':
            continue
        for offset, following in enumerate(lines[number:number + 40], number + 1):
            if not following.strip():
                break
            match = re.search(rb"charset=([A-Za-z0-9_.:+-]+)", following)
            if match:
                name = match.group(1).decode("ascii")
                return (DEFAULT_CHARSET if name == TEMPLATE_CHARSET else name), offset
        break
    return DEFAULT_CHARSET, 0


def _codec_name(charset: str, path: str, line: int) -> str:
    try:
        return codecs.lookup(charset).name
    except LookupError:
        raise PoError(path, line, f"unknown charset {charset!r} in the header's Content-Type") from None


_KEYWORD = re.compile(r"(msgctxt|msgid_plural|msgid|msgstr)(?:\[(\d+)\])?(?=[\s\"]|$)")
_PREVIOUS_KEYWORDS = ("msgctxt", "msgid", "msgid_plural")
# The stages of an entry while it is read, in the order its keywords come.
COMMENTS, CONTEXT, MSGID, PLURAL, MSGSTR = range(5)


class _EntryBuilder:
    """One entry while its lines are read: the entry, its layout blocks, where strings now go."""

    def __init__(self, line: int, leading: List[str]):
        self.entry = Entry(line=line)
        self.blocks: List[Tuple[str, List[str]]] = [(BLANK, leading)] if leading else []
        self.stage = COMMENTS
        self.target: Optional[str] = None  # the part a continuation string extends
        self.keyword_lines: Dict[str, int] = {}  # "msgid" -> its line, for messages
        self.has_keywords = False

    def add_raw(self, part: str, raw: str) -> None:
        if self.blocks and self.blocks[-1][0] == part:
            self.blocks[-1][1].append(raw)
        else:
            self.blocks.append((part, [raw]))

    def append_string(self, part: str, value: str) -> None:
        """Add ``value`` to the string of ``part`` (a keyword part or a "previous ..." one)."""
        entry = self.entry
        if part.startswith("msgstr["):
            entry.msgstr_plural[-1] += value
        elif part.startswith("previous "):
            name = "previous_" + part.split(" ", 1)[1]
            setattr(entry, name, (getattr(entry, name) or "") + value)
        else:
            setattr(entry, part, (getattr(entry, part) or "") + value)

    def build(self) -> Entry:
        self.entry.layout = _Layout(self.blocks, _part_values(self.entry))
        return self.entry


class _Parser:
    """Reads a catalog line by line; each method is one kind of line."""

    def __init__(self, path: str, charset: str):
        self.path, self.charset = path, charset  # the charset: of the bytes that octal and hex escapes write
        self.entries: List[Entry] = []
        self.current: Optional[_EntryBuilder] = None
        self.separator: List[str] = []  # blank lines since the last complete entry

    def error(self, line: int, message: str) -> PoError:
        return PoError(self.path, line, message)

    # ---------------------------------------------------------------- entries start and end
    def builder(self, number: int) -> _EntryBuilder:
        """The entry a comment or keyword of line ``number`` belongs to: a new one after a complete entry."""
        if self.current is None or self.current.stage == MSGSTR:
            self.close()
            self.current = _EntryBuilder(number, self.separator)
            self.separator = []
        return self.current

    def close(self) -> None:
        if self.current is not None:
            self.entries.append(self.current.build())
            self.current = None

    def finish(self) -> Tuple[List[Entry], List[str]]:
        """(the entries, the raw lines after the last one) once every line is read."""
        current = self.current
        if current is not None and current.stage != MSGSTR:
            if current.has_keywords:
                raise self.missing_msgstr(current, "the end of the file")
            # comments that no message follows: kept as they are
            trailing = [raw for _, lines in current.blocks for raw in lines] + self.separator
            self.current = None
            return self.entries, trailing
        self.close()
        return self.entries, self.separator

    def missing_msgstr(self, builder: _EntryBuilder, found: str) -> PoError:
        keyword = {PLURAL: "msgid_plural", MSGID: "msgid"}.get(builder.stage, "msgctxt")
        line = builder.keyword_lines[keyword]
        return self.error(line, f"{keyword} without msgstr: {found} follows it")

    def require_open(self, number: int, what: str) -> None:
        """A comment may not come between an entry's msgid and its msgstr."""
        current = self.current
        if current is not None and current.stage in (CONTEXT, MSGID, PLURAL):
            raise self.missing_msgstr(current, f"{what} (line {number})")

    # ---------------------------------------------------------------- the kinds of line
    def feed(self, number: int, raw: str) -> None:
        text = raw.rstrip("\r\n").lstrip(" \t")  # a comment keeps its trailing spaces
        if not text.strip():
            self.blank(raw)
        elif text.startswith("#~"):
            self.obsolete_line(number, raw, text[2:])
        elif text.startswith("#|"):
            self.previous_line(number, raw, text[2:], obsolete=False)
        elif text.startswith("#"):
            self.comment(number, raw, text)
        else:
            self.message_line(number, raw, text.rstrip(), obsolete=False)

    def blank(self, raw: str) -> None:
        if self.current is None or self.current.stage == MSGSTR:
            self.close()
            self.separator.append(raw)
        else:  # between the comments and the keywords of one entry, or inside it
            self.current.add_raw(BLANK, raw)

    def comment(self, number: int, raw: str, text: str) -> None:
        self.require_open(number, "a comment")
        builder = self.builder(number)
        entry, kind, rest = builder.entry, text[1:2], text[2:]
        if kind == ",":
            entry.flags.extend(flag.strip() for flag in rest.split(",") if flag.strip())
            builder.add_raw("flags", raw)
        elif kind == ":":
            entry.references.extend(rest.split())
            builder.add_raw("reference", raw)
        elif kind == ".":
            entry.extracted_comments.append(_comment_text(rest))
            builder.add_raw("extracted", raw)
        else:
            entry.translator_comments.append(_comment_text(text[1:]))
            builder.add_raw("comment", raw)

    def previous_line(self, number: int, raw: str, text: str, obsolete: bool) -> None:
        """A ``#|`` line (``#~|`` in an obsolete entry): the msgctxt, msgid or msgid_plural it had before."""
        self.require_open(number, "a #| line")
        builder = self.builder(number)
        self.check_obsolete(builder, number, obsolete)
        text = text.strip()
        if text.startswith('"'):  # a continuation of the #| string above
            if builder.target is None or not builder.target.startswith("previous "):
                raise self.error(number, "a #| string with no #| msgid or msgctxt before it")
            values = self.strings(number, text, first=False)
        else:
            keyword, index, rest = self.keyword(number, text)
            if keyword not in _PREVIOUS_KEYWORDS or index is not None:
                raise self.error(number, "#| lines hold msgctxt, msgid or msgid_plural, not "
                                         f"{_name(keyword, index)}")
            builder.target = f"previous {keyword}"
            builder.append_string(builder.target, "")
            values = self.strings(number, rest, first=True)
        for value in values:
            builder.append_string(builder.target, value)
        builder.add_raw("previous", raw)

    def obsolete_line(self, number: int, raw: str, text: str) -> None:
        if text.startswith("|"):
            self.previous_line(number, raw, text[1:], obsolete=True)
        elif not text.strip():  # a bare "#~": nothing to read
            self.blank(raw)
        else:
            self.message_line(number, raw, text.strip(), obsolete=True)

    def message_line(self, number: int, raw: str, text: str, obsolete: bool) -> None:
        if text.startswith('"'):
            self.continuation(number, raw, text, obsolete)
            return
        keyword, index, rest = self.keyword(number, text)
        current = self.current
        starts_entry = keyword in ("msgctxt", "msgid") and (current is None or current.stage == MSGSTR)
        builder = self.builder(number) if starts_entry or current is None else current
        self.check_obsolete(builder, number, obsolete)
        part = self.advance(builder, number, keyword, index)
        builder.target = part
        builder.has_keywords = True
        builder.keyword_lines.setdefault(keyword, number)
        if part.startswith("msgstr["):
            builder.entry.msgstr_plural.append("")
        else:
            builder.append_string(part, "")  # msgctxt "" and msgid_plural "" are not None
        for value in self.strings(number, rest, first=True):
            builder.append_string(part, value)
        builder.add_raw(part, raw)

    def continuation(self, number: int, raw: str, text: str, obsolete: bool) -> None:
        builder = self.current
        if builder is None or builder.target is None or builder.target.startswith("previous "):
            raise self.error(number, "a string with no keyword (msgid, msgstr, ...) before it")
        self.check_obsolete(builder, number, obsolete)
        for value in self.strings(number, text, first=False):
            builder.append_string(builder.target, value)
        builder.add_raw(builder.target, raw)

    # ---------------------------------------------------------------- keywords and their order
    def keyword(self, number: int, text: str) -> Tuple[str, Optional[int], str]:
        """(keyword, its [index] or None, the rest of the line) of a keyword line."""
        match = _KEYWORD.match(text)
        if not match:
            word = re.match(r"[^\s\"]*", text).group() or text[:1]
            raise self.error(number, f"unknown keyword {word!r} (expected msgctxt, msgid, msgid_plural, "
                                     "msgstr or msgstr[N], a string or a # comment)")
        keyword, index = match.group(1), match.group(2)
        if index is not None and keyword != "msgstr":
            raise self.error(number, f"{keyword} takes no [index]")
        return keyword, (int(index) if index is not None else None), text[match.end():]

    def advance(self, builder: _EntryBuilder, number: int, keyword: str, index: Optional[int]) -> str:
        """Check that ``keyword`` may come now in the entry; move its stage on and return its part name."""
        stage, entry = builder.stage, builder.entry
        if keyword == "msgctxt":
            if stage != COMMENTS:
                raise self.out_of_order(builder, number, "msgctxt")
            builder.stage = CONTEXT
            return "msgctxt"
        if keyword == "msgid":
            if stage not in (COMMENTS, CONTEXT):
                raise self.out_of_order(builder, number, "msgid")
            builder.stage = MSGID
            return "msgid"
        if keyword == "msgid_plural":
            if stage != MSGID:
                raise self.error(number, "msgid_plural must come right after its msgid" if stage > CONTEXT
                                 else "msgid_plural without a msgid before it")
            builder.stage = PLURAL
            return "msgid_plural"
        if stage in (COMMENTS, CONTEXT):
            raise self.error(number, f"{_name(keyword, index)} before any msgid")
        if index is None:
            if entry.is_plural:
                raise self.error(number, "an entry with msgid_plural needs msgstr[0], msgstr[1], ...; "
                                         "found msgstr")
            if stage == MSGSTR:
                raise self.error(number, "a second msgstr in one entry")
            builder.stage = MSGSTR
            return "msgstr"
        if not entry.is_plural:
            raise self.error(number, f"msgstr[{index}] in an entry without msgid_plural (use msgstr)")
        expected = len(entry.msgstr_plural)
        if index != expected:
            raise self.error(number, f"expected msgstr[{expected}], found msgstr[{index}]")
        builder.stage = MSGSTR
        return f"msgstr[{index}]"

    def out_of_order(self, builder: _EntryBuilder, number: int, keyword: str) -> PoError:
        if builder.stage in (MSGID, PLURAL) or (builder.stage == CONTEXT and keyword == "msgctxt"):
            return self.missing_msgstr(builder, f"a {keyword} (line {number})")
        return self.error(number, f"{keyword} after msgctxt must be msgid" if keyword == "msgctxt"
                          else f"{keyword} out of place")

    def check_obsolete(self, builder: _EntryBuilder, number: int, obsolete: bool) -> None:
        """An entry's keywords are all "#~" lines or none: an obsolete entry is one block of them."""
        if not builder.has_keywords and builder.target is None:
            builder.entry.obsolete = obsolete
        elif builder.entry.obsolete != obsolete:
            raise self.error(number, "an obsolete (#~) line inside a current entry" if obsolete
                             else "a current line inside an obsolete (#~) entry")

    # ---------------------------------------------------------------- strings
    def strings(self, number: int, text: str, first: bool) -> List[str]:
        """The quoted strings of the rest of a line, unescaped; a keyword needs at least one."""
        values, position = [], 0
        while True:
            while position < len(text) and text[position] in " \t\r":
                position += 1
            if position == len(text):
                break
            if text[position] != '"':
                raise self.error(number, f"unexpected {text[position:position + 12]!r} where a quoted string "
                                         "or the end of the line should be")
            match = _QUOTED.match(text, position)
            if match is None:
                raise self.error(number, "unterminated string (no closing \")")
            values.append(unescape(match.group(1), self.path, number, self.charset))
            position = match.end()
        if not values and first:
            raise self.error(number, "a keyword needs a quoted string after it on its line")
        return values


_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"', re.S)


def _comment_text(rest: str) -> str:
    """A comment's text: gettext writes one space after the mark."""
    return rest[1:] if rest.startswith(" ") else rest


def _name(keyword: str, index: Optional[int]) -> str:
    return keyword if index is None else f"{keyword}[{index}]"


# C escapes gettext reads, and what it writes for each character.
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "b": "\b", "r": "\r", "f": "\f", "v": "\v", "a": "\a", "\\": "\\",
                   '"': '"'}
_ESCAPED = {value: "\\" + key for key, value in _SIMPLE_ESCAPES.items()}
_ESCAPE = re.compile(r"\\(?:([ntbrfva\\\"])|([0-7]{1,3})|x([0-9a-fA-F]+)|(.|$))", re.S)


def unescape(body: str, path: str = "<catalog>", line: int = 0, charset: str = DEFAULT_CHARSET) -> str:
    """The text of a quoted string's body. Octal and hex escapes are bytes (as in C): a run of them is
    decoded in ``charset``."""
    pieces: List[str] = []
    pending = bytearray()  # bytes of octal/hex escapes not decoded yet
    position = 0
    for match in _ESCAPE.finditer(body):
        if match.start() > position:
            _flush_bytes(pending, pieces, charset, path, line)
            pieces.append(body[position:match.start()])
        simple, octal, hexadecimal, other = match.groups()
        if simple is not None:
            _flush_bytes(pending, pieces, charset, path, line)
            pieces.append(_SIMPLE_ESCAPES[simple])
        elif octal is not None or hexadecimal is not None:
            value = int(octal, 8) if octal is not None else int(hexadecimal, 16)
            if value > 0xFF:
                raise PoError(path, line, f"invalid escape sequence {match.group()!r}: more than a byte")
            pending.append(value)
        else:
            raise PoError(path, line, f"invalid escape sequence {match.group()!r} (gettext knows "
                                      "\\n \\t \\\" \\\\ \\a \\b \\f \\r \\v, octal \\NNN and hex \\xNN)")
        position = match.end()
    _flush_bytes(pending, pieces, charset, path, line)
    pieces.append(body[position:])
    return "".join(pieces)


def _flush_bytes(pending: bytearray, pieces: List[str], charset: str, path: str, line: int) -> None:
    if pending:
        try:
            pieces.append(bytes(pending).decode(_codec_name(charset, path, line)))
        except UnicodeDecodeError:
            raise PoError(path, line, f"escaped bytes {bytes(pending)!r} are not {charset} text") from None
        pending.clear()


# ------------------------------------------------------------------------------------------ writing
def _part_values(entry: Entry) -> Dict[str, object]:
    """Each part of an entry, by name, in gettext's order: what the writer compares with what it read."""
    values: Dict[str, object] = {
        "comment": tuple(entry.translator_comments),
        "extracted": tuple(entry.extracted_comments),
        "reference": tuple(entry.references),
        "flags": tuple(entry.flags),
        "previous": (entry.previous_msgctxt, entry.previous_msgid, entry.previous_msgid_plural),
        "msgctxt": entry.msgctxt,
        "msgid": entry.msgid,
        "msgid_plural": entry.msgid_plural,
    }
    if entry.is_plural:
        values.update((f"msgstr[{index}]", value) for index, value in enumerate(entry.msgstr_plural))
    else:
        values["msgstr"] = entry.msgstr
    return values


def _rank(part: str) -> Tuple[int, int]:
    """Where gettext writes a part: comments, flags, previous strings, msgctxt, msgid, ..., msgstr[N]."""
    order = ("comment", "extracted", "reference", "flags", "previous", "msgctxt", "msgid", "msgid_plural")
    if part in order:
        return order.index(part), 0
    index = re.fullmatch(r"msgstr(?:\[(\d+)\])?", part).group(1)
    return len(order), int(index or 0)


def _is_written(part: str, value: object) -> bool:
    """Whether a part has lines: empty comment lists, no previous strings, no msgctxt have none."""
    if part == "previous":
        return any(item is not None for item in value)
    return bool(value) if isinstance(value, tuple) else value is not None


def _entry_lines(entry: Entry, newline: str, reflow: bool) -> List[str]:
    """The lines of one entry, with their line ends: unchanged parts as read (unless ``reflow``), the
    others rendered, a part that is new inserted where gettext's order puts it."""
    values = _part_values(entry)
    written = [part for part, value in values.items() if _is_written(part, value)]

    def render(part: str) -> List[str]:
        return [line + newline for line in _render_part(entry, part)]

    layout = None if reflow else entry.layout
    if layout is None:
        return [line for part in written for line in render(part)]
    laid_out = {part for part, _ in layout.blocks}
    new_parts = [part for part in written if part not in laid_out]
    lines: List[str] = []
    done = set()
    for part, raw_lines in layout.blocks:
        if part != BLANK:
            while new_parts and _rank(new_parts[0]) < _rank(part):
                lines.extend(render(new_parts.pop(0)))
        if part == BLANK or values.get(part, BLANK) == layout.snapshot.get(part):
            lines.extend(raw_lines)
        elif part not in done and part in written:
            lines.extend(render(part))
        done.add(part)
    for part in new_parts:
        lines.extend(render(part))
    return lines


def _render_part(entry: Entry, part: str) -> List[str]:
    """A part's lines (without line ends) as gettext writes them."""
    prefix = "#~ " if entry.obsolete else ""
    wrap = NO_WRAP not in entry.flags
    if part == "comment":
        return [f"#{' ' if text else ''}{text}" for text in entry.translator_comments]
    if part == "extracted":
        return [f"#.{' ' if text else ''}{text}" for text in entry.extracted_comments]
    if part == "reference":
        return _reference_lines(entry.references)
    if part == "flags":
        return ["#, " + ", ".join(entry.flags)]
    if part == "previous":
        previous_prefix = "#~| " if entry.obsolete else "#| "
        values = (entry.previous_msgctxt, entry.previous_msgid, entry.previous_msgid_plural)
        return [line for name, value in zip(_PREVIOUS_KEYWORDS, values) if value is not None
                for line in wrap_string(name, value, previous_prefix, wrap)]
    if part.startswith("msgstr["):
        return wrap_string(part, entry.msgstr_plural[int(part[7:-1])], prefix, wrap)
    return wrap_string(part, getattr(entry, part), prefix, wrap)


def _reference_lines(references: Sequence[str]) -> List[str]:
    """``#: a.c:1 b.c:2`` lines, a new one before a reference that would pass the page width."""
    lines, line = [], "#:"
    for reference in references:
        if len(line) > 2 and len(line) + len(reference) + 1 > PAGE_WIDTH:
            lines.append(line)
            line = "#:"
        line += " " + reference
    return lines + [line]


def wrap_string(keyword: str, value: str, prefix: str = "", wrap: bool = True) -> List[str]:
    """``keyword "value"`` as gettext writes it: escaped, split after each newline, and (``wrap``) broken
    at the line break opportunities of Unicode's rules (UAX #14) so that no line passes 79 columns.
    A string that takes more than one line starts with an empty ``keyword ""`` line."""
    first_column_after_break = len(prefix) + 1  # the opening quote of a continuation line
    width = (PAGE_WIDTH if wrap else 1 << 30) - 1 - first_column_after_break  # room for the closing quote
    portions = re.findall(r"[^\n]*\n|[^\n]+", value) or [""]
    lines: List[str] = []
    first_line = True
    for number, portion in enumerate(portions):
        chars, unbreakable = _escaped(portion)
        start = len(keyword) + 1 if first_line else 0  # columns of `keyword ` beyond a continuation's
        breaks = _wrap_points(chars, unbreakable, width, start)
        if first_line and chars and (number < len(portions) - 1 or start > width or breaks):
            lines.append(f'{prefix}{keyword} ""')
            first_line = False
            breaks = _wrap_points(chars, unbreakable, width, 0)
        lead = f"{prefix}{keyword} " if first_line else prefix
        first_line = False
        for begin, end in zip([0] + breaks, breaks + [len(chars)]):
            lines.append(f'{lead}"{"".join(chars[begin:end])}"')
            lead = prefix
    return lines


def _escaped(portion: str) -> Tuple[List[str], List[bool]]:
    """The characters of a portion as written (an escape is two: backslash and letter), and for each
    whether a line break before it is forbidden (inside an escape; before the final \\n)."""
    chars: List[str] = []
    unbreakable: List[bool] = []
    for char in portion:
        escape = _ESCAPED.get(char)
        if escape:
            chars.extend(escape)
            unbreakable.extend((False, True))
        else:
            chars.append(char)
            unbreakable.append(False)
    if portion.endswith("\n"):
        unbreakable[-2] = True  # gettext: "Don't break immediately before the \n at the end"
    return chars, unbreakable


def _wrap_points(chars: List[str], unbreakable: List[bool], width: int, start_column: int) -> List[int]:
    """The indices to break the line before, as libunistring's ulc_width_linebreaks chooses them: pieces
    run from one break opportunity to the next; a piece that would end past ``width`` goes to a new line."""
    opportunities = _break_opportunities(chars)
    breaks: List[int] = []
    last_opportunity: Optional[int] = None
    column, piece_width = start_column, 0
    for index, char in enumerate(chars):
        if opportunities[index] and not unbreakable[index]:
            if last_opportunity is not None and column + piece_width > width:
                breaks.append(last_opportunity)
                column = 0
            last_opportunity = index
            column += piece_width
            piece_width = 0
        piece_width += _column_width(char)
    if last_opportunity is not None and column + piece_width > width:
        breaks.append(last_opportunity)
    return breaks


def _column_width(char: str) -> int:
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    if unicodedata.category(char) == "Cc":
        return 0  # libunistring ignores control characters
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


# --- Unicode line breaking (UAX #14), the classes and rules that occur in software messages --------------
# Classes: AL letters, NU digits, SP space, OP/CL/CP opening/closing punctuation, QU quotes, EX ! ?,
# IS , . : ;, SY /, HY -, BA break after, B2 em dash, BB break before, PR/PO prefix/postfix (numeric),
# GL non-breaking, IN ellipsis, ID ideographs, NS non-starters, ZW zero-width space, CM combining.
_ASCII_CLASSES = {
    " ": "SP", "(": "OP", "[": "OP", "{": "OP", ")": "CP", "]": "CP", "}": "CL", '"': "QU", "'": "QU",
    "!": "EX", "?": "EX", ",": "IS", ".": "IS", ":": "IS", ";": "IS", "/": "SY", "-": "HY", "%": "PO",
    "$": "PR", "+": "PR", "\\": "PR", "|": "BA", "\t": "BA",
}
_OTHER_CLASSES = {
    "\u00a0": "GL", "\u2007": "GL", "\u202f": "GL", "\u2060": "GL", "\ufeff": "GL", "\u200b": "ZW",
    "\u00ab": "QU", "\u00bb": "QU", "\u2018": "QU", "\u2019": "QU", "\u201c": "QU", "\u201d": "QU",
    "\u2039": "QU", "\u203a": "QU", "\u201e": "OP", "\u201a": "OP", "\u00a1": "OP", "\u00bf": "OP",
    "\u2026": "IN", "\u2025": "IN", "\u2014": "B2", "\u00ad": "BA", "\u2010": "BA", "\u2013": "BA",
    "\u00b0": "PO", "\u2030": "PO", "\u2032": "PO", "\u2033": "PO", "\u00b4": "BB",
    "\u3001": "CL", "\u3002": "CL", "\uff0c": "CL", "\uff0e": "CL", "\uff01": "EX", "\uff1f": "EX",
    "\uff1a": "NS", "\uff1b": "NS", "\u30fc": "NS", "\u3005": "NS",
}
_NO_BREAK_BEFORE = {"CL", "CP", "EX", "IS", "SY"}  # LB13, even after spaces


def _break_class(char: str) -> str:
    if char in _ASCII_CLASSES:
        return _ASCII_CLASSES[char]
    if char < "\x80":
        return "NU" if char.isdigit() else "AL"
    if char in _OTHER_CLASSES:
        return _OTHER_CLASSES[char]
    category = unicodedata.category(char)
    if category in ("Mn", "Me", "Mc", "Cf"):
        return "CM"
    if category == "Nd":
        return "NU"
    if category == "Ps":
        return "OP"
    if category == "Pe":
        return "CL"
    if category in ("Pi", "Pf"):
        return "QU"
    if category == "Zs":
        return "BA"  # the other spaces (en space, ...) allow a break after them
    if category == "Sc":
        return "PR"
    if unicodedata.east_asian_width(char) in ("W", "F"):
        return "ID"
    return "AL"


def _break_opportunities(chars: Sequence[str]) -> List[bool]:
    """For each character, whether UAX #14 allows a line break before it (never before the first)."""
    classes = [_break_class(char) for char in chars]
    for index, cls in enumerate(classes):  # LB9: a combining mark takes the class of what it follows
        if cls == "CM":
            classes[index] = classes[index - 1] if index and classes[index - 1] not in ("SP", "ZW") else "AL"
    allowed = [False] * len(chars)
    before = None  # the class of the last character that is not a space
    spaces = False  # whether spaces come between it and this one
    for index, cls in enumerate(classes):
        if cls == "SP":
            spaces = index > 0
            allowed[index] = False  # LB7
            continue
        if index:
            allowed[index] = _may_break(before, cls, spaces) if before else spaces
        before, spaces = cls, False
    return allowed


def _may_break(before: str, after: str, spaces: bool) -> bool:
    """UAX #14's pair rules: may a line break come between classes ``before`` and ``after`` (with
    ``spaces`` between them)?"""
    if after in _NO_BREAK_BEFORE or before == "OP":  # LB13, LB14
        return False
    if before == "ZW":  # LB8
        return True
    if (before == "QU" and after == "OP") or (before in ("CL", "CP") and after == "NS") \
            or (before == after == "B2"):  # LB15-17
        return False
    if after == "GL" and not spaces and before not in ("BA", "HY"):  # LB12a
        return False
    if before == "GL" and not spaces:  # LB12
        return False
    if spaces:  # LB18
        return True
    return (before, after) not in _NO_BREAK_PAIRS and after not in ("QU", "BA", "HY", "NS", "IN") \
        and before not in ("QU", "BB")  # LB19, LB21, LB22


# LB23-LB30 for the classes above, but for LB29 (IS x AL): the line breaker of gettext's tools breaks after
# a full stop or colon before a letter ("apt." / "conf(5)", "Acquire::" / "ftp"), and so does this one.
_NO_BREAK_PAIRS = {
    ("AL", "NU"), ("NU", "AL"), ("PR", "ID"), ("ID", "PO"), ("PR", "AL"), ("PO", "AL"), ("AL", "PR"),
    ("AL", "PO"), ("CL", "PO"), ("CP", "PO"), ("NU", "PO"), ("CL", "PR"), ("CP", "PR"), ("NU", "PR"),
    ("PO", "OP"), ("PO", "NU"), ("PR", "OP"), ("PR", "NU"), ("HY", "NU"), ("IS", "NU"), ("NU", "NU"),
    ("SY", "NU"), ("AL", "AL"), ("AL", "OP"), ("NU", "OP"), ("CP", "AL"), ("CP", "NU"),
}
