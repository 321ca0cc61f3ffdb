"""The vocabulary shortlist: IBM Model 1 against a brute-force re-derivation, the allowed ids, the file."""

from collections import Counter, defaultdict

import numpy as np
import pytest

from gnmt_tf import model_files
from gnmt_tf.data import shortlist as shortlists
from gnmt_tf.data.tokenizer import WordpieceTokenizer
from gnmt_tf.vocab import BOS_ID, EOS_ID, PAD_ID

PAIRS = [
    ("the cat", "le chat"), ("the dog", "le chien"), ("a cat sleeps", "un chat dort"),
    ("the dog sleeps", "le chien dort"), ("a dog", "un chien"), ("the house", "la maison"),
    ("a house", "une maison"), ("the cat eats", "le chat mange"),
    ("a dog eats the cat", "un chien mange le chat"), ("the big house", "la grande maison"),
    ("a big dog", "un grand chien"), ("the cat sleeps", "le chat dort"),
]
ITERATIONS = 4


@pytest.fixture(scope="module")
def corpus():
    tokenizer = WordpieceTokenizer.learn([side for pair in PAIRS for side in pair], vocab_size=70,
                                         max_characters=30)
    sources, targets = shortlists.wordpiece_pairs(PAIRS, tokenizer.tokenize)
    return tokenizer, sources, targets


def pieces(tokenizer, text):
    """Ids of ``text`` by the tokenizer's pure-Python reference segmentation (not the graph op)."""
    return [tokenizer.pieces.index(p) for word in text.split() for p in tokenizer.segment_word(word)]


def brute_force_model1(id_pairs, vocab_size, iterations):
    """IBM Model 1 as the textbook writes it: t(f|e) from uniform, loops over every pair and position."""
    null = "NULL"
    t = defaultdict(lambda: 1.0 / vocab_size)
    for _ in range(iterations):
        count, total = defaultdict(float), defaultdict(float)
        for source, target in id_pairs:
            words = list(source) + [null]
            for f in target:
                z = sum(t[(f, e)] for e in words)
                for e in words:
                    share = t[(f, e)] / z
                    count[(f, e)] += share
                    total[e] += share
        t = defaultdict(float, {(f, e): c / total[e] for (f, e), c in count.items()})
    return {(e if e != null else vocab_size, f): value for (f, e), value in t.items()}


def test_wordpiece_pairs_are_the_tokenizers_pieces(corpus):
    tokenizer, sources, targets = corpus
    assert [list(s) for s in sources] == [pieces(tokenizer, s) for s, _ in PAIRS]
    assert [list(t) for t in targets] == [pieces(tokenizer, t) for _, t in PAIRS]
    short_sources, _ = shortlists.wordpiece_pairs(PAIRS, tokenizer.tokenize, max_length=2)
    assert len(short_sources) == sum(len(pieces(tokenizer, s)) <= 2 and len(pieces(tokenizer, t)) <= 2
                                     for s, t in PAIRS)


def test_model1_and_the_table_match_a_brute_force_rederivation(corpus):
    tokenizer, sources, targets = corpus
    vocab = tokenizer.vocab_size
    expected = brute_force_model1(list(zip(sources, targets)), vocab, ITERATIONS)
    e, f, t = shortlists.lexical_translation_probabilities(sources, targets, vocab, ITERATIONS)
    assert {(int(a), int(b)) for a, b in zip(e, f)} == set(expected)  # the co-occurring pairs (+ NULL)
    for a, b, value in zip(e, f, t):
        assert value == pytest.approx(expected[(int(a), int(b))], rel=1e-9)
    # Each source piece's probabilities sum to 1 over the target pieces (a distribution t(.|e)).
    np.testing.assert_allclose(np.bincount(e, weights=t)[np.unique(e)], 1.0, rtol=1e-9)

    top_k = 3
    shortlist = shortlists.learn_shortlist(sources, targets, vocab, top_k=top_k, frequent=2,
                                           iterations=ITERATIONS)
    assert shortlist.table.shape == (vocab, top_k) and shortlist.top_k == top_k and shortlist.frequent == 2
    for source_piece in range(vocab):
        row = sorted(((value, -f_) for (e_, f_), value in expected.items() if e_ == source_piece),
                     reverse=True)
        kept = [int(piece) for piece in shortlist.table[source_piece] if piece != EOS_ID]
        assert len(kept) == min(top_k, len(row))  # padded with EOS only where the piece has fewer
        if not row:
            continue
        values = {-negative: value for value, negative in row}
        np.testing.assert_allclose(shortlist.probabilities[source_piece, : len(kept)],
                                   [values[piece] for piece in kept], rtol=1e-6)
        # The k best: nothing left out is more likely than the least likely kept (ties either way).
        left_out = [value for piece, value in values.items() if piece not in kept]
        assert not left_out or max(left_out) <= min(values[piece] for piece in kept) * (1 + 1e-9)
    # The estimate finds the word-for-word translations of this corpus.
    for english, french in [("cat", "chat"), ("dog", "chien"), ("house", "maison")]:
        [source_piece] = pieces(tokenizer, english)
        [target_piece] = pieces(tokenizer, french)
        assert shortlist.table[source_piece, 0] == target_piece


