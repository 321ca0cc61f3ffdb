"""Hard word alignments (gnmt_tf.inference.alignment): per target word, the source word of most attention.

Against a NumPy re-derivation on hand-built attention; the word mapping of placeholder masking against the
restored texts' ``str.split``; and through a tiny random model (with and without masking, as
tests/export/test_export_placeholders.py builds it): every target word aligned exactly once, in the Python
API, the SavedModel and the command line alike."""

import re

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from export.tflite import _state
from gnmt_tf.config import load_config
from gnmt_tf.data.tokenizer import WordpieceTokenizer
from gnmt_tf.inference.alignment import alignment_pairs, piece_words, word_alignments, word_initial_table
from gnmt_tf.inference.translator import Translator
from gnmt_tf.localization import placeholders
from gnmt_tf.localization.in_graph import VERBATIM, Glossary, PlaceholderMasking, Unmasked, slot_ids
from gnmt_tf.localization.placeholders import SLOT_TOKENS
from gnmt_tf.vocab import SPECIAL_TOKENS
from helpers import SHALLOW, random_gnmt, run_in_process, slot_vocabulary

pytestmark = pytest.mark.draws_nothing_random  # every draw has its own seeded generator

MARK = "\u2581"
S1, S2 = SLOT_TOKENS[:2]


# --------------------------------------------------------------------------------- the NumPy re-derivation
def numpy_words(pieces):
    """The word of each piece (-1: none): "▁" or UNK starts one, so does a row's first piece; EOS, PAD and
    all after EOS are no word's."""
    words, word, ended = [], -1, False
    for piece in pieces:
        ended = ended or piece == "</s>"
        if ended or piece == "<pad>":
            words.append(-1)
            continue
        if piece.startswith(MARK) or piece == "<unk>" or word < 0:
            word += 1
        words.append(word)
    return np.array(words)


def numpy_alignment(attention, source_pieces, target_pieces):
    """The source word of each target word: attention [T, S] summed per (target word, source word), argmax."""
    source_words, target_words = numpy_words(source_pieces), numpy_words(target_pieces)
    sums = np.zeros([target_words.max() + 1, max(source_words.max() + 1, 1)])
    for j, target_word in enumerate(target_words):
        for i, source_word in enumerate(source_words):
            if target_word >= 0 and source_word >= 0:
                sums[target_word, source_word] += attention[j, i]
    return sums.argmax(axis=1).tolist()


PIECES = list(SPECIAL_TOKENS) + [MARK + "a", "a", MARK + "b", "b", MARK + "c", "c"]
IDS = {piece: index for index, piece in enumerate(PIECES)}


def graph_alignment(attention, sources, targets):
    """word_alignments of pieces given as strings (sources [batch, S], targets [batch, n, T]), unmasked."""
    source_ids = tf.constant([[IDS[p] for p in row] for row in sources], tf.int32)
    target_ids = tf.constant([[[IDS[p] for p in row] for row in rows] for rows in targets], tf.int32)
    unmasked = Unmasked(tf.constant([""] * len(sources)))
    return word_alignments(tf.constant(attention, tf.float32), target_ids, source_ids,
                           tf.constant(word_initial_table(PIECES)), VERBATIM, unmasked, unmasked).numpy()


def test_words_sum_their_pieces_and_eos_counts_for_none():
    source = [MARK + "a", "b", MARK + "c", "</s>"]  # words: "ab" (pieces 0, 1) and "c"
    target = [MARK + "b", "c", MARK + "a", "</s>"]  # words: "bc" (steps 0, 1) and "a"; the EOS step
    attention = np.array([
        [0.0, 0.3, 0.4, 0.3],  # step 0 alone would take word 1 (piece 2)...
        [0.35, 0.0, 0.05, 0.6],  # ... its word's steps sum to 0.65 on word 0; the EOS column is no word
        [0.1, 0.1, 0.3, 0.5],  # word 1 by 0.3 to 0.2, the EOS column the largest
        [0.9, 0.0, 0.1, 0.0],  # the EOS step: counted, it would give "a" word 0
    ])
    assert numpy_alignment(attention, source, target) == [0, 1]
    assert graph_alignment(attention[None, None], [source], [[target]]).tolist() == [[[0, 1]]]


