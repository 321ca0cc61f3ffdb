"""The Keras callbacks of a training run (:class:`gnmt_tf.training.trainer.Trainer`).

* :class:`RunControl`: stop cleanly at ``max_steps``, after ``max_minutes``, on
  SIGINT/SIGTERM (the run then finishes normally: checkpoint, dev BLEU,
  samples) and on a NaN/Inf loss (the run stops with a message naming the
  step and the last good checkpoint, and saves nothing).
* :class:`StopAgreement`: in a synchronous multi-worker cluster, every worker stops after
  the step at which any one of them stops.
* :class:`PeriodicCheckpoint`: ``tf.train.CheckpointManager`` every
  ``checkpoint_every`` steps and at the run's end, keeping the last ``keep_checkpoints``.
  TensorFlow writes a checkpoint's files first and then atomically replaces
  the ``checkpoint`` index, so a crash mid-save leaves the last good one in place.
* :class:`TrainingSummaries`: TensorBoard scalars every ``log_every`` steps.
* :class:`DevEvaluation`: dev perplexity and BLEU every ``eval_every`` steps, and, with a
  patience, the end of a run whose dev BLEU stopped improving (:class:`BestScore`).
* :class:`DeltaAnnealing`: delta (eq. 10) from its schedule before each training batch.
* :class:`FinalRateDecay`: the learning rate's fall over the end of a bounded run
  (:class:`~gnmt_tf.training.schedules.BudgetDecay`), set before each training batch.
* :class:`Progress`: steps done, steps/s, loss, perplexity, delta and the learning rate, with
  the elapsed and remaining minutes of the budget.
* :class:`SegmentBoundaries`: the per-step callbacks at segment boundaries, for
  parameter-server ``fit``.
* :class:`PauseAfterStep`: not one of the run's own: a hold at a known step, which a test (or a
  script) passes in to stop a run there or look at it (``python -m gnmt_tf.train --pause-after-step``).

Each acts on the optimizer's step counter, which the checkpoint restores, so a
resumed run acts at the same steps as an uninterrupted one.
"""

from __future__ import annotations

import math
import os
import signal
import time
from typing import Callable, Optional, Sequence

import tensorflow as tf
import tf_keras as keras


def current_step(model: keras.Model) -> int:
    """The optimizer's step counter: the steps trained so far, checkpoint included."""
    return int(model.optimizer.iterations.numpy())


class RunControl(keras.callbacks.Callback):
    """Ends ``fit`` at the step limit, the time limit, on a signal, or on a non-finite loss.

    ``started``: the origin of the time limit (a ``time.monotonic()`` value; default: now).
    ``time_limit_waits_for``: a condition the time limit waits for before it stops the run
    (the Trainer's: delta has reached its final value, so that a run its clock stops is used
    at that delta even when one step outlasts the whole budget, as on a loaded machine).
    ``synchronized``: a synchronous multi-worker cluster, where a signal only records the stop
    and :class:`StopAgreement` then stops every worker after the same step.
    """

    def __init__(self, max_steps: int, max_minutes: Optional[float], last_checkpoint: Callable[[], str],
                 time_limit_waits_for: Optional[Callable[[], bool]] = None, started: Optional[float] = None,
                 synchronized: bool = False):
        super().__init__()
        self.max_steps = max_steps
        self.time_limit_waits_for = time_limit_waits_for
        self.started = time.monotonic() if started is None else started
        self.deadline = self.started + 60.0 * max_minutes if max_minutes else None
        self.last_checkpoint = last_checkpoint
        self.stop_reason: Optional[str] = None
        self.diverged_message: Optional[str] = None
        self._previous_handlers = {}
        self.synchronized = synchronized

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous_handlers[sig] = signal.signal(sig, self._on_signal)
            except ValueError:  # not in the main thread (e.g. inside a notebook worker)
                pass

    def restore_signal_handlers(self) -> None:
        for sig, handler in self._previous_handlers.items():
            signal.signal(sig, handler)
        self._previous_handlers = {}

    def _on_signal(self, signum, frame):
        name = signal.Signals(signum).name
        if self.stop_reason and self.stop_reason.startswith("signal"):
            last = self.last_checkpoint() or "(none yet)"
            raise KeyboardInterrupt(f"second {name}: stopping at once; the last checkpoint is {last}")
        self.stop_reason = f"signal {name}"
        if self.model is not None and not self.synchronized:
            self.model.stop_training = True

    def on_train_batch_end(self, batch, logs=None):
        logs = logs or {}
        step = current_step(self.model)
        loss = logs.get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            self.stop_reason = "diverged"
            self.diverged_message = (
                f"the training loss became {float(loss)} at step {step}; stopping without saving. "
                f"The last good checkpoint is {self.last_checkpoint() or '(none yet)'}. Try a lower "
                f"learning rate (training.adam_learning_rate) or check the training data."
            )
            self.model.stop_training = True
        elif step >= self.max_steps:
            self.stop_reason = self.stop_reason or f"reached max_steps ({self.max_steps})"
            self.model.stop_training = True
        elif self.deadline is not None and time.monotonic() >= self.deadline and (
            self.time_limit_waits_for is None or self.time_limit_waits_for()
        ):
            self.stop_reason = self.stop_reason or "reached the time limit (max_minutes)"
            self.model.stop_training = True


