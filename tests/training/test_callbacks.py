"""Callbacks of a training run: delta annealing (section 6, eq. 10), parameter-server segments, the pause hook.

(Stopping and patience: test_training.py and test_reinforce.py.)
"""

from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from gnmt_tf.models.gnmt import GNMT
from gnmt_tf.training.callbacks import (
    DeltaAnnealing, PauseAfterStep, PeriodicCheckpoint, RunControl, SegmentBoundaries,
)
from gnmt_tf.training.schedules import DeltaSchedule
from helpers import SHALLOW_MODEL, copy_task, tiny_model_config


class FakeModel:
    """What DeltaAnnealing reads and sets: the optimizer's step counter and delta."""

    def __init__(self, step, delta):
        self.optimizer = SimpleNamespace(iterations=tf.Variable(step, dtype=tf.int64))
        self.clip_delta = tf.Variable(delta, dtype=tf.float32)

    def set_clip_delta(self, value):
        self.clip_delta.assign(value)

    def at(self, step):
        self.optimizer.iterations.assign(step)
        return self


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _delta(model):
    return float(model.clip_delta.numpy())


def test_delta_takes_the_lowest_of_step_clock_and_current_delta():
    schedule = DeltaSchedule(8.0, 1.0, anneal_steps=1000, anneal_seconds=100.0)
    clock = FakeClock()
    model = FakeModel(step=100, delta=8.0)
    annealing = DeltaAnnealing(schedule, started=0.0, clock=clock)
    annealing.set_model(model)
    annealing.on_train_begin()
    assert _delta(model) == 8.0  # not a new run (step 100): delta is left as it is
    annealing.on_train_batch_begin(0)  # by step: 8 - 7 * 0.1 = 7.3; the clock: 8
    assert _delta(model) == pytest.approx(7.3)
    clock.now = 50.0
    annealing.on_train_batch_begin(0)  # the clock is ahead of step 200 (6.6): 4.5
    assert _delta(model.at(200)) == pytest.approx(4.5)

    # A resumed run: its clock restarts (8) and its step says 6.6; delta stays at 4.5 ...
    clock.now = 1000.0
    resumed = DeltaAnnealing(schedule, clock=clock)  # the clock's origin: the start of fit
    resumed.set_model(model)
    resumed.on_train_begin()
    resumed.on_train_batch_begin(0)
    assert resumed.started == 1000.0 and _delta(model) == pytest.approx(4.5)
    # ... until the new clock or the step passes it: 80 s into the resumed run, 8 - 7 * 0.8 = 2.4.
    clock.now = 1080.0
    resumed.on_train_batch_begin(0)
    assert _delta(model) == pytest.approx(2.4)
    model.at(1000)
    resumed.on_train_batch_begin(0)
    assert _delta(model) == 1.0

    # Without a time bound the step count alone decides, however long the run.
    untimed = DeltaAnnealing(DeltaSchedule(8.0, 1.0, anneal_steps=1000), clock=clock)
    model = FakeModel(step=500, delta=8.0)
    untimed.set_model(model)
    clock.now = 1e9
    untimed.on_train_begin()
    untimed.on_train_batch_begin(0)
    assert _delta(model) == pytest.approx(4.5)


def test_a_run_from_step_zero_starts_at_the_schedule_start():
    model = FakeModel(step=0, delta=1.0)  # a fresh model is at its inference delta
    annealing = DeltaAnnealing(DeltaSchedule(8.0, 1.0, anneal_steps=10))
    annealing.set_model(model)
    annealing.on_train_begin()
    assert _delta(model) == 8.0
    fine_tune = FakeModel(step=0, delta=7.0)  # a fine-tune whose schedule holds delta at 1
    annealing = DeltaAnnealing(DeltaSchedule(1.0, 1.0, anneal_steps=0))
    annealing.set_model(fine_tune)
    annealing.on_train_begin()
    annealing.on_train_batch_begin(0)
    assert _delta(fine_tune) == 1.0


class _Record(keras.callbacks.Callback):
    """The delta each batch trained at, as the training step logged it."""

    def __init__(self):
        super().__init__()
        self.deltas = []

    def on_train_batch_end(self, batch, logs=None):
        self.deltas.append(float(logs["delta"]))