def test_random_attention_as_numpy_derives_it():
    rng = np.random.default_rng(7)
    batch, n, steps, width = 3, 2, 7, 6
    body = PIECES[3:]  # UNK and the pieces: multi-piece words, leading continuation pieces
    sources, targets, expected = [], [], []
    attention = rng.dirichlet(np.full(width, 0.3), size=(batch, n, steps))
    for b in range(batch):
        length = rng.integers(1, width)  # source pieces before EOS
        sources.append(list(rng.choice(body, length)) + ["</s>"] + ["<pad>"] * (width - 1 - length))
        rows = []
        for _ in range(n):
            produced = rng.integers(0, steps)  # target pieces before EOS (0: an EOS alone)
            rows.append(list(rng.choice(body, produced)) + ["</s>"] + ["<pad>"] * (steps - 1 - produced))
        targets.append(rows)
    got = graph_alignment(attention, sources, targets)
    for b in range(batch):
        for k in range(n):
            want = numpy_alignment(attention[b, k], sources[b], targets[b][k])
            assert got[b, k].tolist() == want + [-1] * (got.shape[2] - len(want)), (b, k)
    continuations = ("a", "b", "c")
    assert any(piece in continuations for rows in targets for row in rows for piece in row[1:])  # multi-piece


def test_an_empty_source_has_no_target_words():
    attention = np.full([1, 1, 2, 1], 1.0)
    assert graph_alignment(attention, [["</s>"]], [[[MARK + "a", "</s>"]]]).tolist() == [[[-1]]]


# --------------------------------------------------------------------------------- masked words -> the user's
ALPHABET = "abcdefghijklmnopqrstuvwxyz():<>/.&;=\"{}%$-,"


@pytest.fixture(scope="module")
def character_tokenizer():
    """Every character of ALPHABET and the slot tokens as single-character pieces, both forms."""
    characters = list(ALPHABET) + list(SLOT_TOKENS)
    return WordpieceTokenizer(list(SPECIAL_TOKENS) + [form for c in characters for form in (MARK + c, c)])


def restored_words(tokenizer, text, texts, masked):
    pieces = piece_words(tokenizer.tokenize(tf.constant(texts)).to_tensor(),
                         tf.constant(word_initial_table(tokenizer.pieces)))
    restored = text.restored_words(pieces.words, masked)
    return restored.first.numpy(), restored.last.numpy(), restored.count.numpy().tolist()


MASKED_SOURCES = ["(%s):", "<b>x</b>", "<b>x</b> y", '<a href="u">x</a> y', "%s %s", "%s%s", "a, %s.",
                  "{count, plural, one {# file} other {# files}}", "%(a)s: no placeholder", "${home}/x and y"]


def test_the_words_of_masked_sources_are_those_of_the_sentences(character_tokenizer):
    masking = PlaceholderMasking(slot_ids(character_tokenizer))
    masked = masking.mask(tf.constant(MASKED_SOURCES))
    first, last, count = restored_words(character_tokenizer, masking, masked.text, masked)
    assert count == [len(sentence.split()) for sentence in MASKED_SOURCES]
    # "( S1 ):", "S1 x S2": one word; "S1 x S2 y": y is the second; S1 of '<a href="u">' spans two words
    assert (first[0, :3].tolist(), last[0, :3].tolist()) == ([0, 0, 0], [0, 0, 0])
    assert (first[2, :4].tolist(), last[2, :4].tolist()) == ([0, 0, 0, 1], [0, 0, 0, 1])
    assert (first[3, :4].tolist(), last[3, :4].tolist()) == ([0, 1, 1, 2], [1, 1, 1, 2])
    # Without masking, the same words are themselves.
    unmasked = Unmasked(tf.constant(MASKED_SOURCES))
    _, _, plain = restored_words(character_tokenizer, VERBATIM, MASKED_SOURCES, unmasked)
    assert plain == count


