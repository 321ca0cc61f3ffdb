"""Beam search (section 7, eq. 14) against brute force, hand-computed penalties and constructed cases."""

import itertools
import math

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf.decoding.beam import beam_search
from gnmt_tf.decoding.options import no_pruning
from gnmt_tf.decoding.penalties import coverage_penalty, length_penalty
from gnmt_tf.models.gnmt import GNMT
from gnmt_tf.vocab import BOS_ID, EOS_ID, PAD_ID
from helpers import tiny_model_config

NO_PRUNING = no_pruning()


# ----------------------------------------------------------------------------- penalties
def test_length_penalty_by_hand():
    # lp = (5 + |Y|)^alpha / 6^alpha
    assert float(length_penalty(1, 0.2)) == pytest.approx(1.0)
    assert float(length_penalty(3, 0.2)) == pytest.approx((8 / 6) ** 0.2)  # 1.05922...
    assert float(length_penalty(3, 0.2)) == pytest.approx(1.0592238, rel=1e-6)
    assert float(length_penalty(10, 1.0)) == pytest.approx(15 / 6)
    assert float(length_penalty(7, 0.0)) == 1.0


def test_coverage_penalty_by_hand():
    coverage = tf.constant([[0.5, 1.7, 0.25, 0.9]])
    mask = tf.constant([[True, True, True, False]])  # the last position is padding
    expected = 0.2 * (math.log(0.5) + math.log(1.0) + math.log(0.25))  # min(1.7, 1) -> log 1 = 0
    assert float(coverage_penalty(coverage, mask, 0.2)[0]) == pytest.approx(expected, rel=1e-6)
    assert float(coverage_penalty(coverage, mask, 0.0)[0]) == 0.0
    # Full coverage costs nothing.
    assert float(coverage_penalty(tf.constant([[1.0, 3.0]]), tf.constant([[True, True]]), 1.0)[0]) == 0.0


# ----------------------------------------------------------------------------- a fake model
def table_step_fn(logits_table, attention_table):
    """A step function whose logits and attention depend only on the token fed in."""
    logits_table = tf.constant(logits_table, tf.float32)
    attention_table = tf.constant(attention_table, tf.float32)

    def step(state, tokens):
        return tf.gather(logits_table, tokens), tf.gather(attention_table, tokens), state

    return step


def run_table(logits_table, attention_table, source_len=2, **kwargs):
    step = table_step_fn(logits_table, attention_table)
    state = {"dummy": tf.zeros([1, 1])}
    mask = tf.ones([1, source_len], tf.bool)
    return beam_search(step, state, mask, **kwargs)


def hypotheses(output, row=0):
    """[(tokens without EOS, score)] of the valid n-best entries."""
    result = []
    for ids, length, score in zip(output.ids[row].numpy(), output.lengths[row].numpy(), output.scores[row].numpy()):
        if length:
            assert ids[length - 1] == EOS_ID and np.all(ids[length:] == PAD_ID)
            result.append((tuple(ids[: length - 1]), float(score)))
    return result


NEG = -30.0  # a logit that makes a token practically impossible
V = 6  # 0 PAD, 1 BOS, 2 EOS, 3 UNK, 4 "A", 5 "B"
A, B = 4, 5


