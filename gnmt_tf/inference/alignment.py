"""Hard word alignments from GNMT's attention, in the TensorFlow graph: for each target word, its source word.

GNMT has one attention (Wu et al. 2016, eq. 4-5): at every decoder step j, the weights p_ij over the source
positions i, which sum to 1. Translators report hard alignments (Marian's and OpenNMT's ``src-tgt`` pairs,
"0-0 1-2 2-1"), between words, not wordpieces. Here, per target word, the source word with the most
attention:

* a word's wordpieces are its word-initial piece (paper form: "▁" first, :mod:`gnmt_tf.data.tokenizer`;
  UNK, a whole unknown word, is one too) and the continuation pieces after it;
* the weights are summed over the target word's steps (its pieces) and over each source word's positions;
  the EOS step of the target and the EOS position of the source are no word's, so their weights count for
  none (a step's weights on the source EOS are its attention to no word);
* the target word is aligned to the source word of the largest sum (the first of equal ones).

Word indices are those of the texts the user sees: the sentence as given and the translation as returned,
split on white space (``len(text.split())`` words). With placeholder masking the model reads and writes
masked texts, whose words differ where a slot token was glued to its neighbours or its placeholder holds
white space; the text masking object says where each masked word lies in the user's text
(:meth:`~gnmt_tf.localization.in_graph.PlaceholderMasking.restored_words`; ``VERBATIM``'s is the identity),
and the weights are summed over the user's words. A slot spanning several words (``<a href="x">``) gives each
of them its weights: as a target it aligns each, as a source the first of them wins.

Everything is dense: piece-to-word membership matrices compared from cumulative sums, two batched products
and an argmax (no ragged op, no segment op; each has a TFLite builtin). A source longer than
``max_input_length`` is aligned on the words the model saw (its first ones).
"""

from __future__ import annotations

from typing import List, NamedTuple, Sequence, Tuple

import numpy as np
import tensorflow as tf

from gnmt_tf.data.tokenizer import WORD_MARK
from gnmt_tf.localization.in_graph import MaskedWords, RestoredWords
from gnmt_tf.vocab import BOS_ID, EOS_ID, PAD_ID, UNK_ID

NO_WORD = -1  # what pads an alignment row past its target words


def word_initial_table(pieces: Sequence[str]) -> np.ndarray:
    """bool [vocab]: the wordpiece of each id starts a word (a paper-form piece with "▁", and UNK, which
    stands for a whole word and detokenizes as one)."""
    table = np.array([piece.startswith(WORD_MARK) for piece in pieces], dtype=bool)
    table[UNK_ID] = True
    return table


class PieceWords(NamedTuple):
    """The masked word of each wordpiece of rows of ids, and those words."""

    word: tf.Tensor  # int32 [N, L]: the word each piece is in; -1 for EOS, PAD, BOS and all after EOS
    words: MaskedWords


def piece_words(ids: tf.Tensor, word_initial: tf.Tensor) -> PieceWords:
    """The words of wordpiece rows ``ids`` [N, L] as detokenize makes them (``word_initial``: bool [vocab]).

    What detokenize drops is no word's: PAD, BOS, EOS and everything after the first EOS. A row's first piece
    starts a word even as a continuation piece (detokenize writes it as a word)."""
    before_eos = tf.equal(tf.cumsum(tf.cast(tf.equal(ids, EOS_ID), tf.int32), axis=1), 0)
    real = before_eos & tf.not_equal(ids, PAD_ID) & tf.not_equal(ids, BOS_ID)
    first_real = real & tf.equal(tf.cumsum(tf.cast(real, tf.int32), axis=1, exclusive=True), 0)
    starts = real & (tf.gather(word_initial, ids) | first_real)
    word = tf.where(real, tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1, NO_WORD)
    count = tf.reduce_sum(tf.cast(starts, tf.int32), axis=1)
    in_word = tf.equal(tf.expand_dims(word, 2), tf.reshape(tf.range(_width(count)), [1, 1, -1]))  # [N, L, W]
    first_ids = tf.reduce_sum(tf.where(in_word & tf.expand_dims(starts, 2), tf.expand_dims(ids, 2), PAD_ID),
                              axis=1)
    single_piece = tf.equal(tf.reduce_sum(tf.cast(in_word, tf.int32), axis=1), 1)
    return PieceWords(word, MaskedWords(first_ids, single_piece, count))


