"""model.tied_embeddings: one table is the source and target embeddings and the softmax weights
(Press & Wolf 2017), through every path that reads embeddings: training, checkpoints, int8, export."""

import os

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from gnmt_tf import model_files
from gnmt_tf.config import load_config
from gnmt_tf.data.tokenizer import WordpieceTokenizer
from gnmt_tf.inference.translator import Translator
from gnmt_tf.layers.weights import FLOAT_READER, WeightReader
from gnmt_tf.models.ensemble import Ensemble
from gnmt_tf.models.gnmt import GNMT, unpack_batch
from gnmt_tf.models.losses import SequenceCrossEntropy
from gnmt_tf.quantization.weights import Int8Weights
from gnmt_tf.vocab import BOS_ID, EOS_ID
from helpers import SHALLOW_MODEL, copy_task, number_word_pairs, random_ids, tiny_model_config

TIED = dict(SHALLOW_MODEL, tied_embeddings=True)  # the depth changes nothing the embeddings do


def build(config, weight_scale=None, seed=0):
    model = GNMT(config)
    model.build()
    if weight_scale is not None:
        rng = np.random.default_rng(seed)
        for weight in model.trainable_weights:
            weight.assign(rng.uniform(-weight_scale, weight_scale, weight.shape).astype(np.float32))
    return model


def softmax_kernel(model) -> np.ndarray:
    return model.decoder.softmax_projection.kernel.numpy()


def test_one_table_serves_as_both_embeddings_and_the_softmax():
    # 50 wordpieces: no LSTM kernel of the tiny sizes is 50 x 32 (the tiny config's 64 is 4 x 16 units)
    tied = build(tiny_model_config(vocab_size=50, **TIED))
    untied = build(tiny_model_config(vocab_size=50, **SHALLOW_MODEL))
    vocab, width = tied.model_config.vocab_size, tied.model_config.units

    def tables(model):  # every variable that holds a row or a column per wordpiece of that width
        return [w.name for w in model.weights if sorted(w.shape.as_list()) == sorted([vocab, width])]

    assert tables(tied) == ["decoder/softmax/kernel:0"]
    assert len(tables(untied)) == 3
    assert untied.count_params() - tied.count_params() == 2 * vocab * width
    # The variables they share keep their names (and so their checkpoint keys).
    assert {w.name for w in tied.weights} == {w.name for w in untied.weights} - {
        "source_embedding/embeddings:0", "target_embedding/embeddings:0"}
    # Nothing is stored a row at a time besides the product kernels; an ensemble asks each member.
    assert tied.embedding_tables() == []
    assert [t.name for t in Ensemble([tied, untied]).embedding_tables()] == [
        t.name for t in untied.embedding_tables()]


def test_source_and_target_embeddings_are_the_transposed_softmax_kernel(rng):
    model = build(tiny_model_config(**TIED), weight_scale=0.5)
    ids = random_ids(rng, 3, 5, model.model_config.vocab_size)
    table = softmax_kernel(model).T  # [vocab, units]: row v is column v of the kernel
    np.testing.assert_array_equal(model.embed_source(ids).numpy(), table[ids])
    np.testing.assert_array_equal(model.embed_target(ids[:, 0]).numpy(), table[ids[:, 0]])
    # A search's snapshot, its kernels read once, looks up the same numbers.
    snapshot = FLOAT_READER.reading_once(model.product_kernels(), rows=16)
    np.testing.assert_array_equal(model.embed_target(ids, snapshot).numpy(), table[ids])


def test_a_training_step_moves_the_table_by_the_gradients_of_all_three_uses(rng):
    """The tied kernel's update is -lr x (softmax gradient + source and target embedding gradients,
    transposed), each computed on an untied model whose three tables hold the same numbers."""
    tied = build(tiny_model_config(**TIED), weight_scale=0.3)
    untied = build(tiny_model_config(**SHALLOW_MODEL))
    by_name = {w.name: w.numpy() for w in tied.weights}
    kernel = by_name["decoder/softmax/kernel:0"]
    for w in untied.weights:
        w.assign(kernel.T if w.name.endswith("embedding/embeddings:0") else by_name[w.name])
    source, target_in, target_out = copy_task(rng, 4, tied.model_config.vocab_size)
    learning_rate = 0.5
    for model in (tied, untied):
        model.compile(optimizer=keras.optimizers.SGD(learning_rate), loss=SequenceCrossEntropy())
    batch = ((source, target_in), target_out)

    with tf.GradientTape() as tape:
        loss, _ = untied.objective.loss(untied, unpack_batch(batch), training=True, weights=FLOAT_READER)
    uses = [untied.decoder.softmax_projection.kernel, untied.source_embedding.embeddings,
            untied.target_embedding.embeddings]
    softmax_gradient, source_gradient, target_gradient = (
        tf.convert_to_tensor(g).numpy() for g in tape.gradient(loss, uses))
    assert min(np.abs(g).max() for g in (softmax_gradient, source_gradient, target_gradient)) > 1e-4

    tied.train_step(batch)
    moved = softmax_kernel(tied) - kernel
    expected = -learning_rate * (softmax_gradient + source_gradient.T + target_gradient.T)
    np.testing.assert_allclose(moved, expected, rtol=1e-4, atol=1e-7)


# ------------------------------------------------------------------------------ a model directory
SENTENCES = ["three one four", "", "nine", "zero zero seven five two one", "eight six"]


