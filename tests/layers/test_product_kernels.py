"""Kernels read once per search: the products are the plain ones, and the loop no longer reads kernels."""

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf.config import DecodingConfig
from gnmt_tf.inference.translator import GraphTarget, TranslatorModule
from gnmt_tf.layers.weights import FLOAT_READER, PADDING_COLUMNS, ProductKernel, WeightReader, matmul
from gnmt_tf.models.gnmt import GNMT
from gnmt_tf.quantization.weights import Int8Weights
from helpers import random_ids, tiny_model_config

# 4 x 128 units = 512 columns: LSTM kernels whose row stride is 2 KiB, the ones that get padded.
PADDED_UNITS = 128


@pytest.mark.parametrize("columns,padded,expected_width", [
    (1024, True, 1024 + PADDING_COLUMNS),
    (512, True, 512 + PADDING_COLUMNS),
    (1000, True, 1000),  # a stride that is not a multiple of 2 KiB is left alone
    (1024, False, 1024),
])
def test_a_product_kernel_multiplies_like_its_kernel(rng, columns, padded, expected_width):
    kernel = rng.standard_normal((24, columns)).astype(np.float32)
    x = tf.constant(rng.standard_normal((5, 24)), tf.float32)
    read = ProductKernel.of(kernel, padded)
    assert read.values.shape == (24, expected_width)
    np.testing.assert_array_equal(read.values.numpy()[:, :columns], kernel)
    np.testing.assert_allclose(matmul(x, read).numpy(), x.numpy() @ kernel, rtol=1e-5, atol=1e-5)
    sequence = tf.constant(rng.standard_normal((2, 3, 24)), tf.float32)  # [batch, time, input]
    np.testing.assert_allclose(matmul(sequence, read).numpy(), sequence.numpy() @ kernel, rtol=1e-5, atol=1e-5)
    part = read.rows(slice(8, None))
    np.testing.assert_allclose(matmul(x[:, 8:], part).numpy(), x.numpy()[:, 8:] @ kernel[8:], rtol=1e-5, atol=1e-5)
    ids = np.array([3, 0, columns - 1], np.int32)
    np.testing.assert_array_equal(read.gather_columns(ids).numpy(), kernel[:, ids])


@pytest.mark.parametrize("decided", [True, False])
def test_padding_decided_per_call_in_a_graph(rng, decided):
    kernel = rng.standard_normal((16, 512)).astype(np.float32)
    x = tf.constant(rng.standard_normal((3, 16)), tf.float32)

    @tf.function(input_signature=[tf.TensorSpec([], tf.bool)])
    def product(padded):
        read = ProductKernel.of(kernel, padded)
        return matmul(x, read), tf.shape(read.values)[1]

    y, width = product(tf.constant(decided))
    assert int(width) == (512 + PADDING_COLUMNS if decided else 512)
    assert y.shape == (3, 512)
    np.testing.assert_allclose(y.numpy(), x.numpy() @ kernel, rtol=1e-5, atol=1e-5)


def _model(**overrides):
    model = GNMT(tiny_model_config(units=PADDED_UNITS, attention_units=16, **overrides))
    model.build()
    return model


def _search_graph(module, target, batch=4, source_len=5):
    function = tf.function(lambda ids: module.beam_search(ids, 0.2, 0.2, 3.0, 4, 1, False, target=target).ids,
                           autograph=False)
    return function.get_concrete_function(tf.TensorSpec([batch, source_len], tf.int32)).graph


def _all_ops(graph):
    """The op types of the graph and of every function in its library."""
    library = graph.as_graph_def().library.function
    return [op.type for op in graph.get_operations()] + [node.op for f in library for node in f.node_def]


def _loop_bodies(graph):
    """Every op of the graph's decoding loop bodies: [(op type, attributes)]. (The encoder's loops are
    not the subject: where the reader is not a snapshot, its layers read their kernels before their loops.)"""
    library = graph.as_graph_def().library.function
    return [(node.op, node.attr) for function in library
            if "while_body" in function.signature.name and not function.signature.name.startswith("encoder")
            for node in function.node_def]


