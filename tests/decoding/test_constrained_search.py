"""Beam search under a token-count constraint (gnmt_tf.decoding.constraints): exact counts, the best
eq. 14 output among those that obey them (brute force), the room rule at the length limit, per-sentence
requirements while done sentences' rows are gathered away, and a TFLite form of builtin ops only."""

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf.decoding import UNCONSTRAINED, TokenCounts, beam_search, no_pruning
from gnmt_tf.vocab import BOS_ID, EOS_ID, UNK_ID
from test_beam_search import (
    NEG, V, A, B, RecurrentTable, brute_force_ranking, every_output, hypotheses, run_table, table_step_fn,
)

NO_PRUNING = no_pruning()
C = UNK_ID  # the table models' third ordinary token (V = 6: PAD BOS EOS UNK A B)


def count(seq, token):
    return sum(int(t) == token for t in seq)


def one_sentence_counts(token_ids, required):
    """TokenCounts for a batch of one sentence: ``required`` is its row of counts."""
    return TokenCounts(token_ids, tf.constant([required], tf.int32))


def recurrent_search(model, constraint=UNCONSTRAINED, **kwargs):
    """Beam search over ``model`` (a RecurrentTable) for one sentence of 2 real source tokens."""
    return beam_search(model.step_fn, {"h": tf.zeros([1, model.units])}, tf.ones([1, 2], tf.bool),
                       constraint=constraint, **kwargs)


def constrained_table(logits, attention, token_ids, required, **kwargs):
    return run_table(logits, attention, constraint=one_sentence_counts(token_ids, required), **kwargs)


# ----------------------------------------------------------------------------- exact counts, exact search
# As in test_beam_search's exhaustive tests: 4 emittable tokens (3..6), at most 3 before EOS (2 source tokens,
# ratio 2), so beam 64 with "every_beam" keeps every prefix, a fortiori every prefix the constraint allows.
@pytest.mark.parametrize("seed,alpha,beta", [(0, 0.2, 1.0), (4, 0.6, 0.4)])
def test_a_required_token_the_best_output_lacks_comes_once_in_the_best_output_that_has_it(seed, alpha, beta):
    model, limit, n_best = RecurrentTable(seed), 4, 4
    ranked = brute_force_ranking(model, limit, alpha, beta)
    c = next(token for token in (4, 5, 6) if token not in ranked[0][1])  # the best output lacks it
    obeying = [(score, seq) for score, seq, _ in ranked if count(seq, c) == 1]
    scores = np.array([score for score, _ in obeying[: n_best + 1]])
    assert np.all(np.diff(scores) < -1e-3)  # no near-ties: float32 cannot reorder them
    settings = dict(beam_width=64, alpha=alpha, beta=beta, beamsize=NO_PRUNING, n_best=n_best,
                    eos_rule="every_beam")

    plain = hypotheses(recurrent_search(model, **settings))
    found = hypotheses(recurrent_search(model, one_sentence_counts((c,), [1]), **settings))  # checks the EOS
    assert c not in plain[0][0]
    assert all(count(seq, c) == 1 for seq, _ in found)
    assert [seq for seq, _ in found] == [seq for _, seq in obeying[:n_best]]
    np.testing.assert_allclose([score for _, score in found], scores[:n_best], atol=1e-4)


def table_log_prob(logits, seq):
    """log P of ``seq`` + EOS under a table model (logits depend on the token fed only)."""
    log_probs = tf.nn.log_softmax(tf.constant(logits, tf.float32)).numpy()
    fed, emitted = (BOS_ID,) + tuple(seq), tuple(seq) + (EOS_ID,)
    return float(sum(log_probs[prev, token] for prev, token in zip(fed, emitted)))


def table_score(logits, seq, alpha):
    """Eq. 14 of ``seq`` + EOS under a table model, with beta = 0: log P / ((5 + |Y|) / 6)^alpha."""
    return table_log_prob(logits, seq) / ((5 + len(seq) + 1) / 6) ** alpha


