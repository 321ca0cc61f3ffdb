"""The in-graph placeholder masking and restoring against the Python reference (placeholders.mask / restore)."""

import random

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf.localization import placeholders
from gnmt_tf.localization.in_graph import Glossary, MaskedBatch, PlaceholderMasking, SlotIds
from gnmt_tf.localization.placeholders import MAX_SLOTS, SLOT_TOKENS

S1, S2, S3 = SLOT_TOKENS[:3]
WORD_IDS, CONTINUATION_IDS = tuple(range(100, 100 + MAX_SLOTS)), tuple(range(200, 200 + MAX_SLOTS))

HAND_WRITTEN = [
    "",
    "no placeholders at all",
    "(%s):",
    "<b>bold</b> and <i>%s</i>",
    '<a href="{url}">%s</a>',  # nesting: the tag holds a placeholder, one placeholder as a whole
    "%s and %s, then %s",  # repeats: a slot each
    "%2$s %1$d %%",
    "%(count)d files in %(dir)s",
    "{0} of {name} {{ handle }}",
    "{count, plural, one {# file} other {# files}}",
    "${HOME}/x",
    "AT&T &amp; &#169; &nope",
    "%CPU %MEM %d",
    "héllo %s wörld — {nom}",
    "tab\t%s\u00a0%d\u2003{0}",
    "%s%s%s",
    " ".join(f"%{i}$s" for i in range(1, 20)),  # more than MAX_SLOTS: the rest stay text
    "<!-- a comment --> <br/> <span weight='bold'>x</span>",
]


@pytest.fixture(scope="module")
def masking():
    return PlaceholderMasking(SlotIds(WORD_IDS, CONTINUATION_IDS))  # any ids: only the constraint reads them


@pytest.fixture(scope="module")
def graph_functions(masking):
    mask = tf.function(masking.mask, input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)
    strings, flags = tf.TensorSpec([None, MAX_SLOTS], tf.string), tf.TensorSpec([None, MAX_SLOTS], tf.bool)
    masked_spec = MaskedBatch(tf.TensorSpec([None], tf.string), strings, flags, flags, tf.TensorSpec([None], tf.int32))
    restore = tf.function(masking.restore, input_signature=[tf.TensorSpec([None], tf.string), masked_spec],
                          autograph=False)
    return mask, restore


def decoded(tensor):
    return [value.decode("utf-8") for value in np.asarray(tensor).reshape(-1).tolist()]


def as_python(masked: MaskedBatch, row: int) -> placeholders.Masked:
    count = int(masked.count[row])
    return placeholders.Masked(
        decoded(masked.text[row : row + 1])[0],
        tuple(placeholders.Placeholder(text, "?", bool(before), bool(after)) for text, before, after in zip(
            decoded(masked.placeholders[row, :count]), masked.glued_before[row, :count].numpy(),
            masked.glued_after[row, :count].numpy())),
    )


def assert_masks_like_python(sentences, graph_functions):
    mask, _ = graph_functions
    masked = mask(tf.constant(sentences))
    for row, sentence in enumerate(sentences):
        expected = placeholders.mask(sentence)
        got = as_python(masked, row)
        assert got.text == expected.text, sentence
        assert [(p.text, p.glued_before, p.glued_after) for p in got.placeholders] == [
            (p.text, p.glued_before, p.glued_after) for p in expected.placeholders], sentence
        # Unused slots are empty and unglued.
        assert decoded(masked.placeholders[row, int(masked.count[row]):]) == [""] * (MAX_SLOTS - len(got.placeholders))
    return masked


def test_hand_written_cases_mask_as_python_does(graph_functions):
    masked = assert_masks_like_python(HAND_WRITTEN, graph_functions)
    assert int(masked.count[HAND_WRITTEN.index("%s and %s, then %s")]) == 3
    assert int(masked.count[-2]) == MAX_SLOTS


def test_restoring_the_masked_text_gives_the_source(graph_functions):
    mask, restore = graph_functions
    masked = mask(tf.constant(HAND_WRITTEN))
    assert decoded(restore(masked.text, masked)) == HAND_WRITTEN


def test_translations_restore_as_python_does(graph_functions):
    """Reordered, repeated, unknown and missing slot tokens, spaced in every way."""
    mask, restore = graph_functions
    sources = ["(%s):", "%s%s", "<b>bold</b> %d", "no placeholder", "{0} and {1}"]
    translations = [f"( {S1} ) :", f"{S2} {S1}", f"{S3}  gras {S1}{S2}.", f"rien {S2} ici", f"{S2} et {S1} {S1}"]
    masked = mask(tf.constant(sources))
    expected = [placeholders.restore(t, placeholders.mask(s).placeholders) for s, t in zip(sources, translations)]
    assert decoded(restore(tf.constant(translations), masked)) == expected
    assert expected[1] == "%s %s" and expected[3] == "rien ici"  # the hand-computed reference


