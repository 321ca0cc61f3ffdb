"""Searches over ``GNMT.step``: one decoding loop (:func:`decode`) and its strategies,
beam search with eq. 14 (section 7), greedy search, sampling and forced scoring.

    memory = model.encode(source_ids)
    best = decode(model.step, model.initial_state(memory), memory.mask, BeamSearch(beam_width=4))
    again = decode(model.step, model.initial_state(memory), memory.mask, ForcedScoring(best.ids[:, 0]))
    # again.log_probs, again.scores == best.log_probs[:, 0], best.scores[:, 0] (float rounding)
"""

from gnmt_tf.decoding.beam import EOS_RULES, BeamSearch, BeamSearchOutput, beam_search, no_pruning
from gnmt_tf.decoding.greedy import GreedySearch, greedy_decode
from gnmt_tf.decoding.penalties import coverage_penalty, length_penalty, sequence_score
from gnmt_tf.decoding.sampling import RandomSampling, Sampler
from gnmt_tf.decoding.scoring import ForcedScoring, ScoringOutput
from gnmt_tf.decoding.search import DecodingStrategy, StepInputs, StepOutput, decode, output_length_limits

__all__ = [
    "EOS_RULES",
    "BeamSearch",
    "BeamSearchOutput",
    "DecodingStrategy",
    "ForcedScoring",
    "GreedySearch",
    "RandomSampling",
    "Sampler",
    "ScoringOutput",
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