def test_counts_of_two_and_one_are_met_exactly_by_the_best_output_that_meets_them():
    # A is the model's favourite after anything and EOS unlikely; alpha = 1 rewards length: unconstrained,
    # the output is A's up to the limit.
    logits = np.full((V, V), NEG)
    logits[:, [EOS_ID, C, A, B]] = [-1.0, 1.0, 3.0, 0.5]
    logits[A, [C, B]] = [2.0, -1.0]  # each token its own row: where A goes among the B's matters
    logits[B, [C, B]] = [0.0, 1.5]
    logits[C, [A, B]] = [2.0, 1.0]
    attention = np.full((V, 2), 0.5)
    alpha, limit = 1.0, 5  # 2 source tokens, ratio 2.5: up to 4 tokens before EOS
    settings = dict(beam_width=64, n_best=3, alpha=alpha, beta=0.0, beamsize=NO_PRUNING,
                    eos_rule="every_beam", max_length_ratio=2.5)
    plain = hypotheses(run_table(logits, attention, **settings))
    assert count(plain[0][0], A) >= 2

    found = hypotheses(constrained_table(logits, attention, (A, B), [1, 2], **settings))
    obeying = sorted(((table_score(logits, seq, alpha), seq) for seq in every_output(V, limit)
                      if count(seq, A) == 1 and count(seq, B) == 2), reverse=True)
    assert np.all(np.diff([score for score, _ in obeying[:4]]) < -1e-3)  # no near-ties
    assert [seq for seq, _ in found] == [seq for _, seq in obeying[:3]]
    assert all(count(seq, A) == 1 and count(seq, B) == 2 for seq, _ in found)
    np.testing.assert_allclose([score for _, score in found], [score for score, _ in obeying[:3]], atol=1e-4)


# ----------------------------------------------------------------------------- zero counts, no constraint
def test_zero_counts_and_no_constraint_search_as_the_plain_search_when_the_ids_are_not_wanted():
    model = RecurrentTable(0)
    settings = dict(beam_width=4, n_best=3, alpha=0.6, beta=0.4, beamsize=3.0)
    plain = recurrent_search(model, **settings)
    used = {int(token) for seq, _ in hypotheses(plain) for token in seq}
    unwanted = tuple(token for token in (3, 4, 5, 6) if token not in used)
    assert unwanted, "the plain n-best leaves some token out"
    for constraint in (one_sentence_counts(unwanted, [0] * len(unwanted)), UNCONSTRAINED):
        out = recurrent_search(model, constraint, **settings)
        for field in ("ids", "scores", "log_probs", "lengths"):
            np.testing.assert_array_equal(getattr(out, field).numpy(), getattr(plain, field).numpy())


def test_a_zero_count_bans_an_id_the_model_favours():
    model = RecurrentTable(0)
    settings = dict(beam_width=4, n_best=3, alpha=0.6, beta=0.4, beamsize=NO_PRUNING)
    favourite = hypotheses(recurrent_search(model, **settings))[0][0][0]  # the best output's first token
    found = hypotheses(recurrent_search(model, one_sentence_counts((int(favourite),), [0]), **settings))
    assert len(found) == 3 and all(favourite not in seq for seq, _ in found)


# ----------------------------------------------------------------------------- the room rule
def filler_case():
    """C is what the model wants first and after anything but C; A and B are unlikely; after C, EOS."""
    logits = np.full((V, V), NEG)
    logits[:, [EOS_ID, C, A, B]] = [1.0, 3.0, -2.0, -2.5]
    logits[C, EOS_ID] = 4.0
    return logits, np.full((V, 2), 0.5)


@pytest.mark.parametrize("ratio,fillers", [(1.5, 0), (2.0, 1)])  # limits 3 and 4 tokens, EOS included
def test_required_tokens_that_only_just_fit_are_all_emitted(ratio, fillers):
    """Beam 1 follows the model's favourite filler C as long as the rule lets it: with A and B missing and a
    limit of L tokens, L - 3 fillers fit (t + M + 2 <= L), then only A and B, then EOS."""
    logits, attention = filler_case()
    settings = dict(beam_width=1, alpha=0.0, beta=0.0, beamsize=NO_PRUNING, max_length_ratio=ratio)
    assert hypotheses(run_table(logits, attention, **settings))[0][0] == (C,)  # unconstrained: C, EOS
    out = constrained_table(logits, attention, (A, B), [1, 1], **settings)
    (seq, score), = hypotheses(out)
    assert count(seq, A) == count(seq, B) == 1 and count(seq, C) == fillers
    assert len(seq) + 1 == round(ratio * 2)  # the limit, exactly
    assert score == pytest.approx(table_log_prob(logits, seq), abs=1e-5)


def test_counts_that_cannot_fit_the_limit_give_no_hypothesis():
    logits, attention = filler_case()
    settings = dict(beam_width=4, n_best=2, alpha=0.0, beta=0.0, beamsize=NO_PRUNING, max_length_ratio=1.5)
    out = constrained_table(logits, attention, (A, B), [2, 1], **settings)  # 3 tokens + EOS > 3
    assert out.ids.shape == (1, 2, 0)
    np.testing.assert_array_equal(out.lengths.numpy(), [[0, 0]])
    assert np.all(np.isneginf(out.scores.numpy())) and np.all(np.isneginf(out.log_probs.numpy()))
    assert hypotheses(out) == []


