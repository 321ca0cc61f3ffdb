"""The config of a fine-tune (gnmt_tf.training.fine_tuning): constant plain SGD and delta at its inference
value, then the fine-tune's own fields, then the command line's overrides; QAT's and RL's recipes are it."""

import pytest

from gnmt_tf.config import load_config
from gnmt_tf.quantization.qat import QAT_LEARNING_RATE, quantization_aware_config
from gnmt_tf.training.fine_tuning import fine_tuning_config
from gnmt_tf.training.reinforce import RL_LEARNING_RATE, refinement_config

pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test

BASE = load_config("tiny", overrides={"training.adam_steps": 100, "training.decay_count": 3,
                                      "training.delta_anneal_steps": 50,
                                      "training.final_decay_fraction": 0.3})
CONSTANT_SGD = {"adam_steps": 0, "decay_count": 0, "delta_anneal_steps": 0, "final_decay_fraction": None}


def training_fields(config, names):
    return {name: getattr(config.training, name) for name in names}


def test_the_training_section_becomes_constant_sgd_with_delta_at_its_inference_value():
    config = fine_tuning_config(BASE, 0.25, {})
    assert training_fields(config, CONSTANT_SGD) == CONSTANT_SGD
    assert config.training.sgd_learning_rate == 0.25
    assert config.training.delta_start == BASE.model.clip_delta
    assert config.model == BASE.model and BASE.training.adam_steps == 100  # the model kept; BASE unchanged


def test_the_recipe_comes_after_the_shared_fields_and_the_overrides_after_both():
    recipe = {"training.adam_steps": 7, "training.max_steps": 11}
    config = fine_tuning_config(BASE, 0.25, recipe, {"training.max_steps": 13, "model.clip_delta": 2.0})
    assert (config.training.adam_steps, config.training.max_steps) == (7, 13)
    # delta is fixed at the clip the fine-tuned model will run with: the overridden one.
    assert config.model.clip_delta == config.training.delta_start == 2.0


@pytest.mark.parametrize("fine_tune, rate", [(quantization_aware_config, QAT_LEARNING_RATE),
                                             (refinement_config, RL_LEARNING_RATE)])
def test_qat_and_rl_are_fine_tunes_at_their_own_rate(fine_tune, rate):
    config = fine_tune(BASE)
    assert training_fields(config, CONSTANT_SGD) == CONSTANT_SGD
    assert config.training.sgd_learning_rate == rate
    assert fine_tune(BASE, {"model.clip_delta": 3.0}).training.delta_start == 3.0
