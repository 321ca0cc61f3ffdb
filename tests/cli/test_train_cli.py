"""python -m gnmt_tf.train as a user runs it: kill -9 and resume, Ctrl-C on the built-in data, bad input.

A run that a signal ends is a subprocess with a watchdog (a timeout or a deadline) that ends it by
itself; the others run in this process (helpers.run_in_process), which spares a TensorFlow start each.
"""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf import model_files
from helpers import ROOT, SHALLOW_CLI_ARGS, number_word_pairs, run_in_process
from test_training import _final_state



def _train_cli(model_dir, *extra):
    # Each process ends by itself: a watchdog in the test kills it after a bound.
    return [sys.executable, "-m", "gnmt_tf.train", "--model-dir", model_dir, "--quiet", *extra]


TINY_CLI_ARGS = [
    "--config", "tiny",
    "--set", "model.units=48",
    "--set", "training.checkpoint_every=5",
    "--set", "training.eval_every=100000",
    "--set", "training.adam_steps=20",  # the Adam->SGD switch happens after the kill below
    "--set", "training.sgd_learning_rate=0.1",
    "--set", "training.delta_anneal_steps=25",  # delta reaches 1.0 before the last step
    "--set", "data.dev_max_pairs=50",
    *SHALLOW_CLI_ARGS,
]


def _env():
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    return env


def _write_tsv(path, pairs):
    with open(path, "w", encoding="utf-8") as handle:
        for source, target in pairs:
            handle.write(f"{source}\t{target}\n")


def _checkpoint_values(path):
    """{name: value} of every variable a checkpoint holds, but its own save counter and object graph."""
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH" and not name.startswith("save_counter/")}


