"""Several trained GNMTs decoding as one model (section 8.6: the paper's best results are ensembles).

:class:`Ensemble` has the step-by-step API that the translator searches with
(:meth:`gnmt_tf.models.gnmt.GNMT.encode`, ``initial_state``, ``step``, ``softmax_columns``,
``target_input_table``, ``target_input_projection``, ``product_kernels``), so the one search loop,
the Python API, the CLIs and every export decode an ensemble as they decode one model. Each member
encodes the source and carries its own decoder state; a step combines the members' next-token
distributions by a :class:`Combination` and averages their attention (what the coverage penalty of
eq. 14 and the n-best attention outputs read).

The members must share one wordpiece vocabulary (the translator has one tokenizer) and be decoded at
one delta (eq. 10; :func:`check_members`); their shapes (layers, units) may differ.
"""

from __future__ import annotations

import math
from typing import List, NamedTuple, Optional, Sequence, Tuple

import tensorflow as tf

from gnmt_tf.layers.attention import AttentionMemory
from gnmt_tf.layers.recurrence import WRITTEN_GRADIENT, Recurrence
from gnmt_tf.layers.weights import FLOAT_READER, WeightReader


class Combination:
    """How an ensemble step turns the members' log-probabilities [rows, V] into one row of scores,
    which the search's log-softmax normalizes."""

    name = ""

    def combine(self, log_probs: Sequence[tf.Tensor]) -> tf.Tensor:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class MeanLogProbs(Combination):
    """The mean of the members' log-probabilities: a normalized product of their distributions (a
    log-linear ensemble, Marian's and OpenNMT-py's default). A token needs every member's support, and
    the sum over a translation is the mean of the members' log P(Y|X) up to the per-step normalizers."""

    name = "mean_log_probs"

    def combine(self, log_probs):
        return tf.add_n(list(log_probs)) / float(len(log_probs))


class MeanProbs(Combination):
    """The mean of the members' probabilities (a mixture; fairseq's rule): one confident member
    is enough to keep a token."""

    name = "mean_probs"

    def combine(self, log_probs):
        return tf.reduce_logsumexp(tf.stack(list(log_probs)), axis=0) - math.log(len(log_probs))


MEAN_LOG_PROBS = MeanLogProbs()
MEAN_PROBS = MeanProbs()
COMBINATIONS = {rule.name: rule for rule in (MEAN_LOG_PROBS, MEAN_PROBS)}


def combination_named(name: str) -> Combination:
    """The rule of :data:`COMBINATIONS` called ``name`` (ValueError naming the choices otherwise)."""
    if name not in COMBINATIONS:
        raise ValueError(f"unknown ensemble rule {name!r}: one of {', '.join(COMBINATIONS)}")
    return COMBINATIONS[name]


class EnsembleMemory(NamedTuple):
    """The members' attention memories of one batch of sources."""

    members: Tuple[AttentionMemory, ...]

    @property
    def mask(self) -> tf.Tensor:
        """Real source positions [batch, src]: the same for every member (one tokenizer)."""
        return self.members[0].mask

    def padded_to(self, length) -> "EnsembleMemory":
        return EnsembleMemory(tuple(memory.padded_to(length) for memory in self.members))


class IncompatibleMembers(ValueError):
    """Models that cannot decode as one ensemble (the message names them and what differs)."""


def check_members(models: Sequence, names: Sequence[str]) -> None:
    """Refuse models that do not share a vocabulary size or a delta; ``names`` say which is which."""
    if len(models) != len(names):
        raise ValueError(f"{len(models)} models but {len(names)} names")
    if not models:
        raise IncompatibleMembers("an ensemble needs at least one model")
    first, first_name = models[0], names[0]
    for model, name in zip(models[1:], names[1:]):
        for what, value in (("vocabulary size", _vocab_size), ("delta (eq. 10)", _delta)):
            if value(model) != value(first):
                raise IncompatibleMembers(
                    f"{first_name} and {name} cannot decode as one ensemble: their {what} differs "
                    f"({value(first):g} and {value(model):g})")