class StopAgreement(keras.callbacks.Callback):
    """Multi-worker: when any worker stops (signal, time limit, patience), all stop after this step.

    The last callback of the step, so that it sees every other callback's decision; without
    it a worker leaving ``fit`` alone leaves the others waiting in the next all-reduce.
    """

    def __init__(self, control: RunControl, agree: Callable[[bool], bool]):
        super().__init__()
        self.control = control
        self.agree = agree

    def on_train_batch_end(self, batch, logs=None):
        if self.agree(bool(self.model.stop_training or self.control.stop_reason)):
            self.control.stop_reason = self.control.stop_reason or "another worker stopped (a signal or a limit)"
            self.model.stop_training = True


class PeriodicCheckpoint(keras.callbacks.Callback):
    """Saves the training state every ``every`` steps through its writers.

    ``writers``: objects with ``save(checkpoint_number=step)``, the first a
    ``tf.train.CheckpointManager`` of model + optimizer (whose path :meth:`save` returns); the
    others save what goes with it (the weight average's model checkpoint).
    """

    def __init__(self, writers: Sequence, every: int, control: RunControl):
        super().__init__()
        self.writers = list(writers)
        self.every = every
        self.control = control
        self._saved_step: Optional[int] = None

    def save(self, step: int) -> str:
        """Save at ``step`` (once: a second call at the same step returns the first one's path)."""
        manager = self.writers[0]
        if self._saved_step == step and manager.latest_checkpoint:
            return manager.latest_checkpoint
        path = manager.save(checkpoint_number=step)
        for writer in self.writers[1:]:
            writer.save(checkpoint_number=step)
        self._saved_step = step
        return path

    def on_train_batch_end(self, batch, logs=None):
        if self.control.stop_reason == "diverged":
            return
        step = current_step(self.model)
        if step % self.every == 0:
            self.save(step)

    def on_train_end(self, logs=None):
        # The run's last state is saved here, inside fit, not after it returns: on return fit tears
        # down its data iterator, which can block. With tf.data's autotuning on (TensorFlow 2.21) it
        # sat idle there for up to a minute, and a second Ctrl-C or a scheduler's kill after its
        # SIGTERM grace period in that minute lost every step since the last periodic checkpoint.
        # make_dataset turns autotuning off; this keeps the save first whatever the data pipeline.
        if self.control.stop_reason != "diverged":
            self.save(current_step(self.model))


