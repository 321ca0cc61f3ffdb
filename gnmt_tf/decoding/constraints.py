"""Constraints on what the beam search (section 7) may output, enforced inside the graph.

A constraint is an object passed to :class:`gnmt_tf.decoding.beam.BeamSearch`; what the search
does is chosen by the object, never by a flag:

* :data:`UNCONSTRAINED` (the default): no effect, and no op in the graph; the search is the plain
  section 7 search, bit for bit;
* :class:`TokenCounts`: each sentence's output contains each of n given token ids EXACTLY as often
  as its row of ``required`` says, e.g. the slot tokens that mask a software message's format
  placeholders (:mod:`gnmt_tf.localization.placeholders`): ``%s`` must come back once, and no slot
  the source lacks may appear::

      BeamSearch(4, constraint=TokenCounts(slot_ids, required))  # required: int32 [batch, n]

How a constraint works (:class:`SearchConstraint`): it keeps a state per live hypothesis in the
beam's live nest (:class:`gnmt_tf.decoding.beam.BeamLive`), so the decoding loop gathers it away
with the rows of done sentences; before the local pruning and the top-k of each step it sets the
log-probability of every token a hypothesis may not take next to -inf (:meth:`SearchConstraint.ban`),
and after the top-k it follows each new hypothesis from its parent (:meth:`SearchConstraint.advance`).
A banned extension is never scored, kept or finished, so eq. 14 ranks only outputs that obey the
constraint: with a beam that holds every allowed prefix and no pruning the search returns the best
eq. 14 output among those that obey it.

A sentence whose constraint cannot be met within its length limit (say two required tokens and a
limit of two tokens, the EOS included) gets no hypothesis: its n-best places are empty, score and
log P -inf, length 0, ids PAD, as for any sentence the beam search finds nothing for. The caller
tells it by ``lengths == 0``, or by a score at or below ``NO_HYPOTHESIS`` of
:mod:`gnmt_tf.decoding.beam` (-inf; a TFLite model stores -inf as -3.4e38).

Only :class:`~gnmt_tf.decoding.beam.BeamSearch` takes a constraint for now.
:class:`~gnmt_tf.decoding.greedy.GreedySearch` and
:class:`~gnmt_tf.decoding.sampling.RandomSampling` could apply the same bans to their single row,
but nothing needs them constrained yet;
:class:`~gnmt_tf.decoding.scoring.ForcedScoring` feeds given tokens and bans nothing, so a
constraint on its targets is the caller's check of those targets.

Graph-only and TFLite-convertible like the search (see :mod:`gnmt_tf.decoding.search`): the state
has fixed shapes, and each step works on the n constrained columns and EOS (a gather and a scatter of
A x K x (n + 1) values); a select over [A, K, V] runs only at the steps where some hypothesis has
no room left for a token that is not a missing one.
"""

from __future__ import annotations

import operator
from typing import Any, Sequence

import tensorflow as tf

from gnmt_tf.decoding.search import NEG_INF, StepInputs, static_or_dynamic_size
from gnmt_tf.vocab import BOS_ID, EOS_ID, PAD_ID


class SearchConstraint:
    """What a constraint does in the beam search; the state is a nest of tensors [A, K, ...]
    (A running sentences, K the beam width), () for none."""

    def initialize(self, beam_width: int) -> Any:
        """The state of the ``beam_width`` hypotheses of every sentence before the first step."""
        raise NotImplementedError

    def shape_invariants(self, beam_width: int) -> Any:
        """The state's shape invariants in the decoding loop."""
        raise NotImplementedError

    def ban(self, inputs: StepInputs, state) -> tf.Tensor:
        """``inputs.log_probs`` [A, K, V] with -inf at every token a hypothesis may not take next."""
        raise NotImplementedError

    def advance(self, state, parents: tf.Tensor, tokens: tf.Tensor) -> Any:
        """The state of the new hypotheses: hypothesis k continues hypothesis ``parents[:, k]`` with
        ``tokens[:, k]`` (both int32 [A, K]); a hypothesis finished with EOS leaves the state."""
        raise NotImplementedError


class Unconstrained(SearchConstraint):
    """No constraint: no state, nothing banned, no op added to the search's graph."""

    def initialize(self, beam_width):
        return ()

    def shape_invariants(self, beam_width):
        return ()

    def ban(self, inputs, state):
        return inputs.log_probs

    def advance(self, state, parents, tokens):
        return state


UNCONSTRAINED = Unconstrained()


