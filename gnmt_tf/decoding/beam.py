"""Beam search with GNMT's scoring and pruning (section 7), entirely in the TensorFlow graph.

Score of a finished hypothesis Y for source X (eq. 14, :mod:`gnmt_tf.decoding.penalties`)::

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
  favour outputs that are too short (measured on the dev split: docs/decoding.md).
* Local pruning (section 7, first rule): a token whose log-probability is more
  than ``beamsize`` below the best token of the same hypothesis at this step is
  not expanded. CHOICE: the paper's "local score" is read as the token's
  log-probability at this step.
* Global pruning (second rule): once a sentence has a finished hypothesis,
  live hypotheses whose eq. 14 score (with their current length and coverage)
  is more than ``beamsize`` below the best finished one are dropped.
* ``beamsize`` must be finite and >= 0 (:mod:`gnmt_tf.decoding.options`); 0 keeps only what ties
  with the best, and :data:`~gnmt_tf.decoding.options.NO_PRUNING` (1e9, far more than any
  log-probability gap) disables both rules.
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

Constraints (:mod:`gnmt_tf.decoding.constraints`): a ``constraint`` object bans, before the local
pruning and the top-k of each step, every token a hypothesis may not take next (-inf), with a state
per hypothesis kept in :class:`BeamLive` and followed from parent to child. The default,
``UNCONSTRAINED``, bans nothing and adds no op: the search above, bit for bit.
``TokenCounts(token_ids, required)`` makes each output contain each given id exactly as often as
its sentence requires (the slot tokens of masked placeholders), and bans the tokens that would leave
no room for the missing ones and the EOS before the length limit; eq. 14 then ranks only outputs
that obey it. A sentence whose requirement cannot fit its length limit gets no hypothesis (score
-inf, length 0; in TFLite the score is -3.4e38, see ``NO_HYPOTHESIS``).

:class:`BeamSearch` is this search as a strategy of the one decoding loop,
:func:`gnmt_tf.decoding.search.decode`, which owns the calls of ``step_fn``, the
log-softmax, the length limit, the PAD/BOS/EOS bans, the reordering of the
decoder state by beam and the removal of done sentences; :func:`beam_search` runs
it. The search is model-agnostic: ``step_fn(state, tokens) -> (logits,
attention_probs, new_state)`` on a nest of tensors whose leading dimension is
sentences x beam, which is what :meth:`gnmt_tf.models.gnmt.GNMT.step` is.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Union

import numpy as np
import tensorflow as tf

from gnmt_tf.decoding.constraints import UNCONSTRAINED, SearchConstraint
from gnmt_tf.decoding.penalties import length_penalty, sequence_score
from gnmt_tf.decoding.search import (
    NEG_INF,
    DecodingStrategy,
    StepInputs,
    StepOutput,
    decode,
    static_or_dynamic_size,
)
from gnmt_tf.vocab import EOS_ID, PAD_ID

EOS_RULES = ("top_k", "every_beam")

# The lowest float32. TFLite's converter stores a constant -inf as this finite number, so in a converted
# search an empty place, a banned token or a pruned one is -3.4e38, and a log P added to it stays
# -3.4e38 (it rounds back). A log P or score at or below it is no hypothesis, -inf in TensorFlow and
# -3.4e38 in TFLite alike: testing for "finite" instead let such non-hypotheses (a PAD then EOS, a
# constraint's banned EOS) into the n-best places TensorFlow leaves empty. A real log P is never near it.
NO_HYPOTHESIS = float(np.finfo(np.float32).min)


class BeamSearchOutput(NamedTuple):
    """n-best lists, best first. ``ids`` end with EOS and are padded with PAD after it."""

    ids: tf.Tensor  # int32 [batch, n_best, length]: length = the longest of them
    scores: tf.Tensor  # float32 [batch, n_best]: eq. 14
    log_probs: tf.Tensor  # float32 [batch, n_best]: log P(Y|X)
    lengths: tf.Tensor  # int32 [batch, n_best]: tokens including EOS
    attention: Optional[tf.Tensor]  # float32 [batch, n_best, length, source] when requested


class BeamLive(NamedTuple):
    """The K live hypotheses of each running sentence."""

    log_probs: tf.Tensor  # [A, K]: log P of the prefix; -inf for an empty place
    ids: tf.Tensor  # int32 [A, K, L]: the prefix's t tokens, PAD after them (L: the longest limit)
    coverage: tf.Tensor  # [A, K, S]: sum_j p_ij so far
    attention: Union[tf.Tensor, tuple]  # [A, K, L, S] (zeros after step t) when returned, else ()
    constraint: Any  # the constraint's state of each hypothesis, [A, K, ...]; () when unconstrained


class BeamPool(NamedTuple):
    """The best K finished hypotheses of every sentence, best first."""

    scores: tf.Tensor  # [batch, K]: eq. 14; -inf for an empty place
    log_probs: tf.Tensor  # [batch, K]
    ids: tf.Tensor  # int32 [batch, K, L]: PAD after each hypothesis' EOS
    lengths: tf.Tensor  # int32 [batch, K]: 0 for an empty place
    attention: Union[tf.Tensor, tuple]  # [batch, K, L, S] when attention is returned, else ()


class BeamSearch(DecodingStrategy):
    """Section 7's beam search with eq. 14 scoring and both pruning rules (module docstring).

    Args:
        beam_width: live hypotheses per sentence (a Python int).
        alpha, beta: eq. 14's length and coverage strengths (tensors or floats).
        beamsize: pruning margin (tensor or float), finite and >= 0; ``no_pruning()`` (1e9) disables pruning.
        n_best: hypotheses returned per sentence (<= beam_width).
        return_attention: also return each hypothesis' attention matrix.
        eos_rule: which EOS extensions may finish a hypothesis: "top_k" or "every_beam".
        constraint: what the outputs must obey (:mod:`gnmt_tf.decoding.constraints`): ``UNCONSTRAINED``,
            or e.g. ``TokenCounts(token_ids, required)``.
    """

    def __init__(self, beam_width: int, alpha=0.2, beta=0.2, beamsize=3.0, n_best: int = 1,
                 return_attention: bool = False, eos_rule: str = "top_k",
                 constraint: SearchConstraint = UNCONSTRAINED):
        if eos_rule not in EOS_RULES:
            raise ValueError(f"eos_rule must be one of {', '.join(EOS_RULES)}, got {eos_rule!r}")
        if n_best > beam_width:
            raise ValueError(f"n_best ({n_best}) must not exceed beam_width ({beam_width})")
        self.rows_per_search = beam_width
        self.alpha = alpha
        self.beta = beta
        self.beamsize = beamsize
        self.n_best = n_best
        self.return_attention = return_attention
        self.eos_rule = eos_rule
        self.constraint = constraint

    @property
    def beam_width(self) -> int:
        return self.rows_per_search

    def initialize(self, source_mask, limits):
        K = self.beam_width
        batch = tf.shape(source_mask)[0]
        source_len = tf.shape(source_mask)[1]
        longest = tf.reduce_max(limits)  # every hypothesis fits: histories never change shape
        with_attention = self.return_attention
        live = BeamLive(
            log_probs=tf.tile(tf.constant([[0.0] + [NEG_INF] * (K - 1)]), [batch, 1]),  # one start beam
            ids=tf.fill([batch, K, longest], PAD_ID),
            coverage=tf.zeros([batch, K, source_len]),
            attention=tf.zeros([batch, K, longest, source_len]) if with_attention else (),
            constraint=self.constraint.initialize(K),
        )
        pool = BeamPool(
            scores=tf.fill([batch, K], NEG_INF),
            log_probs=tf.fill([batch, K], NEG_INF),
            ids=tf.fill([batch, K, longest], PAD_ID),
            lengths=tf.zeros([batch, K], tf.int32),
            attention=tf.zeros([batch, K, longest, source_len]) if with_attention else (),
        )
        return live, pool

    def shape_invariants(self, live, pool):
        K = self.beam_width
        attention = tf.TensorShape([None, K, None, None]) if self.return_attention else ()
        return (
            BeamLive(tf.TensorShape([None, K]), tf.TensorShape([None, K, None]),
                     tf.TensorShape([None, K, None]), attention, self.constraint.shape_invariants(K)),
            BeamPool(tf.TensorShape([None, K]), tf.TensorShape([None, K]), tf.TensorShape([None, K, None]),
                     tf.TensorShape([None, K]), attention),
        )

    def step(self, inputs: StepInputs, live: BeamLive, pool: BeamPool) -> StepOutput:
        K = self.beam_width
        beamsize = tf.cast(self.beamsize, tf.float32)
        n_active = tf.shape(inputs.active)[0]
        vocab = static_or_dynamic_size(inputs.log_probs, -1)
        mask = tf.expand_dims(inputs.source_mask, 1)  # [A, 1, S]
        attention = inputs.attention  # [A, K, S]
        # The constraint's bans come first: the best token that local pruning measures from and the
        # top-k below are then among the tokens the hypothesis may take.
        log_probs = self.constraint.ban(inputs, live.constraint)
        # Local pruning: tokens more than beamsize below this hypothesis' best token.
        best_token = tf.reduce_max(log_probs, axis=-1, keepdims=True)
        log_probs = tf.where(log_probs < best_token - beamsize, NEG_INF, log_probs)
        candidates = tf.expand_dims(live.log_probs, -1) + log_probs  # [A, K, V]
        coverage = live.coverage + attention  # every extension of a beam shares its new coverage
        length = inputs.step + 1
        now = tf.equal(tf.range(tf.shape(live.ids)[2]), inputs.step)  # [L]: the history's place for this token

        # Finished: each beam's EOS extension, scored with eq. 14.
        eos_log_probs = candidates[:, :, EOS_ID]  # [A, K]
        eos_scores = sequence_score(eos_log_probs, length, coverage, mask, self.alpha, self.beta)
        admitted = is_hypothesis(eos_log_probs)
        # One top-k serves the EOS rule and the live hypotheses: the 2K best extensions hold at most
        # K EOS ones (one per beam), so they hold the K best non-EOS ones too, in the same order
        # (among equal values top_k puts the lower index first). The search's largest cost after
        # the step itself is these scans of K x vocabulary values.
        best_values, best_index = tf.math.top_k(tf.reshape(candidates, [n_active, K * vocab]), k=2 * K)
        if self.eos_rule == "top_k":  # an EOS must win one of the K best places of this step
            admitted = tf.logical_and(admitted, eos_log_probs >= best_values[:, K - 1 : K])
        eos_scores = tf.where(admitted, eos_scores, NEG_INF)
        pool, top_scores = self._merge_into_pool(
            pool, inputs.active, live, attention, eos_scores, eos_log_probs, length, now
        )

        # Live: the best K non-EOS extensions, the first K of those 2K that are not EOS (a top-k of
        # 2K keys: position, pushed behind every non-EOS one for an EOS).
        is_eos = tf.cast(tf.equal(best_index % vocab, EOS_ID), tf.float32)
        order_keys = tf.range(2 * K, dtype=tf.float32) + 2.0 * K * is_eos
        first_non_eos = tf.math.top_k(-order_keys, k=K).indices
        live_log_probs = tf.gather(best_values, first_non_eos, batch_dims=1)
        flat_index = tf.gather(best_index, first_non_eos, batch_dims=1)
        beam = flat_index // vocab
        new_tokens = flat_index % vocab
        live_ids = tf.where(now, tf.expand_dims(new_tokens, 2), tf.gather(live.ids, beam, batch_dims=1))
        live_coverage = tf.gather(coverage, beam, batch_dims=1)
        live_attention = live.attention
        if self.return_attention:
            live_attention = tf.where(
                tf.expand_dims(now, 1),
                tf.expand_dims(tf.gather(attention, beam, batch_dims=1), 2),
                tf.gather(live.attention, beam, batch_dims=1),
            )
        # Global pruning: live hypotheses far below the best finished one.
        live_scores = sequence_score(live_log_probs, length, live_coverage, mask, self.alpha, self.beta)
        best_finished = top_scores[:, 0:1]
        live_log_probs = tf.where(live_scores < best_finished - beamsize, NEG_INF, live_log_probs)

        # Which sentences are done.
        best_live = tf.reduce_max(live_log_probs, axis=1)  # [A]
        bound = best_live / length_penalty(inputs.limits, self.alpha)  # no later score can exceed this
        nth_finished = top_scores[:, self.n_best - 1]
        done = tf.logical_or(~is_hypothesis(best_live), nth_finished >= bound)
        return StepOutput(
            tokens=new_tokens,
            parents=beam,
            done=done,
            live=BeamLive(live_log_probs, live_ids, live_coverage, live_attention,
                          self.constraint.advance(live.constraint, beam, new_tokens)),
            results=pool,
        )

    def _merge_into_pool(self, pool: BeamPool, active, live: BeamLive, attention, eos_scores, eos_log_probs,
                         length, now):
        """The pool with the running sentences' EOS extensions merged in (EOS written at the
        place ``now`` [L] marks); also returns those sentences' new pool scores [A, K]."""
        K = self.beam_width
        n_active = tf.shape(active)[0]
        eos_ids = tf.where(now, EOS_ID, live.ids)
        # Merge them into the pool of the active sentences.
        my_pool_ids = tf.gather(pool.ids, active)
        merged_scores = tf.concat([tf.gather(pool.scores, active), eos_scores], axis=1)  # [A, 2K]
        merged_log_probs = tf.concat([tf.gather(pool.log_probs, active), eos_log_probs], axis=1)
        merged_ids = tf.concat([my_pool_ids, eos_ids], axis=1)
        merged_lengths = tf.concat([tf.gather(pool.lengths, active), tf.fill([n_active, K], length)], axis=1)
        top_scores, top = tf.math.top_k(merged_scores, k=K)
        new_ids = tf.gather(merged_ids, top, batch_dims=1)
        new_log_probs = tf.gather(merged_log_probs, top, batch_dims=1)
        # A place no admitted hypothesis filled stays empty (length 0), as before any was finished.
        new_lengths = tf.where(is_hypothesis(top_scores), tf.gather(merged_lengths, top, batch_dims=1), 0)
        rows = tf.expand_dims(active, 1)
        pool_attention = pool.attention
        if self.return_attention:
            eos_attention = tf.where(tf.expand_dims(now, 1), tf.expand_dims(attention, 2), live.attention)
            merged_attention = tf.concat([tf.gather(pool.attention, active), eos_attention], axis=1)
            pool_attention = tf.tensor_scatter_nd_update(
                pool.attention, rows, tf.gather(merged_attention, top, batch_dims=1)
            )
        new_pool = BeamPool(
            scores=tf.tensor_scatter_nd_update(pool.scores, rows, top_scores),
            log_probs=tf.tensor_scatter_nd_update(pool.log_probs, rows, new_log_probs),
            ids=tf.tensor_scatter_nd_update(pool.ids, rows, new_ids),
            lengths=tf.tensor_scatter_nd_update(pool.lengths, rows, new_lengths),
            attention=pool_attention,
        )
        return new_pool, top_scores

    def finalize(self, pool: BeamPool, source_mask) -> BeamSearchOutput:
        n = self.n_best
        lengths = pool.lengths[:, :n]
        longest = tf.reduce_max(lengths)  # the histories' PAD columns after every output are dropped
        return BeamSearchOutput(
            ids=pool.ids[:, :n, :longest],
            scores=pool.scores[:, :n],
            log_probs=pool.log_probs[:, :n],
            lengths=lengths,
            attention=pool.attention[:, :n, :longest] if self.return_attention else None,
        )


