"""The exported signatures refuse bad alpha, beta and beamsize themselves (what TF Serving runs), and the
Python Translator refuses them before tracing anything; a good call afterwards answers as before."""

import math

import numpy as np
import pytest
import tensorflow as tf
from serving_helpers import savedmodel_signatures

from gnmt_tf import model_files
from gnmt_tf.config import DecodingConfig
from gnmt_tf.inference.translator import TranslatorModule, Translator

SENTENCES = ["three one four", "nine"]
GOOD = {"alpha": 0.2, "beta": 0.2, "beamsize": 3.0}
# (option, value as a float32 input holds it, how the message writes it); 1e400 is inf as a float
BAD = [("alpha", math.nan, "nan"), ("alpha", math.inf, "inf"), ("alpha", float("1e400"), "inf"),
       ("alpha", -1.0, "-1"), ("beta", -0.5, "-0.5"), ("beamsize", -5.0, "-5"), ("beamsize", math.nan, "nan"),
       ("beamsize", math.inf, "inf")]
IDS = [f"{name}={text}" for name, _, text in BAD]


pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test


@pytest.fixture(scope="module")
def signatures(exported_number_model):
    """(signature, **options) -> outputs of the exported model loaded with tf.saved_model.load, and the
    answers of the good options, taken before any bad call."""
    call = savedmodel_signatures(exported_number_model)
    before = {name: call(name, SENTENCES, **GOOD) for name in ("translate_with_options", "translate_nbest")}
    return call, before


def _hint(name):
    return " (1e9 never prunes)" if name == "beamsize" else ""


@pytest.mark.parametrize("signature", ["translate_with_options", "translate_nbest"])
@pytest.mark.parametrize("name, value, text", BAD, ids=IDS)
def test_a_signature_refuses_a_bad_option_and_then_answers_as_before(signatures, signature, name, value, text):
    call, before = signatures
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        call(signature, SENTENCES, **dict(GOOD, **{name: value}))
    assert f"assertion failed: [{name} must be a finite float32 >= 0, got {text}{_hint(name)}]" in error.value.message
    after = call(signature, SENTENCES, **GOOD)
    assert sorted(after) == sorted(before[signature])
    for key, expected in before[signature].items():
        np.testing.assert_array_equal(after[key], expected, err_msg=key)


def test_the_default_signature_has_no_options_and_translates(signatures):
    call, before = signatures
    assert set(call.signatures["serving_default"].structured_input_signature[1]) == {"sentences"}
    default = call("serving_default", SENTENCES)  # the config's options are GOOD
    assert [t.decode() for t in default["translations"]] == ["trois un quatre", "neuf"]
    np.testing.assert_array_equal(default["translations"], before["translate_with_options"]["translations"])


# ------------------------------------------------------------------------------------------ the Python API
@pytest.fixture(scope="module")
def translator(trained_number_model):
    model_dir, _ = trained_number_model
    model, tokenizer, config = model_files.load_model_dir(model_dir)
    return Translator(model, tokenizer, config.decoding)


@pytest.mark.parametrize("name, value, text", BAD, ids=IDS)
def test_the_translator_refuses_a_bad_option_before_searching(translator, name, value, text):
    message = f"{name} must be a finite float32 >= 0, got {text}{_hint(name)}"
    with pytest.raises(ValueError) as error:
        translator.translate_nbest(SENTENCES, **{name: value})
    assert str(error.value) == message
    assert translator.module._compiled == {}  # refused before anything was traced
    if name != "beamsize":  # scoring takes alpha and beta
        with pytest.raises(ValueError) as error:
            translator.score(SENTENCES, ["trois un quatre", "neuf"], **{name: value})
        assert str(error.value) == message


def test_the_translator_translates_after_a_refusal(translator):
    with pytest.raises(ValueError):
        translator.translate(SENTENCES, beamsize=-5.0)
    assert [t.text for t in translator.translate(SENTENCES)] == ["trois un quatre", "neuf"]


def test_a_module_with_bad_defaults_is_refused(translator):
    """translate uses the config's options without graph checks (TFLite has no Assert kernel): they
    are checked when the module is made, even from a DecodingConfig that was never validated."""
    with pytest.raises(ValueError, match=r"^beamsize must be a finite float32 >= 0, got inf \(1e9 never prunes\)$"):
        TranslatorModule(translator.model, translator.tokenizer, DecodingConfig(beamsize=math.inf))
