"""The text files a command reads and writes: input lines from a file or stdin, output to a file or stdout.

Input is UTF-8. A line that is not stops the command with an error naming the file (``<stdin>`` for
stdin) and the line: a wrong encoding is told, not translated as U+FFFD garbage. ``--encoding-errors
replace`` reads each undecodable byte sequence as U+FFFD instead (Python's "replace" error handler).
A byte-order mark at the start is not part of the first line, and a gzip file (told by its first bytes,
whatever its name) is read as the text it holds.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import re
import sys
from typing import Iterable, Iterator, Tuple

from gnmt_tf.data.readers import DataError

STDIN_NAME = "<stdin>"
GZIP_MAGIC = b"\x1f\x8b"
ENCODING = "utf-8-sig"  # UTF-8, a leading byte-order mark dropped
# What the "surrogateescape" error handler reads an undecodable byte 0x80-0xff as: U+DC80-U+DCFF.
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


class RefuseUndecodable:
    """``--encoding-errors strict``: a line that is not UTF-8 is an error naming its file and line."""

    # Keeps each undecodable byte, as a lone surrogate, to the line that holds it: the line is refused
    # with its number when it is read, where the strict handler fails on a whole buffer at once.
    codec_errors = "surrogateescape"

    def lines(self, text: Iterable[str], name: str) -> Iterator[str]:
        for number, line in enumerate(text, 1):
            escaped = _ESCAPED_BYTE.search(line)
            if escaped:
                byte = ord(escaped.group()) - 0xDC00
                raise DataError(
                    f"{name} line {number} is not UTF-8 (byte 0x{byte:02x} at character {escaped.start() + 1}); "
                    "convert the input to UTF-8, or pass --encoding-errors replace to read such bytes as U+FFFD"
                )
            yield line


class ReplaceUndecodable:
    """``--encoding-errors replace``: each undecodable byte sequence is read as U+FFFD."""

    codec_errors = "replace"

    def lines(self, text: Iterable[str], name: str) -> Iterator[str]:
        return iter(text)


ENCODING_ERRORS = {"strict": RefuseUndecodable(), "replace": ReplaceUndecodable()}


def add_encoding_errors_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--encoding-errors", choices=tuple(ENCODING_ERRORS), default="strict",
        help="what an input line that is not UTF-8 does: strict = stop with an error naming the file and "
        "line (default); replace = read each undecodable byte sequence as U+FFFD",
    )


def input_name(path) -> str:
    """How messages name the input ``path`` (None: stdin)."""
    return path or STDIN_NAME


@contextlib.contextmanager
def open_input(path, undecodable) -> Iterator[Iterator[str]]:
    """The lines of ``path`` (None: stdin) with their line ends, read by ``undecodable``
    (:data:`ENCODING_ERRORS`)."""
    if path:
        with open(path, "rb") as binary, _uncompressed(binary) as content, \
                io.TextIOWrapper(content, encoding=ENCODING, errors=undecodable.codec_errors) as text:
            yield undecodable.lines(text, path)
        return
    text = io.TextIOWrapper(sys.stdin.buffer, encoding=ENCODING, errors=undecodable.codec_errors)
    try:
        yield undecodable.lines(text, STDIN_NAME)
    finally:
        text.detach()  # stdin stays open for whoever reads it next


def _uncompressed(binary: io.BufferedReader):
    """The bytes of ``binary``, decompressed if they are gzip: a context manager."""
    if binary.peek(len(GZIP_MAGIC))[:len(GZIP_MAGIC)] == GZIP_MAGIC:  # peek: the bytes stay to be read
        return gzip.GzipFile(fileobj=binary, mode="rb")
    return contextlib.nullcontext(binary)


def open_output(path):
    """A context manager: ``path`` as UTF-8 text to write, or stdout for None, which it leaves open."""
    if path:
        return open(path, "w", encoding="utf-8")
    return contextlib.nullcontext(sys.stdout)


def tab_separated_pair(line: str, expected: str, where: str) -> Tuple[str, str]:
    """The two sides of a ``SOURCE<TAB>TARGET`` line (its line end dropped); any other number of columns
    is an error naming ``where`` and what was ``expected``."""
    columns = line.rstrip("\n").split("\t")
    if len(columns) != 2:
        raise DataError(f"{where}: expected {expected}, found {len(columns)} tab-separated column(s)")
    return columns[0], columns[1]