class TokenCounts(SearchConstraint):
    """Each sentence emits token ``token_ids[j]`` exactly ``required[b, j]`` times before its EOS.

    Args:
        token_ids: the n constrained vocabulary ids, a tuple of distinct Python ints (never PAD,
            BOS or EOS; within the vocabulary).
        required: int32 [batch, n] (tensor or array): how often each sentence's output must contain
            each of them; 0 bans the id. A negative count counts as 0.

    The state is ``missing`` int32 [A, K, n]: how many more times each hypothesis must emit each id.
    Writing t for the step (it chooses token t + 1), L for the sentence's length limit (tokens, EOS
    included) and M for the hypothesis' total missing count, :meth:`ban` lets a hypothesis take

    * a constrained id j only if ``missing[j] > 0`` and ``t + M + 1 <= L``;
    * EOS only if ``M == 0``;
    * any other token only if ``t + M + 2 <= L``.

    Why (the room rule): after its token t + 1 a hypothesis still needs its M' missing tokens and an
    EOS, so it can finish only if ``t + 1 + M' + 1 <= L``; a missing id makes M' = M - 1, another
    token leaves M' = M. Every hypothesis the rule keeps can still finish (``t + M + 1 <= L`` holds
    again at the next step), and the loop's own rule (only EOS at the last step, t + 1 = L) then
    finds M = 0. Only a sentence with ``M + 1 > L`` at the start, where nothing fits, has every
    token banned at once and is done without a hypothesis (module docstring); with M = 0 the rule
    for other tokens is the loop's own last-step rule.
    """

    def __init__(self, token_ids: Sequence[int], required):
        self.token_ids = _checked_token_ids(token_ids)
        self.required = required

    def initialize(self, beam_width):
        required = tf.maximum(tf.convert_to_tensor(self.required, tf.int32), 0)
        required.shape.with_rank(2)[1:].assert_is_compatible_with([len(self.token_ids)])
        return tf.tile(tf.expand_dims(required, 1), [1, beam_width, 1])

    def shape_invariants(self, beam_width):
        return tf.TensorShape([None, beam_width, len(self.token_ids)])

    def ban(self, inputs, missing):
        missing_total = tf.reduce_sum(missing, axis=2)  # M [A, K]
        room = tf.expand_dims(inputs.limits, 1) - inputs.step - missing_total  # L - t - M [A, K]
        # With M = 0 the rule for other tokens is the loop's own last-step rule: nothing to add.
        may_continue = tf.logical_or(room >= 2, tf.equal(missing_total, 0))
        log_probs = _ban_unless(inputs.log_probs, may_continue, self._is_special(inputs.log_probs))
        allowed = tf.concat([  # [A, K, n + 1]: the n constrained ids, then EOS
            tf.logical_and(missing > 0, tf.expand_dims(room >= 1, 2)),
            tf.expand_dims(tf.equal(missing_total, 0), 2),
        ], axis=2)
        return self._ban_special_columns(log_probs, allowed)

    def advance(self, missing, parents, tokens):
        missing = tf.gather(missing, parents, batch_dims=1)
        emitted = tf.equal(tf.expand_dims(tokens, 2), tf.constant(self.token_ids, tf.int32))  # [A, K, n]
        # An empty place of the beam (log P -inf) may take a banned token and go below 0: it never
        # comes back to life, so its state does not matter.
        return missing - tf.cast(emitted, tf.int32)

    def _special_ids(self) -> tf.Tensor:
        """int32 [n + 1]: the constrained ids, then EOS: the columns whose bans differ per id."""
        return tf.constant(self.token_ids + (EOS_ID,), tf.int32)

    def _is_special(self, log_probs) -> tf.Tensor:
        """bool [V]: True at the constrained ids and EOS (a constant once the vocabulary size is known:
        the converters fold it)."""
        vocab = static_or_dynamic_size(log_probs, -1)
        special = self._special_ids()
        return tf.tensor_scatter_nd_update(tf.zeros([vocab], tf.bool), tf.expand_dims(special, 1),
                                           tf.ones_like(special, tf.bool))

    def _ban_special_columns(self, log_probs, allowed) -> tf.Tensor:
        """``log_probs`` [A, K, V] with -inf in the n + 1 special columns where ``allowed`` [A, K, n + 1]
        is False: a gather and a scatter of A x K x (n + 1) values (a gather over all V columns cost
        ten times as much, measured)."""
        shape, columns, count = tf.shape(log_probs), self._special_ids(), len(self.token_ids) + 1
        rows = tf.reshape(log_probs, [-1, shape[2]])  # [A * K, V]
        values = tf.where(tf.reshape(allowed, [-1, count]), tf.gather(rows, columns, axis=1), NEG_INF)
        row_ids = tf.tile(tf.expand_dims(tf.range(tf.shape(rows)[0]), 1), [1, count])
        column_ids = tf.tile(tf.expand_dims(columns, 0), [tf.shape(rows)[0], 1])
        rows = tf.tensor_scatter_nd_update(rows, tf.stack([row_ids, column_ids], axis=2), values)
        return tf.reshape(rows, shape)


def _ban_unless(log_probs, may_continue, is_special) -> tf.Tensor:
    """``log_probs`` [A, K, V] with -inf at every token but the special ones (``is_special`` [V]) of the
    hypotheses that may not continue (``may_continue`` [A, K] False): those with no room for a token
    other than a missing one. Rare (the last steps before a limit while a token is missing), so skipped
    when no hypothesis needs it."""

    def ban():
        keep = tf.logical_or(tf.expand_dims(may_continue, 2), is_special)
        return tf.where(keep, log_probs, NEG_INF)

    return tf.cond(tf.reduce_all(may_continue), lambda: log_probs, ban)


def _checked_token_ids(token_ids) -> tuple:
    """``token_ids`` as a tuple of distinct Python ints, none of them PAD, BOS or EOS; else ValueError."""
    given = tuple(token_ids)
    if not given or any(isinstance(token, bool) or not hasattr(token, "__index__") for token in given):
        raise ValueError(f"token_ids must be a non-empty tuple of ints, got {token_ids!r}")
    ids = tuple(operator.index(token) for token in given)
    if len(set(ids)) != len(ids):
        raise ValueError(f"token_ids must be distinct, got {ids}")
    if set(ids) & {PAD_ID, BOS_ID, EOS_ID} or min(ids) < 0:
        raise ValueError(f"token_ids must be ordinary ids (not PAD, BOS, EOS or negative), got {ids}")
    return ids
