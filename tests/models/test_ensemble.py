"""Ensembles (section 8.6): the members' steps combined in the one search loop.

References: the model itself (an ensemble of it, or of two copies of it, decodes as it does), and a
brute-force search over every output of a tiny vocabulary scored with the members' teacher-forced
forward passes (the training path, not the step the search uses), combined in NumPy.
"""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf.decoding import BeamSearch, ForcedScoring, GreedySearch, decode
from gnmt_tf.decoding.options import no_pruning
from gnmt_tf.models.ensemble import MEAN_LOG_PROBS, MEAN_PROBS, Ensemble, IncompatibleMembers
from gnmt_tf.models.gnmt import GNMT
from gnmt_tf.vocab import BOS_ID, EOS_ID, PAD_ID
from helpers import SHALLOW_MODEL, tiny_model_config

VOCAB = 7  # 4 emittable tokens besides PAD, BOS and EOS


def tiny_gnmt(seed, vocab_size=VOCAB, scale=1.5, **overrides):
    """A small GNMT with large random weights: peaked distributions that differ from seed to seed."""
    config = tiny_model_config(**{"vocab_size": vocab_size, "units": 16, "attention_units": 8, **SHALLOW_MODEL,
                                  **overrides})
    model = GNMT(config)
    model.build()
    rng = np.random.default_rng(seed)
    for weight in model.trainable_weights:
        weight.assign(rng.uniform(-scale, scale, weight.shape).astype(np.float32))
    return model


def search(model, source, strategy):
    memory = model.encode(tf.constant(source))
    return decode(model.step, model.initial_state(memory), memory.mask, strategy, max_length_ratio=2.0)


def beam(**kwargs):
    return BeamSearch(kwargs.pop("beam_width", 4), alpha=kwargs.pop("alpha", 0.6), beta=kwargs.pop("beta", 0.2),
                      beamsize=kwargs.pop("beamsize", 3.0), n_best=kwargs.pop("n_best", 4), return_attention=True,
                      **kwargs)


SOURCES = np.array([[5, 3, 6, EOS_ID], [4, EOS_ID, PAD_ID, PAD_ID]], np.int32)