def test_coverage_penalty_changes_the_ranking_where_it_should():
    # From BOS: A slightly more likely than B. After A or B: EOS. Attention when fed BOS looks at
    # source position 0; fed A it looks at 0 again; fed B it looks at 1. So "A" covers position 0
    # twice and position 1 never; "B" covers both once.
    logits = np.full((V, V), NEG)
    logits[BOS_ID, [A, B]] = [1.0, 0.9]
    logits[A, EOS_ID] = logits[B, EOS_ID] = 10.0
    attention = np.zeros((V, 2))
    attention[BOS_ID] = attention[A] = [1.0, 0.0]
    attention[B] = [0.0, 1.0]
    plain = hypotheses(run_table(logits, attention, beam_width=2, alpha=0.0, beta=0.0, beamsize=NO_PRUNING))
    covered = hypotheses(run_table(logits, attention, beam_width=2, alpha=0.0, beta=0.2, beamsize=NO_PRUNING))
    assert plain[0][0] == (A,)  # by probability alone
    assert covered[0][0] == (B,)  # the coverage penalty prefers the translation that covers the source
    # Its eq. 14 score is log P + 0 (full coverage): check against the hand computation.
    log_p_b = logits[BOS_ID, B] - np.log(np.exp(logits[BOS_ID]).sum()) + (
        logits[B, EOS_ID] - np.log(np.exp(logits[B]).sum())
    )
    assert covered[0][1] == pytest.approx(log_p_b, abs=1e-5)


def local_pruning_case():
    logits = np.full((V, V), NEG)
    logits[BOS_ID, [EOS_ID, A, B]] = [0.0, 0.5, -4.0]  # B is ~4.5 below A, the best token
    logits[A, EOS_ID] = logits[B, EOS_ID] = 10.0
    return logits, np.full((V, 2), 0.5)


def test_local_pruning_drops_tokens_far_below_the_best_token():
    logits, attention = local_pruning_case()
    wide = hypotheses(run_table(logits, attention, beam_width=3, n_best=3, alpha=0.0, beta=0.0, beamsize=NO_PRUNING))
    pruned = hypotheses(run_table(logits, attention, beam_width=3, n_best=3, alpha=0.0, beta=0.0, beamsize=3.0))
    assert (B,) in [h for h, _ in wide]
    assert (B,) not in [h for h, _ in pruned]
    assert [h for h, _ in pruned] == [h for h, _ in wide if h != (B,)]


def global_pruning_case():
    logits = np.full((V, V), NEG)
    logits[BOS_ID, [EOS_ID, A, B]] = [2.0, 0.0, 0.0]  # A and B are ~2 below EOS: not pruned locally
    logits[[A, B], 2:] = 0.0  # after A or B everything (EOS, UNK, A, B) is equally likely
    return logits, np.full((V, 3), 1.0 / 3)


def test_global_pruning_drops_hypotheses_far_below_the_best_finished_one():
    logits, attention = global_pruning_case()
    settings = dict(beam_width=8, n_best=8, alpha=0.0, beta=0.0, source_len=3)
    wide = hypotheses(run_table(logits, attention, beamsize=NO_PRUNING, **settings))
    pruned = hypotheses(run_table(logits, attention, beamsize=3.0, **settings))
    # Once "EOS" (log P ~ -0.24) is finished, live hypotheses of two tokens (log P ~ -3.6) are
    # more than 3 below it and are dropped: nothing longer than one token before EOS survives.
    assert max(len(h) for h, _ in pruned) == 1
    assert max(len(h) for h, _ in wide) > 1
    assert pruned[0] == wide[0]  # the best translation is the same


def test_large_beamsize_changes_nothing():
    """A large finite margin (no_pruning(), 1e9, and 1e6) searches exactly as no pruning at all.

    The reference is an infinite margin, with which neither pruning comparison can ever hold;
    the entry points refuse inf (gnmt_tf.decoding.options), the search itself still takes it.
    """
    for case in (local_pruning_case(), global_pruning_case()):
        logits, attention = case
        settings = dict(beam_width=4, n_best=4, alpha=0.2, beta=0.2, source_len=attention.shape[1])
        unpruned = run_table(logits, attention, beamsize=float("inf"), **settings)
        for margin in (no_pruning(), 1e6):
            large = run_table(logits, attention, beamsize=margin, **settings)
            np.testing.assert_array_equal(unpruned.ids.numpy(), large.ids.numpy())
            np.testing.assert_allclose(unpruned.scores.numpy(), large.scores.numpy())


