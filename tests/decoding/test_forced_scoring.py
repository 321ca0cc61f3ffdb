"""ForcedScoring: log P(Y|X) and eq. 14 of given translations, against NumPy on a fake step
function, against teacher forcing, and against the beam search's own reported scores."""

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf.decoding import BeamSearch, ForcedScoring, decode, no_pruning
from gnmt_tf.models.gnmt import GNMT
from gnmt_tf.vocab import BOS_ID, EOS_ID, PAD_ID
from helpers import tiny_model_config

V, S = 7, 4  # vocabulary and source width of the fake model


def table_step_fn(logits_table, attention_table):
    """Logits and attention depend only on the token fed in."""
    logits_table = tf.constant(logits_table, tf.float32)
    attention_table = tf.constant(attention_table, tf.float32)

    def step(state, tokens):
        return tf.gather(logits_table, tokens), tf.gather(attention_table, tokens), state

    return step


def numpy_scores(logits_table, attention_table, target, mask, alpha, beta):
    """(log P, eq. 14 score, length, attention [length, S]) of one target by hand."""
    length = int(np.sum(target != PAD_ID))
    log_softmax = logits_table - np.log(np.exp(logits_table).sum(axis=1, keepdims=True))
    fed = np.concatenate([[BOS_ID], target[: length - 1]])  # step j is fed y_{j-1}
    log_p = sum(log_softmax[f, y] for f, y in zip(fed, target[:length]))
    attention = attention_table[fed]
    coverage = np.maximum(np.minimum(attention.sum(axis=0), 1.0), 1e-10)
    cp = beta * np.sum(np.log(coverage)[mask])
    return log_p, log_p / ((5.0 + length) / 6.0) ** alpha + cp, length, attention


def test_forced_scores_match_numpy_and_ignore_the_generation_rules():
    rng = np.random.default_rng(0)
    logits = rng.normal(0.0, 2.0, (V, V))
    attention = rng.dirichlet(np.ones(S), size=V)  # rows sum to 1 over the source
    attention[:, 0] *= 0.1  # position 0 stays under-covered: the coverage penalty matters
    mask = np.array([[True, True, True, False], [True, True, False, False], [True, True, True, True]])
    targets = np.array([
        [4, 5, 6, EOS_ID, PAD_ID, PAD_ID, PAD_ID],
        [5, BOS_ID, 4, 4, 6, 3, EOS_ID],  # BOS inside: never generated, scored as given
        [EOS_ID, PAD_ID, PAD_ID, PAD_ID, PAD_ID, PAD_ID, PAD_ID],
    ], np.int32)
    # The second source has 2 real tokens: generation would stop at 4 tokens (ratio 2) or 1
    # (ratio 0.5); its target has 7.
    alpha, beta = 0.6, 0.3
    step = table_step_fn(logits, attention)
    for ratio in (2.0, 0.5):  # the length limit does not apply to forced tokens
        strategy = ForcedScoring(targets, tf.constant(alpha), tf.constant(beta), return_attention=True)
        out = decode(step, {"row": tf.zeros([3])}, mask, strategy, max_length_ratio=ratio)
        assert out.attention.shape == (3, targets.shape[1], S)
        for row in range(3):
            log_p, score, length, att = numpy_scores(logits, attention, targets[row], mask[row], alpha, beta)
            assert int(out.lengths[row]) == length
            assert float(out.log_probs[row]) == pytest.approx(log_p, abs=1e-5)
            assert float(out.scores[row]) == pytest.approx(score, abs=1e-5)
            np.testing.assert_allclose(out.attention[row, :length].numpy(), att, atol=1e-6)
            assert np.all(out.attention[row, length:].numpy() == 0.0)
    no_attention = decode(step, {"row": tf.zeros([3])}, mask, ForcedScoring(targets, alpha, beta))
    assert no_attention.attention is None
    np.testing.assert_allclose(no_attention.scores.numpy(), out.scores.numpy(), rtol=1e-6)


