"""Fewer operations per decoding step, same outputs (Devlin 2017).

* The attention memory is kept once per search, not tiled over the beam and gathered at
  every reordering: bit-identical to the plain per-row memory.
* The bottom decoder layer's input projection is gathered from a precomputed table
  instead of a product per step: equal within float rounding (float weights), within int8
  rounding (int8 weights), identical strings on the trained fixture model.
"""

import functools
from typing import NamedTuple

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf import GNMT
from gnmt_tf import model_files
from gnmt_tf.decoding import BeamSearch, GreedySearch, decode
from gnmt_tf.decoding.rows import map_rows
from gnmt_tf.inference.translator import Translator
from gnmt_tf.layers.recurrence import STEPWISE
from gnmt_tf.layers.weights import WeightReader
from gnmt_tf.quantization import Int8Weights
from helpers import random_ids, tiny_model_config


class PerRowMemory(NamedTuple):
    """The attention memory without ``one_row_per_search``: the driver tiles it over every row."""

    keys: tf.Tensor
    values: tf.Tensor
    mask: tf.Tensor


def random_model(input_feeding, seed=0, **overrides):
    model = GNMT(tiny_model_config(input_feeding=input_feeding, **overrides))
    model.build()
    rng = np.random.default_rng(seed)
    for weight in model.trainable_weights:  # large weights: outputs depend on every detail
        weight.assign(rng.uniform(-0.5, 0.5, weight.shape).astype(np.float32))
    return model


def sources(rng, vocab):
    ids = random_ids(rng, 5, 7, vocab)
    ids[3, 3:] = 0  # a shorter sentence: padding positions in the shared memory
    ids[3, 2] = 2
    return ids


def test_map_rows_treats_per_search_parts_apart():
    class Shared(NamedTuple):
        one_row_per_search = True
        x: tf.Tensor

    nest = {"rows": (tf.constant([1, 2]),), "memory": Shared(tf.constant([10]))}
    out = map_rows(nest, lambda t: t * 2, lambda t: t + 1)
    assert out["rows"][0].numpy().tolist() == [2, 4] and out["memory"].x.numpy().tolist() == [11]
    assert isinstance(out["memory"], Shared)


@pytest.mark.parametrize("input_feeding, strategy", [(False, "beam1"), (False, "beam3"), (True, "beam5_attention"),
                                                     (True, "greedy")])
def test_memory_shared_by_a_search_gives_bit_identical_outputs(input_feeding, strategy):
    model = random_model(input_feeding)
    source = sources(np.random.default_rng(1), model.model_config.vocab_size)
    memory = model.encode(source, training=False)
    make = {
        "beam1": lambda: BeamSearch(1, alpha=0.6, beta=0.2, beamsize=3.0),
        "beam3": lambda: BeamSearch(3, alpha=0.6, beta=0.2, beamsize=3.0, n_best=2),
        "beam5_attention": lambda: BeamSearch(5, alpha=1.0, beta=0.4, beamsize=2.0, n_best=3, return_attention=True),
        "greedy": GreedySearch,
    }[strategy]
    shared = decode(model.step, model.initial_state(memory), memory.mask, make())
    per_row_state = model.initial_state(memory)._replace(memory=PerRowMemory(*memory))
    per_row = decode(model.step, per_row_state, memory.mask, make())
    flat_shared, flat_per_row = tf.nest.flatten(shared), tf.nest.flatten(per_row)
    assert [x is None for x in flat_shared] == [x is None for x in flat_per_row]
    for got, want in zip(flat_shared, flat_per_row):
        if got is not None:
            np.testing.assert_array_equal(got.numpy(), want.numpy())


def table_step(model, table):
    return functools.partial(model.step, target_inputs=model.target_input_projection(lambda ids: tf.gather(table, ids)))