def is_hypothesis(values: tf.Tensor) -> tf.Tensor:
    """Where ``values`` (log P or eq. 14 scores) are those of a hypothesis: above :data:`NO_HYPOTHESIS`."""
    return values > NO_HYPOTHESIS


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
    constraint: SearchConstraint = UNCONSTRAINED,
) -> BeamSearchOutput:
    """Beam search over ``step_fn`` for a batch of sentences (see the module docstring).

    ``decode(step_fn, initial_state, source_mask, BeamSearch(...), max_length_ratio)``.

    Args:
        step_fn: ``(state, tokens [rows]) -> (logits [rows, vocab], attention [rows, source], state)``.
        initial_state: a nest of tensors with leading dimension ``batch`` (one row per sentence).
        source_mask: bool [batch, source], True at real source positions.
        beam_width: live hypotheses per sentence (a Python int).
        alpha, beta: eq. 14's length and coverage strengths (tensors or floats).
        beamsize: pruning margin, finite and >= 0; ``no_pruning()`` (1e9) disables pruning.
        max_length_ratio: output length limit as a multiple of the source length.
        n_best: hypotheses returned per sentence (<= beam_width).
        return_attention: also return each hypothesis' attention matrix.
        eos_rule: which EOS extensions may finish a hypothesis: "top_k" or "every_beam"
            (see the module docstring).
        constraint: what the outputs must obey (:mod:`gnmt_tf.decoding.constraints`); by default nothing.
    """
    strategy = BeamSearch(beam_width, alpha=alpha, beta=beta, beamsize=beamsize, n_best=n_best,
                          return_attention=return_attention, eos_rule=eos_rule, constraint=constraint)
    return decode(step_fn, initial_state, source_mask, strategy, max_length_ratio=max_length_ratio)
