"""The whole translator as TFLite: builtin + tensorflow-text ops only, identical translations to TF."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from export.tflite import (
    CONCATENATING_RECURRENCE,
    ALLOWED_CUSTOM_OPS,
    TFLiteConversionError,
    check_ops,
    convert_to_tflite,
    custom_ops,
    list_ops,
)
from gnmt_tf.inference.translator import TranslatorModule
from gnmt_tf.layers.cell import GNMTLSTMCell
from gnmt_tf.config import load_config
from gnmt_tf.layers.recurrence import STEPWISE, WRITTEN_GRADIENT, run_lstm
from gnmt_tf.layers.weights import FLOAT_READER
from gnmt_tf.data.tokenizer import WordpieceTokenizer
from helpers import SHALLOW, random_gnmt

WORDS = "the a cat dog sat on mat house red blue green runs quickly slowly over under big small bird tree".split()

TEST_SENTENCES = [
    "",
    "cat",
    "the dog sat on the mat",
    "a big red bird runs quickly over the small green tree",
    "blue house",
    "   ",
    "dog runs slowly under a tree",
    "green",
    "the small bird sat on a big blue mat quickly and the cat runs over it",
    "red red red",
    "zebra café",  # characters outside the alphabet: unknown words
]

TEXT_OPS = {"TFText>WhitespaceTokenizeWithOffsetsV2", "FastWordpieceTokenizeWithOffsets", "TFText>FastWordpieceDetokenize"}


def synthetic_sentences(n, seed=0):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=rng.integers(1, 9))) for _ in range(n)]


@pytest.fixture(scope="module")
def exported():
    """A tiny random GNMT (weights scaled up, EOS made less likely so outputs vary) and its TFLite form.

    At the shallow depth (helpers.SHALLOW): the ops a conversion meets are the same at any depth, and the
    residual layers' TFLite form is checked on the fixture model (test_export_saved_model.py)."""
    keras.utils.set_random_seed(1234)
    config = load_config("tiny", overrides=SHALLOW)
    tokenizer = WordpieceTokenizer.learn(synthetic_sentences(300), vocab_size=120, max_characters=40)
    config.model.vocab_size = tokenizer.vocab_size
    model = random_gnmt(config)
    translator = TranslatorModule(model, tokenizer, config.decoding, max_input_length=12)
    return translator, convert_to_tflite(translator)


def test_only_builtin_and_tensorflow_text_ops(exported):
    _, model = exported
    ops = list_ops(model)
    assert {"WHILE", "FULLY_CONNECTED", "TOPK_V2"} <= set(ops)  # the loops and beam search are in there
    assert not [op for op in ops if op.startswith("Flex")]
    assert set(custom_ops(ops)) == TEXT_OPS
    check_ops(ops)  # does not raise


def test_check_ops_rejects_foreign_custom_and_flex_ops():
    assert TEXT_OPS <= ALLOWED_CUSTOM_OPS
    check_ops(["WHILE", "ADD", *TEXT_OPS])
    with pytest.raises(TFLiteConversionError, match="StridedSlice"):
        check_ops(["WHILE", "STRIDED_SLICE", "StridedSlice", *TEXT_OPS])
    with pytest.raises(TFLiteConversionError, match="RaggedGather.*RaggedRange"):
        check_ops(["ADD", "RaggedGather", "RaggedRange"])
    with pytest.raises(TFLiteConversionError, match="Flex.*FlexTensorListReserve"):
        check_ops(["ADD", "FlexTensorListReserve"])


def test_tflite_translations_are_identical_to_tensorflow(exported):
    pytest.importorskip("ai_edge_litert", reason="the LiteRT interpreter (pip install ai-edge-litert) is needed")
    from export.tflite import TFLiteTranslator

    translator, model = exported
    reference = translator.translate(tf.constant(TEST_SENTENCES))
    expected = [text.decode("utf-8") for text in reference["translations"].numpy()]
    # The tiny random model really produces text of different lengths, so the comparison means something.
    assert expected[0] == expected[5] == ""
    assert all(expected[i] for i in (1, 2, 3, 4, 6, 7, 8, 9, 10))
    assert len(set(expected)) >= 8

    for xnnpack in (True, False):
        tflite = TFLiteTranslator(model, num_threads=1, xnnpack=xnnpack)
        translations = tflite.translate(TEST_SENTENCES)
        assert [t.text for t in translations] == expected
        np.testing.assert_allclose([t.score for t in translations], reference["scores"].numpy(),
                                   rtol=1e-4, atol=1e-4)
        # One at a time (another batch shape) gives the same translations.
        assert [tflite.translate([s])[0].text for s in TEST_SENTENCES[:4]] == expected[:4]
    assert tflite.translate([]) == []


def test_tflite_loops_compute_exactly_what_keras_rnn_computes():
    """The TensorArray-free recurrence used for export is the training recurrence's math, bit for bit, and
    the search's, and all are what ``keras.backend.rnn`` computes with the cell's step (an independent loop)."""
    cell = GNMTLSTMCell(8, init_scale=0.5)
    cell.build((None, 5))
    rng = np.random.default_rng(3)
    inputs = tf.constant(rng.normal(size=(3, 6, 5)).astype(np.float32))
    mask = tf.constant(np.arange(6)[None, :] < np.array([[6], [2], [4]]))

    def run(recurrence):
        @tf.function
        def traced(inputs, mask):
            outputs, (c, m) = run_lstm(cell, inputs, mask, FLOAT_READER, recurrence)
            return outputs, c, m
        return traced(inputs, mask)

    @tf.function
    def keras_rnn(inputs, mask):
        def step(x_t, states):
            output, state = cell.recur(x_t, tuple(states), FLOAT_READER)
            return output, list(state)
        initial = cell.get_initial_state(batch_size=3, dtype=tf.float32)
        _, outputs, (c, m) = keras.backend.rnn(step, cell.project_inputs(inputs, FLOAT_READER), list(initial),
                                               mask=mask, zero_output_for_mask=True)
        return outputs, c, m

    training_path, search_path, export_path = run(WRITTEN_GRADIENT), run(STEPWISE), run(CONCATENATING_RECURRENCE)
    reference = keras_rnn(inputs, mask)
    for a, b, s, r in zip(training_path, export_path, search_path, reference):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        np.testing.assert_array_equal(a.numpy(), s.numpy())
        np.testing.assert_array_equal(a.numpy(), r.numpy())
    assert np.all(export_path[0].numpy()[1, 2:] == 0)  # padding outputs are zero