# ----------------------------------------------------------------------------- a real GNMT
def tiny_gnmt(vocab_size, seed, scale, input_feeding=False):
    config = tiny_model_config(vocab_size=vocab_size, units=16, attention_units=8,
                               input_feeding=input_feeding)
    model = GNMT(config)
    model.build()
    rng = np.random.default_rng(seed)
    for w in model.trainable_weights:  # large weights: peaked, varied distributions
        w.assign(rng.uniform(-scale, scale, w.shape).astype(np.float32))
    return model


def sources():
    return np.array(
        [[4, 6, 8, EOS_ID, PAD_ID], [5, 7, 9, 4, EOS_ID], [6, EOS_ID, PAD_ID, PAD_ID, PAD_ID]], np.int32
    )


def forced(model, source, targets, **kwargs):
    memory = model.encode(source)
    return decode(model.step, model.initial_state(memory), memory.mask, ForcedScoring(targets, **kwargs))


@pytest.mark.parametrize("input_feeding", [False, True])
def test_scoring_the_beam_searchs_n_best_returns_the_scores_it_reported(input_feeding):
    model = tiny_gnmt(vocab_size=10, seed=7, scale=1.0, input_feeding=input_feeding)
    source = sources()
    alpha, beta, K = 0.6, 0.4, 4
    memory = model.encode(source)
    search = BeamSearch(K, alpha=alpha, beta=beta, beamsize=no_pruning(), n_best=K, return_attention=True)
    best = decode(model.step, model.initial_state(memory), memory.mask, search)
    assert np.all(best.lengths.numpy() > 0)  # every place filled: every rank is compared
    for rank in range(K):
        scored = forced(model, source, best.ids[:, rank], alpha=alpha, beta=beta, return_attention=True)
        np.testing.assert_array_equal(scored.lengths.numpy(), best.lengths[:, rank].numpy())
        np.testing.assert_allclose(scored.log_probs.numpy(), best.log_probs[:, rank].numpy(), atol=1e-5,
                                   rtol=0)
        np.testing.assert_allclose(scored.scores.numpy(), best.scores[:, rank].numpy(), atol=1e-5, rtol=0)
        np.testing.assert_allclose(scored.attention.numpy(), best.attention[:, rank].numpy(), atol=1e-5)


def test_forced_log_probs_agree_with_teacher_forcing():
    """Step by step through the decoding loop vs the whole-sequence decoder (another code path)."""
    model = tiny_gnmt(vocab_size=10, seed=3, scale=1.0)
    source = sources()
    rng = np.random.default_rng(1)
    lengths = [6, 2, 9]  # the last is longer than the search's limit (2 x 2 source tokens)
    targets = np.full((3, 9), PAD_ID, np.int32)
    for row, n in enumerate(lengths):
        targets[row, : n - 1] = rng.integers(3, 10, n - 1)
        targets[row, n - 1] = EOS_ID
    shifted = np.concatenate([np.full((3, 1), BOS_ID), targets[:, :-1]], axis=1)
    target_in = np.where(targets == PAD_ID, PAD_ID, shifted)
    logits, attention = model.forward(source, target_in)
    log_softmax = tf.nn.log_softmax(logits).numpy()
    scored = forced(model, source, targets, alpha=0.0, beta=1.0, return_attention=True)
    mask = source != PAD_ID
    for row, n in enumerate(lengths):
        log_p = log_softmax[row, np.arange(n), targets[row, :n]].sum()
        coverage = np.maximum(np.minimum(attention.numpy()[row, :n].sum(axis=0), 1.0), 1e-10)
        assert float(scored.log_probs[row]) == pytest.approx(log_p, abs=1e-4)
        assert float(scored.scores[row]) == pytest.approx(log_p + np.log(coverage)[mask[row]].sum(), abs=1e-4)
        np.testing.assert_allclose(scored.attention.numpy()[row, :n], attention.numpy()[row, :n], atol=1e-5)
