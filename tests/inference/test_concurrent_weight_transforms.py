"""A weight transform is a value given to a translator at construction, never state of the model.

Two translators of ONE model, one reading the float weights and one the int8 weights of eq. 12
(:class:`gnmt_tf.quantization.Int8Weights`), trace and decode at the same time on two threads, and
each gives exactly what it gives alone. Were the transform switched on the model around a trace (as
a context manager would), one thread's graphs would pick up the other's weights.
"""

import threading

from gnmt_tf.config import DecodingConfig
from gnmt_tf.data.tokenizer import WordpieceTokenizer
from gnmt_tf.inference.translator import Translator
from gnmt_tf.models.gnmt import GNMT
from gnmt_tf.quantization.weights import Int8Weights
from helpers import number_word_pairs, tiny_model_config

ROUNDS = 3  # each thread decodes the sentences this many times, so that the two overlap
SENTENCES = 12


def _translations(translator, sentences):
    """Every hypothesis of every n-best list: (text, score, log P), compared exactly."""
    nbest = translator.translate_nbest(sentences, n_best=2)
    return [[(hypothesis.text, hypothesis.score, hypothesis.log_prob) for hypothesis in hypotheses]
            for hypotheses in nbest]


def test_two_translators_of_one_model_with_different_transforms_decode_concurrently():
    pairs = number_word_pairs(200, seed=5, min_len=1)
    sentences_of_both = [s for pair in pairs for s in pair]
    tokenizer = WordpieceTokenizer.learn(sentences_of_both, vocab_size=64, max_characters=60)
    # Random weights (seeded per test), 12x the tiny config's: peaked distributions, so that the int8
    # rounding changes the scores.
    model = GNMT(tiny_model_config(vocab_size=tokenizer.vocab_size, init_scale=0.5))
    model.build()
    sentences = [source for source, _ in number_word_pairs(SENTENCES, seed=6, min_len=1, max_len=6)]
    transforms = {"float": None, "int8": Int8Weights(model)}
    decoding = DecodingConfig(beam_width=3, n_best=2)

    def translator(name):  # batches of 4 of the 12 sentences: several searches per round
        return Translator(model, tokenizer, decoding, batch_size=4, concurrent_batches=1,
                          weight_transform=transforms[name])

    alone = {name: _translations(translator(name), sentences) for name in transforms}
    assert all(alone["float"]) and all(alone["int8"])  # every sentence translated
    float_scores = [score for hypotheses in alone["float"] for _, score, _ in hypotheses]
    int8_scores = [score for hypotheses in alone["int8"] for _, score, _ in hypotheses]
    assert float_scores != int8_scores  # the two transforms really compute different numbers

    # Fresh translators: each traces its graphs while the other thread traces and decodes.
    translators = {name: translator(name) for name in transforms}
    together = {name: [] for name in transforms}
    failures = []
    start = threading.Barrier(len(transforms))

    def decode(name):
        try:
            start.wait(timeout=120)
            for _ in range(ROUNDS):
                together[name].append(_translations(translators[name], sentences))
        except BaseException as error:  # reported below, in the test's own thread
            failures.append((name, error))

    threads = [threading.Thread(target=decode, args=(name,), daemon=True) for name in transforms]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not any(thread.is_alive() for thread in threads), "a decoding thread did not finish"
    assert not failures, failures
    for name in transforms:
        assert len(together[name]) == ROUNDS
        for round_outputs in together[name]:
            assert round_outputs == alone[name], name
