"""Forced scoring: log P(Y|X) and the eq. 14 score (section 7) of GIVEN translations.

A strategy of the one decoding loop, :func:`gnmt_tf.decoding.search.decode`: instead
of choosing tokens it feeds each target's own tokens (BOS first, then y_1 .. y_n)
and sums the log-softmax of each target token, the same log-softmax the beam
search sums, and the attention over every step (including the EOS step) for
eq. 14's coverage penalty. The score is
:func:`gnmt_tf.decoding.penalties.sequence_score`, the function the beam search
scores its hypotheses with, so scoring a beam search's own output gives back the
log P and score the search reported (to float rounding: the decoder then runs on
a batch of another shape).

The generation constraints do not apply to the forced tokens: nothing is banned
(a target may contain any token) and there is no length limit (a target may be
longer than ``ceil(max_length_ratio * source length)``, the most a search would
generate); ``max_length_ratio`` of :func:`decode` is ignored.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Union

import tensorflow as tf

from gnmt_tf.decoding.penalties import sequence_score
from gnmt_tf.decoding.search import DecodingStrategy, StepInputs, StepOutput, write_step
from gnmt_tf.vocab import PAD_ID


class ScoringOutput(NamedTuple):
    """Per sentence: the given translation's log P, eq. 14 score and length."""

    log_probs: tf.Tensor  # float32 [batch]: log P(Y|X), summed over the target's tokens
    scores: tf.Tensor  # float32 [batch]: eq. 14
    lengths: tf.Tensor  # int32 [batch]: target tokens (non-PAD), EOS included
    attention: Optional[tf.Tensor]  # float32 [batch, T, S] when requested (zeros after the target)


class ForcedTargets(NamedTuple):
    """The targets of the sentences still being scored."""

    ids: tf.Tensor  # int32 [A, T + 1]: each target, one PAD column more
    lengths: tf.Tensor  # int32 [A]


class ForcedTotals(NamedTuple):
    """What is summed over the steps, for every sentence."""

    log_probs: tf.Tensor  # [batch]
    coverage: tf.Tensor  # [batch, S]: sum_j p_ij
    attention: Union[tf.Tensor, tuple]  # [batch, T, S] (one step per target token) when returned, else ()


class ForcedScoring(DecodingStrategy):
    """Score given translations ``target_ids`` (see the module docstring).

    Args:
        target_ids: int32 [batch, T]; each target ends with EOS and is padded with PAD
            after it. Its length is its number of non-PAD tokens.
        alpha, beta: eq. 14's length and coverage strengths (tensors or floats).
        return_attention: also return each target's attention matrix [batch, T, S].
    """

    generates = False

    def __init__(self, target_ids, alpha=0.2, beta=0.2, return_attention: bool = False):
        self.target_ids = target_ids
        self.alpha = alpha
        self.beta = beta
        self.return_attention = return_attention

    def _targets(self):
        ids = tf.convert_to_tensor(self.target_ids, tf.int32)
        return ids, tf.reduce_sum(tf.cast(tf.not_equal(ids, PAD_ID), tf.int32), axis=1)

    def initialize(self, source_mask, limits):
        ids, lengths = self._targets()
        batch = tf.shape(source_mask)[0]
        source_len = tf.shape(source_mask)[1]
        targets = ForcedTargets(ids=tf.pad(ids, [[0, 0], [0, 1]]), lengths=lengths)
        totals = ForcedTotals(
            log_probs=tf.zeros([batch]),
            coverage=tf.zeros([batch, source_len]),
            # One step for every target token; at least one, the step an empty target is run for.
            attention=tf.zeros([batch, tf.maximum(tf.shape(ids)[1], 1), source_len])
            if self.return_attention else (),
        )
        return targets, totals

    def step(self, inputs: StepInputs, targets: ForcedTargets, totals: ForcedTotals) -> StepOutput:
        t = inputs.step
        n_active = tf.shape(inputs.active)[0]
        token = tf.gather(targets.ids, t, axis=1)  # [A]: y_{t+1}, fed at the next step
        log_probs = tf.reshape(inputs.log_probs, [n_active, -1])
        attention = tf.reshape(inputs.attention, [n_active, -1])
        real = t < targets.lengths  # False only for an empty target, at t = 0
        token_log_prob = tf.where(real, tf.gather(log_probs, token, batch_dims=1), 0.0)
        attention = tf.where(tf.expand_dims(real, 1), attention, 0.0)
        rows = tf.expand_dims(inputs.active, 1)
        totals = ForcedTotals(
            # Added one step at a time, in the order the beam search adds them.
            log_probs=tf.tensor_scatter_nd_add(totals.log_probs, rows, token_log_prob),
            coverage=tf.tensor_scatter_nd_add(totals.coverage, rows, attention),
            attention=write_step(totals.attention, inputs.active, t, attention)
            if self.return_attention else (),
        )
        return StepOutput(
            tokens=tf.expand_dims(token, 1),
            parents=None,
            done=t + 1 >= targets.lengths,
            live=targets,
            results=totals,
        )

    def finalize(self, totals: ForcedTotals, source_mask) -> ScoringOutput:
        ids, lengths = self._targets()
        attention = None
        if self.return_attention:
            attention = totals.attention[:, : tf.shape(ids)[1]]  # zeros after every target
        log_probs, coverage = totals.log_probs, totals.coverage
        scores = sequence_score(log_probs, lengths, coverage, source_mask, self.alpha, self.beta)
        return ScoringOutput(log_probs=log_probs, scores=scores, lengths=lengths, attention=attention)
