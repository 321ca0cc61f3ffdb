"""Shape buckets: a compiled step sees few shapes, and padding changes no output.

* The bucket sizes against a brute-force rule in Python.
* With buckets, every step runs at a bucket's row count (the count of distinct step shapes
  is bounded by the buckets, not by how searches end), and beam search, greedy search,
  sampling (the same seed) and forced scoring give the same outputs as without (float rounding).
* A memory padded with masked source positions attends exactly as before.
* A translator pads only its searches over the whole softmax (the compiled ones), not a
  shortlisted search, whose step is never compiled.
"""

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf import GNMT
from gnmt_tf.decoding import BeamSearch, ForcedScoring, GreedySearch, RandomSampling, decode
from gnmt_tf.decoding.buckets import BucketedRows, ShapeBuckets
from helpers import random_ids, tiny_model_config


def brute_force_bucket(sizes, count):
    if count == 0:
        return 0
    fitting = [size for size in sizes if size >= count]
    if fitting:
        return fitting[0]
    multiple = sizes[-1]
    while multiple < count:
        multiple += sizes[-1]
    return multiple


@pytest.mark.parametrize("sizes", [(1, 2, 4, 8), (3,), (2, 5, 16)])
def test_bucket_sizes_follow_the_rule(sizes):
    buckets = ShapeBuckets(searches=sizes, source=sizes)
    counts = list(range(0, 40))
    got = [int(buckets.searches_size(n)) for n in counts]
    assert got == [brute_force_bucket(sizes, n) for n in counts]
    assert [int(buckets.source_size(n)) for n in counts] == got


def test_bucket_shapes_lists_every_pair_a_search_can_meet():
    buckets = ShapeBuckets(searches=(1, 2, 4), source=(8, 16))
    assert buckets.shapes(max_searches=3, max_source=9) == [(1, 8), (1, 16), (2, 8), (2, 16), (4, 8), (4, 16)]
    assert buckets.shapes(max_searches=1, max_source=3) == [(1, 8)]


@pytest.mark.parametrize("bad", [(), (0, 2), (4, 2), (2, 2), (1.5,)])
def test_bad_buckets_are_refused(bad):
    with pytest.raises(ValueError, match="increasing positive integers"):
        ShapeBuckets(searches=bad)


def random_model(seed=0):
    model = GNMT(tiny_model_config(input_feeding=True))
    model.build()
    rng = np.random.default_rng(seed)
    for weight in model.trainable_weights:  # large weights: outputs depend on every detail
        weight.assign(rng.uniform(-0.5, 0.5, weight.shape).astype(np.float32))
    return model


def sources(rng, vocab, batch=7, length=6):
    ids = random_ids(rng, batch, length, vocab)
    for row, real in ((1, 2), (4, 4), (5, 1)):  # shorter sentences: searches end at different steps
        ids[row, real:] = 0
        ids[row, real - 1] = 2
    return ids


class RecordingStep:
    """The model's step, noting the row count and source length of every call (eager)."""

    def __init__(self, model):
        self.step, self.shapes = model.step, []

    def __call__(self, state, tokens, **options):
        self.shapes.append((int(tokens.shape[0]), int(state.memory.mask.shape[1])))
        return self.step(state, tokens, **options)


STRATEGIES = {
    "beam3": lambda targets: BeamSearch(3, alpha=0.6, beta=0.2, beamsize=3.0, n_best=2, return_attention=True),
    "greedy": lambda targets: GreedySearch(),
    "sampling": lambda targets: RandomSampling(2, seed=5),
    "scoring": lambda targets: ForcedScoring(targets, alpha=0.4, beta=0.3, return_attention=True),
}


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_buckets_bound_the_step_shapes_and_change_no_output(strategy):
    model = random_model()
    rng = np.random.default_rng(3)
    source = sources(rng, model.model_config.vocab_size)
    targets = sources(rng, model.model_config.vocab_size, length=5)
    buckets = ShapeBuckets(searches=(1, 2, 4), source=(4, 16))  # 7 sentences: beyond the largest bucket too
    memory = model.encode(source, training=False)
    plain_step, bucketed_step = RecordingStep(model), RecordingStep(model)
    tf.random.set_seed(9)  # each run draws the same samples
    plain = decode(plain_step, model.initial_state(memory), memory.mask, STRATEGIES[strategy](targets))
    padded = memory.padded_to(buckets.source_size(tf.shape(memory.mask)[1]))
    tf.random.set_seed(9)
    bucketed = decode(bucketed_step, model.initial_state(padded), padded.mask, STRATEGIES[strategy](targets),
                      layout=BucketedRows(buckets))

    width = 3 if strategy == "beam3" else 1
    allowed_rows = {size * width for size in (1, 2, 4, 8, 12, 16)}  # beyond 4: multiples of 4
    assert {rows for rows, _ in bucketed_step.shapes} <= allowed_rows
    assert {length for _, length in bucketed_step.shapes} == {16}
    assert len(bucketed_step.shapes) == len(plain_step.shapes)  # the same steps, only padded
    assert len(set(plain_step.shapes)) > len(set(bucketed_step.shapes)) or strategy == "scoring"

    fields = plain._fields if hasattr(plain, "_fields") else ("ids",)  # greedy search: the ids alone
    for name in fields:
        got, want = (getattr(bucketed, name), getattr(plain, name)) if hasattr(plain, "_fields") else (bucketed, plain)
        if name == "attention":  # over the padded source: the padding gets none of it
            np.testing.assert_array_equal(got.numpy()[..., source.shape[1]:], 0.0)
            got = got[..., : source.shape[1]]
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5, err_msg=name)