def test_the_words_of_translations_are_those_of_their_restored_texts(character_tokenizer):
    masking = PlaceholderMasking(slot_ids(character_tokenizer))
    sources = ["(%s):", "<b>x</b> y", "<b>x</b> y", '<a href="u">x</a>', "%s%s", "a, %s."]
    translations = [f"z ( {S1} ):", f"{S2} z {S1} w", f"{S1} w {S2}", f"{S2} {S1} z", f"{S2} {S1}", f"{S1} b"]
    masked = masking.mask(tf.constant(sources))
    restored = [t.decode("utf-8") for t in masking.restore(tf.constant(translations), masked).numpy()]
    _, _, count = restored_words(character_tokenizer, masking, translations, masked)
    assert count == [len(text.split()) for text in restored], restored
    assert restored[0] == "z (%s):" and count[0] == 2


def test_a_glossary_term_counts_as_the_source_words_of_the_sentence(character_tokenizer):
    masking = PlaceholderMasking(slot_ids(character_tokenizer))
    sentences = tf.constant(["open new folder now"])
    with_targets = masking.mask(sentences, Glossary.of([("new folder", "dossier")], sentences))
    with_sources = masking.mask(sentences, Glossary.of([("new folder", "new folder")], sentences))
    assert restored_words(character_tokenizer, masking, with_targets.text, with_sources)[2] == [4]
    # The target term's words would be counted: "dossier", one word.
    assert restored_words(character_tokenizer, masking, with_targets.text, with_targets)[2] == [3]


# --------------------------------------------------------------------------------- a tiny random model
SOURCES = ["open %s", "(%s):", "<b>x</b>", "save the file %s to %s", "", "new folder",
           '<a href="{url}">open</a> the &amp; file', "copy %d of %d files"]


@pytest.fixture(scope="module")
def translators():
    """The same random model with placeholder masking and without: {"masked": ..., "verbatim": ...}."""
    keras.utils.set_random_seed(4321)
    config = load_config("tiny", overrides={**SHALLOW, "decoding.beam_width": 2})
    tokenizer = slot_vocabulary()
    config.model.vocab_size = tokenizer.vocab_size
    model = random_gnmt(config)
    masking = PlaceholderMasking(slot_ids(tokenizer))
    return {"masked": Translator(model, tokenizer, config.decoding, text=masking),
            "verbatim": Translator(model, tokenizer, config.decoding, text=VERBATIM)}


def assert_every_target_word_once(source, translation):
    seen = (source, translation.text, translation.alignment)
    assert [target for _, target in translation.alignment] == list(range(len(translation.text.split()))), seen
    assert all(0 <= s < len(source.split()) for s, _ in translation.alignment), seen


# A search is traced once per translator and settings (n_best, attention or not): the tests share them (beam
# width 2; n-best lists of 2 and best translations), the masked translator's n-best lists only.
@pytest.mark.parametrize("kind", ["masked", "verbatim"])
def test_every_target_word_is_aligned_once_to_a_source_word(translators, kind):
    translator = translators[kind]
    nbest = translator.translate_nbest(SOURCES, n_best=2, return_alignment=True)
    for source, hypotheses in zip(SOURCES, nbest):
        assert hypotheses or not source
        for hypothesis in hypotheses:
            assert_every_target_word_once(source, hypothesis)
            assert hypothesis.attention is None  # not asked for
            # Every hypothesis of a masked n-best list keeps the placeholders (the constrained search).
            assert kind == "verbatim" or placeholders.check(source, hypothesis.text).ok, (source, hypothesis.text)
    assert any(len(h.text.split()) > 1 for hypotheses in nbest for h in hypotheses)
    unasked = translator.translate_nbest(SOURCES, n_best=2, return_attention=True)
    assert [[h.text for h in hypotheses] for hypotheses in unasked] == [[h.text for h in hypotheses]
                                                                         for hypotheses in nbest]
    assert all(h.alignment is None for hypotheses in unasked for h in hypotheses)


