"""Training: the recipe end to end, checkpoints and resume, stopping, divergence, the CLI."""

import math
import os
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from gnmt_tf import model_dir as layout
from gnmt_tf.config import load_config
from gnmt_tf.tokenizer import WordpieceTokenizer
from gnmt_tf.training import RunControl, Trainer, TrainingDiverged
from helpers import number_word_pairs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
    layout.save_metadata(model_dir, config, tokenizer)
    return config, model_dir, train_pairs, dev_pairs, tokenizer


def test_tiny_model_learns_a_synthetic_translation_task(trained_number_model):
    model_dir, result = trained_number_model  # trained by the fixture in conftest.py
    assert result.step == 1000 and "max_steps" in result.stop_reason
    assert result.dev_bleu.score > 70, (result.dev_bleu, result.samples)
    assert result.dev_bleu.signature.startswith("nrefs:1")
    # The model directory is self-contained: it loads and translates by itself.
    model, loaded_tokenizer, loaded_config = layout.load_model_dir(model_dir, which="latest")
    assert _final_state(model_dir)[1] == 1.0  # delta annealed to its end value (by step 500)
    from gnmt_tf.translator import Translator

    translation = Translator(model, loaded_tokenizer).translate(["one two three"])[0]
    assert translation == "un deux trois"
    assert os.listdir(os.path.join(model_dir, "logs", "train"))  # TensorBoard events were written


def test_summaries_hold_the_logged_scalars(tmp_path):
    config, model_dir, train_pairs, dev_pairs, tokenizer = tiny_number_setup(
        tmp_path, steps=40, **{"training.eval_every": 40}
    )
    Trainer(config, model_dir, train_pairs, dev_pairs, tokenizer, log=lambda m: None, verbose=0).train()
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
    config, model_dir, train_pairs, dev_pairs, tokenizer = tiny_number_setup(tmp_path, steps=50)
    trainer = Trainer(config, model_dir, train_pairs, dev_pairs, tokenizer, log=lambda m: None, verbose=0)
    weight = trainer.model.decoder.softmax_projection.kernel
    weight.assign(tf.fill(weight.shape, float("nan")))
    with pytest.raises(TrainingDiverged) as err:
        trainer.train()
    message = str(err.value)
    assert "nan at step 1" in message and "last good checkpoint is (none yet)" in message
    assert not tf.train.latest_checkpoint(layout.checkpoint_dir(model_dir))  # NaN weights never saved


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


def _train_cli(model_dir, *extra):
    # Each process ends by itself: a watchdog in the test kills it after a bound.
    return [sys.executable, "-m", "gnmt_tf.train", "--model-dir", model_dir, "--quiet", *extra]


TINY_CLI_ARGS = [
    "--config", "tiny",
    "--set", "model.units=48",
    "--set", "training.checkpoint_every=10",
    "--set", "training.eval_every=100000",
    "--set", "training.adam_steps=40",  # the Adam->SGD switch happens after the kill below
    "--set", "training.sgd_learning_rate=0.1",
    "--set", "training.delta_anneal_steps=50",  # delta reaches 1.0 before the last step
    "--set", "data.dev_max_pairs=50",
]


def _env():
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    return env


def _write_tsv(path, pairs):
    with open(path, "w", encoding="utf-8") as handle:
        for source, target in pairs:
            handle.write(f"{source}\t{target}\n")


def _final_state(model_dir):
    """Step, delta and optimizer phase of the latest checkpoint."""
    config, tokenizer = layout.load_metadata(model_dir)
    from gnmt_tf.model import GNMT
    from gnmt_tf.optimizer import AdamThenSGD

    model = GNMT(config.model)
    model.build()
    optimizer = AdamThenSGD.from_config_section(config)
    optimizer.build(model.trainable_variables)
    path = tf.train.latest_checkpoint(layout.checkpoint_dir(model_dir))
    tf.train.Checkpoint(model=model, optimizer=optimizer).restore(path).assert_existing_objects_matched()
    return int(optimizer.iterations.numpy()), float(model.clip_delta.numpy()), bool(optimizer.in_adam_phase())