def test_output_length_is_limited_and_ends_with_eos():
    logits = np.full((V, V), NEG)
    logits[:, A] = 5.0  # EOS is never likely: the limit must end the search
    attention = np.full((V, 2), 0.5)
    # The forced final EOS costs every length the same, so alpha = 1 (which rewards length)
    # makes the longest allowed output the best one.
    out = hypotheses(run_table(logits, attention, beam_width=2, n_best=2, alpha=1.0, beta=0.0, beamsize=NO_PRUNING,
                               max_length_ratio=2.0, source_len=2))
    assert out[0][0] == (A, A, A)  # 2 x 2 source tokens = 4 tokens, the last one EOS
    assert all(len(h) <= 3 for h, _ in out)


def eos_outside_top_k_case():
    # From BOS: A and B (log P -1.07 each) rank above EOS (-1.17); with beam 2 the EOS extension
    # is third. After A or B, EOS, UNK, A and B are equally likely (log P -1.39 each), so every
    # longer output has log P below -2.4 and the empty output, if admitted, is the best one.
    logits = np.full((V, V), NEG)
    logits[BOS_ID, [EOS_ID, A, B]] = [-0.1, 0.0, 0.0]
    logits[[A, B], 2:] = 0.0
    return logits, np.full((V, 2), 0.5)


def test_an_eos_outside_the_top_k_does_not_finish_a_hypothesis():
    logits, attention = eos_outside_top_k_case()
    settings = dict(beam_width=2, n_best=2, alpha=0.0, beta=0.0, beamsize=NO_PRUNING)
    log_p = tf.nn.log_softmax(tf.constant(logits, tf.float32)).numpy()
    every = hypotheses(run_table(logits, attention, eos_rule="every_beam", **settings))
    top_k = hypotheses(run_table(logits, attention, eos_rule="top_k", **settings))
    assert every[0][0] == ()  # admitted although it ranked third, and then the best by log P
    assert every[0][1] == pytest.approx(log_p[BOS_ID, EOS_ID], abs=1e-5)
    assert () not in [h for h, _ in top_k]
    # What top_k finishes instead: one token, then EOS (EOS ranks first after A or B).
    best_one_token = log_p[BOS_ID, A] + log_p[A, EOS_ID]
    assert top_k[0][0] in [(A,), (B,)]
    assert top_k[0][1] == pytest.approx(best_one_token, abs=1e-5)


def test_eos_rule_is_checked():
    logits, attention = eos_outside_top_k_case()
    with pytest.raises(ValueError, match="eos_rule"):
        run_table(logits, attention, beam_width=2, eos_rule="sometimes")


# ----------------------------------------------------------------------------- a real GNMT
def tiny_gnmt(vocab_size=7, seed=0, scale=1.5, input_feeding=False):
    config = tiny_model_config(vocab_size=vocab_size, units=16, attention_units=8, input_feeding=input_feeding)
    model = GNMT(config)
    model.build()
    rng = np.random.default_rng(seed)
    for w in model.trainable_weights:  # large weights: peaked, varied distributions
        w.assign(rng.uniform(-scale, scale, w.shape).astype(np.float32))
    return model


def gnmt_search(model, source, **kwargs):
    memory = model.encode(source)
    return beam_search(model.step, model.initial_state(memory), memory.mask, **kwargs)


def every_output(vocab, limit):
    """Every output y_1..y_n (EOS follows) with n + 1 <= limit tokens, y_i neither PAD, BOS nor EOS."""
    tokens = [v for v in range(vocab) if v not in (PAD_ID, BOS_ID, EOS_ID)]
    return [seq for n in range(limit) for seq in itertools.product(tokens, repeat=n)]