def _vocab_size(model) -> int:
    return model.model_config.vocab_size


def _delta(model) -> float:
    return float(model.clip_delta.numpy())


class Ensemble:
    """Trained GNMTs (one vocabulary, one delta) as one model for searches (see the module docstring).

    Args:
        members: built :class:`gnmt_tf.models.GNMT` models; the same model twice is allowed.
        combination: how a step combines the members' distributions (default :data:`MEAN_LOG_PROBS`).
        names: what :func:`check_members` calls the members in its errors (default "model 1", ...).
    """

    def __init__(self, members: Sequence, combination: Combination = MEAN_LOG_PROBS,
                 names: Optional[Sequence[str]] = None):
        self.members = tuple(members)
        check_members(self.members, names or [f"model {i}" for i in range(1, len(self.members) + 1)])
        self.combination = combination
        self.model_config = self.members[0].model_config
        self.clip_delta = self.members[0].clip_delta

    def __len__(self) -> int:
        return len(self.members)

    @property
    def variables(self) -> List[tf.Variable]:
        """Every member's variables, each once (a member given twice is one set of weights)."""
        return _unique(variable for member in self.members for variable in member.variables)

    def product_kernels(self) -> List[tf.Variable]:
        return _unique(kernel for member in self.members for kernel in member.product_kernels())

    def embedding_tables(self) -> List[tf.Variable]:
        return _unique(table for member in self.members for table in member.embedding_tables())

    # ------------------------------------------------------------------ one step at a time
    def encode(self, source_ids, weights: WeightReader = FLOAT_READER, training=None,
               recurrence: Recurrence = WRITTEN_GRADIENT) -> EnsembleMemory:
        return EnsembleMemory(tuple(member.encode(source_ids, weights, training=training, recurrence=recurrence)
                                    for member in self.members))

    def initial_state(self, memory: EnsembleMemory):
        return tuple(member.initial_state(part) for member, part in zip(self.members, memory.members))

    def step(self, state, token_ids, weights: WeightReader = FLOAT_READER, softmax_columns=None,
             target_inputs=None):
        """Each member's step from its own state -> (combined scores [B, V], mean attention [B, S], states).

        ``softmax_columns`` and ``target_inputs``: one per member (:meth:`softmax_columns`,
        :meth:`target_input_projection`), or None."""
        columns = softmax_columns if softmax_columns is not None else (None,) * len(self)
        inputs = target_inputs if target_inputs is not None else (None,) * len(self)
        log_probs, attention, states = [], [], []
        for member, member_state, member_columns, member_inputs in zip(self.members, state, columns, inputs):
            logits, probs, new_state = member.step(member_state, token_ids, weights, softmax_columns=member_columns,
                                                   target_inputs=member_inputs)
            log_probs.append(tf.nn.log_softmax(logits))
            attention.append(probs)
            states.append(new_state)
        return self.combination.combine(log_probs), tf.add_n(attention) / float(len(self)), tuple(states)

    def softmax_columns(self, output_ids, weights: WeightReader = FLOAT_READER) -> tuple:
        return tuple(member.softmax_columns(output_ids, weights) for member in self.members)

    def target_input_table(self, weights: WeightReader = FLOAT_READER) -> tuple:
        return tuple(member.target_input_table(weights) for member in self.members)

    def target_input_projection(self, token_rows, weights: WeightReader = FLOAT_READER) -> tuple:
        return tuple(member.target_input_projection(rows, weights)
                     for member, rows in zip(self.members, token_rows))


def _unique(variables) -> List[tf.Variable]:
    seen, found = set(), []
    for variable in variables:
        if variable.ref() not in seen:
            seen.add(variable.ref())
            found.append(variable)
    return found