def _width(counts: tf.Tensor) -> tf.Tensor:
    """The most of ``counts`` [N], at least 1: a dimension of words that is never empty (argmax needs one)."""
    return tf.maximum(tf.reduce_max(tf.concat([counts, tf.zeros([1], tf.int32)], axis=0)), 1)


class UserWords(NamedTuple):
    """The words of the texts the user sees that the wordpieces of masked texts lie in."""

    membership: tf.Tensor  # float32 [N, L, R]: 1 where piece l lies in word r (R: a row's most words, >= 1)
    count: tf.Tensor  # int32 [N]: the words of each text


def user_word_membership(pieces: PieceWords, restored: RestoredWords) -> tf.Tensor:
    """:attr:`UserWords.membership` from each piece's masked word and where that word lies."""
    known = pieces.word >= 0
    word = tf.maximum(pieces.word, 0)
    first = tf.expand_dims(tf.gather(restored.first, word, batch_dims=1), 2)
    last = tf.expand_dims(tf.gather(restored.last, word, batch_dims=1), 2)
    user_word = tf.reshape(tf.range(_width(restored.count)), [1, 1, -1])
    return tf.cast(tf.expand_dims(known, 2) & (first <= user_word) & (user_word <= last), tf.float32)


def user_words(ids: tf.Tensor, word_initial: tf.Tensor, text, masked) -> UserWords:
    """The words of the user's texts that the pieces of masked texts (``ids`` [N, L]) lie in; ``text`` is the
    translator's text masking and ``masked`` what it made of these texts' sources (a row each)."""
    pieces = piece_words(ids, word_initial)
    restored = text.restored_words(pieces.words, masked)
    return UserWords(user_word_membership(pieces, restored), restored.count)


def word_alignments(attention: tf.Tensor, target_ids: tf.Tensor, source_ids: tf.Tensor,
                    word_initial: tf.Tensor, text, source_masked, target_masked) -> tf.Tensor:
    """The source word of each target word of n-best lists: int32 [batch, n, target words], -1 padded.

    Args:
        attention: float32 [batch, n, T, S]: each hypothesis' weights (eq. 4-5) of every step on the source.
        target_ids: int32 [batch, n, T]: its output ids (EOS at the end, PAD after).
        source_ids: int32 [batch, S]: the source pieces, EOS at the end, PAD after.
        word_initial: bool [vocab] (:func:`word_initial_table`).
        text: the translator's text masking (``VERBATIM`` or ``PlaceholderMasking``).
        source_masked: what it made of the sentences, a row each, for the source words (with a glossary: the
            mask whose slots hold the source terms, which the sentences hold, rather than the target terms).
        target_masked: the same for restoring the translations.

    A sentence without source words (an empty one) has no target words: its translation is "".
    """
    with tf.name_scope("word_alignments"):
        batch, n = tf.shape(attention)[0], tf.shape(attention)[1]
        flat_ids = tf.reshape(target_ids, tf.stack([batch * n, -1]))
        target = user_words(flat_ids, word_initial, text, target_masked.repeated(n))
        source = user_words(source_ids, word_initial, text, source_masked)
        target_membership = tf.reshape(target.membership, tf.concat(
            [tf.stack([batch, n]), tf.shape(target.membership)[1:]], axis=0))  # [batch, n, T, Rt]
        # Eq. 4-5's weights summed over each target word's steps, then over each source word's positions.
        per_target_word = tf.matmul(target_membership, tf.cast(attention, tf.float32), transpose_a=True)
        per_word_pair = tf.matmul(per_target_word, tf.expand_dims(source.membership, 1))  # [batch, n, Rt, Rs]
        source_word = tf.reshape(tf.range(tf.shape(source.membership)[2]), [1, 1, 1, -1])
        real_source_word = source_word < tf.reshape(source.count, [-1, 1, 1, 1])
        best = tf.argmax(tf.where(real_source_word, per_word_pair, -1.0), axis=3, output_type=tf.int32)
        target_count = tf.reshape(target.count, tf.stack([batch, n]))
        target_count = tf.where(tf.expand_dims(source.count > 0, 1), target_count, 0)
        target_word = tf.reshape(tf.range(tf.shape(best)[2]), [1, 1, -1])
        return tf.where(target_word < tf.expand_dims(target_count, 2), best, NO_WORD)


def alignment_pairs(row: np.ndarray) -> List[Tuple[int, int]]:
    """(source word, target word) pairs of one hypothesis' row of :func:`word_alignments`, in target order."""
    return [(int(source), target) for target, source in enumerate(row) if source != NO_WORD]
