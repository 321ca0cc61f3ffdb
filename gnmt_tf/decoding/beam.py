"""Beam search with GNMT's scoring and pruning (section 7), entirely in the TensorFlow graph.

Score of a finished hypothesis Y for source X (eq. 14)::

    s(Y, X) = log P(Y|X) / lp(Y) + cp(X; Y)
    lp(Y)   = (5 + |Y|)^alpha / (5 + 1)^alpha
    cp(X;Y) = beta * sum_i log(min(sum_j p_ij, 1.0))

|Y| counts the generated tokens including the final EOS, and p_ij is the
attention of target step j on source position i, summed over every step
including the EOS step; i runs over the real source positions (padding
excluded; the EOS appended to every source is a real position). A coverage
of exactly 0 is floored at 1e-10 so that cp stays finite.

Search, per sentence:

* ``beam_width`` live hypotheses; each step every live hypothesis is extended
  by every token. Extending with EOS finishes a hypothesis: the admitted EOS
  extensions are scored with eq. 14 and merged into a pool of the best
  ``beam_width`` finished hypotheses; the best ``beam_width`` non-EOS
  extensions (by log-probability) stay live. PAD and BOS are never generated.
* Which EOS extensions are admitted (``eos_rule``): "top_k" (default): only an
  EOS extension whose log-probability ranks among the ``beam_width`` best
  extensions of the sentence at this step (EOS and non-EOS alike), as OpenNMT,
  fairseq and tensor2tensor do; "every_beam": every live hypothesis' EOS
  extension, however unlikely. Section 7 leaves this open; "every_beam" lets a
  short, improbable ending into the pool at every step, and eq. 14's scores then
  favour outputs that are too short (measured: benchmarks/results/quality.json).
* Local pruning (section 7, first rule): a token whose log-probability is more
  than ``beamsize`` below the best token of the same hypothesis at this step is
  not expanded. CHOICE: the paper's "local score" is read as the token's
  log-probability at this step.
* Global pruning (second rule): once a sentence has a finished hypothesis,
  live hypotheses whose eq. 14 score (with their current length and coverage)
  is more than ``beamsize`` below the best finished one are dropped.
* ``beamsize = inf`` disables both rules.
* The output is at most ``ceil(max_length_ratio * source length)`` tokens long
  (source length counts real source tokens, EOS included); at the last allowed
  step only EOS may be chosen, so every output ends with EOS.
* A sentence is done when it has no live hypothesis left, or when no live
  hypothesis can still beat its ``n_best``-th finished one: log P only falls
  as a hypothesis grows, lp is largest at the length limit and cp <= 0, so
  ``best live log P / lp(limit)`` bounds every score still to come; stopping
  then loses nothing.
* Done sentences are removed from the batch (their rows are gathered away),
  so they stop costing compute; the batch ends when every sentence is done.

The search is model-agnostic: it calls ``step_fn(state, tokens) -> (logits,
attention_probs, new_state)`` on a nest of tensors whose leading dimension is
sentences x beam, which is what :meth:`gnmt_tf.models.gnmt.GNMT.step` is.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional

import tensorflow as tf

from gnmt_tf.vocab import BOS_ID, EOS_ID, PAD_ID

_COVERAGE_FLOOR = 1e-10
_NEG_INF = float("-inf")
EOS_RULES = ("top_k", "every_beam")


class BeamSearchOutput(NamedTuple):
    """n-best lists, best first. ``ids`` end with EOS and are padded with PAD after it."""

    ids: tf.Tensor  # int32 [batch, n_best, length]
    scores: tf.Tensor  # float32 [batch, n_best]: eq. 14
    log_probs: tf.Tensor  # float32 [batch, n_best]: log P(Y|X)
    lengths: tf.Tensor  # int32 [batch, n_best]: tokens including EOS
    attention: Optional[tf.Tensor]  # float32 [batch, n_best, length, source] when requested


def length_penalty(lengths, alpha):
    """lp(Y) = (5 + |Y|)^alpha / 6^alpha (eq. 14)."""
    lengths = tf.cast(lengths, tf.float32)
    return tf.pow((5.0 + lengths) / 6.0, tf.cast(alpha, tf.float32))


def coverage_penalty(coverage, source_mask, beta):
    """cp = beta * sum_i log(min(sum_j p_ij, 1)) over real source positions (eq. 14).

    ``coverage`` [..., source] holds sum_j p_ij; ``source_mask`` broadcasts to it.
    """
    capped = tf.maximum(tf.minimum(coverage, 1.0), _COVERAGE_FLOOR)
    logs = tf.where(tf.cast(source_mask, tf.bool), tf.math.log(capped), tf.zeros_like(capped))
    return tf.cast(beta, tf.float32) * tf.reduce_sum(logs, axis=-1)


def _tile_beams(tensor, beam_width):
    """[batch, ...] -> [batch * beam, ...], each sentence's rows together."""
    tensor = tf.convert_to_tensor(tensor)
    multiples = tf.concat([[1, beam_width], tf.ones([tf.rank(tensor) - 1], tf.int32)], axis=0)
    tiled = tf.tile(tf.expand_dims(tensor, 1), multiples)
    return tf.reshape(tiled, tf.concat([[-1], tf.shape(tensor)[1:]], axis=0))