@pytest.mark.parametrize("int8", [False, True])
def test_a_search_reads_its_kernels_before_the_decoding_loop(int8):
    model = _model()
    int8_weights = Int8Weights(model, products="float") if int8 else None
    module = TranslatorModule(model, None, DecodingConfig(beam_width=4), weight_transform=int8_weights)
    once_graph = _search_graph(module, GraphTarget())
    in_loop_graph = _search_graph(module, GraphTarget(read_kernels_once=False))
    read_once, read_in_loop = _loop_bodies(once_graph), _loop_bodies(in_loop_graph)
    count = lambda ops, kind: sum(op == kind for op, _ in ops)
    int8_casts = lambda ops: sum(op == "Cast" and attr["SrcT"].type == tf.int8.as_datatype_enum
                                 for op, attr in ops)
    decoder_kernels = 2 * model.model_config.decoder_layers + 1  # each layer's two, and the softmax's
    assert count(read_once, "MatMul") > 0 and count(read_once, "MatMul") == count(read_in_loop, "MatMul")
    # Read in the loop, every step reads the decoder's LSTM and softmax kernels (and dequantizes the int8
    # ones); read once, none of them: what a step still reads is the attention and the embeddings.
    assert count(read_in_loop, "ReadVariableOp") - count(read_once, "ReadVariableOp") >= decoder_kernels
    if int8:
        assert int8_casts(read_in_loop) - int8_casts(read_once) >= decoder_kernels
    assert count(read_once, "Pad") == 0  # the padding, too, is done before the loop
    assert "Pad" in _all_ops(once_graph)  # 16 rows: the 512-column kernels are padded
    assert "Pad" not in _all_ops(in_loop_graph)


@pytest.mark.parametrize("batch", [1, 4])  # 4 and 16 rows: below and at PADDED_PRODUCT_ROWS
def test_a_search_reading_its_kernels_once_finds_what_the_plain_search_finds(rng, batch):
    model = _model(init_scale=0.3)  # large weights: peaked distributions, real choices
    module = TranslatorModule(model, None, DecodingConfig(beam_width=4))
    source = tf.constant(random_ids(rng, batch, 6, model.model_config.vocab_size))
    outputs = {}
    for name, target in (("once", GraphTarget()), ("in_loop", GraphTarget(read_kernels_once=False))):
        search = tf.function(lambda ids, target=target: module.beam_search(ids, 0.2, 0.2, 3.0, 4, 3, False,
                                                                           target=target), autograph=False)
        outputs[name] = search(source)
    np.testing.assert_array_equal(outputs["once"].ids.numpy(), outputs["in_loop"].ids.numpy())
    np.testing.assert_allclose(outputs["once"].scores.numpy(), outputs["in_loop"].scores.numpy(), rtol=1e-5)


@pytest.mark.parametrize("products", ["float", "int8"])
def test_reading_once_makes_a_snapshot_and_leaves_the_reader_unchanged(rng, products):
    """The snapshot multiplies by the kernels as they were read (through the transform); the reader it
    was made from still reads them at every product, through the same transform."""
    model = _model()
    cell = model.decoder.bottom_cell
    reader = WeightReader(Int8Weights(model, products=products))
    snapshot = reader.reading_once(model.product_kernels(), rows=16)
    assert snapshot is not reader and snapshot.transform is reader.transform
    with pytest.raises(ValueError, match="already holds kernels read once"):  # the snapshot holds them ...
        snapshot.reading_once(model.product_kernels())
    reader.reading_once(model.product_kernels())  # ... the reader does not: it can make another snapshot
    x = tf.constant(rng.standard_normal((3, int(cell.recurrent_kernel.shape[0]))), tf.float32)
    through_transform = reader.transform.product(x, cell.recurrent_kernel).numpy()
    np.testing.assert_array_equal(reader.product(x, cell.recurrent_kernel).numpy(), through_transform)
    if products == "float":  # dequantized once: a float product with the same values
        np.testing.assert_allclose(snapshot.product(x, cell.recurrent_kernel).numpy(), through_transform,
                                   rtol=1e-6, atol=1e-6)
    else:  # int8 products are the transform's own, read once or not
        np.testing.assert_array_equal(snapshot.product(x, cell.recurrent_kernel).numpy(), through_transform)

    # Float weights: the snapshot keeps the values it read; the reader follows the variable.
    before = FLOAT_READER.product(x, cell.recurrent_kernel).numpy()
    float_snapshot = FLOAT_READER.reading_once([cell.recurrent_kernel])
    cell.recurrent_kernel.assign(2.0 * cell.recurrent_kernel)
    np.testing.assert_array_equal(float_snapshot.product(x, cell.recurrent_kernel).numpy(), before)
    np.testing.assert_allclose(FLOAT_READER.product(x, cell.recurrent_kernel).numpy(), 2.0 * before,
                               rtol=1e-6, atol=1e-6)


def test_a_snapshot_is_not_read_once_again_and_a_reader_cannot_be_changed():
    model = _model()
    snapshot = FLOAT_READER.reading_once(model.product_kernels())
    with pytest.raises(ValueError, match="already holds kernels read once"):
        snapshot.reading_once(model.product_kernels())
    with pytest.raises(AttributeError, match="immutable"):
        snapshot._read_once = {}
    FLOAT_READER.reading_once(model.product_kernels())  # the original can make more snapshots