def brute_force_best(model, source, limit):
    """Every output y_1..y_n EOS with n + 1 <= limit (PAD and BOS excluded), scored exactly."""
    candidates = every_output(model.model_config.vocab_size, limit)
    width = limit
    target_in = np.full((len(candidates), width), PAD_ID, np.int32)
    target_out = np.full((len(candidates), width), PAD_ID, np.int32)
    for row, seq in enumerate(candidates):
        target_in[row, : len(seq) + 1] = (BOS_ID,) + seq
        target_out[row, : len(seq) + 1] = seq + (EOS_ID,)
    sources = np.repeat(source, len(candidates), axis=0)
    log_probs = tf.nn.log_softmax(model((sources, target_in))).numpy()
    scores = []
    for row, seq in enumerate(candidates):
        positions = range(len(seq) + 1)
        scores.append(sum(log_probs[row, j, target_out[row, j]] for j in positions))
    best = int(np.argmax(scores))
    return candidates[best], scores[best]


# Exhaustive settings: 4 emittable tokens and outputs of at most 3 of them before EOS give at
# most 4^3 = 64 live prefixes, and at most 64 x 5 = 320 extensions a step. "every_beam" finishes
# every prefix with beam 64; "top_k" admits every EOS extension once the beam holds all 320.
@pytest.mark.parametrize("seed,eos_rule,beam_width", [
    (0, "every_beam", 64), (1, "every_beam", 64), (2, "top_k", 320), (3, "top_k", 320),
])
def test_exact_search_matches_brute_force(seed, eos_rule, beam_width):
    model = tiny_gnmt(seed=seed, input_feeding=seed % 2 == 1)
    source = np.array([[5, EOS_ID]], np.int32)  # 2 real tokens: outputs of at most 4 tokens
    limit = 4
    best_seq, best_log_prob = brute_force_best(model, source, limit)
    out = gnmt_search(model, source, beam_width=beam_width, alpha=0.0, beta=0.0, beamsize=NO_PRUNING,
                      max_length_ratio=2.0, eos_rule=eos_rule)
    found = hypotheses(out)[0]
    assert found[0] == best_seq
    assert found[1] == pytest.approx(best_log_prob, abs=1e-4)  # alpha = beta = 0: score = log P
    assert float(out.log_probs[0, 0]) == pytest.approx(best_log_prob, abs=1e-4)


class RecurrentTable:
    """A fake model whose logits and attention depend on the whole prefix fed so far: a random tanh
    recurrence over the fed tokens' embeddings, read out into logits and into attention over the source.
    ``step_fn`` is it in TensorFlow for the search; ``steps`` is it again in NumPy (float64) for the
    brute force."""

    def __init__(self, seed, vocab=7, source_len=2, units=4):
        rng = np.random.default_rng(seed)
        self.vocab, self.units = vocab, units
        self.embedding = rng.normal(0.0, 1.5, (vocab, units))
        self.recurrent = rng.normal(0.0, 1.0, (units, units))
        self.readout = rng.normal(0.0, 1.5, (units, vocab))
        self.attend = rng.normal(0.0, 2.0, (units, source_len))

    def step_fn(self, state, tokens):
        f32 = lambda array: tf.constant(array, tf.float32)  # noqa: E731
        h = tf.tanh(state["h"] @ f32(self.recurrent) + tf.gather(f32(self.embedding), tokens))
        return h @ f32(self.readout), tf.nn.softmax(h @ f32(self.attend)), {"h": h}

    def steps(self, fed):
        """(log-softmax of the logits, attention) of each step when ``fed`` is fed, one token a step."""
        h = np.zeros(self.units)
        for token in fed:
            h = np.tanh(h @ self.recurrent + self.embedding[token])
            logits, scores = h @ self.readout, h @ self.attend
            yield logits - np.log(np.exp(logits).sum()), np.exp(scores) / np.exp(scores).sum()