# ----------------------------------------------------------------------------- a batch
def test_each_sentence_obeys_its_own_counts_while_done_sentences_leave_the_batch():
    """Three sentences of 1, 2 and 3 source tokens (limits 2, 4, 6): the first needs nothing and ends first,
    the others need different counts; each finds what it finds alone, so no sentence reads another's row."""
    model = RecurrentTable(3, source_len=3)
    token_ids = (4, 5, 6)
    required = np.array([[0, 0, 0], [1, 0, 2], [2, 1, 0]], np.int32)
    mask = np.arange(3)[None, :] < np.array([[1], [2], [3]])
    settings = dict(beam_width=3, n_best=2, alpha=0.6, beta=0.4, beamsize=3.0)

    def search(rows):
        return beam_search(model.step_fn, {"h": tf.zeros([len(rows), model.units])}, tf.constant(mask[rows]),
                           constraint=TokenCounts(token_ids, tf.constant(required[rows])), **settings)

    batched = search([0, 1, 2])
    for row in range(3):
        found = hypotheses(batched, row)
        alone = hypotheses(search([row]))
        assert found and all([count(seq, t) for t in token_ids] == list(required[row]) for seq, _ in found)
        assert [seq for seq, _ in found] == [seq for seq, _ in alone]
        np.testing.assert_allclose([score for _, score in found], [score for _, score in alone], atol=1e-5)
    lengths = [[len(seq) for seq, _ in hypotheses(batched, row)] for row in range(3)]
    assert max(lengths[0]) < 2 <= min(lengths[1] + lengths[2])  # the first sentence is done first


def test_token_ids_are_checked():
    for bad in ((EOS_ID,), (4, 4), (), (4.0,), (True,)):
        with pytest.raises(ValueError, match="token_ids"):
            TokenCounts(bad, [[1]])


# ----------------------------------------------------------------------------- TFLite
def test_a_constrained_search_converts_to_tflite_builtins_and_finds_there_what_it_finds_in_tensorflow():
    """Builtin ops only, and the same n-best places, empty ones included: TFLite stores a constant -inf as
    -3.4e38, a finite number, and a search that took "finite" for "a hypothesis" filled the places left
    empty here with what it had banned (the second sentence's "A EOS", which lacks B)."""
    from export.tflite import custom_ops, list_ops

    logits, attention = filler_case()
    step = table_step_fn(logits, attention)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.bool), tf.TensorSpec([None, 2], tf.int32)])
    def search(source_mask, required):
        state = {"dummy": tf.zeros(tf.stack([tf.shape(source_mask)[0], 1]))}
        out = beam_search(step, state, source_mask, beam_width=3, n_best=3, alpha=0.6, beta=0.2,
                          max_length_ratio=1.5, constraint=TokenCounts((A, B), required))
        return {"ids": out.ids, "scores": out.scores, "lengths": out.lengths}

    converter = tf.lite.TFLiteConverter.from_concrete_functions([search.get_concrete_function()], tf.Module())
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]  # no Flex, no custom ops
    model = converter.convert()
    ops = list_ops(model)
    assert "WHILE" in ops and "TOPK_V2" in ops and custom_ops(ops) == []

    pytest.importorskip("ai_edge_litert", reason="the LiteRT interpreter (pip install ai-edge-litert)")
    from ai_edge_litert.interpreter import Interpreter

    source_mask = np.array([[True, False], [True, True]])  # limits 2 and 3: both counts just fit
    required = np.array([[1, 0], [1, 1]], np.int32)
    runner = Interpreter(model_content=model).get_signature_runner()
    tflite = runner(source_mask=source_mask, required=required)
    expected = search(tf.constant(source_mask), tf.constant(required))
    expected = {name: value.numpy() for name, value in expected.items()}
    found = expected["lengths"] > 0  # the places TensorFlow fills: 1 and 2 of 3
    np.testing.assert_array_equal(found.sum(axis=1), [1, 2])
    np.testing.assert_array_equal(tflite["lengths"], expected["lengths"])
    np.testing.assert_array_equal(tflite["ids"], expected["ids"])
    np.testing.assert_allclose(tflite["scores"][found], expected["scores"][found], atol=1e-5)
    assert np.all(tflite["scores"][~found] <= np.finfo(np.float32).min)  # -inf's TFLite form
    for row, place in zip(*np.nonzero(found)):
        ids = expected["ids"][row, place]
        assert [count(ids, A), count(ids, B)] == list(required[row]), (row, place, ids)