def random_strings(seed, count):
    parts = ["%s", "%d", "%", "s", "<b>", "</b>", "<a href=\"{url}\">", "&amp;", "&", ";", "{", "}", "0", "name",
             "${", "%(n)s", "(", ")", "<!--", "-->", "<", ">", "/", "x", "é", "語", " ", " ", "\u00a0", "\u2003",
             "\t", "%CPU", ":", "$", "=", "'", '"', "{{", "}}", ",", "plural", "1$"]
    rng = random.Random(seed)
    return ["".join(rng.choice(parts) for _ in range(rng.randint(0, 14))) for _ in range(count)]


def test_random_strings_mask_and_restore_as_python_does(graph_functions):
    mask, restore = graph_functions
    sources = random_strings(seed=5, count=400)
    masked = assert_masks_like_python(sources, graph_functions)
    rng = random.Random(6)
    translations = []
    for source in sources:  # the masked words shuffled, with slot tokens added and spacing changed
        words = placeholders.mask(source).text.split(" ") + [rng.choice(SLOT_TOKENS) for _ in range(rng.randint(0, 2))]
        rng.shuffle(words)
        translations.append(rng.choice([" ", "  ", ""]).join(words) + rng.choice(["", " ", "."]))
    expected = [placeholders.restore(t, placeholders.mask(s).placeholders) for s, t in zip(sources, translations)]
    assert decoded(restore(tf.constant(translations), masked)) == expected


def test_a_reserved_character_in_the_text_becomes_unknown(graph_functions):
    """Python's mask refuses it; the graph cannot raise (TFLite), so the character cannot pose as a slot."""
    mask, restore = graph_functions
    masked = mask(tf.constant([f"x{S1}y %s", f"{S2}"]))
    assert decoded(masked.text) == [f"x\u2047y {S1}", "\u2047"]
    assert decoded(restore(masked.text, masked)) == ["x\u2047y %s", "\u2047"]


def test_the_constraint_counts_the_slot_tokens_of_each_source(masking):
    """As often as in the source, as words; glued to a word (a continuation piece), never."""
    ids = tf.constant([[WORD_IDS[0], 5, WORD_IDS[1], WORD_IDS[0], 2], [7, CONTINUATION_IDS[0], 2, 0, 0]], tf.int32)
    constraint = masking.constraint(ids)
    assert tuple(constraint.token_ids) == WORD_IDS + CONTINUATION_IDS
    expected = np.zeros([2, 2 * MAX_SLOTS], np.int32)
    expected[0, 0], expected[0, 1] = 2, 1
    np.testing.assert_array_equal(constraint.required.numpy(), expected)


GLOSSARY = [("file", "fichier"), ("the file", "le fichier"), ("folder", "dossier"), ("%s", "never")]
TERM_CASES = [
    "Delete the file %s or the files, file.",
    "profile file_x file-name (file)",
    "no term here",
    "",
    "folder/file: <b>folder</b>",
    "le fichier été file\u00a0folder",
]


def test_glossary_terms_mask_and_restore_as_python_does(masking):
    """Terms as words only, the longest first, placeholders winning ties; restored as their target terms."""
    glossary = Glossary.of(GLOSSARY, tf.constant(TERM_CASES))
    masked = masking.mask(tf.constant(TERM_CASES), glossary)
    for row, sentence in enumerate(TERM_CASES):
        expected = placeholders.mask(sentence, glossary=GLOSSARY)
        got = as_python(masked, row)
        assert (got.text, [(p.text, p.glued_before, p.glued_after) for p in got.placeholders]) == (
            expected.text, [(p.text, p.glued_before, p.glued_after) for p in expected.placeholders]), sentence
    restored = decoded(masking.restore(masked.text, masked))
    assert restored[0] == "Delete le fichier %s or the files, fichier."  # the hand-computed reference
    assert restored[1] == "profile file_x fichier-name (fichier)"


def test_no_glossary_is_the_empty_glossary(masking):
    sentences = tf.constant(TERM_CASES)
    plain, empty = masking.mask(sentences), masking.mask(sentences, Glossary.of([], sentences))
    assert decoded(plain.text) == decoded(empty.text) == [placeholders.mask(s).text for s in TERM_CASES]


def test_a_models_glossary_applies_to_every_sentence_after_the_requests_own():
    """Its own entries without a request glossary; a request's entry for the same term wins."""
    sentences = tf.constant(["open the file", "no term", "file: %s"])
    own = PlaceholderMasking(SlotIds(WORD_IDS, CONTINUATION_IDS), glossary=[("file", "fichier")])
    assert decoded(own.restore(own.mask(sentences).text, own.mask(sentences))) == [
        "open the fichier", "no term", "fichier: %s"]
    request = Glossary.of([("file", "document"), ("open", "ouvrir")], sentences)
    masked = own.mask(sentences, request)
    assert decoded(own.restore(masked.text, masked)) == [
        placeholders.restore(m.text, m.placeholders) for m in (
            placeholders.mask(s, glossary=[("file", "document"), ("open", "ouvrir"), ("file", "fichier")])
            for s in ["open the file", "no term", "file: %s"])]
    assert decoded(own.restore(masked.text, masked))[0] == "ouvrir the document"