@pytest.fixture(scope="module")
def compiled():
    """A compiled model and a batch, shared (fit traces the step once); each test starts it at step 0."""
    model = GNMT(tiny_model_config(**SHALLOW_MODEL))  # depth is not what is tested
    model.build()
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.0))  # the steps, not learning, matter
    source, target_in, target_out = copy_task(np.random.default_rng(0), 4, model.model_config.vocab_size)
    data = tf.data.Dataset.from_tensors(((source, target_in), target_out)).repeat()
    return model, data, int((target_out != 0).sum())


def _at_step_zero(compiled):
    model, data, target_tokens = compiled
    model.optimizer.iterations.assign(0)
    model.set_clip_delta(model.model_config.clip_delta)
    return model, data, target_tokens


def test_in_fit_each_batch_trains_at_the_delta_of_its_step(compiled):
    model, data, _ = _at_step_zero(compiled)
    schedule = DeltaSchedule(8.0, 1.0, anneal_steps=10)
    assert _delta(model) == 1.0
    record = _Record()
    model.fit(data, steps_per_epoch=4, epochs=2, verbose=0, callbacks=[DeltaAnnealing(schedule), record])
    # Step i (the step counter before its update) trains at 8 - 7 i / 10: 8.0, 7.3, ..., 3.1.
    np.testing.assert_allclose(record.deltas, [8.0 - 0.7 * i for i in range(8)], rtol=1e-6)
    assert _delta(model) == pytest.approx(schedule(7))  # what a checkpoint after step 8 holds

    # Resumed with a lower delta than its step's (an anneal the clock drove): delta stays there
    # until the step's own value falls below it (step 8: 2.4, step 9: 1.7).
    model.set_clip_delta(2.0)
    record.deltas = []
    model.fit(data, steps_per_epoch=2, epochs=1, verbose=0, callbacks=[DeltaAnnealing(schedule), record])
    np.testing.assert_allclose(record.deltas, [2.0, 1.7], rtol=1e-6)


