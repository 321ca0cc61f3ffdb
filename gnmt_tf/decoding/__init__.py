"""Searches over ``GNMT.step``: one decoding loop (:func:`decode`) and its strategies,
beam search with eq. 14 (section 7), greedy search, sampling and forced scoring.

    memory = model.encode(source_ids)
    best = decode(model.step, model.initial_state(memory), memory.mask, BeamSearch(beam_width=4))
    again = decode(model.step, model.initial_state(memory), memory.mask, ForcedScoring(best.ids[:, 0]))
    # again.log_probs, again.scores == best.log_probs[:, 0], best.scores[:, 0] (float rounding)

The rule every entry point applies to the options alpha, beta and beamsize is in
:mod:`gnmt_tf.decoding.options`. The public names below are imported on first use, so that
the command lines, the config and the serving client can check options without loading
TensorFlow.
"""

from gnmt_tf.lazy import lazy_names

_PUBLIC = {
    "EOS_RULES": "gnmt_tf.decoding.beam",
    "BeamSearch": "gnmt_tf.decoding.beam",
    "BeamSearchOutput": "gnmt_tf.decoding.beam",
    "beam_search": "gnmt_tf.decoding.beam",
    "SearchConstraint": "gnmt_tf.decoding.constraints",
    "TokenCounts": "gnmt_tf.decoding.constraints",
    "UNCONSTRAINED": "gnmt_tf.decoding.constraints",
    "GreedySearch": "gnmt_tf.decoding.greedy",
    "coverage_penalty": "gnmt_tf.decoding.penalties",
    "length_penalty": "gnmt_tf.decoding.penalties",
    "sequence_score": "gnmt_tf.decoding.penalties",
    "RandomSampling": "gnmt_tf.decoding.sampling",
    "Sampler": "gnmt_tf.decoding.sampling",
    "ForcedScoring": "gnmt_tf.decoding.scoring",
    "ScoringOutput": "gnmt_tf.decoding.scoring",
    "DecodingStrategy": "gnmt_tf.decoding.search",
    "StepInputs": "gnmt_tf.decoding.search",
    "StepOutput": "gnmt_tf.decoding.search",
    "decode": "gnmt_tf.decoding.search",
    "output_length_limits": "gnmt_tf.decoding.search",
    "NO_PRUNING": "gnmt_tf.decoding.options",
    "SEARCH_OPTIONS": "gnmt_tf.decoding.options",
    "assert_search_options": "gnmt_tf.decoding.options",
    "check_search_option": "gnmt_tf.decoding.options",
    "no_pruning": "gnmt_tf.decoding.options",
    "search_option_problem": "gnmt_tf.decoding.options",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _PUBLIC)