@pytest.fixture(scope="module")
def tied_model_dir(tmp_path_factory):
    """A tied shallow tiny model with large random weights (so that its outputs vary), saved as a model
    directory: config, wordpieces, a dev split and one checkpoint."""
    keras.utils.set_random_seed(1234)
    pairs = number_word_pairs(60, seed=3)
    tokenizer = WordpieceTokenizer.learn([s for p in pairs for s in p], vocab_size=64, max_characters=40)
    config = load_config("tiny", overrides={f"model.{k}": v for k, v in TIED.items()})
    config.model.vocab_size = tokenizer.vocab_size
    model = build(config.model, weight_scale=1.0)
    bias = model.decoder.softmax_projection.bias
    bias.assign(tf.tensor_scatter_nd_update(bias, [[EOS_ID]], [-2.0]))  # longer outputs
    model_dir = str(tmp_path_factory.mktemp("tied") / "model")
    model_files.save_metadata(model_dir, config, tokenizer)
    model_files.write_dev_split(model_dir, pairs[:6])
    tf.train.Checkpoint(model=model).save(os.path.join(model_files.checkpoint_dir(model_dir), "ckpt"))
    return model_dir, model, tokenizer, config


def greedy_translation(model, source_ids, steps=8):
    """Output ids of a greedy search, step by step (eagerly: no search to trace)."""
    state = model.initial_state(model.encode(source_ids))
    tokens, output = tf.fill([len(source_ids)], BOS_ID), []
    for _ in range(steps):
        logits, _, state = model.step(state, tokens)
        tokens = tf.argmax(logits, axis=-1, output_type=tf.int32)
        output.append(tokens.numpy())
    return np.stack(output, axis=1)


def test_checkpoint_round_trip_translates_identically(tied_model_dir, rng):
    model_dir, model, _, _ = tied_model_dir
    checkpoint = model_files.find_checkpoint(model_dir, "latest")
    stored = [name for name, _ in tf.train.list_variables(checkpoint) if name.startswith("model/")]
    assert not [name for name in stored if "embedding" in name]  # the one table is the softmax kernel
    loaded, _, _ = model_files.load_model_dir(model_dir, "latest")  # a fresh model, as the commands load
    source = random_ids(rng, 4, 6, model.model_config.vocab_size)
    expected = greedy_translation(model, source)
    assert len({tuple(row) for row in expected}) == 4  # the sentences translate differently
    np.testing.assert_array_equal(greedy_translation(loaded, source), expected)
    np.testing.assert_array_equal(loaded.embed_source(source).numpy(), model.embed_source(source).numpy())


def test_int8_lookups_are_the_dequantized_softmax_columns(tied_model_dir, rng):
    _, model, tokenizer, config = tied_model_dir
    kernel = softmax_kernel(model)
    # NumPy's eq. 12: one scale per output unit (column), i.e. one per wordpiece.
    scales = np.abs(kernel).max(axis=0, keepdims=True)
    dequantized = (np.round(kernel / scales * 127.0) * (scales / 127.0)).T
    assert np.abs(dequantized - kernel.T).max() > 1e-4  # the rounding shows
    ids = random_ids(rng, 2, 6, model.model_config.vocab_size)
    for products in ("float", "int8"):  # dequantized once per search, or section 6's int8 products
        int8 = Int8Weights(model, products=products)
        reader = WeightReader(int8)
        for lookup in (model.embed_source, model.embed_target):
            np.testing.assert_allclose(lookup(ids, reader).numpy(), dequantized[ids], rtol=1e-6, atol=1e-7)
        # The table is stored once, as the softmax kernel's int8 codes: no int8 table of its own.
        assert int8.replaces(model.decoder.softmax_projection.kernel)
        vocab, units = model.model_config.vocab_size, model.model_config.units
        assert [v.name for v in int8.variables_int8 if v.shape.as_list() == [vocab, units]] == []
    # A graph of the lookups reads the int8 codes, never the float kernel (so an int8 export stores none).
    lookup = tf.function(lambda ids: model.embed_source(ids, reader)).get_concrete_function(tf.constant(ids))
    assert model.decoder.softmax_projection.kernel.ref() not in {v.ref() for v in lookup.variables}
    assert any(v.dtype == tf.int8 for v in lookup.variables)
    translations = Translator(model, tokenizer, config.decoding, weight_transform=int8,
                              precompute_target_inputs=True).translate(SENTENCES)
    assert len(translations) == len(SENTENCES) and translations[1].text == ""


@pytest.mark.parametrize("format_name", ["saved_model", "tflite"])
def test_exports_translate_as_the_python_translator(tied_model_dir, tmp_path, format_name):
    """The exporter's own check: the artifact, loaded from disk, translates the dev sentences as the
    Python Translator does (it raises ExportError otherwise)."""
    from export.exporters import ExportRequest, export

    if format_name == "tflite":
        pytest.importorskip("ai_edge_litert", reason="the LiteRT interpreter (pip install ai-edge-litert)")
    model_dir = tied_model_dir[0]
    log = []
    request = ExportRequest(model_dir=model_dir, output=str(tmp_path / "gnmt"), checkpoint="latest",
                            verify_sentences=6, log=log.append)
    assert export(request, format_name) == str(tmp_path / "gnmt" / "1")
    assert "checked: 8 sentences translate identically" in log  # 6 dev sentences + 2 edge cases