def test_under_segments_delta_moves_at_segment_boundaries(compiled):
    """As parameter-server training runs it: the step callbacks wrapped in SegmentBoundaries."""
    model, data, target_tokens = _at_step_zero(compiled)
    schedule = DeltaSchedule(8.0, 1.0, anneal_steps=10)

    class Boundaries(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.seen = []

        def on_train_begin(self, logs=None):
            self.seen.append(("train", int(self.model.optimizer.iterations.numpy())))

        def on_train_batch_begin(self, batch, logs=None):
            self.seen.append(("begin", int(self.model.optimizer.iterations.numpy())))

        def on_train_batch_end(self, batch, logs=None):
            self.seen.append(("end", int(self.model.optimizer.iterations.numpy()), logs["target_tokens"]))

    boundaries, record = Boundaries(), _Record()
    segments = SegmentBoundaries([DeltaAnnealing(schedule), boundaries], steps=3)
    model.fit(data, steps_per_epoch=3, epochs=2, verbose=0, callbacks=[segments, record])
    # delta is set at each segment's start, from its first step, and holds for the segment.
    np.testing.assert_allclose(record.deltas, [8.0] * 3 + [schedule(3)] * 3, rtol=1e-6)
    seen = boundaries.seen
    assert [entry[:2] for entry in seen] == [("train", 0), ("begin", 0), ("end", 3), ("begin", 3), ("end", 6)]
    # Batch-end hooks get the segment's token counts (for throughput): the batch's times 3 steps.
    assert [entry[2] for entry in seen if entry[0] == "end"] == [3 * target_tokens] * 2


def test_the_time_limit_waits_until_delta_has_reached_its_end():
    """A run stopped by its clock is used at the final delta: past the deadline, the run goes on
    until a step has started after the clock anneal ended (one slow first step outlasting the whole
    budget, as on a loaded machine, must not leave a checkpoint at delta 4.9)."""
    from gnmt_tf.training.callbacks import RunControl

    schedule = DeltaSchedule(8.0, 1.0, anneal_steps=100_000, anneal_seconds=10.0)
    clock = FakeClock()
    model = FakeModel(step=0, delta=8.0)
    model.stop_training = False
    annealing = DeltaAnnealing(schedule, started=0.0, clock=clock)
    control = RunControl(max_steps=100, max_minutes=1e-9, last_checkpoint=lambda: None,
                         time_limit_waits_for=annealing.annealed)
    for callback in (annealing, control):
        callback.set_model(model)
    annealing.on_train_begin()
    clock.now = 5.0  # the first step starts half-way through the anneal ...
    annealing.on_train_batch_begin(0)
    assert _delta(model) == pytest.approx(4.5)
    control.on_train_batch_end(0, {"loss": 1.0})  # ... and ends past the (tiny) deadline
    assert not model.stop_training and control.stop_reason is None
    clock.now = 12.0  # the next step starts after the anneal: delta 1, then the limit stops the run
    annealing.on_train_batch_begin(1)
    assert _delta(model.at(1)) == 1.0
    control.on_train_batch_end(1, {"loss": 1.0})
    assert model.stop_training and "time limit" in control.stop_reason
    # Without a condition the time limit stops at once, as before.
    plain = RunControl(max_steps=100, max_minutes=1e-9, last_checkpoint=lambda: None)
    other = FakeModel(step=0, delta=8.0)
    other.stop_training = False
    plain.set_model(other)
    plain.on_train_batch_end(0, {"loss": 1.0})
    assert other.stop_training


class RecordingWriter:
    """A checkpoint writer that records the steps it was asked to save."""

    def __init__(self):
        self.steps = []
        self.latest_checkpoint = None

    def save(self, checkpoint_number):
        self.steps.append(checkpoint_number)
        self.latest_checkpoint = f"ckpt-{checkpoint_number}"
        return self.latest_checkpoint


def test_the_last_state_is_saved_when_fit_ends_and_not_after_a_divergence():
    """Saved in fit's on_train_end, before fit tears down its data iterator (which can take a minute)."""
    writer, extra = RecordingWriter(), RecordingWriter()
    control = RunControl(max_steps=1000, max_minutes=None, last_checkpoint=lambda: writer.latest_checkpoint)
    checkpointing = PeriodicCheckpoint([writer, extra], every=500, control=control)
    model = FakeModel(step=499, delta=1.0)
    checkpointing.set_model(model)
    checkpointing.on_train_batch_end(0)
    assert writer.steps == []  # not a checkpoint step
    control.stop_reason = "signal SIGTERM"
    checkpointing.on_train_end()
    assert writer.steps == [499] and extra.steps == [499]
    # the trainer's call after fit: no second save
    assert checkpointing.save(499) == "ckpt-499" and writer.steps == [499]

    writer, extra = RecordingWriter(), RecordingWriter()
    checkpointing = PeriodicCheckpoint([writer, extra], every=500, control=control)
    checkpointing.set_model(model.at(512))
    control.stop_reason = "diverged"
    checkpointing.on_train_end()
    assert writer.steps == [] and extra.steps == []


def test_the_pause_holds_the_run_after_its_step_until_its_file_is_deleted(tmp_path):
    """The hook a test stops a run with: at its step it writes its file and returns only once the file is
    gone; at any other step it does nothing. Waited on through events (the file, the thread's end); the
    bounds are watchdogs only."""
    import os
    import threading
    import time

    hold = str(tmp_path / "paused")
    pause = PauseAfterStep(5, hold, poll_seconds=0.01)
    pause.set_model(FakeModel(step=4, delta=1.0))
    pause.on_train_batch_end(0)  # step 4: not its step
    assert not os.path.exists(hold)
    pause.set_model(FakeModel(step=5, delta=1.0))
    returned = threading.Event()
    thread = threading.Thread(target=lambda: (pause.on_train_batch_end(0), returned.set()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 300  # a watchdog: the file appears once the thread has run
    while not os.path.exists(hold):
        assert thread.is_alive() and time.monotonic() < deadline, "the pause never wrote its file"
        time.sleep(0.01)
    with open(hold, encoding="utf-8") as handle:
        assert handle.read() == "5\n"
    assert not returned.is_set()  # it only returns once the file is gone: still held
    assert not os.path.exists(hold + ".partial")
    os.remove(hold)
    assert returned.wait(300), "the pause did not let the run go on"
