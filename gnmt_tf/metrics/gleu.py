"""The sentence-level GLEU reward of RL refinement (Wu et al. 2016, section 5), in TensorFlow.

Definition (section 5)
----------------------
Record all sub-sequences of 1, 2, 3 or 4 tokens (n-grams) in the output and in the target. With
``matches`` the number of n-grams they share,

    recall    = matches / (number of n-grams in the target)
    precision = matches / (number of n-grams in the output)
    GLEU      = min(recall, precision)

which lies in [0, 1] and is symmetric in output and target. As in NLTK's ``sentence_gleu``, the
n-grams of all orders n = 1..max_order are pooled into one count, and matches are clipped: an n-gram
g found c_out(g) times in the output and c_ref(g) times in the target contributes
min(c_out(g), c_ref(g)). A sentence of L tokens has sum_n max(0, L - n + 1) n-grams. Denominators are
max(1, count), so a sentence without n-grams (an empty output) scores 0 rather than NaN; two empty
sentences also score 0.

Units: wordpieces by default
----------------------------
The paper counts "tokens in output and target sequence", i.e. the model's output units, which are
wordpieces (section 4.1); this is the default and needs no tokenizer. With ``word_start`` (a bool per
wordpiece id: does it begin a word, see :func:`word_start_table`) the pieces are first joined into
words, the units BLEU sees after detokenization (``reward_units: words`` in the ``rl`` config).

What is counted
---------------
Ids are right-padded with PAD_ID; everything from the first ``end_id`` (EOS) on is dropped, and so is
every PAD, so sampled outputs and padded ``target_output_ids`` (which end with EOS) can be passed as
they are. The two tensors may have different widths.

Matches are counted exactly, without hashing ids, from equality matrices: for each order n,
``eq_n[b, i, j]`` says whether the output n-gram starting at i equals the target n-gram starting at j,
built as ``eq_n[i, j] = eq_{n-1}[i, j] & eq_1[i + n - 1, j + n - 1]``. Then c_ref(g_i) =
sum_j eq_n[i, j], and the output n-gram at i counts as a match iff it is among the first c_ref(g_i)
occurrences of g_i in the output (its rank, from the output-vs-output matrix, is below c_ref(g_i));
over the c_out(g) occurrences of g that is exactly min(c_out(g), c_ref(g)), in integers. Memory is
O(batch * T^2) per order, fine for sentence lengths of ~100.

Words are identified by a 64-bit hash of their wordpiece sequence (see :func:`word_ids`); two
different words share a hash with probability about 2^-63, so a pair of sentences with k distinct
words has a collision with probability below k^2 / 2^64 (about 5e-16 for k = 100). Since a word is
its piece sequence, a word spelled with a segmentation other than the tokenizer's own (possible in a
sampled output) counts as a different word, as it does at the wordpiece level.
"""

from __future__ import annotations

from typing import Callable, Optional, Tuple

import numpy as np
import tensorflow as tf

from gnmt_tf.data.tokenizer import WORD_MARK
from gnmt_tf.vocab import EOS_ID, PAD_ID, SPECIAL_TOKENS

__all__ = ["sentence_gleu", "word_ids", "word_start_table", "reward_function"]

RewardFunction = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]