def _dev_loss(model_dir):
    model, tokenizer, config = layout.load_model_dir(model_dir, which="latest")
    from gnmt_tf.data import make_dataset, read_tsv

    pairs, _ = read_tsv(os.path.join(model_dir, "dev.tsv"))
    data = make_dataset(pairs, tokenizer.tokenize, batch_size=64, max_length=50, bucket_width=5,
                        shuffle_buffer=1, seed=0, training=False)
    from gnmt_tf.losses import SequenceCrossEntropy

    model.compile(loss=SequenceCrossEntropy())
    return model.evaluate(data, verbose=0, return_dict=True)["loss"]


def test_killed_run_resumes_to_the_same_state(tmp_path):
    train_tsv, dev_tsv = str(tmp_path / "train.tsv"), str(tmp_path / "dev.tsv")
    _write_tsv(train_tsv, number_word_pairs(1500, seed=3))
    _write_tsv(dev_tsv, number_word_pairs(50, seed=4))
    data_args = ["--train", train_tsv, "--dev", dev_tsv, *TINY_CLI_ARGS]

    # The uninterrupted run and the run to be killed are independent: they run side by side.
    straight = str(tmp_path / "straight")
    straight_process = subprocess.Popen(_train_cli(straight, *data_args, "--max-steps", "60"), env=_env(),
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    killed = str(tmp_path / "killed")
    process = subprocess.Popen(_train_cli(killed, *data_args, "--max-steps", "60"), env=_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            latest = tf.train.latest_checkpoint(layout.checkpoint_dir(killed)) if os.path.isdir(killed) else None
            if latest and int(latest.rsplit("-", 1)[1]) >= 20:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the run wrote no checkpoint in time")
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        _, straight_errors = straight_process.communicate(timeout=300)
        assert straight_process.returncode == 0, straight_errors[-2000:]
    finally:
        for running in (process, straight_process):
            if running.poll() is None:
                running.kill()
    step_at_kill, _, phase_at_kill = _final_state(killed)
    assert 20 <= step_at_kill < 60 and phase_at_kill  # killed while still in the Adam phase

    resumed = subprocess.run(_train_cli(killed, *data_args, "--max-steps", "60"), env=_env(),
                             timeout=300, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming from" in resumed.stdout and f"at step {step_at_kill}" in resumed.stdout

    assert _final_state(killed) == _final_state(straight)  # (60, delta 1.0, SGD phase) for both
    assert _final_state(straight) == (60, 1.0, False)
    straight_loss, resumed_loss = _dev_loss(straight), _dev_loss(killed)
    assert abs(straight_loss - resumed_loss) < 0.15 * straight_loss, (straight_loss, resumed_loss)


def test_sigint_finishes_the_run_normally(tmp_path):
    train_tsv = str(tmp_path / "train.tsv")
    _write_tsv(train_tsv, number_word_pairs(1500, seed=5))
    model_dir = str(tmp_path / "model")
    process = subprocess.Popen(_train_cli(model_dir, "--train", train_tsv, *TINY_CLI_ARGS, "--max-steps", "100000"),
                               env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if os.path.isdir(layout.checkpoint_dir(model_dir)) and tf.train.latest_checkpoint(
                layout.checkpoint_dir(model_dir)
            ):
                break
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr[-2000:]
    assert "signal SIGINT" in stdout and "BLEU" in stdout and "sample translations" in stdout
    step = int(stdout.split("stopped at step ")[1].split(":")[0])
    assert tf.train.latest_checkpoint(layout.checkpoint_dir(model_dir)).endswith(f"ckpt-{step}")


def test_cli_default_data_smoke_run(tmp_path):
    """The main command's path on the built-in data, bounded to a few steps."""
    if not os.path.isdir("/usr/share/locale/fr/LC_MESSAGES"):
        pytest.skip("no gettext catalogs on this machine")
    model_dir = str(tmp_path / "model")
    result = subprocess.run(
        _train_cli(model_dir, "--config", "tiny", "--set", "model.vocab_size=600", "--set", "data.dev_max_pairs=40",
                   "--max-steps", "8"),
        env=_env(), timeout=400, capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "built-in data: gettext catalogs for en->fr" in out
    assert "held out 40 pairs as the dev split" in out
    assert "learned a shared wordpiece vocabulary" in out
    assert "dev BLEU = " in out and "nrefs:1" in out and "sample translations" in out
    for name in ("config.yaml", "wordpieces.txt", "dev.tsv", "checkpoints", "best", "logs"):
        assert os.path.exists(os.path.join(model_dir, name)), name


def test_cli_reports_bad_input_clearly(tmp_path, capsys):
    from gnmt_tf.train import main

    def run(*args):  # in-process: usage errors end before any training
        code = main(["--model-dir", str(tmp_path / "m"), "--quiet", *args])
        return code, capsys.readouterr().err

    code, errors = run("--train", str(tmp_path / "nope.tsv"))
    assert code == 2 and "nope.tsv" in errors
    code, errors = run("--target-lang", "xx")
    assert code == 2 and "--train" in errors
    code, errors = run("--set", "model.unitz=3")
    assert code == 2 and "model.unitz" in errors
    assert not os.path.exists(tmp_path / "m" / "checkpoints")  # nothing was started


def test_a_run_stopped_mid_anneal_is_used_at_its_trained_delta(tmp_path):
    # 60 steps of a 600-step anneal: delta ends near 8 - 7 * 59/600 = 7.3, far from 1.
    config, model_dir, train_pairs, dev_pairs, tokenizer = tiny_number_setup(
        tmp_path, steps=60, **{"training.delta_anneal_steps": 600, "training.eval_every": 60}
    )
    trainer = Trainer(config, model_dir, train_pairs, dev_pairs, tokenizer, log=lambda m: None, verbose=0)
    result = trainer.train()
    trained_delta = float(trainer.model.clip_delta.numpy())
    assert trained_delta == pytest.approx(8.0 - 7.0 * 59 / 600, rel=1e-5)
    assert result.delta == pytest.approx(trained_delta)

    warnings = []
    for which in ("best", "latest"):
        model, loaded_tokenizer, _ = layout.load_model_dir(model_dir, which=which, warn=warnings.append)
        assert float(model.clip_delta.numpy()) == pytest.approx(trained_delta)
    assert len(warnings) == 2 and f"delta = {trained_delta:.3g}" in warnings[0] and "not the final 1" in warnings[0]

    # It translates as the training process's own model did at the end of the run.
    from gnmt_tf.translator import Translator

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
    model, _, _ = layout.load_model_dir(model_dir, warn=warnings.append)
    assert float(model.clip_delta.numpy()) == 1.0 and result.delta == 1.0
    assert warnings == []


def test_a_run_bounded_in_time_ends_fully_annealed(tmp_path):
    # The step anneal (100k steps) would leave delta near 8; the clock anneal ends after 10% of
    # 18 s, which the first step (tracing) alone takes about.
    config, model_dir, train_pairs, dev_pairs, tokenizer = tiny_number_setup(
        tmp_path, steps=100_000, **{"training.delta_anneal_steps": 100_000, "training.max_minutes": 0.3,
                                    "training.delta_anneal_time_fraction": 0.1, "training.eval_every": 100_000}
    )
    result = Trainer(config, model_dir, train_pairs, dev_pairs, tokenizer, log=lambda m: None, verbose=0).train()
    assert "time limit" in result.stop_reason and result.step < 100_000
    assert result.delta == 1.0
    assert _final_state(model_dir)[1] == 1.0