class TrainingSummaries(keras.callbacks.Callback):
    """TensorBoard: loss, perplexity, learning rate, delta, gradient norm, tokens/s."""

    KEYS = ("loss", "perplexity", "learning_rate", "delta", "gradient_norm")

    def __init__(self, log_dir: str, every: int, replicas: int = 1):
        super().__init__()
        self.writer = tf.summary.create_file_writer(log_dir)
        self.every = every
        # Distributed logs are the first replica's (Trainer): its token counts stand for each
        # replica's share of the batch, and its gradient norm for a replica's own gradient.
        self.replicas = replicas
        self._tokens = 0.0
        self._source_tokens = 0.0
        self._since = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        logs = logs or {}
        self._tokens += float(logs.get("target_tokens", 0.0)) * self.replicas
        self._source_tokens += float(logs.get("source_tokens", 0.0)) * self.replicas
        step = current_step(self.model)
        if step % self.every:
            return
        elapsed = max(time.monotonic() - self._since, 1e-9)
        with self.writer.as_default(step=step):
            for key in self.KEYS:
                if key in logs:
                    # A replica's gradient is that of its loss divided by the replica count.
                    scale = self.replicas if key == "gradient_norm" else 1
                    tf.summary.scalar(key, float(logs[key]) * scale)
            tf.summary.scalar("target_tokens_per_second", self._tokens / elapsed)
            tf.summary.scalar("source_tokens_per_second", self._source_tokens / elapsed)
        self.writer.flush()
        self._tokens = self._source_tokens = 0.0
        self._since = time.monotonic()


class BestScore:
    """The best dev BLEU so far, and how many evaluations in a row have not beaten it.

    A score equal to the best takes its place (the later weights have trained longer for the same
    BLEU; on a small dev split the score often saturates, and keeping the first weights that reached
    it would freeze best/ there), but does not count as an improvement: RL's patience (section 5)
    runs out on a dev BLEU that stays level.
    """

    def __init__(self, best: Optional[float] = None):
        self.best = best  # a resumed run's best so far (best/best_bleu.txt), or None
        self.evaluations_since_best = 0

    def add(self, score: float) -> bool:
        """Record one evaluation's score; whether its weights become the best (ties included)."""
        if self.best is None or score > self.best:
            self.evaluations_since_best = 0
        else:
            self.evaluations_since_best += 1
        kept = self.best is None or score >= self.best
        if kept:
            self.best = score
        return kept


class DevEvaluation(keras.callbacks.Callback):
    """The dev evaluation every ``every`` steps; with a ``patience``, an end to a run that stopped improving.

    RL refinement (section 5, ``rl.patience``) runs "until BLEU score on a dev set does not
    change": with a patience, the run stops after that many evaluations in a row without a
    better dev BLEU.

    Args:
        evaluate: ``evaluate(step)`` evaluates the model on the dev set and adds its BLEU to
            ``record`` (:meth:`gnmt_tf.training.dev.DevEvaluator.evaluate`, which also keeps the best checkpoint).
        record: the :class:`BestScore` that ``evaluate`` adds to.
        every: steps between evaluations.
        control: the run's :class:`RunControl`: a diverged run is not evaluated, and a stop
            for want of improvement is recorded as its stop reason.
        patience: evaluations without a better BLEU before the run stops; None: never stop.
    """

    def __init__(
        self, evaluate: Callable[[int], object], record: BestScore, every: int, control: RunControl,
        patience: Optional[int] = None,
    ):
        super().__init__()
        self.evaluate = evaluate
        self.record = record
        self.every = every
        self.control = control
        self.patience = patience

    def on_train_batch_end(self, batch, logs=None):
        if self.control.stop_reason == "diverged":
            return
        step = current_step(self.model)
        if step % self.every:
            return
        self.evaluate(step)
        if self.patience is not None and self.record.evaluations_since_best >= self.patience:
            self.control.stop_reason = self.control.stop_reason or (
                f"dev BLEU did not improve in {self.patience} evaluations (rl.patience)"
            )
            self.model.stop_training = True