def _kept_tokens(ids: tf.Tensor, end_id: Optional[int]) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Drops PAD and everything from the first ``end_id`` on, keeping the order of the rest.

    Returns (tokens [B, W], valid [B, W], lengths [B]): the kept tokens moved to the front of each row
    (``valid`` is a prefix mask), W the longest kept row.
    """
    valid = tf.not_equal(ids, tf.cast(PAD_ID, ids.dtype))
    if end_id is not None:
        seen_end = tf.cumsum(tf.cast(tf.equal(ids, tf.cast(end_id, ids.dtype)), tf.int32), axis=1)
        valid &= tf.equal(seen_end, 0)
    lengths = tf.reduce_sum(tf.cast(valid, tf.int32), axis=1)
    # A stable sort on "dropped" moves kept tokens to the front in order, so a PAD inside a row (which a
    # sampler may emit) is removed rather than breaking the n-grams around it.
    order = tf.argsort(tf.cast(~valid, tf.int32), axis=1, stable=True)
    width = tf.reduce_max(tf.concat([lengths, [0]], axis=0))
    tokens = tf.gather(ids, order[:, :width], batch_dims=1)
    return tokens, tf.sequence_mask(lengths, width), lengths


def _ngram_count(lengths: tf.Tensor, max_order: int) -> tf.Tensor:
    """Number of n-grams, n = 1..max_order, of sentences of the given lengths."""
    return tf.add_n([tf.maximum(lengths - n + 1, 0) for n in range(1, max_order + 1)])


def _clipped_matches(hyp, hyp_valid, ref, ref_valid, max_order: int) -> tf.Tensor:
    """sum over orders n and n-grams g of min(c_hyp(g), c_ref(g)), per row; int32 [B]."""
    eq_hr_1 = tf.equal(hyp[:, :, None], ref[:, None, :]) & hyp_valid[:, :, None] & ref_valid[:, None, :]
    eq_hh_1 = tf.equal(hyp[:, :, None], hyp[:, None, :]) & hyp_valid[:, :, None] & hyp_valid[:, None, :]
    eq_hr, eq_hh = eq_hr_1, eq_hh_1
    matches = tf.zeros(tf.shape(hyp)[:1], tf.int32)
    for n in range(1, max_order + 1):
        if n > 1:
            # n-gram (i, j) equal <=> (n-1)-gram (i, j) equal and token pair (i+n-1, j+n-1) equal.
            eq_hr = eq_hr[:, :-1, :-1] & eq_hr_1[:, n - 1:, n - 1:]
            eq_hh = eq_hh[:, :-1, :-1] & eq_hh_1[:, n - 1:, n - 1:]
        ref_count = tf.reduce_sum(tf.cast(eq_hr, tf.int32), axis=2)  # c_ref(g_i); 0 if i is no n-gram
        positions = tf.range(tf.shape(eq_hh)[1])
        earlier = positions[None, :] < positions[:, None]  # [i, i']: i' < i
        rank = tf.reduce_sum(tf.cast(eq_hh & earlier, tf.int32), axis=2)  # earlier occurrences of g_i
        # The first min(c_hyp, c_ref) occurrences of each n-gram match: the clipped count, exactly.
        matches += tf.reduce_sum(tf.cast(rank < ref_count, tf.int32), axis=1)
    return matches


def sentence_gleu(
    hypotheses,
    references,
    max_order: int = 4,
    end_id: Optional[int] = EOS_ID,
    word_start=None,
) -> tf.Tensor:
    """GLEU (section 5) of every output against its target: float32 [batch] in [0, 1].

    Args:
        hypotheses: integer ids [batch, T_hyp], right-padded with PAD_ID.
        references: integer ids [batch, T_ref], right-padded with PAD_ID; T_ref may differ from T_hyp.
        max_order: longest n-gram counted (the paper's 4).
        end_id: tokens from the first ``end_id`` on are ignored (the end-of-sentence mark and anything
            sampled after it); None keeps them.
        word_start: None to count wordpiece n-grams (the default units); or a bool vector [vocab_size]
            (:func:`word_start_table`) to count n-grams of words.

    PAD tokens are ignored wherever they are. Works eagerly, in ``tf.function`` with unknown shapes
    and in replica contexts (plain TensorFlow ops only).
    """
    if not isinstance(max_order, (int, np.integer)) or max_order < 1:
        raise ValueError(f"max_order must be a positive integer, got {max_order!r}")
    max_order = int(max_order)
    with tf.name_scope("sentence_gleu"):
        if word_start is not None:
            hypotheses = word_ids(hypotheses, word_start, end_id)
            references = word_ids(references, word_start, end_id)
            end_id = None  # already applied; word ids are never EOS_ID
        hypotheses = tf.convert_to_tensor(hypotheses)
        references = tf.convert_to_tensor(references)
        if hypotheses.dtype != references.dtype:
            hypotheses = tf.cast(hypotheses, tf.int64)
            references = tf.cast(references, tf.int64)
        hyp, hyp_valid, hyp_len = _kept_tokens(hypotheses, end_id)
        ref, ref_valid, ref_len = _kept_tokens(references, end_id)
        matches = tf.cast(_clipped_matches(hyp, hyp_valid, ref, ref_valid, max_order), tf.float32)
        # max(1, count): no n-grams gives 0, not NaN (see the module docstring).
        precision = matches / tf.cast(tf.maximum(_ngram_count(hyp_len, max_order), 1), tf.float32)
        recall = matches / tf.cast(tf.maximum(_ngram_count(ref_len, max_order), 1), tf.float32)
        return tf.minimum(precision, recall)


# splitmix64's finalizer: a bijection of 64-bit integers that spreads every input bit over the output.
_MIX_1 = 0xBF58476D1CE4E5B9
_MIX_2 = 0x94D049BB133111EB
_GOLDEN = 0x9E3779B97F4A7C15


def _mix64(x: tf.Tensor) -> tf.Tensor:
    """splitmix64 on uint64 (unsigned arithmetic wraps modulo 2^64, as the hash needs)."""
    def shift(z, bits):
        return tf.bitwise.bitwise_xor(z, tf.bitwise.right_shift(z, tf.constant(bits, tf.uint64)))

    z = x + tf.constant(_GOLDEN, tf.uint64)
    z = shift(z, 30) * tf.constant(_MIX_1, tf.uint64)
    z = shift(z, 27) * tf.constant(_MIX_2, tf.uint64)
    return shift(z, 31)


def word_ids(ids, word_start, end_id: Optional[int] = EOS_ID) -> tf.Tensor:
    """Wordpiece ids [B, T] -> word ids, int64 [B, W], right-padded with PAD_ID.

    A word is a piece with ``word_start[id]`` True followed by the pieces without it; the first kept
    piece of a row always begins a word (as detokenization turns a leading continuation piece into a
    word), and ids outside ``word_start`` begin a word (detokenization shows them as the unknown
    word). PAD and everything from the first ``end_id`` on are dropped first.

    The id of a word is a 63-bit hash of its piece sequence, the sum modulo 2^64 of
    splitmix64(piece_id + 2^32 * position_in_word) over its pieces, with the top bit set: it is the
    same in every row and every call, and never PAD_ID, EOS_ID or a wordpiece id, so the result can be
    passed back to :func:`sentence_gleu` (with ``end_id=None``). Collisions: see the module docstring.
    """
    with tf.name_scope("word_ids"):
        ids = tf.convert_to_tensor(ids)
        tokens, valid, lengths = _kept_tokens(ids, end_id)
        tokens = tf.cast(tokens, tf.int64)
        table = tf.convert_to_tensor(word_start, tf.bool)
        vocab_size = tf.shape(table, out_type=tf.int64)[0]
        in_table = (tokens >= 0) & (tokens < vocab_size)
        starts_word = tf.where(in_table, tf.gather(table, tf.clip_by_value(tokens, 0, vocab_size - 1)), True)

        shape = tf.shape(tokens)
        batch, width = shape[0], shape[1]
        position = tf.broadcast_to(tf.range(width)[None, :], shape)
        starts_word = (starts_word | tf.equal(position, 0)) & valid
        word_index = tf.cumsum(tf.cast(starts_word, tf.int32), axis=1) - 1
        num_words = tf.reduce_sum(tf.cast(starts_word, tf.int32), axis=1)

        # One segment per (row, word); dropped tokens go to an extra segment that is discarded.
        num_segments = batch * width
        segment = tf.where(valid, tf.range(batch)[:, None] * width + word_index, num_segments)
        word_begin = tf.math.unsorted_segment_min(position, segment, num_segments + 1)
        in_word = tf.cast(position - tf.gather(word_begin, segment), tf.uint64)
        piece = tf.cast(tokens, tf.uint64)
        piece_hash = _mix64(piece + tf.bitwise.left_shift(in_word, tf.constant(32, tf.uint64)))
        word_hash = tf.math.unsorted_segment_sum(piece_hash, segment, num_segments + 1)[:num_segments]
        word_hash = tf.bitwise.bitwise_or(word_hash, tf.constant(1 << 63, tf.uint64))
        word_hash = tf.reshape(tf.bitcast(word_hash, tf.int64), shape)
        words = tf.where(tf.sequence_mask(num_words, width), word_hash, tf.constant(PAD_ID, tf.int64))
        return words[:, : tf.reduce_max(tf.concat([num_words, [0]], axis=0))]


def word_start_table(tokenizer) -> np.ndarray:
    """bool [vocab_size]: which wordpiece ids begin a word.

    The paper's convention (section 4.1), kept by :class:`gnmt_tf.data.tokenizer.WordpieceTokenizer`: a
    word-initial piece starts with the mark "▁", a continuation piece has none. The special tokens
    count as word beginnings (UNK detokenizes to the unknown word "⁇").
    """
    pieces = tokenizer.pieces
    return np.array(
        [i < len(SPECIAL_TOKENS) or piece.startswith(WORD_MARK) for i, piece in enumerate(pieces)], dtype=bool
    )


def reward_function(rl_config, tokenizer=None) -> RewardFunction:
    """The RL reward of an ``rl`` config: ``(hypothesis_ids, reference_ids) -> float32 [batch]``.

    Uses ``rl_config.max_order`` and ``rl_config.reward_units`` ("wordpieces", or "words", which needs
    the tokenizer for :func:`word_start_table`). Ids end at EOS or padding, as for :func:`sentence_gleu`.
    """
    units = rl_config.reward_units
    max_order = int(rl_config.max_order)
    if units == "wordpieces":
        table = None
    elif units == "words":
        if tokenizer is None:
            raise ValueError("rl.reward_units 'words' needs the tokenizer to find word beginnings")
        table = word_start_table(tokenizer)
    else:
        raise ValueError(f"rl.reward_units must be 'wordpieces' or 'words', got {units!r}")

    def reward(hypothesis_ids, reference_ids) -> tf.Tensor:
        return sentence_gleu(hypothesis_ids, reference_ids, max_order=max_order, word_start=table)

    return reward
