"""The one decoding loop (search.decode) with fake step functions returning fixed logits:
length limits, PAD/BOS bans, EOS at the limit, greedy search, and finished rows removed."""

import math

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf.decoding import (
    BeamSearch,
    DecodingStrategy,
    ForcedScoring,
    GreedySearch,
    RandomSampling,
    decode,
    output_length_limits,
)
from gnmt_tf.vocab import BOS_ID, EOS_ID, PAD_ID

V = 7  # 0 PAD, 1 BOS, 2 EOS, 3 UNK, 4 "A", 5 "B", 6 "C"
A, B, C = 4, 5, 6


def table_step_fn(logits_table, source_len, rows_seen=None):
    """Logits depend only on the token fed in; attention is uniform. ``rows_seen`` records the
    rows of every call (the loop runs eagerly outside tf.function)."""
    logits_table = tf.constant(logits_table, tf.float32)

    def step(state, tokens):
        if rows_seen is not None:
            rows_seen.append(int(tokens.shape[0]))
        attention = tf.fill([tf.shape(tokens)[0], source_len], 1.0 / source_len)
        return tf.gather(logits_table, tokens), attention, state

    return step


def source_mask(lengths, width=None):
    width = width or max(lengths)
    return np.arange(width)[None, :] < np.array(lengths)[:, None]


def run(strategy, logits_table, lengths, ratio=2.0, rows_seen=None):
    mask = source_mask(lengths)
    state = {"row": tf.range(len(lengths))}  # a decoder state of one row per sentence
    step = table_step_fn(logits_table, mask.shape[1], rows_seen)
    return decode(step, state, mask, strategy, max_length_ratio=ratio)


def numpy_greedy(logits_table, limit):
    """Greedy search by hand: the best token but PAD/BOS, only EOS at the last allowed step."""
    out, token = [], BOS_ID
    while True:
        row = logits_table[token].copy()
        row[[PAD_ID, BOS_ID]] = -np.inf
        if len(out) + 1 >= limit:
            row[np.arange(V) != EOS_ID] = -np.inf
        token = int(np.argmax(row))
        out.append(token)
        if token == EOS_ID:
            return out


def test_output_length_limits_by_hand():
    mask = source_mask([3, 1, 5, 1], width=5)
    np.testing.assert_array_equal(output_length_limits(mask, 2.0).numpy(), [6, 2, 10, 2])
    np.testing.assert_array_equal(output_length_limits(mask, 1.5).numpy(), [5, 2, 8, 2])  # ceil(4.5) ...
    np.testing.assert_array_equal(output_length_limits(mask, 0.1).numpy(), [1, 1, 1, 1])  # at least 1
    empty = np.zeros((1, 3), bool)
    assert output_length_limits(empty, 2.0).numpy().tolist() == [1]


def test_greedy_never_generates_pad_or_bos_and_follows_the_table():
    logits = np.full((V, V), -5.0)
    logits[:, PAD_ID] = logits[:, BOS_ID] = 9.0  # the most likely tokens, but never generated
    logits[BOS_ID, A] = 3.0
    logits[A, [B, C]] = [2.0, 1.0]
    logits[B, C] = 4.0
    logits[C, EOS_ID] = 5.0
    out = run(GreedySearch(), logits, [4]).numpy()
    assert out.tolist() == [[A, B, C, EOS_ID]] == [numpy_greedy(logits, 8)]


def test_greedy_ends_with_eos_at_each_sentence_limit_and_pads_after():
    logits = np.full((V, V), -5.0)
    logits[:, A] = 5.0  # EOS never likely: only the limit ends an output
    lengths = [1, 3, 2]  # limits ceil(1.5 x length): 2, 5, 3
    out = run(GreedySearch(), logits, lengths, ratio=1.5).numpy()
    expected = np.full((3, 5), PAD_ID)
    for row, length in enumerate(lengths):
        limit = math.ceil(1.5 * length)
        path = numpy_greedy(logits, limit)
        assert len(path) == limit and path[-1] == EOS_ID
        expected[row, :limit] = path
    np.testing.assert_array_equal(out, expected)