def test_frequency_ranking_counts_target_pieces(corpus):
    tokenizer, _, targets = corpus
    ranking = shortlists.frequency_ranking(targets, tokenizer.vocab_size)
    counts = Counter(int(piece) for target in targets for piece in target)
    expected = sorted((i for i in range(tokenizer.vocab_size) if i not in (PAD_ID, BOS_ID, EOS_ID)),
                      key=lambda i: (-counts[i], i))
    assert ranking.tolist() == expected


@pytest.mark.parametrize("frequent,minimum", [(2, 1), (0, 6)])
def test_allowed_ids_and_the_coverage_claimed(corpus, frequent, minimum):
    """The allowed ids of a batch are the NumPy union of its table rows, the frequent pieces and EOS; every
    reference piece the coverage says is allowed is among them, and every other one is not."""
    tokenizer, sources, targets = corpus
    shortlist = shortlists.learn_shortlist(sources, targets, tokenizer.vocab_size, top_k=2, frequent=frequent,
                                           iterations=ITERATIONS)
    tables = shortlists.ShortlistTables(shortlist)
    decoded = [np.append(source, EOS_ID).astype(np.int32) for source in sources]  # as the translator decodes
    batch = np.zeros([3, max(len(s) for s in decoded[:3])], np.int32)  # PAD_ID fills the rest
    for row, source in enumerate(decoded[:3]):
        batch[row, : len(source)] = source
    allowed = tables.allowed_ids(batch, minimum).numpy()
    common = set(shortlist.ranking[: max(frequent, minimum)])
    expected = set(shortlist.table[batch].ravel()) | common | {EOS_ID}
    assert allowed.tolist() == sorted(expected)
    assert len(set(allowed) - {EOS_ID}) >= minimum  # a beam of width `minimum` can always fill

    coverage = shortlists.reference_coverage(tables, decoded, targets, minimum=minimum)
    assert len(coverage.covered) == len(PAIRS)
    claimed = total = 0
    for source, reference, covered, size in zip(decoded, targets, coverage.covered, coverage.allowed_sizes):
        own = set(tables.allowed_ids(source[None, :], minimum).numpy().tolist())
        assert size == len(own)
        assert [int(piece) in own for piece in reference] == covered.tolist()
        assert own >= {int(piece) for piece in reference[covered]}
        claimed += int(covered.sum())
        total += len(reference)
    assert coverage.fraction == pytest.approx(claimed / total)


def test_the_file_round_trips_and_bad_files_are_refused(corpus, tmp_path):
    tokenizer, sources, targets = corpus
    shortlist = shortlists.learn_shortlist(sources, targets, tokenizer.vocab_size, top_k=4, frequent=3,
                                           iterations=2)
    model_dir = str(tmp_path)
    assert model_files.read_shortlist(model_dir) is None and not model_files.has_shortlist(model_dir)
    path = model_files.write_shortlist(model_dir, shortlist)
    assert path == str(tmp_path / model_files.SHORTLIST_FILE) and sorted(p.name for p in tmp_path.iterdir()) == [
        model_files.SHORTLIST_FILE]  # no temporary file left
    loaded = model_files.read_shortlist(model_dir, vocab_size=tokenizer.vocab_size)
    for field in ("table", "probabilities", "ranking"):
        np.testing.assert_array_equal(getattr(loaded, field), getattr(shortlist, field))
    assert (loaded.top_k, loaded.frequent) == (4, 3)
    with pytest.raises(model_files.ModelDirError, match="built for a vocabulary of .* pieces, the model has 9"):
        model_files.read_shortlist(model_dir, vocab_size=9)
    (tmp_path / model_files.SHORTLIST_FILE).write_bytes(b"not a shortlist")
    with pytest.raises(model_files.ModelDirError, match="not a readable shortlist"):
        model_files.read_shortlist(model_dir)
    with pytest.raises(ValueError, match="top_k must be at least 1"):
        shortlists.learn_shortlist(sources, targets, tokenizer.vocab_size, top_k=0, frequent=3, iterations=2)