def beam_search(
    step_fn: Callable,
    initial_state,
    source_mask: tf.Tensor,
    beam_width: int,
    alpha: float = 0.2,
    beta: float = 0.2,
    beamsize: float = 3.0,
    max_length_ratio: float = 2.0,
    n_best: int = 1,
    return_attention: bool = False,
    eos_rule: str = "top_k",
) -> BeamSearchOutput:
    """Beam search over ``step_fn`` for a batch of sentences (see the module docstring).

    Args:
        step_fn: ``(state, tokens [rows]) -> (logits [rows, vocab], attention [rows, source], state)``.
        initial_state: a nest of tensors with leading dimension ``batch`` (one row per sentence).
        source_mask: bool [batch, source], True at real source positions.
        beam_width: live hypotheses per sentence (a Python int).
        alpha, beta: eq. 14's length and coverage strengths (tensors or floats).
        beamsize: pruning margin; ``inf`` disables pruning.
        max_length_ratio: output length limit as a multiple of the source length.
        n_best: hypotheses returned per sentence (<= beam_width).
        return_attention: also return each hypothesis' attention matrix.
        eos_rule: which EOS extensions may finish a hypothesis: "top_k" or "every_beam"
            (see the module docstring).
    """
    if eos_rule not in EOS_RULES:
        raise ValueError(f"eos_rule must be one of {', '.join(EOS_RULES)}, got {eos_rule!r}")
    if n_best > beam_width:
        raise ValueError(f"n_best ({n_best}) must not exceed beam_width ({beam_width})")
    K = beam_width
    source_mask = tf.convert_to_tensor(source_mask, tf.bool)
    batch = tf.shape(source_mask)[0]
    source_len = tf.shape(source_mask)[1]
    alpha = tf.cast(alpha, tf.float32)
    beta = tf.cast(beta, tf.float32)
    beamsize = tf.cast(beamsize, tf.float32)
    real_lengths = tf.reduce_sum(tf.cast(source_mask, tf.int32), axis=1)
    limits = tf.maximum(
        tf.cast(tf.math.ceil(tf.cast(real_lengths, tf.float32) * max_length_ratio), tf.int32), 1
    )

    # ---- live hypotheses of the active sentences (all sentences at first) --------------
    active = tf.range(batch)  # which batch rows are still being searched
    state = tf.nest.map_structure(lambda t: _tile_beams(t, K), initial_state)
    live_log_probs = tf.tile(tf.constant([[0.0] + [_NEG_INF] * (K - 1)]), [batch, 1])  # one start beam
    live_ids = tf.zeros([batch, K, 0], tf.int32)
    live_coverage = tf.zeros([batch, K, source_len])
    live_attention = tf.zeros([batch, K, 0, source_len])
    tokens = tf.fill([batch * K], BOS_ID)

    # ---- finished pool of every sentence ------------------------------------------------
    pool_scores = tf.fill([batch, K], _NEG_INF)
    pool_log_probs = tf.fill([batch, K], _NEG_INF)
    pool_ids = tf.zeros([batch, K, 0], tf.int32)
    pool_lengths = tf.zeros([batch, K], tf.int32)
    pool_attention = tf.zeros([batch, K, 0, source_len])

    def body(t, active, state, tokens, live_log_probs, live_ids, live_coverage, live_attention,
             pool_scores, pool_log_probs, pool_ids, pool_lengths, pool_attention):
        n_active = tf.shape(active)[0]
        mask = tf.gather(source_mask, active)  # [A, S]
        limit = tf.gather(limits, active)  # [A]
        logits, attention, state = step_fn(state, tokens)
        vocab = tf.shape(logits)[-1]
        log_probs = tf.reshape(tf.nn.log_softmax(logits), [n_active, K, vocab])
        attention = tf.reshape(attention, [n_active, K, source_len])
        token_ids = tf.range(vocab)
        never = tf.logical_or(tf.equal(token_ids, PAD_ID), tf.equal(token_ids, BOS_ID))
        last_step = tf.reshape(t + 1 >= limit, [n_active, 1, 1])
        allowed = tf.logical_and(~never, tf.logical_or(~last_step, tf.equal(token_ids, EOS_ID)))
        log_probs = tf.where(allowed, log_probs, _NEG_INF)
        # Local pruning: tokens more than beamsize below this hypothesis' best token.
        best_token = tf.reduce_max(log_probs, axis=-1, keepdims=True)
        log_probs = tf.where(log_probs < best_token - beamsize, _NEG_INF, log_probs)
        candidates = tf.expand_dims(live_log_probs, -1) + log_probs  # [A, K, V]
        coverage = live_coverage + attention  # every extension of a beam shares its new coverage
        length = t + 1

        # Finished: each beam's EOS extension, scored with eq. 14.
        eos_log_probs = candidates[:, :, EOS_ID]  # [A, K]
        eos_scores = eos_log_probs / length_penalty(length, alpha) + coverage_penalty(
            coverage, tf.expand_dims(mask, 1), beta
        )
        admitted = tf.math.is_finite(eos_log_probs)
        if eos_rule == "top_k":  # an EOS must win one of the K best places of this step
            kth_best = tf.math.top_k(tf.reshape(candidates, [n_active, K * vocab]), k=K).values[:, K - 1 :]
            admitted = tf.logical_and(admitted, eos_log_probs >= kth_best)
        eos_scores = tf.where(admitted, eos_scores, _NEG_INF)
        eos_ids = tf.concat([live_ids, tf.fill([n_active, K, 1], EOS_ID)], axis=2)

        # Merge them into the pool of the active sentences (pad the pool to length t + 1).
        my_pool_ids = tf.pad(tf.gather(pool_ids, active), [[0, 0], [0, 0], [0, 1]])
        merged_scores = tf.concat([tf.gather(pool_scores, active), eos_scores], axis=1)  # [A, 2K]
        merged_log_probs = tf.concat([tf.gather(pool_log_probs, active), eos_log_probs], axis=1)
        merged_ids = tf.concat([my_pool_ids, eos_ids], axis=1)
        merged_lengths = tf.concat([tf.gather(pool_lengths, active), tf.fill([n_active, K], length)], axis=1)
        top_scores, top = tf.math.top_k(merged_scores, k=K)
        new_pool_ids = tf.gather(merged_ids, top, batch_dims=1)
        new_pool_log_probs = tf.gather(merged_log_probs, top, batch_dims=1)
        # A place no admitted hypothesis filled stays empty (length 0), as before any was finished.
        new_pool_lengths = tf.where(
            tf.math.is_finite(top_scores), tf.gather(merged_lengths, top, batch_dims=1), 0
        )
        rows = tf.expand_dims(active, 1)
        pool_ids = tf.tensor_scatter_nd_update(tf.pad(pool_ids, [[0, 0], [0, 0], [0, 1]]), rows, new_pool_ids)
        pool_scores = tf.tensor_scatter_nd_update(pool_scores, rows, top_scores)
        pool_log_probs = tf.tensor_scatter_nd_update(pool_log_probs, rows, new_pool_log_probs)
        pool_lengths = tf.tensor_scatter_nd_update(pool_lengths, rows, new_pool_lengths)
        if return_attention:
            eos_attention = tf.concat([live_attention, tf.expand_dims(attention, 2)], axis=2)
            my_pool_attention = tf.pad(tf.gather(pool_attention, active), [[0, 0], [0, 0], [0, 1], [0, 0]])
            merged_attention = tf.concat([my_pool_attention, eos_attention], axis=1)
            pool_attention = tf.tensor_scatter_nd_update(
                tf.pad(pool_attention, [[0, 0], [0, 0], [0, 1], [0, 0]]),
                rows, tf.gather(merged_attention, top, batch_dims=1),
            )

        # Live: the best K non-EOS extensions.
        not_eos = tf.not_equal(token_ids, EOS_ID)
        flat = tf.reshape(tf.where(not_eos, candidates, _NEG_INF), [n_active, K * vocab])
        live_log_probs, flat_index = tf.math.top_k(flat, k=K)
        beam = flat_index // vocab
        new_tokens = flat_index % vocab
        live_ids = tf.concat([tf.gather(live_ids, beam, batch_dims=1), tf.expand_dims(new_tokens, 2)], axis=2)
        live_coverage = tf.gather(coverage, beam, batch_dims=1)
        if return_attention:
            live_attention = tf.concat(
                [tf.gather(live_attention, beam, batch_dims=1),
                 tf.expand_dims(tf.gather(attention, beam, batch_dims=1), 2)], axis=2,
            )
        # Global pruning: live hypotheses far below the best finished one.
        live_scores = live_log_probs / length_penalty(length, alpha) + coverage_penalty(
            live_coverage, tf.expand_dims(mask, 1), beta
        )
        best_finished = top_scores[:, 0:1]
        live_log_probs = tf.where(live_scores < best_finished - beamsize, _NEG_INF, live_log_probs)

        # Which sentences are done.
        best_live = tf.reduce_max(live_log_probs, axis=1)  # [A]
        bound = best_live / length_penalty(limit, alpha)  # no later score can exceed this
        nth_finished = top_scores[:, n_best - 1]
        done = tf.logical_or(~tf.math.is_finite(best_live), nth_finished >= bound)

        # Reorder the decoder state by beam, then drop the done sentences' rows.
        row_of = tf.reshape(tf.expand_dims(tf.range(n_active) * K, 1) + beam, [-1])
        keep = tf.reshape(tf.where(~done), [-1])
        keep_rows = tf.reshape(tf.gather(tf.reshape(row_of, [n_active, K]), keep), [-1])
        state = tf.nest.map_structure(lambda s: tf.gather(s, keep_rows), state)
        tokens = tf.reshape(tf.gather(new_tokens, keep), [-1])
        live_log_probs = tf.gather(live_log_probs, keep)
        live_ids = tf.gather(live_ids, keep)
        live_coverage = tf.gather(live_coverage, keep)
        if return_attention:
            live_attention = tf.gather(live_attention, keep)
        active = tf.gather(active, keep)
        return (t + 1, active, state, tokens, live_log_probs, live_ids, live_coverage, live_attention,
                pool_scores, pool_log_probs, pool_ids, pool_lengths, pool_attention)

    def condition(t, active, *rest):
        return tf.shape(active)[0] > 0

    def invariant(tensor):
        shape = tensor.shape.as_list()
        return tf.TensorShape([None] + [None] * (len(shape) - 1))

    loop_vars = (0, active, state, tokens, live_log_probs, live_ids, live_coverage, live_attention,
                 pool_scores, pool_log_probs, pool_ids, pool_lengths, pool_attention)
    shape_invariants = (
        tf.TensorShape([]), tf.TensorShape([None]), tf.nest.map_structure(invariant, state), tf.TensorShape([None]),
        tf.TensorShape([None, K]), tf.TensorShape([None, K, None]), tf.TensorShape([None, K, None]),
        tf.TensorShape([None, K, None, None]), tf.TensorShape([None, K]), tf.TensorShape([None, K]),
        tf.TensorShape([None, K, None]), tf.TensorShape([None, K]), tf.TensorShape([None, K, None, None]),
    )
    outputs = tf.while_loop(condition, body, loop_vars, shape_invariants=shape_invariants)
    _, _, _, _, _, _, _, _, pool_scores, pool_log_probs, pool_ids, pool_lengths, pool_attention = outputs
    return BeamSearchOutput(
        ids=pool_ids[:, :n_best],
        scores=pool_scores[:, :n_best],
        log_probs=pool_log_probs[:, :n_best],
        lengths=pool_lengths[:, :n_best],
        attention=pool_attention[:, :n_best] if return_attention else None,
    )


def no_pruning() -> float:
    """The ``beamsize`` that disables both pruning rules."""
    return math.inf