def test_translate_gives_the_best_translations_alignment(translators):
    translator = translators["verbatim"]
    nbest = translator.translate_nbest(SOURCES, n_best=2, return_alignment=True)
    best = translator.translate(SOURCES, return_alignment=True)
    assert [b.text for b in best] == [h[0].text if h else "" for h in nbest]
    assert [b.alignment for b in best] == [h[0].alignment if h else None for h in nbest]


def test_the_saved_model_aligns_as_the_python_api_does(translators, tmp_path):
    # Without masking: a masked translator's SavedModel (its alignments are the same function of the same
    # masked rows) takes 11 s more to trace, load and run.
    translator = translators["verbatim"]
    module = translator.module
    tf.saved_model.save(_state(module), str(tmp_path), signatures={"translate_nbest": module.translate_nbest})
    options = {name: tf.constant(value) for name, value in module.default_options.items()}
    nbest_signature = tf.saved_model.load(str(tmp_path)).signatures["translate_nbest"]
    out = nbest_signature(sentences=tf.constant(SOURCES), **options)
    assert set(out) == {"translations", "scores", "lengths", "attention", "source_pieces", "target_pieces",
                        "alignments"}
    alignments = out["alignments"].numpy()
    nbest = translator.translate_nbest(SOURCES, n_best=module.n_best, return_alignment=True)
    for i, hypotheses in enumerate(nbest):
        for rank, hypothesis in enumerate(hypotheses):
            assert alignment_pairs(alignments[i, rank]) == hypothesis.alignment, SOURCES[i]
        if not hypotheses:  # the empty sentence
            assert (alignments[i] == -1).all()


# --------------------------------------------------------------------------------- the command line
def translate_command(translator, monkeypatch, *args, stdin):
    from gnmt_tf.cli import common

    monkeypatch.setattr(common, "load_translator", lambda args: (translator, None, None))
    return run_in_process(["python", "-m", "gnmt_tf.translate", "--model-dir", "unused", *args], stdin=stdin)


PAIRS = r"(\d+-\d+( \d+-\d+)*)?"


def pairs_text(translation):
    return " ".join(f"{source}-{target}" for source, target in translation.alignment or [])


def test_the_command_line_writes_the_alignment_after_each_translation(translators, monkeypatch):
    translator = translators["verbatim"]
    lines = ["open %s", "", "(%s):"]
    result = translate_command(translator, monkeypatch, "--alignments", stdin="\n".join(lines) + "\n")
    assert result.returncode == 0, result.stderr[-3000:]
    written = result.stdout.splitlines()
    assert len(written) == 3 and written[1] == " ||| "  # an empty sentence: empty translation and alignment
    best = translator.translate(lines, return_alignment=True)
    for line, translation in zip(written, best):
        assert re.fullmatch(r".* \|\|\| " + PAIRS, line), line
        assert line == f"{translation.text} ||| {pairs_text(translation)}"

    result = translate_command(translator, monkeypatch, "--alignments", "--n-best", "2", stdin="open %s\n\n")
    assert result.returncode == 0, result.stderr[-3000:]
    entries = result.stdout.splitlines()  # the blank line gets none
    assert all(re.fullmatch(r"0 \|\|\| .* \|\|\| -?\d+\.\d{4} \|\|\| " + PAIRS, e) for e in entries), entries
    nbest = translator.translate_nbest(["open %s"], n_best=2, return_alignment=True)[0]
    assert [entry.split(" ||| ")[3] for entry in entries] == [pairs_text(h) for h in nbest]


def test_alignments_are_for_lines_not_for_a_catalog(monkeypatch, tmp_path):
    catalog = tmp_path / "messages.pot"
    catalog.write_text('msgid ""\nmsgstr ""\n', encoding="utf-8")
    result = translate_command(None, monkeypatch, "--po", str(catalog), "--alignments", stdin="")
    assert result.returncode == 2 and "--alignments" in result.stderr, result.stderr
