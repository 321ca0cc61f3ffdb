"""Training: the recipe end to end, stopping, divergence, delta as trained (the CLI: test_train_cli.py)."""

import math
import os

import pytest
import tensorflow as tf

from gnmt_tf import model_files
from gnmt_tf.config import load_config
from gnmt_tf.data.tokenizer import WordpieceTokenizer
from gnmt_tf.training.callbacks import RunControl
from gnmt_tf.training.trainer import Trainer, TrainingDiverged
from helpers import SHALLOW, number_word_pairs
from conftest import MAX_NUMBER_MODEL_STEPS, NUMBER_MODEL_STEPS, QUALITY_CHECK_STEPS


def tiny_number_setup(tmp_path, steps, **overrides):
    train_pairs = number_word_pairs(2000, seed=1, min_len=1)
    dev_pairs = number_word_pairs(100, seed=2, min_len=1)
    tokenizer = WordpieceTokenizer.learn([s for p in train_pairs for s in p], vocab_size=64, max_characters=60)
    values = {
        "model.vocab_size": tokenizer.vocab_size,
        "model.units": 64,
        "model.attention_units": 32,
        "training.max_steps": steps,
        "training.checkpoint_every": 100,
        "training.eval_every": 10_000,
        "training.log_every": 20,
        "training.batch_size": 32,
        "training.adam_learning_rate": 0.01,
        "training.adam_steps": steps,
        "training.delta_anneal_steps": steps // 2,
    }
    values.update(overrides)
    config = load_config("tiny", overrides=values)
    model_dir = str(tmp_path / "model")
    model_files.save_metadata(model_dir, config, tokenizer)
    return config, model_dir, train_pairs, dev_pairs, tokenizer


def test_tiny_model_learns_a_synthetic_translation_task(trained_number_model):
    model_dir, result = trained_number_model  # trained by the fixture in conftest.py
    # trained until it met its quality (conftest.py), in whole rounds of QUALITY_CHECK_STEPS
    assert NUMBER_MODEL_STEPS <= result.step <= MAX_NUMBER_MODEL_STEPS and "max_steps" in result.stop_reason
    assert (result.step - NUMBER_MODEL_STEPS) % QUALITY_CHECK_STEPS == 0
    assert result.dev_bleu.score > 70, (result.dev_bleu, result.samples)
    assert result.dev_bleu.signature.startswith("nrefs:1")
    # The model directory is self-contained: it loads and translates by itself.
    model, loaded_tokenizer, loaded_config = model_files.load_model_dir(model_dir, which="latest")
    assert _final_state(model_dir)[1] == 1.0  # delta annealed to its end value (half way)
    from gnmt_tf.inference.translator import Translator

    translation = Translator(model, loaded_tokenizer).translate(["one two three"])[0]
    assert translation.text == "un deux trois"
    assert os.listdir(os.path.join(model_dir, "logs", "train"))  # TensorBoard events were written


def test_summaries_hold_the_logged_scalars(trained_number_model):
    model_dir, _ = trained_number_model  # a real run: logged every 20 steps, dev evaluated at its end
    tags = set()
    for sub in ("train", "dev"):
        directory = os.path.join(model_dir, "logs", sub)
        for name in os.listdir(directory):
            for event in tf.compat.v1.train.summary_iterator(os.path.join(directory, name)):
                tags |= {f"{sub}/{value.tag}" for value in event.summary.value}
    expected = {
        "train/loss", "train/perplexity", "train/learning_rate", "train/delta", "train/gradient_norm",
        "train/target_tokens_per_second", "dev/bleu", "dev/perplexity",
    }
    assert expected <= tags, tags


def test_nan_loss_stops_with_a_message_naming_step_and_checkpoint(tmp_path):
    config, model_dir, train_pairs, dev_pairs, tokenizer = tiny_number_setup(tmp_path, steps=50, **SHALLOW)
    trainer = Trainer(config, model_dir, train_pairs, dev_pairs, tokenizer, log=lambda m: None, verbose=0)
    weight = trainer.model.decoder.softmax_projection.kernel
    weight.assign(tf.fill(weight.shape, float("nan")))
    with pytest.raises(TrainingDiverged) as err:
        trainer.train()
    message = str(err.value)
    assert "nan at step 1" in message and "last good checkpoint is (none yet)" in message
    assert not tf.train.latest_checkpoint(model_files.checkpoint_dir(model_dir))  # NaN weights never saved