def test_killed_run_resumes_to_the_same_state(tmp_path, monkeypatch):
    """A run killed with SIGKILL resumes from its last checkpoint with every weight and every optimizer
    slot (Adam's moments, the step counter that sets the Adam/SGD phase and delta) as they were saved,
    bit for bit, repeats the steps the kill lost, and trains on from there to the run's end (step, delta
    and optimizer phase).

    The run holds after step 17 (--pause-after-step) and is killed there: between its checkpoints of
    steps 15 and 20 (training.checkpoint_every=5), whatever the machine's speed."""
    from gnmt_tf.models.gnmt import GNMT

    train_tsv, dev_tsv = str(tmp_path / "train.tsv"), str(tmp_path / "dev.tsv")
    _write_tsv(train_tsv, number_word_pairs(1500, seed=3))
    _write_tsv(dev_tsv, number_word_pairs(50, seed=4))
    data_args = ["--train", train_tsv, "--dev", dev_tsv, *TINY_CLI_ARGS]

    # The run to be killed is a process; the resumed one runs in this process.
    killed = str(tmp_path / "killed")
    log, hold = tmp_path / "killed.log", tmp_path / "paused"
    with open(log, "w") as handle:
        process = subprocess.Popen(
            _train_cli(killed, *data_args, "--max-steps", "30", "--pause-after-step", "17", str(hold)),
            env=_env(), stdout=subprocess.DEVNULL, stderr=handle)
    try:
        deadline = time.monotonic() + 300  # a watchdog: the run writes the file when it holds at step 17
        while not hold.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the run did not hold at step 17 (exit status {process.poll()}): "
                            f"{log.read_text()[-2000:]}")
            time.sleep(0.1)
        assert hold.read_text() == "17\n"
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    # The kill lost steps 16 and 17: the last checkpoint is step 15's, in the Adam phase.
    checkpointed, _, in_adam_phase = _final_state(killed)
    assert checkpointed == 15 and in_adam_phase
    left = tf.train.latest_checkpoint(model_files.checkpoint_dir(killed))
    assert left.endswith("ckpt-15")
    saved = _checkpoint_values(left)  # read now: the resumed run deletes old checkpoints (keep_checkpoints)

    # The state the resumed run trains from: every variable of its model and optimizer when fit starts,
    # written as a checkpoint of the same objects.
    started_from = str(tmp_path / "started_from" / "state")
    fit = GNMT.fit

    def fit_from_a_recorded_state(self, *args, **kwargs):
        if not os.path.exists(started_from + ".index"):
            tf.train.Checkpoint(model=self, optimizer=self.optimizer).write(started_from)
        return fit(self, *args, **kwargs)

    monkeypatch.setattr(GNMT, "fit", fit_from_a_recorded_state)
    resumed = run_in_process(_train_cli(killed, *data_args, "--max-steps", "30"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"resuming from {left} at step {checkpointed}" in resumed.stdout
    assert f"training from step {checkpointed} to at most 30" in resumed.stdout  # 16 and 17 again: none lost

    restored = _checkpoint_values(started_from)
    assert sorted(restored) == sorted(saved)  # the same variables: none missing, none new
    differing = [name for name, value in saved.items()
                 if restored[name].dtype != value.dtype or not np.array_equal(restored[name], value)]
    assert not differing, differing
    # What was compared: the weights and delta, and the optimizer's step counter and Adam moments
    # (two per trainable weight), which at this step are far from their zero start.
    model_weights = [name for name in saved if name.startswith("model/")]
    optimizer_slots = [name for name in saved if name.startswith("optimizer/") and "iterations" not in name]
    assert saved["optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"] == checkpointed
    assert any("clip_delta" in name for name in model_weights)
    assert len(optimizer_slots) >= 2 * (len(model_weights) - 1) > 20
    assert sum(np.any(saved[name] != 0) for name in optimizer_slots) >= 0.9 * len(optimizer_slots)

    # Training went on from there (every kernel moved) to the end of the run.
    final = _checkpoint_values(tf.train.latest_checkpoint(model_files.checkpoint_dir(killed)))
    assert all(not np.array_equal(final[name], saved[name]) for name in model_weights if "kernel" in name)
    assert _final_state(killed) == (30, 1.0, False)  # step 30, delta annealed to 1, in the SGD phase


def test_ctrl_c_ends_a_run_on_the_built_in_data_normally(tmp_path):
    """The main command on its default, the built-in data, ended by Ctrl-C: a normal end at the next step
    (evaluation, samples, a final checkpoint, status 0) and a complete model directory.

    The run is the command's main() in this process; a thread sends this process SIGINT once the run has
    written a checkpoint (its handler is installed by then). --max-minutes 4 is the run's watchdog. A SIGINT
    that the run leaves unhandled meets the test's own handler and fails the test, rather than
    interrupting the test session. Without gettext catalogs (no built-in data) it trains on number pairs.
    """
    import threading

    built_in = os.path.isdir("/usr/share/locale/fr/LC_MESSAGES")
    model_dir = str(tmp_path / "model")
    if built_in:
        data_args = ["--set", "model.vocab_size=600", "--set", "data.dev_max_pairs=40"]
    else:
        train_tsv = str(tmp_path / "train.tsv")
        _write_tsv(train_tsv, number_word_pairs(1500, seed=5))
        data_args = ["--train", train_tsv]
    finished = threading.Event()

    def interrupt_after_a_checkpoint():
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not finished.is_set():
            if os.path.isdir(model_files.checkpoint_dir(model_dir)) and tf.train.latest_checkpoint(
                model_files.checkpoint_dir(model_dir)
            ):
                break
            time.sleep(0.2)
        if not finished.is_set():
            os.kill(os.getpid(), signal.SIGINT)

    def unhandled(signum, frame):
        raise AssertionError("SIGINT reached the test, not the training run's handler")

    previous = signal.signal(signal.SIGINT, unhandled)
    interrupter = threading.Thread(target=interrupt_after_a_checkpoint, daemon=True)
    try:
        interrupter.start()
        result = run_in_process(_train_cli(model_dir, *TINY_CLI_ARGS, *data_args, "--max-steps", "100000",
                                           "--max-minutes", "4"))
    finally:
        finished.set()
        interrupter.join(10)
        signal.signal(signal.SIGINT, previous)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "signal SIGINT" in out
    step = int(out.split("stopped at step ")[1].split(":")[0])
    assert tf.train.latest_checkpoint(model_files.checkpoint_dir(model_dir)).endswith(f"ckpt-{step}")
    if built_in:
        assert "built-in data: gettext catalogs for en->fr" in out
        assert "held out 40 pairs as the dev split" in out
        assert "learned a shared wordpiece vocabulary" in out
    assert "dev BLEU = " in out and "nrefs:1" in out and "sample translations" in out
    for name in ("config.yaml", "wordpieces.txt", "dev.tsv", "checkpoints", "best", "logs"):
        assert os.path.exists(os.path.join(model_dir, name)), name


def test_cli_reports_bad_input_clearly(tmp_path, capsys):
    from gnmt_tf.cli.train import main

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
