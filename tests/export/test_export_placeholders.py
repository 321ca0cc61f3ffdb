"""Placeholders kept by construction, in every artifact: the Python API, the SavedModel and TFLite.

A tiny model with random weights knows nothing of placeholders; that every translation still holds each
placeholder of its source exactly once is the masking, the constrained search and the restoring at work,
and the exported artifacts must give the Python API's translations exactly."""

import pytest
import tensorflow as tf
import tf_keras as keras

from export.tflite import TFLiteTranslator, _state, convert_to_tflite, custom_ops, list_ops
from gnmt_tf.config import load_config
from gnmt_tf.inference.results import texts
from gnmt_tf.inference.translator import Translator
from gnmt_tf.localization import placeholders
from gnmt_tf.data.tokenizer import WordpieceTokenizer
from gnmt_tf.localization.in_graph import PlaceholderMasking, VERBATIM, slot_ids
from helpers import SHALLOW, random_gnmt, slot_vocabulary

SOURCES = [
    "open %s",
    "save the file %s to %s",
    "<b>delete</b> %(name)s in {0}",
    "new folder",
    "",
    "copy %d of %d files to ${HOME}",
    '<a href="{url}">open</a> the &amp; file',
]


@pytest.fixture(scope="module")
def translator():
    keras.utils.set_random_seed(4321)
    config = load_config("tiny", overrides=SHALLOW)
    tokenizer = slot_vocabulary()
    config.model.vocab_size = tokenizer.vocab_size
    model = random_gnmt(config)
    return Translator(model, tokenizer, config.decoding, text=PlaceholderMasking(slot_ids(tokenizer)))


def test_every_placeholder_is_kept_exactly_once(translator):
    translations = texts(translator.translate(SOURCES))
    for source, translation in zip(SOURCES, translations):
        assert placeholders.check(source, translation).ok, (source, translation)
    assert translations[SOURCES.index("")] == ""


GLOSSARY = [("file", "dossier-fichier"), ("new folder", "nouveau répertoire")]


def test_every_glossary_term_is_in_the_translation(translator):
    """Required terms by construction too; a sentence without a term translates as without the glossary."""
    with_terms = texts(translator.translate(SOURCES, glossary=GLOSSARY))
    without = texts(translator.translate(SOURCES))
    for source, translation, plain in zip(SOURCES, with_terms, without):
        present = [target for term, target in GLOSSARY if f" {term} " in f" {source} "]
        assert all(target in translation for target in present), (source, translation)
        assert placeholders.check(source, translation).ok
        if not present:
            assert translation == plain, source
    assert any(f" {term} " in f" {s} " for term, _ in GLOSSARY for s in SOURCES)  # the test has terms


def test_a_glossary_needs_a_masking_model(translator):
    verbatim = Translator(translator.model, translator.tokenizer, translator.decoding, text=VERBATIM)
    with pytest.raises(ValueError, match="glossary needs a model trained with localization.placeholders"):
        verbatim.translate(["open file"], glossary=GLOSSARY)


def test_a_model_without_slot_tokens_is_refused():
    tokenizer = WordpieceTokenizer.learn(["open the file"], vocab_size=60, max_characters=20)
    with pytest.raises(ValueError, match="trained without localization.placeholders"):
        slot_ids(tokenizer)


def test_the_saved_model_restores_as_the_python_api_does(translator, tmp_path):
    """Its translate_with_glossary signature, saved with the state it reads, without terms (the search of
    serving_default with placeholders alone) and with them; one signature traces in a third of the time
    of all of them."""
    module = translator.module
    tf.saved_model.save(_state(module), str(tmp_path), signatures={"translate_with_glossary": module.translate_with_glossary})
    signature = tf.saved_model.load(str(tmp_path)).signatures["translate_with_glossary"]
    options = {name: tf.constant(value) for name, value in module.default_options.items()}
    for glossary in ([], GLOSSARY):
        terms = [tf.constant([[entry[side] for entry in glossary]] * len(SOURCES), tf.string, [len(SOURCES), len(glossary)])
                 for side in (0, 1)]
        out = signature(sentences=tf.constant(SOURCES), term_sources=terms[0], term_targets=terms[1], **options)
        assert ([t.decode("utf-8") for t in out["translations"].numpy()]
                == texts(translator.translate(SOURCES, glossary=glossary))), glossary


def test_tflite_restores_as_the_python_api_does(translator):
    model = convert_to_tflite(translator.module)
    assert {"TFText>ByteSplitWithOffsets", "TFText>FastWordpieceDetokenize"} <= set(custom_ops(list_ops(model)))
    assert texts(TFLiteTranslator(model).translate(SOURCES)) == texts(translator.translate(SOURCES))
