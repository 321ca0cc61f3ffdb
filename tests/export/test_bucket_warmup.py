"""Warm-up requests that compile an XLA step for every shape bucket before a version serves.

The bucket a request lands in is computed here by brute force (word counts of a toy length
function); the trained fixture model's XLA export is checked in tests/cli/test_export_cli.py.
"""

import functools

import pytest
import tensorflow as tf

from export.warmup import bucket_warmup_requests, sentence_of_length
from gnmt_tf.decoding.buckets import ShapeBuckets

pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test

WORDS = "the quick brown fox jumps over the lazy dog".split()


def toy_length(sentence):
    """A source length: 2 pieces per word of more than 3 letters, 1 otherwise, + EOS."""
    return sum(2 if len(word) > 3 else 1 for word in sentence.split()) + 1


@pytest.mark.parametrize("lower", [0, 1, 5, 16, 40])
def test_sentence_of_length_is_the_shortest_run_of_words_beyond_the_bound(lower):
    sentence = sentence_of_length([" ".join(WORDS[:4]), " ".join(WORDS[4:])], toy_length, lower)
    words = sentence.split()
    assert words == [WORDS[i % len(WORDS)] for i in range(len(words))]  # the words in order, cycled
    assert toy_length(sentence) > lower
    assert len(words) == 1 or toy_length(" ".join(words[:-1])) <= lower  # one word fewer is not enough


def test_bucket_warmup_covers_every_bucket_of_both_search_graphs():
    buckets = ShapeBuckets(searches=(1, 2, 4), source=(4, 8, 16, 32))
    options = {"alpha": 0.2, "beta": 0.2, "beamsize": 3.0}
    requests = bucket_warmup_requests("m", [" ".join(WORDS)], options, buckets, toy_length, max_source=20)
    met = set()
    for request in requests:
        sentences = [s.decode() for s in tf.make_ndarray(request.inputs["sentences"]).tolist()]
        assert len(set(sentences[1:])) <= 1  # one sentence sets the batch's length, the others are short
        length = max(toy_length(sentence) for sentence in sentences)
        assert length == toy_length(sentences[0]) and all(toy_length(s) <= 4 for s in sentences[1:])
        bucket = min(size for size in buckets.source if size >= length)
        met.add((request.model_spec.signature_name, len(sentences), bucket))
        assert {name: float(tf.make_ndarray(request.inputs[name])) for name in options} == pytest.approx(options)
    # Source bucket 32 holds lengths 17..32, but the translator keeps at most 20: it is met too.
    expected = {(signature, searches, length) for signature in ("translate_with_options", "translate_nbest")
                for searches in (1, 2, 4) for length in (4, 8, 16, 32)}
    assert met == expected and len(requests) == len(expected)


def test_bucket_warmup_stops_at_the_longest_source_kept():
    buckets = ShapeBuckets(searches=(1,), source=(4, 8, 16, 32))
    requests = bucket_warmup_requests("m", WORDS, {}, buckets, toy_length, max_source=8)
    lengths = [toy_length(tf.make_ndarray(r.inputs["sentences"])[0].decode()) for r in requests]
    assert len(requests) == 4 and max(lengths) <= 8  # buckets 4 and 8, two signatures each


def test_the_translators_source_lengths_land_in_every_bucket(trained_number_model):
    from gnmt_tf.inference.translator import TranslatorModule
    from gnmt_tf.model_files import load_model_dir

    model_dir, _ = trained_number_model
    model, tokenizer, config = load_model_dir(model_dir)
    module = TranslatorModule(model, tokenizer, config.decoding, max_input_length=100)
    buckets = ShapeBuckets()
    requests = bucket_warmup_requests("m", ["three one four", "seven six"], {}, buckets, module.source_length,
                                      module.max_input_length + 1)
    # Traced once, and each length computed once (both signatures' requests share their sentences): eager
    # runs of the tokenizer's ops, 56 requests' worth, cost seconds.
    preprocess, source_length = module.compiled_preprocess(), functools.lru_cache(module.source_length)
    met = set()
    for request in requests:
        sentences = tf.make_ndarray(request.inputs["sentences"])
        ids = preprocess(tf.constant(sentences))[0].numpy()  # what the search really sees (source_ids)
        assert ids.shape[1] == source_length(sentences[0].decode())  # the first sets the length
        met.add((request.model_spec.signature_name, len(sentences), int(buckets.source_size(ids.shape[1]))))
    assert met == {(signature, searches, length) for signature in ("translate_with_options", "translate_nbest")
                   for searches, length in buckets.shapes(64, 101)}
    assert {length for _, _, length in met} == {16, 32, 64, 128}  # 101 pieces at most: no 256 bucket