def brute_force_ranking(model, limit, alpha, beta):
    """Every output within ``limit`` tokens (EOS included) as (eq. 14 score, tokens, log P), best first.

    Eq. 14 written out: log P / ((5 + |Y|) / 6)^alpha + beta * sum_i log(min(sum_j p_ij, 1)), |Y| and
    j counting the final EOS too.
    """
    ranked = []
    for seq in every_output(model.vocab, limit):
        steps = list(model.steps((BOS_ID,) + seq))
        log_p = sum(log_probs[token] for (log_probs, _), token in zip(steps, seq + (EOS_ID,)))
        coverage = np.sum([attention for _, attention in steps], axis=0)
        length = len(seq) + 1
        score = log_p / ((5 + length) / 6) ** alpha + beta * np.sum(np.log(np.minimum(coverage, 1.0)))
        ranked.append((score, seq, log_p))
    return sorted(ranked, key=lambda entry: entry[0], reverse=True)


# As in test_exact_search_matches_brute_force: 4 emittable tokens, at most 3 before EOS (2 source
# tokens, ratio 2), so beam 64 keeps every prefix ("every_beam") and beam 320 admits every EOS ("top_k").
@pytest.mark.parametrize("seed,alpha,beta,eos_rule,beam_width", [
    (0, 0.2, 1.0, "every_beam", 64), (4, 0.6, 0.4, "every_beam", 64), (6, 0.6, 0.4, "top_k", 320),
    (7, 2.0, 0.6, "top_k", 320),
])
def test_exact_search_with_penalties_matches_brute_force(seed, alpha, beta, eos_rule, beam_width):
    """Eq. 14 with alpha, beta > 0: the best output and the n-best order of an exhaustive search are those
    of the enumeration of every output."""
    model = RecurrentTable(seed)
    limit, n_best = 4, 8
    ranked = brute_force_ranking(model, limit, alpha, beta)
    scores = np.array([score for score, _, _ in ranked[: n_best + 1]])
    assert np.all(np.diff(scores) < -1e-3)  # no near-ties: float32 cannot reorder them
    # Both penalties decide here: without either one (or both) the best output is another one.
    best = [seq for _, seq, _ in ranked[:n_best]]
    for other_alpha, other_beta in ((alpha, 0.0), (0.0, beta), (0.0, 0.0)):
        assert brute_force_ranking(model, limit, other_alpha, other_beta)[0][1] != best[0]

    out = beam_search(model.step_fn, {"h": tf.zeros([1, model.units])}, tf.ones([1, 2], tf.bool),
                      beam_width=beam_width, alpha=alpha, beta=beta, beamsize=NO_PRUNING,
                      max_length_ratio=2.0, n_best=n_best, eos_rule=eos_rule)
    found = hypotheses(out)
    assert [seq for seq, _ in found] == best
    np.testing.assert_allclose([score for _, score in found], scores[:n_best], atol=1e-4)
    log_probs = [log_p for _, _, log_p in ranked[:n_best]]
    np.testing.assert_allclose(out.log_probs.numpy()[0], log_probs, atol=1e-4)