@pytest.mark.parametrize("input_feeding, cell", [(False, "paper"), (True, "standard")])
def test_precomputed_input_projection_equals_the_product(input_feeding, cell):
    model = random_model(input_feeding, embedding_dim=12, cell=cell)
    source = sources(np.random.default_rng(2), model.model_config.vocab_size)
    memory = model.encode(source, training=False)
    state = model.initial_state(memory)
    state = state._replace(context=tf.random.uniform(state.context.shape, -1, 1, seed=3))  # input feeding reads it
    tokens = tf.constant([4, 9, 17, 30, 5])
    table = model.target_input_table()
    # The table's rows are the embeddings' projections with the bias, computed by hand:
    embeddings = model.target_embedding.embeddings.numpy()
    bottom = model.decoder.bottom_cell
    bias = bottom.bias.numpy() if bottom.bias is not None else 0.0  # the paper's cell has none
    np.testing.assert_allclose(table.numpy(), embeddings @ bottom.kernel.numpy()[:embeddings.shape[1]] + bias,
                               rtol=1e-5, atol=1e-5)
    want_logits, want_probs, want_state = model.step(state, tokens)
    got_logits, got_probs, got_state = table_step(model, table)(state, tokens)
    np.testing.assert_allclose(got_logits.numpy(), want_logits.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_probs.numpy(), want_probs.numpy(), rtol=1e-5, atol=1e-6)
    for got, want in zip(tf.nest.flatten(got_state), tf.nest.flatten(want_state)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    # ... and a whole beam search picks the same hypotheses.
    plain = decode(model.step, model.initial_state(memory), memory.mask, BeamSearch(4, n_best=2))
    gathered = decode(table_step(model, table), model.initial_state(memory), memory.mask, BeamSearch(4, n_best=2))
    np.testing.assert_array_equal(gathered.ids.numpy(), plain.ids.numpy())
    np.testing.assert_allclose(gathered.scores.numpy(), plain.scores.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("products", ["float", "int8"])
def test_precomputed_input_projection_under_int8_weights(products):
    """With int8 weights the table is computed through them and stored in int8 (one scale per row):
    the step stays within int8 rounding of the plain int8 step."""
    model = random_model(True, embedding_dim=12)
    int8 = Int8Weights(model, products=products)
    source = sources(np.random.default_rng(4), model.model_config.vocab_size)
    tokens = tf.constant([4, 9, 17, 30, 5])
    weights = WeightReader(int8)
    memory = model.encode(source, weights, training=False, recurrence=STEPWISE)
    state = model.initial_state(memory)
    state = state._replace(context=tf.random.uniform(state.context.shape, -1, 1, seed=5))
    rows = int8.stored_rows(model.target_input_table(weights))
    assert rows.codes.dtype == tf.int8
    want = model.step(state, tokens, weights)[0].numpy()
    target_inputs = model.target_input_projection(rows, weights)
    got = model.step(state, tokens, weights, target_inputs=target_inputs)[0].numpy()
    float_logits = model.step(model.initial_state(memory)._replace(context=state.context), tokens)[0].numpy()
    int8_error = np.abs(want - float_logits).max()  # what int8 itself changes
    assert 0 < np.abs(got - want).max() <= max(2 * int8_error, 1e-3)


def test_translator_with_the_table_translates_the_fixture_identically(trained_number_model):
    model_dir, _ = trained_number_model
    model, tokenizer, config = model_files.load_model_dir(model_dir)
    sentences = [source for source, _ in model_files.read_dev_split(model_dir)[:40]]
    plain = Translator(model, tokenizer, config.decoding).translate_nbest(sentences, n_best=2)
    gathered = Translator(model, tokenizer, config.decoding, precompute_target_inputs=True).translate_nbest(
        sentences, n_best=2)
    assert [[t.text for t in nbest] for nbest in gathered] == [[t.text for t in nbest] for nbest in plain]
    np.testing.assert_allclose([t.score for nbest in gathered for t in nbest],
                               [t.score for nbest in plain for t in nbest], rtol=1e-5)