class DeltaAnnealing(keras.callbacks.Callback):
    """Sets delta (eq. 10, ``model.clip_delta``) before each training batch from a delta schedule.

    Section 6 anneals delta from 8 to 1 (:class:`~gnmt_tf.training.schedules.DeltaSchedule`).
    Before each batch::

        delta <- min(delta, schedule(step), schedule.at_time(seconds))

    ``step`` is the optimizer's step counter before the batch's update (the step the batch
    trains); ``seconds`` is the time since ``started`` (a ``clock()`` value), used only when
    the schedule is bounded in time (``anneal_seconds``). ``started`` should be the origin of
    the run's own time limit (``RunControl.started``), so that the time ``fit`` spends before
    its first step counts towards the anneal as it counts towards the limit and a run its
    clock stops has finished annealing; by default it is the start of ``fit``.

    Delta never rises: a resumed run (whose clock restarts) continues from the delta of its
    checkpoint. A run that begins at step 0 begins at the schedule's first delta.

    Under ParameterServerStrategy Keras allows only epoch-level callbacks; the Trainer wraps
    this one in :class:`SegmentBoundaries`, so delta then moves at segment boundaries: it is
    set at each segment's start from the segment's first step, and holds for the segment.
    Under MultiWorkerMirroredStrategy every worker computes the same delta from the same step.
    """

    def __init__(self, schedule, started: Optional[float] = None, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.schedule = schedule
        self.started = started
        self.clock = clock

    def on_train_begin(self, logs=None):
        if self.started is None:
            self.started = self.clock()
        if current_step(self.model) == 0:
            self.model.set_clip_delta(self.schedule(0))

    def annealed(self) -> bool:
        """Whether delta has reached the schedule's end (float32 slack)."""
        return float(self.model.clip_delta.numpy()) <= self.schedule.end * (1 + 1e-6)

    def on_train_batch_begin(self, batch, logs=None):
        target = self.schedule(current_step(self.model))
        if self.schedule.anneal_seconds is not None:
            target = min(target, self.schedule.at_time(self.clock() - self.started))
        if target < float(self.model.clip_delta.numpy()):
            self.model.set_clip_delta(target)


class SegmentBoundaries(keras.callbacks.Callback):
    """Runs per-step callbacks at the boundaries of segments ("epochs") of ``steps`` steps.

    Parameter-server ``fit`` schedules steps asynchronously and allows only epoch-level
    callbacks, so the Trainer makes every step a callback acts on a segment end. Batch-begin
    hooks run at a segment's start, batch-end hooks at its end, with the segment's last
    step's logs (the loss: its mean over the segment); the token counts are scaled to the
    segment's steps for the throughput summaries.
    """

    def __init__(self, callbacks: Sequence[keras.callbacks.Callback], steps: int):
        super().__init__()
        self.callbacks = list(callbacks)
        self.steps = steps

    def set_model(self, model):
        super().set_model(model)
        for callback in self.callbacks:
            callback.set_model(model)

    def on_train_begin(self, logs=None):
        for callback in self.callbacks:
            callback.on_train_begin(logs)

    def on_epoch_begin(self, epoch, logs=None):
        for callback in self.callbacks:
            callback.on_train_batch_begin(0, logs)

    def on_epoch_end(self, epoch, logs=None):
        logs = dict(logs or {})
        for key in ("source_tokens", "target_tokens"):
            if key in logs:
                logs[key] = float(logs[key]) * self.steps
        for callback in self.callbacks:
            callback.on_train_batch_end(self.steps - 1, logs)

    def on_train_end(self, logs=None):
        for callback in self.callbacks:
            callback.on_train_end(logs)


class FinalRateDecay(keras.callbacks.Callback):
    """Sets the learning rate's budget factor (``scale``) from a :class:`~gnmt_tf.training.schedules.BudgetDecay`
    before each training batch, from the step and the time since ``started`` (the run's time-limit origin)."""

    def __init__(self, decay, scale: tf.Variable, started: float, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.decay = decay
        self.scale = scale
        self.started = started
        self.clock = clock

    def on_train_batch_begin(self, batch, logs=None):
        self.scale.assign(self.decay(current_step(self.model), self.clock() - self.started))


class Progress(keras.callbacks.Callback):
    """What a run has done, in the units a user thinks in: steps, steps/s, minutes elapsed and left.

    Every ``every`` seconds, and at the end, one line such as::

        step 1,240 | 2.31 steps/s | loss 3.42 | perplexity 30.5 | delta 1 | lr 0.0018 | 4.5 min, 4.5 left

    goes to ``stream``; with ``live`` (a terminal) the line is rewritten in place after every step.
    The minutes left are those of the time limit (``max_minutes``) or, without one, the steps left
    at the current speed.
    """

    def __init__(self, control: "RunControl", stream, every: float = 30.0, live: bool = False,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.control = control
        self.stream = stream
        self.every = every
        self.live = live
        self.clock = clock
        self._since = 0.0
        self._since_step = 0
        self._last_line = 0.0
        self._width = 0
        self._reported_step: Optional[int] = None
        self.steps_per_second: Optional[float] = None

    def on_train_begin(self, logs=None):
        self._since, self._since_step = self.clock(), current_step(self.model)
        self._last_line = self._since

    def on_train_batch_end(self, batch, logs=None):
        now = self.clock()
        if self.live or now - self._last_line >= self.every:
            self._report(now, logs or {})

    def on_train_end(self, logs=None):
        if self.live:
            self.stream.write("\n")
            self.stream.flush()
        elif current_step(self.model) != self._reported_step:
            self._report(self.clock(), {})

    def _report(self, now: float, logs) -> None:
        step = current_step(self.model)
        if step > self._since_step and now > self._since:
            self.steps_per_second = (step - self._since_step) / (now - self._since)
        self._last_line, self._reported_step = now, step
        line = self.line(step, now, logs)
        if self.live:  # rewrite the line, blanking what a longer previous one left
            self.stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def line(self, step: int, now: float, logs) -> str:
        parts = [f"step {step:,}"]
        if self.steps_per_second:
            parts.append(f"{self.steps_per_second:.2f} steps/s")
        for key, label, form in (("loss", "loss", ".3f"), ("perplexity", "perplexity", ".1f"),
                                 ("delta", "delta", ".3g"), ("learning_rate", "lr", ".3g")):
            if key in logs:
                parts.append(f"{label} {float(logs[key]):{form}}")
        elapsed = now - self.control.started
        if self.control.deadline is not None:
            left = max(self.control.deadline - now, 0.0)
        elif self.steps_per_second:
            left = max(self.control.max_steps - step, 0) / self.steps_per_second
        else:
            left = None
        parts.append(f"{elapsed / 60:.1f} min" + (f", {left / 60:.1f} left" if left is not None else ""))
        return " | ".join(parts)


class PauseAfterStep(keras.callbacks.Callback):
    """After step ``step``, once the callbacks before it have acted (its checkpoint and dev evaluation,
    if any), creates the file ``hold`` and waits until it is deleted.

    A watcher of ``hold`` then knows the run is at that step and stays there: it can kill the process at
    a known step, look at the model directory, or delete the file to let the run go on; it waits for an
    event, not for a time. ``hold`` holds the step. Under parameter-server training the steps a batch
    callback sees are segment ends (:class:`SegmentBoundaries`): pause at one of those.
    """

    def __init__(self, step: int, hold: str, poll_seconds: float = 0.05):
        super().__init__()
        self.step = step
        self.hold = hold
        self.poll_seconds = poll_seconds

    def on_train_batch_end(self, batch, logs=None):
        if current_step(self.model) != self.step:
            return
        partial = self.hold + ".partial"
        with open(partial, "w", encoding="utf-8") as handle:
            handle.write(f"{self.step}\n")
        os.replace(partial, self.hold)  # appears whole: a watcher never reads half of it
        while os.path.exists(self.hold):
            time.sleep(self.poll_seconds)