def test_a_padded_memory_attends_as_before():
    model = random_model(seed=2)
    source = sources(np.random.default_rng(4), model.model_config.vocab_size)
    memory = model.encode(source, training=False)
    queries = tf.random.stateless_uniform([source.shape[0], 3, model.model_config.units], seed=[1, 2])
    contexts, probs = model.decoder.attention.attend(queries, memory)
    padded_contexts, padded_probs = model.decoder.attention.attend(queries, memory.padded_to(11))
    assert padded_probs.shape[-1] == 11
    np.testing.assert_array_equal(padded_probs.numpy()[..., source.shape[1]:], 0.0)
    np.testing.assert_allclose(padded_probs.numpy()[..., : source.shape[1]], probs.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(padded_contexts.numpy(), contexts.numpy(), rtol=1e-6, atol=1e-6)


def test_translator_with_buckets_gives_the_same_nbest_lists(trained_number_model):
    from gnmt_tf.inference.translator import TranslatorModule
    from gnmt_tf.model_files import load_model_dir

    model_dir, _ = trained_number_model
    model, tokenizer, config = load_model_dir(model_dir)
    sentences = tf.constant(["three one four", "", "nine", "two five eight nine", "seven six"])
    options = {name: tf.constant(value, tf.float32) for name, value in (("alpha", 0.2), ("beta", 0.2),
                                                                          ("beamsize", 3.0))}
    plain = TranslatorModule(model, tokenizer, config.decoding).translate_nbest(sentences, **options)
    buckets = ShapeBuckets(searches=(2, 4), source=(8,))  # 5 sentences -> 8 searches; 6 pieces -> 8
    bucketed = TranslatorModule(model, tokenizer, config.decoding, shape_buckets=buckets).translate_nbest(
        sentences, **options)
    assert set(bucketed) == set(plain)
    for name, value in plain.items():
        assert bucketed[name].shape == value.shape, name  # the padding is cut away again
        if value.dtype == tf.string:
            assert bucketed[name].numpy().tolist() == value.numpy().tolist(), name
        else:
            np.testing.assert_allclose(bucketed[name].numpy(), value.numpy(), rtol=1e-5, atol=1e-5, err_msg=name)


def test_a_shortlisted_search_runs_unpadded_and_the_whole_softmax_at_buckets(trained_number_model, monkeypatch):
    from gnmt_tf.inference.translator import TranslatorModule
    from gnmt_tf.model_files import load_model_dir
    from helpers import shortlist_excluding

    model_dir, _ = trained_number_model
    model, tokenizer, config = load_model_dir(model_dir)
    module = TranslatorModule(model, tokenizer, config.decoding, shape_buckets=ShapeBuckets(searches=(4,), source=(16,)),
                              shortlist=shortlist_excluding(tokenizer.vocab_size, []))
    source_ids = module.source_ids(tf.constant(["three one four", "nine"]))  # 2 greedy searches
    assert source_ids.shape[1] < 16
    recorder = RecordingStep(model)
    monkeypatch.setattr(model, "step", recorder)  # searched eagerly: the step sees real shapes

    module.search(source_ids, GreedySearch(), use_shortlist=True)
    assert recorder.shapes and {length for _, length in recorder.shapes} == {source_ids.shape[1]}
    assert max(rows for rows, _ in recorder.shapes) == 2

    recorder.shapes.clear()
    module.search(source_ids, GreedySearch(), use_shortlist=False)
    assert recorder.shapes and set(recorder.shapes) == {(4, 16)}
