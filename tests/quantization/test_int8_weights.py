"""Int8Weights: the model computes with eq. 12 weights read through ``WeightReader(Int8Weights(model))``."""

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf.layers.recurrence import STEPWISE
from gnmt_tf.layers.weights import WeightReader
from gnmt_tf.quantization.weights import Int8Weights
from gnmt_tf.models.gnmt import GNMT
from helpers import random_ids, tiny_model_config


def eq12_roundtrip(kernel, axis):
    """NumPy: quantize with one scale per slice along ``axis`` kept, then dequantize."""
    scales = np.abs(kernel).max(axis=axis, keepdims=True)
    return np.round(kernel / scales * 127.0) * (scales / 127.0)


@pytest.fixture
def model():
    # Large weights, so that the int8 rounding is visible in the logits.
    model = GNMT(tiny_model_config(init_scale=0.5))
    model.build()
    return model


def forward_logits(model, source, target, transform=None):
    logits, _ = model.forward(source, target, weights=WeightReader(transform), recurrence=STEPWISE)
    return logits.numpy()


def test_float_products_equal_a_model_with_numpy_fake_quantized_weights(model, rng):
    source = random_ids(rng, 3, 7, model.model_config.vocab_size)
    target = random_ids(rng, 3, 5, model.model_config.vocab_size)
    quantized = forward_logits(model, source, target, Int8Weights(model, products="float"))
    float_logits = forward_logits(model, source, target)

    # Independent reference: a clone whose weights are replaced by NumPy's eq. 12 round trip.
    reference = GNMT(tiny_model_config(init_scale=0.5))
    reference.build()
    weights = []
    for variable in model.weights:
        value = variable.numpy()
        name = variable.name
        if name.endswith("embeddings:0"):
            value = eq12_roundtrip(value, axis=1)  # one scale per token row
        elif name.endswith(("/kernel:0", "/recurrent_kernel:0")) and "attention" not in name:
            value = eq12_roundtrip(value, axis=0)  # one scale per output unit
        weights.append(value)
    reference.set_weights(weights)
    effect = np.abs(quantized - float_logits).max()
    assert effect > 1e-3  # quantization really changed something
    np.testing.assert_allclose(quantized, forward_logits(reference, source, target), atol=effect / 100)


def test_int8_products_differ_from_float_products_only_by_activation_rounding(model, rng):
    source = random_ids(rng, 2, 6, model.model_config.vocab_size)
    target = random_ids(rng, 2, 4, model.model_config.vocab_size)
    dequantized = forward_logits(model, source, target, Int8Weights(model, products="float"))
    integer = forward_logits(model, source, target, Int8Weights(model, products="int8"))
    difference = np.abs(integer - dequantized)
    assert 0 < difference.max() < 0.05 * np.abs(dequantized).max()


@pytest.mark.parametrize("products", ["float", "int8"])
def test_int8_logits_of_a_shortlist_are_the_full_int8_logits_at_its_ids(model, rng, products):
    """The softmax kernel's columns keep their own eq. 12 scales: restricting them changes no logit computed."""
    vocab = model.model_config.vocab_size
    source = random_ids(rng, 2, 6, vocab)
    tokens = tf.constant(random_ids(rng, 2, 1, vocab)[:, 0])
    output_ids = np.sort(rng.choice(vocab, size=9, replace=False)).astype(np.int32)
    int8 = WeightReader(Int8Weights(model, products=products))
    state = model.initial_state(model.encode(source, int8, recurrence=STEPWISE))
    full, _, _ = model.step(state, tokens, int8)
    columns = model.softmax_columns(output_ids, int8)
    restricted, _, _ = model.step(state, tokens, int8, softmax_columns=columns)
    np.testing.assert_allclose(restricted.numpy()[:, output_ids], full.numpy()[:, output_ids], rtol=1e-6, atol=1e-6)
    assert np.all(np.delete(restricted.numpy(), output_ids, axis=1) == -np.inf)


def test_graphs_traced_with_an_int8_reader_capture_only_int8_weights(model):
    int8 = Int8Weights(model)
    source = tf.constant([[5, 6, 2]])
    reader = WeightReader(int8)
    encode = tf.function(lambda s: model.encode(s, reader, recurrence=STEPWISE).values)
    concrete = encode.get_concrete_function(source)
    captured = {v.ref() for v in concrete.variables}
    replaced = [v for v in model.variables if int8.replaces(v)]
    assert replaced and not any(v.ref() in captured for v in replaced)
    assert any(v.dtype == tf.int8 for v in concrete.variables)
    kept = set(v.ref() for v in int8.kept_float_variables())
    assert all(v.ref() in kept or v.dtype == tf.int8 or any(v is w for w in int8.variables_int8)
               for v in concrete.variables)


def test_size_counts_int8_codes_scales_and_the_float_weights_kept(model):
    """The one size counter: 1 byte per quantized value, 4 per scale (and offset), 4 per float value."""
    from gnmt_tf.quantization.int8 import quantized_kernel_variables

    def count(variables):
        return sum(int(np.prod(v.shape)) for v in variables)

    kernels = quantized_kernel_variables(model)
    tables = [model.source_embedding.embeddings, model.target_embedding.embeddings]
    others = [v for v in model.variables if not any(v is w for w in kernels + tables)]
    units = sum(int(k.shape[1]) for k in kernels)  # one scale per output unit (eq. 12)
    tokens = sum(int(t.shape[0]) for t in tables)  # one scale per token row
    float32 = 4 * count(model.variables)
    per_row = count(kernels) + 4 * units + count(tables) + 4 * tokens + 4 * count(others)
    assert Int8Weights(model).size_bytes() == {"float32_bytes": float32, "int8_bytes": per_row}
    # Marian's rule stores an offset per output unit as well.
    marian = Int8Weights(model, method="per_column_7sigma").size_bytes()
    assert marian == {"float32_bytes": float32, "int8_bytes": per_row + 4 * units}
    assert per_row < float32 / 2


def test_bad_arguments(model):
    with pytest.raises(ValueError, match="method must be one of"):
        Int8Weights(model, method="per_tensor")
    with pytest.raises(ValueError, match="products must be one of"):
        Int8Weights(model, products="int4")
