"""Training: the recipe end to end, stopping, divergence, delta as trained (the CLI: test_train_cli.py)."""

import json
import math
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf import model_files, plots
from gnmt_tf.config import ConfigError
from gnmt_tf.training.callbacks import RunControl
from gnmt_tf.training.trainer import Trainer, TrainingDiverged
from helpers import SHALLOW, run_in_process
from number_model import tiny_number_setup


# One short run serves the tests of what a run leaves behind: a shallow model for SHORT_RUN_STEPS steps
# of a delta anneal ten times as long (so the run stops mid-anneal), one dev evaluation at its end.
SHORT_RUN_STEPS = 150
SHORT_RUN_ANNEAL_STEPS = 10 * SHORT_RUN_STEPS


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """The short run: (trainer, its TrainResult, model_dir, dev_pairs, tokenizer)."""
    import tf_keras as keras

    keras.utils.set_random_seed(1234)
    config, model_dir, train_pairs, dev_pairs, tokenizer = tiny_number_setup(
        tmp_path_factory.mktemp("short_run"), steps=SHORT_RUN_STEPS,
        **{"training.delta_anneal_steps": SHORT_RUN_ANNEAL_STEPS, "training.eval_every": SHORT_RUN_STEPS,
           **SHALLOW})
    trainer = Trainer(config, model_dir, train_pairs, dev_pairs, tokenizer, log=lambda m: None, verbose=0)
    return trainer, trainer.train(), model_dir, dev_pairs, tokenizer


def test_a_short_run_learns_the_number_task(short_run):
    _, result, model_dir, _, tokenizer = short_run
    assert result.step == SHORT_RUN_STEPS and "max_steps" in result.stop_reason
    # An untrained model's dev perplexity is about the vocabulary's size (a uniform softmax: 64 here); after
    # these 150 steps it is below 2 (measured 1.85 and 1.95 from two initial weights; 3.3 and 8.5 after 60).
    assert tokenizer.vocab_size > 50 and result.dev_perplexity < 4, result.dev_perplexity
    assert result.dev_bleu.signature.startswith("nrefs:1")
    loss = [value for _, value in plots.read_training_scalars(model_dir)["train/loss"]]
    assert np.mean(loss[-2:]) < 0.5 * np.mean(loss[:2]), loss
    # That the model directory loads and translates by itself as the run's model did:
    # test_a_run_stopped_mid_anneal_is_used_at_its_trained_delta.


def test_summaries_hold_the_logged_scalars(short_run):
    _, _, model_dir, _, _ = short_run  # logged every 20 steps, dev evaluated at its end
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


def test_the_final_dev_figure_is_what_evaluate_gives_on_the_default_checkpoint(short_run, tmp_path):
    """One figure for one thing (tests/training/test_dev_figure.py has the rest): the dev BLEU the run
    ended with is python -m gnmt_tf.evaluate's on the same dev pairs and the checkpoint translate uses."""
    _, result, model_dir, dev_pairs, _ = short_run
    dev_file = model_files.write_dev_split(str(tmp_path), dev_pairs)  # as the train command keeps it
    out = run_in_process([sys.executable, "-m", "gnmt_tf.evaluate", "--model-dir", model_dir, "--test", dev_file,
                          "--json"])
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert abs(report["bleu"] - result.dev.bleu.score) <= 0.01, (report["bleu"], result.dev)
    assert report["signature"] == result.dev.bleu.signature
    assert result.dev_checkpoint == model_files.find_checkpoint(model_dir, "best")
    # and it says how it was decoded: the config's beam search, as evaluate ran it
    assert result.dev.search == (f"beam {report['beam_width']}, alpha {report['alpha']:g}, beta {report['beta']:g}, "
                                 f"beamsize {report['beamsize']:g}")


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