@pytest.mark.parametrize("members", [1, 2])
@pytest.mark.parametrize("combination", [MEAN_LOG_PROBS, MEAN_PROBS], ids=lambda rule: rule.name)
def test_an_ensemble_of_one_model_or_of_copies_of_it_decodes_as_the_model(members, combination):
    model = tiny_gnmt(seed=0)
    ensemble = Ensemble([model] * members, combination)
    alone, together = search(model, SOURCES, beam()), search(ensemble, SOURCES, beam())
    np.testing.assert_array_equal(together.ids.numpy(), alone.ids.numpy())
    np.testing.assert_array_equal(together.lengths.numpy(), alone.lengths.numpy())
    np.testing.assert_allclose(together.scores.numpy(), alone.scores.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(together.log_probs.numpy(), alone.log_probs.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(together.attention.numpy(), alone.attention.numpy(), atol=1e-6)
    greedy_alone, greedy_together = search(model, SOURCES, GreedySearch()), search(ensemble, SOURCES, GreedySearch())
    np.testing.assert_array_equal(greedy_together.numpy(), greedy_alone.numpy())


def test_a_member_given_twice_is_one_set_of_weights():
    model, other = tiny_gnmt(seed=0), tiny_gnmt(seed=1)
    assert len(Ensemble([model, model]).variables) == len(model.variables)
    assert len(Ensemble([model, other]).product_kernels()) == 2 * len(model.product_kernels())


# ----------------------------------------------------------------------------- brute force
def every_output(limit):
    """Every output y_1..y_n (EOS follows) with n + 1 <= limit tokens, none of them PAD, BOS or EOS."""
    tokens = [v for v in range(VOCAB) if v not in (PAD_ID, BOS_ID, EOS_ID)]
    return [seq for n in range(limit) for seq in itertools.product(tokens, repeat=n)]


def teacher_forced_log_probs(model, source, candidates):
    """log-softmax [candidates, positions, V] of the model's full forward pass over each candidate."""
    width = max(len(seq) for seq in candidates) + 1
    target_in = np.full((len(candidates), width), PAD_ID, np.int32)
    for row, seq in enumerate(candidates):
        target_in[row, : len(seq) + 1] = (BOS_ID,) + seq
    logits = model((np.repeat(source, len(candidates), axis=0), target_in)).numpy().astype(np.float64)
    return logits - np.log(np.exp(logits).sum(-1, keepdims=True))


def combine(log_probs, rule):
    """The ensemble's normalized log-distribution from the members' [members, ..., V], in NumPy (over the
    whole vocabulary: the search bans PAD and BOS after normalizing)."""
    if rule is MEAN_LOG_PROBS:
        scores = np.mean(log_probs, axis=0)
    else:
        scores = np.log(np.mean(np.exp(log_probs), axis=0))
    return scores - np.log(np.exp(scores).sum(-1, keepdims=True))


def brute_force_ranking(members, source, limit, rule):
    """Every output within ``limit`` tokens (EOS included) as (log P under the ensemble, tokens), best first."""
    candidates = every_output(limit)
    members_log_probs = np.stack([teacher_forced_log_probs(member, source, candidates) for member in members])
    log_probs = combine(members_log_probs, rule)
    ranked = []
    for row, seq in enumerate(candidates):
        outputs = seq + (EOS_ID,)
        ranked.append((sum(log_probs[row, j, token] for j, token in enumerate(outputs)), seq))
    return sorted(ranked, reverse=True)


@pytest.mark.parametrize("seeds,rule", [((10, 11), MEAN_LOG_PROBS), ((2, 3), MEAN_PROBS)],
                         ids=["log-linear", "mixture"])
def test_beam_search_over_two_models_matches_brute_force(seeds, rule):
    """Beam 64 keeps every prefix of at most 3 of the 4 emittable tokens (2 source tokens, ratio 2):
    the search is exhaustive, so its n-best list is the brute force's ranking by the ensemble's log P."""
    members = [tiny_gnmt(seed) for seed in seeds]
    source = np.array([[5, EOS_ID]], np.int32)
    ranked = brute_force_ranking(members, source, limit=4, rule=rule)
    assert ranked[0][0] - ranked[1][0] > 1e-3  # no near-tie float32 could reorder
    # The ensemble decides: each member alone prefers another output, or the ensemble's best differs.
    alone = [brute_force_ranking([member], source, 4, rule)[0][1] for member in members]
    assert alone != [ranked[0][1]] * 2
    out = search(Ensemble(members, rule), source, BeamSearch(64, alpha=0.0, beta=0.0, beamsize=no_pruning(),
                                                              n_best=4, eos_rule="every_beam"))
    found = [tuple(out.ids.numpy()[0, k, : out.lengths.numpy()[0, k] - 1]) for k in range(4)]
    assert found == [seq for _, seq in ranked[:4]]
    np.testing.assert_allclose(out.log_probs.numpy()[0], [score for score, _ in ranked[:4]], atol=1e-4)


def test_forced_scoring_of_an_ensemble_is_the_brute_force_log_prob():
    members = [tiny_gnmt(6), tiny_gnmt(7)]
    source = np.array([[5, 4, EOS_ID]], np.int32)
    seq = (3, 6, 4)
    expected = next(score for score, found in brute_force_ranking(members, source, 4, MEAN_LOG_PROBS)
                    if found == seq)
    targets = tf.constant([list(seq) + [EOS_ID]], tf.int32)
    out = search(Ensemble(members), source, ForcedScoring(targets, 0.0, 0.0, False))
    assert float(out.log_probs[0]) == pytest.approx(expected, abs=1e-4)


# ----------------------------------------------------------------------------- refusals
def test_models_of_different_vocabularies_or_deltas_are_refused_by_name():
    model = tiny_gnmt(0)
    with pytest.raises(IncompatibleMembers, match=r"runs/a and runs/b .*vocabulary size differs \(7 and 9\)"):
        Ensemble([model, tiny_gnmt(1, vocab_size=9)], names=["runs/a", "runs/b"])
    other = tiny_gnmt(1)
    other.set_clip_delta(2.0)
    with pytest.raises(IncompatibleMembers, match=r"model 1 and model 2 .*delta"):
        Ensemble([model, other])
    # Other shapes decode together: the combination is over the vocabulary, not the states.
    Ensemble([model, tiny_gnmt(2, units=8)])