def test_batch_invariance():
    model = tiny_gnmt(vocab_size=12, seed=5, scale=0.8)
    rng = np.random.default_rng(6)
    lengths = [3, 6, 1, 4]
    width = max(lengths) + 1
    sources = np.full((4, width), PAD_ID, np.int32)
    for row, n in enumerate(lengths):
        sources[row, :n] = rng.integers(4, 12, n)
        sources[row, n] = EOS_ID
    settings = dict(beam_width=3, n_best=2, alpha=0.2, beta=0.2, beamsize=3.0, return_attention=True)
    batched = gnmt_search(model, sources, **settings)
    for row, n in enumerate(lengths):
        alone = gnmt_search(model, sources[row : row + 1, : n + 1], **settings)
        length = alone.ids.shape[-1]
        np.testing.assert_array_equal(batched.ids.numpy()[row, :, :length], alone.ids.numpy()[0])
        assert np.all(batched.ids.numpy()[row, :, length:] == PAD_ID)
        np.testing.assert_allclose(batched.scores.numpy()[row], alone.scores.numpy()[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(
            batched.attention.numpy()[row, :, :length, : n + 1], alone.attention.numpy()[0], atol=1e-5
        )


def test_a_shortlist_of_every_id_changes_nothing_and_a_smaller_one_is_obeyed():
    """Beam search over the step with a vocabulary shortlist (the step's output_ids): with every
    id it is the search without one; with fewer ids it never outputs another."""
    model = tiny_gnmt(vocab_size=12, seed=7, scale=0.8)
    sources = np.array([[5, 6, 7, EOS_ID], [8, EOS_ID, PAD_ID, PAD_ID]], np.int32)
    settings = dict(beam_width=3, n_best=3, alpha=0.2, beta=0.2, beamsize=no_pruning(), return_attention=True)
    memory = model.encode(sources)

    def search(output_ids):
        columns = model.softmax_columns(output_ids)
        step = lambda state, tokens: model.step(state, tokens, softmax_columns=columns)  # noqa: E731
        return beam_search(step, model.initial_state(memory), memory.mask, **settings)

    full = gnmt_search(model, sources, **settings)
    everything = search(tf.range(12))
    for field in ("ids", "lengths"):
        np.testing.assert_array_equal(getattr(everything, field).numpy(), getattr(full, field).numpy())
    for field in ("scores", "log_probs", "attention"):
        np.testing.assert_allclose(getattr(everything, field).numpy(), getattr(full, field).numpy(), atol=1e-5)
    used = {int(token) for row in range(2) for tokens, _ in hypotheses(full, row) for token in tokens}
    assert used, "the unrestricted search outputs some non-special token"
    banned = max(used, key=lambda token: sum(token in tokens for row in range(2)
                                             for tokens, _ in hypotheses(full, row)))
    allowed = [token for token in range(12) if token != banned]
    restricted = search(tf.constant(allowed, tf.int32))
    outputs = [tokens for row in range(2) for tokens, _ in hypotheses(restricted, row)]
    assert outputs and all(banned not in tokens for tokens in outputs)


def test_scores_are_eq14_of_the_returned_hypotheses():
    model = tiny_gnmt(vocab_size=10, seed=7, scale=1.0)
    source = np.array([[4, 6, 8, EOS_ID]], np.int32)
    alpha, beta = 0.6, 0.4
    out = gnmt_search(model, source, beam_width=4, n_best=4, alpha=alpha, beta=beta, beamsize=NO_PRUNING,
                      return_attention=True)
    scores = out.scores.numpy()[0]
    assert np.all(np.diff(scores) <= 1e-6)  # best first
    for rank in range(4):
        length = int(out.lengths[0, rank])
        ids = out.ids.numpy()[0, rank, :length]
        target_in = np.array([[BOS_ID, *ids[:-1]]], np.int32)
        logits, attention = model.forward(source, target_in)
        log_p = float(np.sum(tf.nn.log_softmax(logits).numpy()[0, np.arange(length), ids]))
        coverage = np.minimum(attention.numpy()[0].sum(axis=0), 1.0)
        expected = log_p / ((5 + length) / 6) ** alpha + beta * np.sum(np.log(coverage))
        assert float(out.log_probs[0, rank]) == pytest.approx(log_p, abs=1e-4)
        assert scores[rank] == pytest.approx(expected, abs=1e-4)
        np.testing.assert_allclose(out.attention.numpy()[0, rank, :length], attention.numpy()[0], atol=1e-5)


def test_attention_keys_are_projected_once_per_sentence(monkeypatch):
    model = tiny_gnmt(vocab_size=10, seed=8)
    calls = []
    original = model.decoder.attention.project_keys
    monkeypatch.setattr(model.decoder.attention, "project_keys", lambda v: calls.append(1) or original(v))
    gnmt_search(model, np.array([[4, 5, 6, EOS_ID]], np.int32), beam_width=3, beamsize=NO_PRUNING)
    assert len(calls) == 1  # in encode(), not in any of the decoding steps
