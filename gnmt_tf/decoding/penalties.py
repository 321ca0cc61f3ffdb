"""GNMT's scoring function (section 7, eq. 14): length and coverage penalties.

Score of a hypothesis Y for source X::

    s(Y, X) = log P(Y|X) / lp(Y) + cp(X; Y)
    lp(Y)   = (5 + |Y|)^alpha / (5 + 1)^alpha
    cp(X;Y) = beta * sum_i log(min(sum_j p_ij, 1.0))

|Y| counts the tokens including the final EOS, and p_ij is the attention of
target step j on source position i, summed over every step including the EOS
step; i runs over the real source positions (padding excluded; the EOS
appended to every source is a real position). A coverage of exactly 0 is
floored at 1e-10 so that cp stays finite.

The beam search (:class:`gnmt_tf.decoding.beam.BeamSearch`) and forced scoring
(:class:`gnmt_tf.decoding.scoring.ForcedScoring`) both score with
:func:`sequence_score`, so a given translation gets the same score from both.
"""

from __future__ import annotations

import tensorflow as tf

_COVERAGE_FLOOR = 1e-10


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


def sequence_score(log_probs, lengths, coverage, source_mask, alpha, beta):
    """Eq. 14: ``log_probs / lp(lengths) + cp(coverage)``, elementwise over hypotheses.

    ``log_probs`` and ``lengths`` broadcast to the hypotheses' shape [...]; ``coverage``
    is [..., source] and ``source_mask`` broadcasts to it.
    """
    return log_probs / length_penalty(lengths, alpha) + coverage_penalty(coverage, source_mask, beta)
