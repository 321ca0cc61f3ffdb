"""The config of a fine-tune of a trained model: what quantization-aware training (section 6;
:func:`gnmt_tf.quantization.qat.quantization_aware_config`) and RL refinement (section 5;
:func:`gnmt_tf.training.reinforce.refinement_config`) share.

Both continue from trained weights at a constant rate and see the model as it will run, so both train
with plain SGD (no Adam phase) at one learning rate, without halvings or a final decay, and with delta
fixed at its inference value ``model.clip_delta``.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping

NO_OVERRIDES: Mapping[str, Any] = MappingProxyType({})


def fine_tuning_config(config, learning_rate: float, recipe: Mapping[str, Any],
                       overrides: Mapping[str, Any] = NO_OVERRIDES):
    """``config`` with the training section of a fine-tune: plain SGD at ``learning_rate``, constant, and
    delta fixed at ``model.clip_delta`` (the overridden one, if ``overrides`` sets it); then the fine-tune's
    own ``recipe`` fields; ``overrides`` (dotted keys, as ``--set``) are applied last."""
    constant_sgd = {
        "training.adam_steps": 0,
        "training.sgd_learning_rate": learning_rate,
        "training.decay_count": 0,
        "training.delta_start": overrides.get("model.clip_delta", config.model.clip_delta),
        "training.delta_anneal_steps": 0,
        "training.final_decay_fraction": None,  # the recipe's rate is constant
    }
    return config.replace(**{**constant_sgd, **recipe, **overrides})
