"""The shared wordpiece vocabulary of GNMT (Wu et al. 2016, section 4.1), tokenized inside the graph.

The paper's convention
----------------------
One wordpiece vocabulary is learned from the training text of *both* languages, so that a string
that is copied from the source to the target (a name, a number) is segmented identically on both
sides. A special mark is added only at the *beginning* of every word::

    Jet makers feud  ->  ▁J et ▁makers ▁fe ud

so the original text is recovered by concatenating the pieces and turning every "▁" back into a
space. The number of basic characters is capped (about 500 for Western languages) and the rarer
characters are mapped to an unknown symbol. Segmentation is deterministic.

This module stores the vocabulary in exactly that "paper form": a list of pieces whose index is
the id; ``pieces[0:4]`` are the special tokens of :mod:`gnmt_tf.vocab`; a word-initial piece starts
with "▁" (U+2581), e.g. "▁the"; a continuation piece has no mark, e.g. "ing". It is saved as a text
file, one piece per line.

Learning (:meth:`WordpieceTokenizer.learn`): the alphabet is the ``max_characters`` most frequent
characters, plus the reserved characters it is given (the slot tokens of masked placeholders); every
alphabet character ``c`` gets both "▁c" and "c", so that every word made of alphabet characters can
be segmented; the multi-character pieces are learned with sentencepiece's BPE trainer (fast C++, and
it uses the paper's "▁" word-beginning mark), fed only with words made of alphabet characters.
Segmenting a word uses greedy longest-match-first (WordPiece's MaxMatch, as in tensorflow-text's
FastWordpieceTokenizer): the inventory comes from BPE, the segmentation is the deterministic
left-to-right longest match.

The in-graph op form (a renaming, not a different model)
--------------------------------------------------------
Tokenization and detokenization run inside the TensorFlow graph with the tensorflow-text ops that
have TFLite kernels, ``WhitespaceTokenizer`` and ``FastWordpieceTokenizer``, plus basic tensor ops
(gather, cumsum, scatter_nd, where, boolean_mask): no ``tf.strings`` op, which TFLite lacks (the
tests convert both to TFLite and find only builtin ops plus the three tensorflow-text kernels).
FastWordpiece marks *continuation* pieces instead of word-initial ones (BERT's "##ing"), so the
vocabulary handed to the op is the paper form renamed, keeping every id::

    paper "▁x"  ->  op "x"        (word-initial)
    paper "x"   ->  op J + "x"    (continuation; J = U+F0000, a private-use character)

Both forms describe the same set of pieces with the same ids, and MaxMatch segments every word
identically under both (a word-initial piece can only match at the start of a word, a continuation
piece only after it), so this is a renaming, not a different model. The special entries get op
strings that no text word can produce: ids 0-2 contain spaces (words never do), and id 3 (UNK) is
"⁇" (U+2047), which is what an unknown word detokenizes to.

What the round trip preserves (:meth:`WordpieceTokenizer.normalize`)
---------------------------------------------------------------------
For every Python string ``s`` (without lone surrogates, which UTF-8 cannot encode),
``detokenize(tokenize([s]))[0] == normalize(s)`` where normalize:

1. splits ``s`` on the 25 characters of Unicode's White_Space property (:data:`WHITESPACE`), which
   is what WhitespaceTokenizer splits on (note that Python's ``str.split()`` also splits on the
   separators U+001C-U+001F, which are *not* White_Space and stay inside words here), and joins the
   words with single spaces (so leading/trailing whitespace disappears);
2. replaces a word by "⁇" if it contains a character outside the alphabet or is longer than
   ``max_bytes_per_word`` UTF-8 bytes (default 1000, far beyond any real word).

Unknown words: the paper maps each rare *character* to an unknown character; here a word with a
character outside the (~500-character) alphabet becomes the single unknown token "⁇" (id 3). This
word-level version is forced by FastWordpiece, which replaces the whole word when any part of it
cannot be segmented. Some characters are never in the alphabet: whitespace, "⁇", "▁" (it is the
word-beginning mark), J, U+0000 (FastWordpiece's trie cannot hold it) and U+0011 (with a U+0011
vocabulary entry, FastWordpiece segfaults on words containing it; U+0011 is the label its builder
uses for internal dummy trie nodes).

tensorflow-text quirks handled here (tensorflow-text 2.21)
----------------------------------------------------------
* WhitespaceTokenizer ends a word one byte too late when the whitespace character after it is
  multi-byte: "a\\u00a0b" gives the words b"a\\xc2" and b"b" (the word keeps all but the last byte of
  the first whitespace character that follows it). The op vocabulary therefore has five hidden
  continuation entries, past the last real id, for those truncated byte sequences (b"\\xc2",
  b"\\xe1\\x9a", b"\\xe2\\x80", b"\\xe2\\x81", b"\\xe3\\x80"); tokenize drops them. Inside a word they
  change nothing: a real character starting with the same bytes is either in the alphabet (a longer
  match) or makes the word unknown anyway. The byte limit is applied to the word without them.
* FastWordpiece's trie also matches a word that *starts* with J (as continuation pieces) or with
  "⁇" (as the UNK entry followed by more pieces); tokenize turns every word whose first piece is a
  continuation piece, or that contains UNK, into the single UNK id, as normalize says.
  FastWordpiece's detokenize keeps J in front of a continuation piece that starts a sequence (a
  decoder can emit one); detokenize therefore rewrites a leading continuation piece as the
  segmentation of its text as a whole word (paper "ing" -> "▁in" + "g"), same text.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import threading
import weakref
from collections import Counter, OrderedDict
from typing import Dict, FrozenSet, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from gnmt_tf.vocab import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID

__all__ = [
    "WordpieceTokenizer",
    "WordpieceOpsCache",
    "WORD_MARK",
    "UNKNOWN_TEXT",
    "WHITESPACE",
    "DEFAULT_MAX_BYTES_PER_WORD",
    "row_ids",
]


# The paper's begin-of-word mark (section 4.1), also sentencepiece's.
WORD_MARK = "\u2581"  # ▁

# What an unknown word detokenizes to: the op-form string of UNK_ID.
UNKNOWN_TEXT = "\u2047"  # ⁇

# The op form's continuation prefix (FastWordpiece's "suffix indicator"): a private-use character,
# never in the alphabet, so it never collides with text.
_CONTINUATION = "\U000f0000"

# Unicode's White_Space property: exactly the characters tensorflow-text's WhitespaceTokenizer splits
# on (ICU u_isUWhiteSpace; checked against the op in tests). Python's str.isspace() is this set plus
# U+001C..U+001F.
WHITESPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
_WHITESPACE_RUN = re.compile("[" + re.escape("".join(sorted(WHITESPACE))) + "]+")

# Characters that can never be in the alphabet (see the module docstring).
_EXCLUDED_CHARACTERS = frozenset({UNKNOWN_TEXT, WORD_MARK, _CONTINUATION, "\x00", "\x11"}) | WHITESPACE

# Op strings of the special ids 0-2: they contain spaces, so no text word can produce them.
_SPECIAL_OP_STRINGS = (" <pad> ", " <s> ", " </s> ")

# Generous: no real word is this long; longer words become "⁇".
DEFAULT_MAX_BYTES_PER_WORD = 1000

# FastWordpiece rejects vocabulary entries longer than this (without the continuation prefix).
_MAX_PIECE_BYTES = 256


def _truncated_whitespace_bytes() -> Tuple[bytes, ...]:
    """The byte strings WhitespaceTokenizer leaves at the end of a word (see the module docstring)."""
    return tuple(sorted({c.encode("utf-8")[:-1] for c in WHITESPACE if len(c.encode("utf-8")) > 1}))


_TRAILING_GARBAGE = _truncated_whitespace_bytes()


def _split_words(text: str) -> List[str]:
    """Splits ``text`` on White_Space runs as WhitespaceTokenizer does; never returns empty words."""
    return [word for word in _WHITESPACE_RUN.split(text) if word]


@dataclasses.dataclass(frozen=True)
class _Vocabulary:
    """The validated paper-form vocabulary (plain Python data, kept out of tf.Module tracking)."""

    pieces: Tuple[str, ...]
    index: Dict[str, int]
    alphabet: FrozenSet[str]
    max_piece_chars: int


def _validate(pieces: Sequence[str]) -> _Vocabulary:
    """Checks that ``pieces`` is a well-formed paper-form vocabulary; raises ValueError otherwise."""
    pieces = tuple(pieces)
    if tuple(pieces[: len(SPECIAL_TOKENS)]) != SPECIAL_TOKENS:
        raise ValueError(
            f"the first {len(SPECIAL_TOKENS)} wordpieces must be the special tokens {SPECIAL_TOKENS}, "
            f"got {pieces[:len(SPECIAL_TOKENS)]}"
        )
    index: Dict[str, int] = {}
    for piece_id, piece in enumerate(pieces):
        if not isinstance(piece, str):
            raise ValueError(f"wordpiece {piece_id} is not a string: {piece!r}")
        if piece in index:
            raise ValueError(f"wordpiece {piece!r} appears twice (ids {index[piece]} and {piece_id})")
        index[piece] = piece_id
        if piece_id < len(SPECIAL_TOKENS):
            continue
        body = piece[1:] if piece.startswith(WORD_MARK) else piece
        if not body:
            raise ValueError(f"wordpiece {piece_id} is empty or a bare {WORD_MARK!r}")
        bad = sorted(set(body) & _EXCLUDED_CHARACTERS)
        if bad:
            raise ValueError(f"wordpiece {piece_id} {piece!r} contains the excluded character(s) {bad!r}")
        if len(body.encode("utf-8")) > _MAX_PIECE_BYTES:
            raise ValueError(f"wordpiece {piece_id} is longer than {_MAX_PIECE_BYTES} UTF-8 bytes")
    # The alphabet: characters with both a word-initial and a continuation single-character piece.
    alphabet = frozenset(
        piece for piece in pieces[len(SPECIAL_TOKENS):] if len(piece) == 1 and WORD_MARK + piece in index
    )
    # Every piece must be made of alphabet characters, so that any word of alphabet characters can be
    # segmented (greedy matching can always fall back to single characters) and every piece's text
    # can be re-segmented as a word.
    for piece_id, piece in enumerate(pieces[len(SPECIAL_TOKENS):], start=len(SPECIAL_TOKENS)):
        body = piece[1:] if piece.startswith(WORD_MARK) else piece
        missing = sorted(set(body) - alphabet)
        if missing:
            raise ValueError(
                f"wordpiece {piece_id} {piece!r} uses character(s) {missing!r} that lack a word-initial "
                f"piece ({WORD_MARK}c) or a continuation piece (c) in the vocabulary"
            )
    max_piece_chars = max((len(p.lstrip(WORD_MARK)) for p in pieces[len(SPECIAL_TOKENS):]), default=1)
    return _Vocabulary(pieces=pieces, index=index, alphabet=alphabet, max_piece_chars=max_piece_chars)


def row_ids(row_splits: tf.Tensor, num_values: tf.Tensor) -> tf.Tensor:
    """The row of every value of a ragged tensor, from its row splits.

    Uses only scatter_nd and cumsum (TFLite builtins): mark each row start with 1 (empty rows add up),
    then the running count of marks is the row id.
    """
    inner_splits = row_splits[1:-1]
    marks = tf.scatter_nd(
        tf.expand_dims(inner_splits, 1),
        tf.ones_like(inner_splits),
        tf.reshape(num_values + 1, [1]),
    )
    return tf.cumsum(marks[:-1])


def _compact(values: tf.Tensor, row_splits: tf.Tensor, keep: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """Keeps ``values[keep]`` and recomputes the row splits (a ragged boolean_mask with basic ops)."""
    kept_before = tf.concat([tf.zeros([1], tf.int64), tf.cumsum(tf.cast(keep, tf.int64))], axis=0)
    return tf.boolean_mask(values, keep), tf.gather(kept_before, row_splits)


def _max_match(vocab: _Vocabulary, word: str) -> List[str]:
    """Greedy longest-match-first segmentation of an alphabet word into paper-form pieces."""
    out, start = [], 0
    while start < len(word):
        prefix = WORD_MARK if start == 0 else ""
        for end in range(min(len(word), start + vocab.max_piece_chars), start, -1):
            piece = prefix + word[start:end]
            if piece in vocab.index and vocab.index[piece] >= len(SPECIAL_TOKENS):
                out.append(piece)
                start = end
                break
        else:  # cannot happen for alphabet words: every character has both forms
            return [SPECIAL_TOKENS[UNK_ID]]
    return out


def _leading_replacement(vocab: _Vocabulary) -> np.ndarray:
    """[vocab_size, K] ids that replace a piece at the start of a sequence, padded with -1.

    A continuation piece is replaced by the segmentation of its text as a whole word ("ing" ->
    "▁in" "g"); every other id by itself. FastWordpiece's detokenize would otherwise print the
    op-form continuation prefix J in front of a sequence-initial continuation piece.
    """
    rows = []
    for piece_id, piece in enumerate(vocab.pieces):
        if piece_id < len(SPECIAL_TOKENS) or piece.startswith(WORD_MARK):
            rows.append([piece_id])
        else:
            rows.append([vocab.index[p] for p in _max_match(vocab, piece)])
    width = max(len(row) for row in rows)
    table = np.full([len(rows), width], -1, dtype=np.int32)
    for piece_id, row in enumerate(rows):
        table[piece_id, : len(row)] = row
    return table


class _WordpieceOps(tf.Module):
    """The in-graph form of one vocabulary: tensorflow-text's tokenizers over the op-form vocabulary,
    the lookup tables, and the traced tokenize and detokenize functions.

    Immutable once built, and shared by the :class:`WordpieceTokenizer` objects of the same vocabulary
    built with one :class:`WordpieceOpsCache` (the process's, unless they are given another): a model
    directory loaded again calls the functions already traced instead of building their ~500 ops again.
    """

    def __init__(self, vocab: _Vocabulary, max_bytes_per_word: int):
        super().__init__(name="wordpiece_ops")
        self.vocab_size = len(vocab.pieces)
        self._max_bytes_per_word = max_bytes_per_word
        vocab_size = self.vocab_size

        # The op form (see the module docstring), as bytes so that the hidden entries for the
        # WhitespaceTokenizer quirk can be byte sequences that are not valid UTF-8 on their own.
        continuation = _CONTINUATION.encode("utf-8")
        op_vocab: List[bytes] = [s.encode("utf-8") for s in _SPECIAL_OP_STRINGS]
        op_vocab.append(UNKNOWN_TEXT.encode("utf-8"))
        is_continuation = [False] * len(SPECIAL_TOKENS)
        for piece in vocab.pieces[len(SPECIAL_TOKENS):]:
            if piece.startswith(WORD_MARK):
                op_vocab.append(piece[len(WORD_MARK):].encode("utf-8"))
                is_continuation.append(False)
            else:
                op_vocab.append(continuation + piece.encode("utf-8"))
                is_continuation.append(True)
        garbage_bytes = [0] * vocab_size
        for garbage in _TRAILING_GARBAGE:  # hidden ids vocab_size, vocab_size + 1, ...
            op_vocab.append(continuation + garbage)
            is_continuation.append(True)
            garbage_bytes.append(len(garbage))

        self._whitespace = tf_text.WhitespaceTokenizer()
        self._fast_wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=op_vocab,
            suffix_indicator=_CONTINUATION,
            # +2: a word may carry up to 2 bytes of a following whitespace character (see the module
            # docstring); the exact limit is applied by tokenize from the byte offsets.
            max_bytes_per_word=max_bytes_per_word + max(len(g) for g in _TRAILING_GARBAGE),
            token_out_type=tf.int32,
            unknown_token=UNKNOWN_TEXT,
            no_pretokenization=True,
            support_detokenization=True,
        )
        # Lookup tables, kept as numpy and turned into graph constants where used.
        self._is_continuation = np.array(is_continuation, dtype=bool)
        self._garbage_bytes = np.array(garbage_bytes, dtype=np.int32)
        self._leading_replacement = _leading_replacement(vocab)

    # Traced once per vocabulary and called as a function wherever tokenize is used (pipelines,
    # searches, exports), rather than its ~300 ops (most of them tensorflow-text's whitespace split)
    # built again in every graph that tokenizes.
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    def tokenize_vector(self, strings: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        """:meth:`WordpieceTokenizer.tokenize` of a vector of strings: the values and row splits of the
        ragged ids."""
        with tf.name_scope("wordpiece_tokenize"):
            words = self._whitespace.tokenize(strings)  # [N, (words)]
            word_pieces, _, end_offsets = self._fast_wordpiece.tokenize_with_offsets(words.values)
            ids = word_pieces.values  # int32, all pieces of all words
            ends = tf.cast(end_offsets.values, tf.int32)
            splits = tf.cast(word_pieces.row_splits, tf.int64)  # pieces of each word
            num_pieces = tf.size(ids, out_type=tf.int64)
            starts, limits = splits[:-1], splits[1:]

            # Per word (FastWordpiece gives every non-empty word at least one piece).
            first_id = tf.gather(ids, starts)
            last = limits - 1
            is_unk = tf.cast(tf.equal(ids, UNK_ID), tf.int64)
            unk_before = tf.concat([tf.zeros([1], tf.int64), tf.cumsum(is_unk)], axis=0)
            has_unk = tf.gather(unk_before, limits) - tf.gather(unk_before, starts) > 0
            # The word's own length: the last piece's end offset minus any trailing whitespace bytes.
            word_bytes = tf.gather(ends, last) - tf.gather(
                tf.constant(self._garbage_bytes), tf.gather(ids, last)
            )
            bad_word = (
                tf.gather(tf.constant(self._is_continuation), first_id)  # word started with J
                | has_unk  # e.g. "⁇abc": UNK entry followed by pieces
                | (word_bytes > self._max_bytes_per_word)
            )

            # Per piece: a bad word keeps only its first piece, as UNK_ID; otherwise drop the hidden
            # entries (ids >= vocab_size) that absorbed the WhitespaceTokenizer's trailing bytes.
            word_of_piece = row_ids(splits, num_pieces)
            bad_piece = tf.gather(bad_word, word_of_piece)
            is_first = tf.equal(tf.range(num_pieces), tf.gather(starts, word_of_piece))
            new_ids = tf.where(bad_piece, tf.constant(UNK_ID, tf.int32), ids)
            keep = tf.where(bad_piece, is_first, ids < self.vocab_size)
            sentence_splits = tf.gather(splits, tf.cast(words.row_splits, tf.int64))
            return _compact(new_ids, sentence_splits, keep)

    # Traced once per vocabulary, as tokenize_vector is (~200 ops).
    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int64)],
                 autograph=False)
    def detokenize_rows(self, values: tf.Tensor, splits: tf.Tensor) -> tf.Tensor:
        """:meth:`WordpieceTokenizer.detokenize` of the rows of ragged ids given as values and row splits."""
        with tf.name_scope("wordpiece_detokenize"):
            unk = tf.constant(UNK_ID, tf.int32)
            values = tf.where((values < 0) | (values >= self.vocab_size), unk, values)

            # 1. Cut each row at its first EOS; drop PAD and BOS.
            num_values = tf.size(values, out_type=tf.int64)
            row = row_ids(splits, num_values)
            eos_until = tf.cumsum(tf.cast(tf.equal(values, EOS_ID), tf.int64))  # inclusive
            eos_before_row = tf.gather(tf.concat([tf.zeros([1], tf.int64), eos_until], axis=0), splits[:-1])
            after_eos = eos_until - tf.gather(eos_before_row, row) > 0
            keep = ~after_eos & tf.not_equal(values, PAD_ID) & tf.not_equal(values, BOS_ID)
            values, splits = _compact(values, splits, keep)

            # 2. Rewrite a row-initial continuation piece as its text segmented as a word: every value
            #    becomes `width` slots (the replacement for a row's first value, else the value and
            #    -1 fillers), and the fillers are dropped.
            num_values = tf.size(values, out_type=tf.int64)
            row = row_ids(splits, num_values)
            is_first = tf.equal(tf.range(num_values), tf.gather(splits[:-1], row))
            table = tf.constant(self._leading_replacement)
            width = table.shape[1]
            fillers = tf.fill(tf.stack([num_values, width - 1]), tf.constant(-1, tf.int32))
            unchanged = tf.concat([tf.expand_dims(values, 1), fillers], axis=1)
            slots = tf.where(tf.expand_dims(is_first, 1), tf.gather(table, values), unchanged)
            slots = tf.reshape(slots, [-1])
            values, splits = _compact(slots, splits * width, slots >= 0)

            pieces = tf.RaggedTensor.from_row_splits(values, splits, validate=False)
            return self._fast_wordpiece.detokenize(pieces)


_OpsKey = Tuple[Tuple[str, ...], int]  # (pieces, max_bytes_per_word)


class WordpieceOpsCache:
    """The in-graph form (:class:`_WordpieceOps`) of each vocabulary, built once and shared by every
    tokenizer built with this cache.

    Why: building the two traced functions costs ~500 ops (about 0.6 CPU-s); a model directory loaded
    again (a second translator, an export and its check, a server's reload, the next test) calls the
    ones already traced instead. Kept: the form of
    every vocabulary a live tokenizer uses, and of the ``keep_recent`` vocabularies used last after
    their tokenizers are gone (each costs a few MB and its traced functions). Thread-safe.
    """

    def __init__(self, keep_recent: int = 4):
        self._in_use: "weakref.WeakValueDictionary[_OpsKey, _WordpieceOps]" = weakref.WeakValueDictionary()
        self._recent: "OrderedDict[_OpsKey, _WordpieceOps]" = OrderedDict()
        self._keep_recent = keep_recent
        self._lock = threading.Lock()

    def ops(self, vocab: _Vocabulary, max_bytes_per_word: int) -> _WordpieceOps:
        """The form of this vocabulary and word limit (the graph holds the limit), built on first use."""
        key = (vocab.pieces, max_bytes_per_word)
        with self._lock:
            ops = self._in_use.get(key)
            if ops is None:
                ops = self._in_use[key] = _WordpieceOps(vocab, max_bytes_per_word)
            self._recent[key] = ops
            self._recent.move_to_end(key)
            while len(self._recent) > self._keep_recent:
                self._recent.popitem(last=False)
            return ops


# What every tokenizer of the process shares unless it is given a cache of its own.
PROCESS_OPS = WordpieceOpsCache()


class WordpieceTokenizer(tf.Module):
    """GNMT's shared wordpiece vocabulary (section 4.1) with in-graph tokenize/detokenize.

    Args:
        pieces: the paper-form vocabulary (index = id): the special tokens of :mod:`gnmt_tf.vocab`,
            then pieces where a word-initial piece starts with "▁". Every character used must have
            both single-character pieces "▁c" and "c".
        max_bytes_per_word: words longer than this many UTF-8 bytes become "⁇".
        name: the tf.Module name.
        ops_cache: where the in-graph form of the vocabulary comes from: :data:`PROCESS_OPS` shares it
            with the process's other tokenizers of the same vocabulary.

    Build one with :meth:`learn` or :meth:`load`. ``tokenize`` and ``detokenize`` only use graph ops,
    so they work eagerly, inside ``tf.function``, in ``tf.data`` ``map`` and in exported graphs.
    """

    def __init__(
        self,
        pieces: Sequence[str],
        max_bytes_per_word: int = DEFAULT_MAX_BYTES_PER_WORD,
        name: Optional[str] = None,
        ops_cache: WordpieceOpsCache = PROCESS_OPS,
    ):
        super().__init__(name=name)
        if max_bytes_per_word < 1:
            raise ValueError(f"max_bytes_per_word must be positive, got {max_bytes_per_word}")
        self._vocab = _validate(pieces)
        self._max_bytes_per_word = int(max_bytes_per_word)
        self._ops = ops_cache.ops(self._vocab, self._max_bytes_per_word)

    # ------------------------------------------------------------------ properties

    @property
    def vocab_size(self) -> int:
        """Number of ids (special tokens included)."""
        return len(self._vocab.pieces)

    @property
    def pieces(self) -> List[str]:
        """The paper-form vocabulary; index = id."""
        return list(self._vocab.pieces)

    @property
    def alphabet(self) -> FrozenSet[str]:
        """The characters that have both a word-initial ("▁c") and a continuation ("c") piece."""
        return self._vocab.alphabet

    @property
    def max_bytes_per_word(self) -> int:
        """Words longer than this many UTF-8 bytes become "⁇"."""
        return self._max_bytes_per_word

    def piece_strings(self, ids: Iterable[int]) -> List[str]:
        """The paper-form pieces of ``ids`` (for display), e.g. ``['▁J', 'et', '▁makers']``."""
        out = []
        for piece_id in np.asarray(ids, dtype=np.int64).reshape(-1).tolist():
            if not 0 <= piece_id < self.vocab_size:
                raise IndexError(f"id {piece_id} is outside the vocabulary [0, {self.vocab_size})")
            out.append(self._vocab.pieces[piece_id])
        return out

    # ------------------------------------------------------------------ pure-Python reference

    def _word_is_known(self, word: str) -> bool:
        return len(word.encode("utf-8")) <= self._max_bytes_per_word and set(word) <= self._vocab.alphabet

    def normalize(self, text: str) -> str:
        """What ``detokenize(tokenize(text))`` returns: whitespace folded, unknown words as "⁇".

        Words are split on :data:`WHITESPACE` (Unicode White_Space, as WhitespaceTokenizer) and joined
        with single spaces; a word with a character outside :attr:`alphabet`, or longer than
        :attr:`max_bytes_per_word` UTF-8 bytes, becomes "⁇".
        """
        return " ".join(word if self._word_is_known(word) else UNKNOWN_TEXT for word in _split_words(text))

    def segment_word(self, word: str) -> List[str]:
        """Pure-Python reference segmentation of one word, in paper form (what tokenize computes).

        Greedy longest-match-first (MaxMatch) over the vocabulary; a word with a character outside the
        alphabet, or longer than :attr:`max_bytes_per_word` bytes, is ``["<unk>"]``.
        """
        if not word or not self._word_is_known(word):
            return [SPECIAL_TOKENS[UNK_ID]]
        return _max_match(self._vocab, word)

    # ------------------------------------------------------------------ in-graph ops

    def tokenize(self, strings: Union[tf.Tensor, Sequence[str], str]) -> Union[tf.RaggedTensor, tf.Tensor]:
        """Strings [N] -> wordpiece ids, an int32 RaggedTensor [N, (pieces)]. No BOS/EOS is added.

        A scalar string gives an int32 Tensor [pieces]. A word with a character outside the alphabet
        (or longer than :attr:`max_bytes_per_word`) becomes the single id UNK_ID.
        """
        strings = tf.convert_to_tensor(strings, dtype=tf.string)
        if strings.shape.rank == 0:
            return self.tokenize(tf.expand_dims(strings, 0))[0]
        if strings.shape.rank != 1:
            raise ValueError(f"tokenize expects a scalar or a vector of strings, not {strings.shape}")
        return tf.RaggedTensor.from_row_splits(*self._ops.tokenize_vector(strings), validate=False)

    def detokenize(self, ids: Union[tf.RaggedTensor, tf.Tensor, Sequence[Sequence[int]]]) -> tf.Tensor:
        """Wordpiece ids [N, (L)] (ragged, or dense and padded) -> strings [N].

        Everything from the first EOS on is dropped, and so are PAD and BOS; continuation pieces are
        joined to the piece before, words are joined with single spaces, UNK is "⁇", ids outside the
        vocabulary count as UNK. An empty sequence gives "". A dense vector [L] gives a scalar string.
        """
        with tf.name_scope("wordpiece_detokenize"):
            if isinstance(ids, tf.RaggedTensor):
                if ids.ragged_rank != 1 or ids.shape.rank != 2:
                    raise ValueError(f"detokenize expects a RaggedTensor [N, (L)], got shape {ids.shape}")
                values = ids.values
                splits = tf.cast(ids.row_splits, tf.int64)
            else:
                ids = tf.convert_to_tensor(ids)
                if ids.shape.rank == 1:
                    return self.detokenize(tf.expand_dims(ids, 0))[0]
                if ids.shape.rank != 2:
                    raise ValueError(f"detokenize expects ids [N, L], got shape {ids.shape}")
                shape = tf.shape(ids, out_type=tf.int64)
                values = tf.reshape(ids, [-1])
                splits = tf.range(shape[0] + 1) * shape[1]
            return self._ops.detokenize_rows(tf.cast(values, tf.int32), splits)

    # ------------------------------------------------------------------ learning

    @classmethod
    def learn(
        cls,
        sentences: Iterable[str],
        vocab_size: int,
        max_characters: int = 500,
        max_bytes_per_word: int = DEFAULT_MAX_BYTES_PER_WORD,
        reserved_characters: Sequence[str] = (),
    ) -> "WordpieceTokenizer":
        """Learns the shared vocabulary (section 4.1) from the sentences of both languages.

        1. The alphabet is the ``reserved_characters``, then the ``max_characters`` most frequent other
           characters of the words (ties broken by code point), never whitespace, "⁇", "▁", J, U+0000
           or U+0011.
        2. Multi-character pieces come from sentencepiece's BPE trainer, fed with the sentences minus
           the words that will be "⁇" anyway (characters outside the alphabet, or too long).
        3. Vocabulary = special tokens + ("▁c", "c") for every alphabet character, reserved ones first
           in their given order + the learned pieces in score order, truncated to at most
           ``vocab_size`` entries (fewer if BPE finds fewer).

        ``reserved_characters``: characters that are in the alphabet whatever their frequency, even if
        the sentences never hold them, counted in addition to ``max_characters``: the slot tokens of
        masked placeholders (:data:`gnmt_tf.localization.placeholders.SLOT_TOKENS`), each a word of its
        own, which a model must be able to read and write although a corpus may hold few of them. With
        none, the vocabulary is what it would be without the argument.

        Deterministic: the same input gives the same vocabulary.

        Raises:
            ValueError: ``vocab_size`` cannot hold the special tokens and both forms of every
                alphabet character (reserved ones included); a reserved character is not one
                character, is given twice, or is one of the characters never in the alphabet.
        """
        if max_characters < 0:
            raise ValueError(f"max_characters must be >= 0, got {max_characters}")
        reserved = _checked_reserved(reserved_characters)
        sentence_words = [_split_words(sentence) for sentence in sentences]
        counts: Counter = Counter()
        for words in sentence_words:
            for word in words:
                counts.update(word)
        candidates = [c for c in counts if c not in _EXCLUDED_CHARACTERS and c not in reserved]
        alphabet = reserved + sorted(candidates, key=lambda c: (-counts[c], ord(c)))[:max_characters]
        minimum = len(SPECIAL_TOKENS) + 2 * len(alphabet)
        if vocab_size < minimum:
            reserved_note = f" ({len(reserved)} of them reserved)" if reserved else ""
            raise ValueError(
                f"vocab_size={vocab_size} is too small: the {len(SPECIAL_TOKENS)} special tokens and the "
                f"two forms (\u2581c and c) of the {len(alphabet)} alphabet characters{reserved_note} need at "
                f"least {minimum}; raise vocab_size to {minimum} or more, or lower max_characters"
            )
        pieces = list(SPECIAL_TOKENS)
        for c in alphabet:
            pieces += [WORD_MARK + c, c]
        budget = vocab_size - len(pieces)
        if budget > 0:
            allowed = frozenset(alphabet)
            present = set(pieces)

            def known(word: str) -> bool:
                return len(word.encode("utf-8")) <= max_bytes_per_word and set(word) <= allowed

            texts = (" ".join(w for w in words if known(w)) for words in sentence_words)
            for piece in _learn_bpe_pieces(texts, spm_vocab_size=vocab_size + 1):
                body = piece[1:] if piece.startswith(WORD_MARK) else piece
                if len(body) < 2 or piece in present or not set(body) <= allowed:
                    continue
                pieces.append(piece)
                present.add(piece)
                if len(pieces) == vocab_size:
                    break
        return cls(pieces, max_bytes_per_word=max_bytes_per_word)

    # ------------------------------------------------------------------ files

    def save(self, path: str) -> str:
        """Writes the vocabulary to the file ``path`` atomically (one piece per line); returns ``path``.

        A model directory keeps it as ``wordpieces.txt`` (:mod:`gnmt_tf.model_files`)."""
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        tmp = f"{path}.tmp{os.getpid()}"
        # "\n".join, read back with split("\n"): pieces may contain characters such as U+001C that
        # str.splitlines() would treat as line breaks.
        with open(tmp, "wb") as handle:
            handle.write("\n".join(self._vocab.pieces).encode("utf-8"))
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str, max_bytes_per_word: int = DEFAULT_MAX_BYTES_PER_WORD,
             ops_cache: WordpieceOpsCache = PROCESS_OPS) -> "WordpieceTokenizer":
        """Reads the vocabulary file ``path`` (written by :meth:`save`) and validates it; ``ops_cache`` as
        for the constructor."""
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"no wordpiece vocabulary: the file {path!r} does not exist "
                "(written by WordpieceTokenizer.save or learn(...).save)"
            )
        with open(path, "rb") as handle:
            data = handle.read()
        try:
            pieces = data.decode("utf-8").split("\n")
        except UnicodeDecodeError as error:
            raise ValueError(f"{path}: not valid UTF-8 ({error})") from error
        if len(pieces) > 1 and pieces[-1] == "":  # tolerate a final newline (pieces are never empty)
            pieces.pop()
        try:
            return cls(pieces, max_bytes_per_word=max_bytes_per_word, ops_cache=ops_cache)
        except ValueError as error:
            raise ValueError(f"{path}: invalid wordpiece vocabulary: {error}") from error


def _checked_reserved(characters: Sequence[str]) -> List[str]:
    """``learn``'s reserved characters as a list, refused (ValueError) unless each is one character that
    may be in the alphabet, given once."""
    reserved: List[str] = []
    for c in characters:
        if not isinstance(c, str) or len(c) != 1:
            raise ValueError(f"a reserved character must be one character, got {c!r}")
        if c in _EXCLUDED_CHARACTERS:
            raise ValueError(
                f"U+{ord(c):04X} cannot be a reserved character: it is never in the alphabet (whitespace, "
                f"\u2047, \u2581, U+F0000, U+0000 and U+0011 are not)"
            )
        if c in reserved:
            raise ValueError(f"the reserved character U+{ord(c):04X} is given twice")
        reserved.append(c)
    return reserved


def _chunks_for_spm(texts: Iterable[str], max_bytes: int = 4000) -> Iterator[str]:
    """Yields non-empty texts, split at spaces into chunks under sentencepiece's sentence-length limit.

    Pieces never cross words (split_by_whitespace), so chunking changes nothing learned; it only keeps
    sentencepiece from silently skipping long sentences.
    """
    for text in texts:
        if not text:
            continue
        if len(text.encode("utf-8")) <= max_bytes:
            yield text
            continue
        chunk: List[str] = []
        size = 0
        for word in text.split(" "):
            n = len(word.encode("utf-8")) + 1
            if chunk and size + n > max_bytes:
                yield " ".join(chunk)
                chunk, size = [], 0
            chunk.append(word)
            size += n
        if chunk:
            yield " ".join(chunk)


def _learn_bpe_pieces(texts: Iterable[str], spm_vocab_size: int) -> List[str]:
    """Pieces learned by sentencepiece's BPE trainer, in score order (sentencepiece's "▁" convention)."""
    import sentencepiece as spm  # imported here: only learning needs it

    chunks = list(_chunks_for_spm(texts))
    if not chunks:
        return []
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(chunks),
        model_writer=model,
        model_type="bpe",
        vocab_size=spm_vocab_size,
        hard_vocab_limit=False,  # small corpora: learn fewer pieces instead of failing
        character_coverage=1.0,  # the alphabet is already capped by learn()
        normalization_rule_name="identity",
        remove_extra_whitespaces=True,
        add_dummy_prefix=True,  # "▁" on the first word too
        split_by_whitespace=True,  # pieces never cross words
        byte_fallback=False,
        pad_id=PAD_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        unk_id=UNK_ID,
        pad_piece=SPECIAL_TOKENS[PAD_ID],
        bos_piece=SPECIAL_TOKENS[BOS_ID],
        eos_piece=SPECIAL_TOKENS[EOS_ID],
        unk_piece=SPECIAL_TOKENS[UNK_ID],
        shuffle_input_sentence=False,
        num_threads=1,  # determinism
        minloglevel=2,  # no progress output
    )
    processor = spm.SentencePieceProcessor(model_proto=model.getvalue())
    return [
        processor.id_to_piece(i)
        for i in range(processor.get_piece_size())
        if not (processor.is_control(i) or processor.is_unknown(i) or processor.is_unused(i))
    ]
