"""Searches over ``GNMT.step``: one decoding loop (:func:`decode`) and its strategies,
beam search with eq. 14 (section 7), greedy search, sampling."""

from gnmt_tf.decoding.beam import EOS_RULES, BeamSearch, BeamSearchOutput, beam_search, no_pruning
from gnmt_tf.decoding.greedy import GreedySearch, greedy_decode
from gnmt_tf.decoding.penalties import coverage_penalty, length_penalty, sequence_score
from gnmt_tf.decoding.sampling import RandomSampling, Sampler
from gnmt_tf.decoding.search import DecodingStrategy, StepInputs, StepOutput, decode, output_length_limits

__all__ = [
    "EOS_RULES",
    "BeamSearch",
    "BeamSearchOutput",
    "DecodingStrategy",
    "GreedySearch",
    "RandomSampling",
    "Sampler",
    "StepInputs",
    "StepOutput",
    "beam_search",
    "coverage_penalty",
    "decode",
    "greedy_decode",
    "length_penalty",
    "no_pruning",
    "output_length_limits",
    "sequence_score",
]