def test_finished_sentences_stop_costing_compute():
    logits = np.full((V, V), -5.0)
    logits[:, A] = 5.0
    logits[:, EOS_ID] = -1e9  # no output ends before its limit (greedy search still ends with EOS)
    lengths = [1, 3, 2]  # outputs of 2, 6 and 4 tokens (limits at ratio 2)
    rows_seen = []
    run(GreedySearch(), logits, lengths, rows_seen=rows_seen)
    assert rows_seen == [3, 3, 2, 2, 1, 1]  # a sentence's rows leave once its output ended
    rows_seen = []
    run(RandomSampling(4), logits, lengths, rows_seen=rows_seen)
    assert rows_seen == [12, 12, 8, 8, 4, 4]  # 4 samples a sentence


def test_decoder_state_follows_its_sentence_when_others_finish():
    """Rows are gathered away, never mixed up: the state of each remaining row is its own."""
    logits = np.full((V, V), -5.0)
    logits[:, A] = 5.0
    lengths = [1, 3, 2]
    mask = source_mask(lengths)

    def step(state, tokens):  # the logits come from the state: sentence b prefers token A + b % 3
        preferred = A + state["sentence"] % 3
        return tf.one_hot(preferred, V) * 10.0, tf.zeros([tf.shape(tokens)[0], mask.shape[1]]), state

    out = decode(step, {"sentence": tf.range(3)}, mask, GreedySearch()).numpy()
    for row, length in enumerate(lengths):
        limit = 2 * length
        assert out[row, : limit - 1].tolist() == [A + row % 3] * (limit - 1)
        assert out[row, limit - 1] == EOS_ID and np.all(out[row, limit:] == PAD_ID)


class ShapeRecorder(DecodingStrategy):
    """``strategy``, recording the shapes of its live and results nests at every step."""

    def __init__(self, strategy):
        self.strategy = strategy
        self.searches_per_sentence = strategy.searches_per_sentence
        self.rows_per_search = strategy.rows_per_search
        self.generates = strategy.generates
        self.eos_at_limit = strategy.eos_at_limit
        self.shapes = []

    def initialize(self, source_mask, limits):
        return self.strategy.initialize(source_mask, limits)

    def shape_invariants(self, live, results):
        return self.strategy.shape_invariants(live, results)

    def step(self, inputs, live, results):
        self.shapes.append([tuple(tensor.shape) for tensor in tf.nest.flatten((live, results))])
        return self.strategy.step(inputs, live, results)

    def finalize(self, results, source_mask):
        return self.strategy.finalize(results, source_mask)


@pytest.mark.parametrize("strategy", [
    BeamSearch(3, return_attention=True, beamsize=1e9),
    GreedySearch(),
    RandomSampling(2, seed=1),
    ForcedScoring([[A, B, C, A, EOS_ID]], return_attention=True),
], ids=["beam", "greedy", "sampling", "scoring"])
def test_the_search_state_keeps_its_shapes_from_step_to_step(strategy):
    """Histories are allocated at full length before the loop, so while no search ends, every
    loop variable has the same shape at every step (TFLite's WHILE then plans its memory once)."""
    logits = np.full((V, V), -5.0)
    logits[:, [A, B]] = [5.0, 4.0]
    logits[:, EOS_ID] = -1e9  # the one sentence runs to its limit of 6 tokens
    recorder = ShapeRecorder(strategy)
    run(recorder, logits, [3])
    assert len(recorder.shapes) in (5, 6)  # scoring feeds 5 tokens, a search generates 6
    assert all(shapes == recorder.shapes[0] for shapes in recorder.shapes)


def test_the_driver_runs_inside_tf_function():
    logits = np.full((V, V), -5.0)
    logits[BOS_ID, B] = logits[B, EOS_ID] = 5.0
    step = table_step_fn(logits, 3)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.bool)])
    def greedy(mask):
        return decode(step, {"row": tf.zeros([tf.shape(mask)[0]])}, mask, GreedySearch())

    np.testing.assert_array_equal(greedy(source_mask([3, 2])).numpy(), [[B, EOS_ID], [B, EOS_ID]])


def test_strategy_arguments_are_checked():
    with pytest.raises(ValueError, match="num_samples"):
        RandomSampling(0)
