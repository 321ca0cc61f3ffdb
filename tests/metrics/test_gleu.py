"""Tests of the sentence GLEU reward (section 5) against hand values and a pure-Python version."""

from collections import Counter

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf.config import RLConfig
from gnmt_tf.metrics.gleu import reward_function, sentence_gleu, word_ids, word_start_table
from gnmt_tf.data.tokenizer import WORD_MARK, WordpieceTokenizer
from gnmt_tf.vocab import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID

# Hand-example tokens: a b c d.
A, B, C, D = 4, 5, 6, 7


def reference_gleu(output, target, max_order=4):
    """Section 5 with collections.Counter: pooled n-grams of orders 1..max_order, clipped matches."""
    def ngrams(tokens):
        return Counter(
            tuple(tokens[i:i + n]) for n in range(1, max_order + 1) for i in range(len(tokens) - n + 1)
        )

    out, ref = ngrams(list(output)), ngrams(list(target))
    matches = sum((out & ref).values())
    return min(matches / max(1, sum(out.values())), matches / max(1, sum(ref.values())))


def pad(rows, width=None, fill=PAD_ID):
    width = max([len(r) for r in rows] + [0]) if width is None else width
    out = np.full([len(rows), width], fill, dtype=np.int32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def gleu(hyps, refs, **kwargs):
    return sentence_gleu(pad(hyps), pad(refs), **kwargs).numpy()


# ---------------------------------------------------------------------------------- hand values


def test_identical_and_disjoint():
    np.testing.assert_allclose(gleu([[A, B, C, D], [A]], [[A, B, C, D], [A]]), [1.0, 1.0])
    np.testing.assert_allclose(gleu([[A, B], [A, A, A]], [[C, D, C], [B]]), [0.0, 0.0])


def test_worked_partial_overlap():
    # output "a b c d": a b c d | ab bc cd | abc bcd | abcd        -> 10 n-grams
    # target "a b d":   a b d   | ab bd    | abd                   ->  6 n-grams
    # matches: a, b, d, ab -> 4;  precision 4/10, recall 4/6, GLEU = min = 0.4
    result = gleu([[A, B, C, D], [A, B, D]], [[A, B, D], [A, B, C, D]])
    np.testing.assert_allclose(result, [0.4, 0.4], atol=1e-7)
    assert result.dtype == np.float32


def test_repeated_tokens_are_clipped():
    # "a a a a": 4 x a, 3 x aa, 2 x aaa, 1 x aaaa -> 10 n-grams.
    # vs "a":   matches min(4, 1) = 1 -> precision 1/10, recall 1/1 -> 0.1
    # vs "a a": target a, a, aa (3); matches min(4, 2) + min(3, 1) = 3 -> precision 3/10, recall 1 -> 0.3
    result = gleu([[A, A, A, A], [A, A, A, A], [A]], [[A], [A, A], [A, A, A, A]])
    np.testing.assert_allclose(result, [0.1, 0.3, 0.1], atol=1e-7)


def test_empty_output_scores_zero():
    # No n-grams: the max(1, count) denominators give 0, not NaN, also for two empty sentences.
    result = sentence_gleu(pad([[], [EOS_ID, A], []], width=3), pad([[A, B], [A], []], width=2)).numpy()
    np.testing.assert_array_equal(result, [0.0, 0.0, 0.0])


def test_end_of_sentence_and_padding_are_dropped():
    hyps = pad([[A, B, EOS_ID, C, D, C], [A, B, PAD_ID, C], [A, B, EOS_ID, PAD_ID, PAD_ID, PAD_ID]])
    refs = pad([[A, B, EOS_ID], [A, B, C, EOS_ID, PAD_ID], [A, B, D, D]])
    # Row 0: "a b" vs "a b"; row 1: a PAD inside a row is skipped, "a b c" vs "a b c";
    # row 2: "a b" (2 + 1 n-grams) vs "a b d d" (4 + 3 + 2 + 1 = 10), matches 3 -> min(3/3, 3/10).
    np.testing.assert_allclose(sentence_gleu(hyps, refs).numpy(), [1.0, 1.0, 0.3], atol=1e-7)
    # Without end_id, EOS is an ordinary token and what follows it counts.
    np.testing.assert_allclose(
        sentence_gleu(hyps[:1], refs[:1], end_id=None).numpy(),
        [reference_gleu([A, B, EOS_ID, C, D, C], [A, B, EOS_ID])], atol=1e-7,
    )


def test_different_widths_and_dtypes():
    hyps = pad([[A, B, C, D, A, B, C], [C]], width=9)
    refs = pad([[A, B, C], [C, D]], width=3).astype(np.int64)
    expected = [reference_gleu([A, B, C, D, A, B, C], [A, B, C]), reference_gleu([C], [C, D])]
    np.testing.assert_allclose(sentence_gleu(hyps, refs).numpy(), expected, atol=1e-7)
    np.testing.assert_allclose(sentence_gleu(refs, hyps).numpy(), expected, atol=1e-7)


@pytest.mark.parametrize("max_order", [1, 2, 3, 6])
def test_other_max_orders(max_order):
    hyp, ref = [A, B, C, D, A, B, C], [A, B, C, A, B, D]
    result = gleu([hyp], [ref], max_order=max_order)
    np.testing.assert_allclose(result, [reference_gleu(hyp, ref, max_order)], atol=1e-7)
    if max_order == 1:  # unigrams: output 7, target 6, clipped matches a2 b2 c1 d1 = 6 -> min(6/7, 6/6)
        np.testing.assert_allclose(result, [6 / 7], atol=1e-7)


def test_rejects_bad_max_order():
    with pytest.raises(ValueError, match="max_order"):
        sentence_gleu(pad([[A]]), pad([[A]]), max_order=0)


# ---------------------------------------------------------------------------------- random batches


def random_pairs(rng, count, vocab=(4, 5, 6, 7), max_len=12):
    """Pairs of random sentences from a small vocabulary (frequent overlaps), as id lists."""
    def sentence():
        return [int(t) for t in rng.choice(np.asarray(vocab), rng.integers(0, max_len + 1))]

    return [(sentence(), sentence()) for _ in range(count)]


def as_model_ids(rng, sentences, width):
    """Sentences as a model would produce them: EOS, then random junk or padding up to ``width``."""
    out = np.full([len(sentences), width], PAD_ID, dtype=np.int32)
    for i, sentence in enumerate(sentences):
        row = list(sentence) + [EOS_ID]
        row += list(rng.integers(PAD_ID, 8, width - len(row)))  # after EOS: anything, ignored
        out[i] = row
    return out


def test_matches_pure_python_on_random_pairs(rng):
    pairs = random_pairs(rng, 400)
    hyps = as_model_ids(rng, [h for h, _ in pairs], width=16)
    refs = as_model_ids(rng, [r for _, r in pairs], width=14)
    expected = [reference_gleu(h, r) for h, r in pairs]
    np.testing.assert_allclose(sentence_gleu(hyps, refs).numpy(), expected, atol=1e-6, rtol=0)
    assert 0 < sum(0 < e < 1 for e in expected) and min(expected) >= 0  # partial overlaps are exercised
    # Symmetry (section 5): exactly, since matches are integer counts.
    np.testing.assert_array_equal(sentence_gleu(hyps, refs).numpy(), sentence_gleu(refs, hyps).numpy())
    for max_order in (2, 5):
        expected = [reference_gleu(h, r, max_order) for h, r in pairs[:100]]
        result = sentence_gleu(hyps[:100], refs[:100], max_order=max_order).numpy()
        np.testing.assert_allclose(result, expected, atol=1e-6, rtol=0)


def test_in_tf_function_with_dynamic_shapes(rng):
    spec = tf.TensorSpec([None, None], tf.int32)
    traced = tf.function(lambda h, r: sentence_gleu(h, r), input_signature=[spec, spec])
    for width_h, width_r, count in [(16, 14, 50), (5, 20, 7), (1, 1, 3)]:
        pairs = random_pairs(rng, count, max_len=min(width_h, width_r) - 1)
        hyps = as_model_ids(rng, [h for h, _ in pairs], width_h)
        refs = as_model_ids(rng, [r for _, r in pairs], width_r)
        expected = [reference_gleu(h, r) for h, r in pairs]
        np.testing.assert_allclose(traced(hyps, refs).numpy(), expected, atol=1e-6, rtol=0)
    assert traced(np.zeros([0, 4], np.int32), np.zeros([0, 2], np.int32)).shape == (0,)


def test_in_replica_context(rng):
    pairs = random_pairs(rng, 8)
    hyps = as_model_ids(rng, [h for h, _ in pairs], 14)
    refs = as_model_ids(rng, [r for _, r in pairs], 14)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    per_replica = strategy.run(tf.function(sentence_gleu), args=(tf.constant(hyps), tf.constant(refs)))
    result = strategy.experimental_local_results(per_replica)[0].numpy()
    np.testing.assert_allclose(result, [reference_gleu(h, r) for h, r in pairs], atol=1e-6, rtol=0)


# ---------------------------------------------------------------------------------- words

SENTENCES = [
    "the makers of the jets make seats",
    "the maker makes the seat and the jet makes noise",
    "seats make makers happy and jets make noise",
    "the noisy jets of the makers",
]

# (output, target) pairs; several words are split into more than one wordpiece.
WORD_PAIRS = [
    ("the makers make seats", "the makers make seats"),
    ("the makers make seats", "the maker makes seats"),
    ("jets make noise and the makers make noise", "the makers of the jets make noise"),
    ("seats seats seats", "the seats"),
    ("noisy makers", "happy jets"),
    ("", "the jets"),
]


@pytest.fixture(scope="module")
def tokenizer():
    return WordpieceTokenizer.learn(SENTENCES, vocab_size=50, max_characters=30)


def tokenized(tokenizer, texts, width, end=True):
    rows = [list(r) + ([EOS_ID] if end else []) for r in tokenizer.tokenize(texts).to_list()]
    return pad(rows, width=width)


def test_word_start_table(tokenizer):
    table = word_start_table(tokenizer)
    pieces = tokenizer.pieces
    assert table.dtype == bool and table.shape == (tokenizer.vocab_size,)
    assert table[: len(SPECIAL_TOKENS)].all()
    assert all(table[i] == p.startswith(WORD_MARK) for i, p in enumerate(pieces) if i >= len(SPECIAL_TOKENS))
    assert table.sum() > len(SPECIAL_TOKENS) and (~table).sum() > 0


def test_word_level_matches_detokenized_words(tokenizer):
    outputs = [o for o, _ in WORD_PAIRS]
    targets = [t for _, t in WORD_PAIRS]
    hyps = tokenized(tokenizer, outputs, width=30, end=False)
    refs = tokenized(tokenizer, targets, width=24)  # as target_output_ids: EOS, then padding
    # Multi-piece words are exercised.
    assert any(len(tokenizer.tokenize(w).numpy()) > 1 for w in " ".join(outputs).split())
    table = word_start_table(tokenizer)
    hyp_words = [s.decode().split() for s in tokenizer.detokenize(hyps).numpy()]
    ref_words = [s.decode().split() for s in tokenizer.detokenize(refs).numpy()]
    assert hyp_words == [o.split() for o in outputs]
    expected = [reference_gleu(h, r) for h, r in zip(hyp_words, ref_words)]
    np.testing.assert_allclose(sentence_gleu(hyps, refs, word_start=table).numpy(), expected, atol=1e-6)
    np.testing.assert_allclose(expected[:2], [1.0, reference_gleu("the makers make seats".split(),
                                                                  "the maker makes seats".split())])
    # Inside a tf.function with dynamic shapes too.
    spec = tf.TensorSpec([None, None], tf.int32)
    traced = tf.function(lambda h, r: sentence_gleu(h, r, word_start=table), input_signature=[spec, spec])
    np.testing.assert_allclose(traced(hyps, refs).numpy(), expected, atol=1e-6)


def test_word_and_wordpiece_levels_differ(tokenizer):
    # "makers" vs "maker": different words, but they share wordpieces.
    assert len(tokenizer.tokenize("makers").numpy()) > 1
    hyps = tokenized(tokenizer, ["the makers"], width=8)
    refs = tokenized(tokenizer, ["the maker"], width=8)
    table = word_start_table(tokenizer)
    words = sentence_gleu(hyps, refs, word_start=table).numpy()
    pieces = sentence_gleu(hyps, refs).numpy()
    np.testing.assert_allclose(words, [reference_gleu(["the", "makers"], ["the", "maker"])])  # 1/3
    hyp_pieces = [i for i in hyps[0] if i not in (PAD_ID, EOS_ID)]
    ref_pieces = [i for i in refs[0] if i not in (PAD_ID, EOS_ID)]
    np.testing.assert_allclose(pieces, [reference_gleu(hyp_pieces, ref_pieces)], atol=1e-7)
    assert pieces[0] > words[0] + 0.05


def test_word_ids(tokenizer):
    table = word_start_table(tokenizer)
    first = word_ids(tokenized(tokenizer, ["the makers make", "make the"], width=12), table).numpy()
    second = word_ids(tokenized(tokenizer, ["makers the seats"], width=10), table).numpy()
    assert first.dtype == np.int64 and first.shape == (2, 3) and second.shape == (1, 3)
    the, makers, make = first[0]
    assert len({the, makers, make, second[0, 2]}) == 4
    np.testing.assert_array_equal(first[1], [make, the, PAD_ID])
    np.testing.assert_array_equal(second[0, :2], [makers, the])
    assert (first[first != PAD_ID] < 0).all()  # top bit set: never PAD, EOS or a wordpiece id
    # A leading continuation piece, UNK and ids outside the table each begin a word.
    continuation = next(i for i, p in enumerate(tokenizer.pieces) if i >= 4 and not p.startswith(WORD_MARK))
    odd = word_ids(pad([[continuation, continuation, UNK_ID, continuation, 999, BOS_ID]]), table).numpy()
    assert odd.shape == (1, 4)
    # The same pieces in another order, or split differently into words, are other words.
    index = {piece: i for i, piece in enumerate(tokenizer.pieces)}
    s, e, a, ts = index[WORD_MARK + "s"], index["e"], index["a"], index["ts"]
    shuffled = word_ids(pad([[s, e, a, ts], [s, a, e, ts], [s, e, a, ts, s, e, a, ts]]), table).numpy()
    assert shuffled[0, 0] != shuffled[1, 0]
    np.testing.assert_array_equal(shuffled[2], [shuffled[0, 0]] * 2)


def test_reward_function(tokenizer):
    hyps = tokenized(tokenizer, ["the makers make seats", "jets"], width=10)
    refs = tokenized(tokenizer, ["the maker makes seats", "the jets"], width=9)
    table = word_start_table(tokenizer)
    by_pieces = reward_function(RLConfig(), tokenizer)(hyps, refs).numpy()
    np.testing.assert_allclose(by_pieces, sentence_gleu(hyps, refs).numpy())
    by_words = reward_function(RLConfig(reward_units="words", max_order=2), tokenizer)(hyps, refs).numpy()
    np.testing.assert_allclose(by_words, sentence_gleu(hyps, refs, max_order=2, word_start=table).numpy())
    assert not np.allclose(by_pieces, by_words)
    with pytest.raises(ValueError, match="tokenizer"):
        reward_function(RLConfig(reward_units="words"), None)