def test_a_run_stopped_mid_anneal_is_used_at_its_trained_delta(short_run, tmp_path):
    # 150 steps of a 1500-step anneal: delta ends near 8 - 7 * 149/1500 = 7.3, far from 1.
    trainer, result, model_dir, dev_pairs, tokenizer = short_run
    trained_delta = float(trainer.model.clip_delta.numpy())
    assert trained_delta == pytest.approx(8.0 - 7.0 * (SHORT_RUN_STEPS - 1) / SHORT_RUN_ANNEAL_STEPS, rel=1e-5)
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


def test_a_run_compiled_with_xla_trains_on_one_batch_shape_per_length_bucket(tmp_path):
    config, model_dir, train_pairs, dev_pairs, tokenizer = tiny_number_setup(
        tmp_path, steps=30, **{"training.jit_compile": True, "data.bucket_width": 10, **SHALLOW})
    with pytest.raises(ConfigError, match="training.jit_compile: .* not available with --strategy"):
        Trainer(config, model_dir, train_pairs, dev_pairs, tokenizer, log=lambda m: None, verbose=0,
                strategy=tf.distribute.MirroredStrategy(["/cpu:0"]))
    trainer = Trainer(config, model_dir, train_pairs, dev_pairs, tokenizer, log=lambda m: None, verbose=0)
    assert trainer.model.jit_compile
    # XLA compiles the step once per batch shape: one shape per length bucket, padded to its width.
    widths = _bucket_widths(config)
    batches = trainer.batches.for_fit(trainer.step)
    shapes = {tuple(target_out.shape) for (source, target_in), target_out in batches.take(100)}
    assert shapes <= {(config.training.batch_size, width) for width in widths} and len(shapes) > 1, shapes
    result = trainer.train()
    assert result.step == 30 and result.dev_perplexity < 0.5 * tokenizer.vocab_size, result
    # Too few pairs to fill a batch of any bucket: no batch at all, said plainly (not a run "finished" at step 0).
    few = Trainer(config, str(tmp_path / "few"), train_pairs[:20], dev_pairs, tokenizer, log=lambda m: None,
                  verbose=0)
    with pytest.raises(ConfigError, match=r"no batch: 20 pairs, and with training.jit_compile .* \(32\) pairs"):
        few.train()


def test_a_run_bounded_in_cells_trains_on_batches_within_the_bound(tmp_path):
    # 13 x 13 x 16 = 2704: the narrow buckets keep all 32 pairs, the wide ones (widths 13-21) take fewer.
    bound = 2704
    config, model_dir, train_pairs, dev_pairs, tokenizer = tiny_number_setup(
        tmp_path, steps=20, **{"training.batch_cells": bound, **SHALLOW})
    trainer = Trainer(config, model_dir, train_pairs, dev_pairs, tokenizer, log=lambda m: None, verbose=0)
    batches = trainer.batches.for_fit(trainer.step)
    shapes = [(source.shape, target_out.shape) for (source, target_in), target_out in batches.take(200)]
    cells = [s[0] * s[1] * t[1] for s, t in shapes]
    assert max(cells) <= bound, max(cells)
    # The bound binds where it should: no batch holds more pairs than its length bucket's share,
    # bound // width^2 (32, 32, 16, 9 and 6 pairs for widths 5, 9, 13, 17 and 21 ids), and the
    # wide buckets' full batches hold fewer than training.batch_size.
    widths = _bucket_widths(config)
    assert widths == [5, 9, 13, 17, 21], widths  # the widths the shares above were worked out for
    share = {w: min(config.training.batch_size, bound // (w * w)) for w in widths}
    bucket = [min(w for w in widths if w >= max(s[1], t[1])) for s, t in shapes]
    assert all(s[0] <= share[w] for (s, t), w in zip(shapes, bucket)), shapes
    assert {w for (s, t), w in zip(shapes, bucket) if s[0] == share[w] < config.training.batch_size}, shapes
    result = trainer.train()
    assert result.step == 20 and result.dev_perplexity < 0.5 * tokenizer.vocab_size, result


def _bucket_widths(config):
    """The widest batch of each length bucket, in ids (wordpieces and EOS), as the pipeline buckets."""
    d = config.data
    return list(range(d.bucket_width + 1, d.max_length + 1, d.bucket_width)) + [d.max_length + 1]