def test_run_control_limits():
    control = RunControl(max_steps=10, max_minutes=None, last_checkpoint=lambda: "ckpt-5")

    class FakeModel:
        stop_training = False

        class optimizer:
            iterations = tf.Variable(3, dtype=tf.int64)

    model = FakeModel()
    control.set_model(model)
    control.on_train_batch_end(0, {"loss": 2.0})
    assert not model.stop_training
    control.on_train_batch_end(0, {"loss": math.inf})
    assert model.stop_training and control.stop_reason == "diverged"
    assert "step 3" in control.diverged_message and "ckpt-5" in control.diverged_message

    model.stop_training = False
    at_limit = RunControl(max_steps=3, max_minutes=None, last_checkpoint=lambda: None)
    at_limit.set_model(model)
    at_limit.on_train_batch_end(0, {"loss": 1.0})
    assert model.stop_training and "max_steps (3)" in at_limit.stop_reason

    model.stop_training = False
    timed = RunControl(max_steps=100, max_minutes=1e-9, last_checkpoint=lambda: None)
    timed.set_model(model)
    timed.on_train_batch_end(0, {"loss": 1.0})
    assert model.stop_training and "time limit" in timed.stop_reason


def _final_state(model_dir):
    """Step, delta and optimizer phase of the latest checkpoint."""
    config, tokenizer = model_files.load_metadata(model_dir)
    from gnmt_tf.models.gnmt import GNMT
    from gnmt_tf.training.optimizer import AdamThenSGD

    model = GNMT(config.model)
    model.build()
    optimizer = AdamThenSGD.from_config_section(config)
    optimizer.build(model.trainable_variables)
    path = tf.train.latest_checkpoint(model_files.checkpoint_dir(model_dir))
    tf.train.Checkpoint(model=model, optimizer=optimizer).restore(path).assert_existing_objects_matched()
    return int(optimizer.iterations.numpy()), float(model.clip_delta.numpy()), bool(optimizer.in_adam_phase())


def test_a_run_stopped_mid_anneal_is_used_at_its_trained_delta(tmp_path):
    # 20 steps of a 200-step anneal: delta ends near 8 - 7 * 19/200 = 7.3, far from 1.
    config, model_dir, train_pairs, dev_pairs, tokenizer = tiny_number_setup(
        tmp_path, steps=20, **{"training.delta_anneal_steps": 200, "training.eval_every": 20, **SHALLOW}
    )
    trainer = Trainer(config, model_dir, train_pairs, dev_pairs, tokenizer, log=lambda m: None, verbose=0)
    result = trainer.train()
    trained_delta = float(trainer.model.clip_delta.numpy())
    assert trained_delta == pytest.approx(8.0 - 7.0 * 19 / 200, rel=1e-5)
    assert result.delta == pytest.approx(trained_delta)

    warnings = []
    for which in ("best", "latest"):
        model, loaded_tokenizer, _ = model_files.load_model_dir(model_dir, which=which, warn=warnings.append)
        assert float(model.clip_delta.numpy()) == pytest.approx(trained_delta)
    assert len(warnings) == 2 and f"delta = {trained_delta:.3g}" in warnings[0] and "not the final 1" in warnings[0]

    # It translates as the training process's own model did at the end of the run.
    from gnmt_tf.inference.translator import Translator

    sources = [source for source, _ in dev_pairs[:6]]
    assert Translator(model, loaded_tokenizer).greedy(sources) == Translator(trainer.model, tokenizer).greedy(sources)

    # An int8 export of it is refused, naming delta, and writes nothing.
    from export.exporters import ExportError, ExportRequest, export

    base = tmp_path / "int8"
    with pytest.raises(ExportError, match=r"delta = 7\.3.*not the final delta = 1"):
        export(ExportRequest(model_dir=model_dir, output=str(base), quantize="int8", log=lambda m: None),
               "saved_model")
    assert not base.exists() or not os.listdir(base)


def test_a_run_that_finished_its_anneal_loads_at_delta_one_without_warning(trained_number_model):
    model_dir, result = trained_number_model
    warnings = []
    model, _, _ = model_files.load_model_dir(model_dir, warn=warnings.append)
    assert float(model.clip_delta.numpy()) == 1.0 and result.delta == 1.0
    assert warnings == []


def test_a_run_bounded_in_time_ends_fully_annealed(tmp_path):
    # The step anneal (100k steps) would leave delta near 8; the clock anneal ends after 10% of
    # 6 s, before the first step (tracing) ends.
    config, model_dir, train_pairs, dev_pairs, tokenizer = tiny_number_setup(
        tmp_path, steps=100_000, **{"training.delta_anneal_steps": 100_000, "training.max_minutes": 0.1,
                                    "training.delta_anneal_time_fraction": 0.1, "training.eval_every": 100_000,
                                    **SHALLOW}
    )
    result = Trainer(config, model_dir, train_pairs, dev_pairs, tokenizer, log=lambda m: None, verbose=0).train()
    assert "time limit" in result.stop_reason and result.step < 100_000
    assert result.delta == 1.0
    assert _final_state(model_dir)[1] == 1.0
