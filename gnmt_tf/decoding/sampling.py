"""Token-by-token searches: one decoder row per search, one token chosen each step.

:class:`Sampler` is the strategy of the one decoding loop
(:func:`gnmt_tf.decoding.search.decode`) for searches that keep a single hypothesis:
each step it chooses one token per search from the log-probabilities (the driver
has already banned PAD and BOS, and at the length limit every token but EOS where
the strategy asks for it), appends it to the output, and ends the search at EOS;
the driver ends it at its length limit. Subclasses only say how a token is chosen
(keras-hub's ``Sampler.get_next_token``):

* :class:`RandomSampling` (here): ``num_samples`` draws from the softmax per sentence, the
  samples of RL refinement (section 5, :mod:`gnmt_tf.training.reinforce`);
* :class:`gnmt_tf.decoding.greedy.GreedySearch`: the most probable token.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import tensorflow as tf

from gnmt_tf.decoding.search import DecodingStrategy, StepInputs, StepOutput, write_step
from gnmt_tf.vocab import EOS_ID, PAD_ID


class TokenHistory(NamedTuple):
    """The tokens chosen so far for every search, PAD after its end."""

    ids: tf.Tensor  # int32 [searches, longest limit]


class Sampler(DecodingStrategy):
    """One token per search and step, chosen by :meth:`choose`; the output is int32 ids
    [searches, T]: each search's tokens, PAD after its end (EOS, or its length limit)."""

    def choose(self, log_probs: tf.Tensor) -> tf.Tensor:
        """int32 [A] tokens from log-probabilities [A, V] (banned tokens are -inf)."""
        raise NotImplementedError

    def initialize(self, source_mask, limits):
        return (), TokenHistory(tf.fill([tf.shape(source_mask)[0], tf.reduce_max(limits)], PAD_ID))

    def step(self, inputs: StepInputs, live, history: TokenHistory) -> StepOutput:
        n_active = tf.shape(inputs.active)[0]
        chosen = self.choose(tf.reshape(inputs.log_probs, [n_active, -1]))  # [A]
        return StepOutput(
            tokens=tf.expand_dims(chosen, 1),
            parents=None,
            done=tf.equal(chosen, EOS_ID),
            live=live,
            results=TokenHistory(write_step(history.ids, inputs.active, inputs.step, chosen)),
        )

    def finalize(self, history: TokenHistory, source_mask) -> tf.Tensor:
        # As long as the longest output: PAD is never chosen, so that is the steps the loop ran.
        steps = tf.reduce_max(tf.reduce_sum(tf.cast(tf.not_equal(history.ids, PAD_ID), tf.int32), axis=1))
        return history.ids[:, :steps]


class RandomSampling(Sampler):
    """``num_samples`` independent samples of each sentence from the model's softmax.

    PAD and BOS are impossible and the other tokens keep their relative probabilities:
    the driver sets the log-probabilities of PAD and BOS to -inf and
    ``tf.random.categorical`` renormalises over the rest. A sample ends with EOS when
    EOS is drawn, or stops WITHOUT EOS at ``ceil(max_length_ratio * source length)``
    tokens: EOS is not forced at the limit, so every output the sampler returns has
    exactly the probability the model gives it under this distribution.

    Output: int32 ids [batch * num_samples, T]; row ``b * num_samples + k`` is sample k of
    sentence b, PAD after its end.

    Args:
        num_samples: samples per sentence (a Python int).
        seed: the op seed of ``tf.random.categorical`` (with the global seed: reproducible).
    """

    eos_at_limit = False

    def __init__(self, num_samples: int, seed: Optional[int] = None):
        if num_samples < 1:
            raise ValueError(f"num_samples must be at least 1, got {num_samples}")
        self.searches_per_sentence = num_samples
        self.seed = seed

    @property
    def num_samples(self) -> int:
        return self.searches_per_sentence

    def choose(self, log_probs):
        return tf.reshape(tf.random.categorical(log_probs, 1, dtype=tf.int32, seed=self.seed), [-1])
