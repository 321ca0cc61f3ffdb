"""Schedules of the training recipe: the learning rate (section 8.3) and delta (section 6).

Both are functions of the global step (delta, for a run bounded in time, also of the
training time), so a run restored from a checkpoint (which restores the step) is back
on the same schedule. The exception is :class:`BudgetDecay`, the rate's fall over the end
of a run's budget: it reads the run's own clock too, so a resumed timed run starts its
budget, and its decay, afresh.
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf
import tf_keras as keras

from gnmt_tf.config import GNMTConfig


@keras.saving.register_keras_serializable(package="gnmt_tf")
class GNMTLearningRate(keras.optimizers.schedules.LearningRateSchedule):
    """Section 8.3: Adam's rate for the first ``adam_steps`` steps, then SGD's rate;
    from ``decay_start`` on the rate is halved every ``decay_interval`` steps,
    ``decay_count`` times in all.

    CHOICE: the first halving happens at ``decay_start`` itself, so that the
    paper's "anneal after 1.2M steps, halving every 200k steps for 800k more"
    gives four halvings, at 1.2M, 1.4M, 1.6M and 1.8M.

    ``budget_scale``: a scalar variable the rate is multiplied by, set before each step from a
    :class:`BudgetDecay` (the decay at the end of a bounded run); None: no such factor. It is
    derived from the step and the clock, so it is neither saved in the config nor checkpointed.
    """

    def __init__(
        self,
        adam_learning_rate: float,
        adam_steps: int,
        sgd_learning_rate: float,
        decay_start: int,
        decay_interval: int,
        decay_count: int,
        budget_scale: Optional[tf.Variable] = None,
    ):
        self.adam_learning_rate = adam_learning_rate
        self.adam_steps = adam_steps
        self.sgd_learning_rate = sgd_learning_rate
        self.decay_start = decay_start
        self.decay_interval = decay_interval
        self.decay_count = decay_count
        self.budget_scale = budget_scale

    @classmethod
    def from_config_section(cls, config: GNMTConfig, budget_scale: Optional[tf.Variable] = None) -> "GNMTLearningRate":
        t = config.training
        return cls(
            t.adam_learning_rate, t.adam_steps, t.sgd_learning_rate, t.decay_start, t.decay_interval, t.decay_count,
            budget_scale,
        )

    def halvings(self, step):
        """How many times the rate has been halved by ``step`` (0 .. decay_count)."""
        step = tf.cast(step, tf.int64)
        done = (step - self.decay_start) // self.decay_interval + 1
        return tf.clip_by_value(done, 0, self.decay_count)

    def __call__(self, step):
        step = tf.cast(step, tf.int64)
        base = tf.where(step < self.adam_steps, self.adam_learning_rate, self.sgd_learning_rate)
        rate = tf.cast(base, tf.float32) * tf.pow(0.5, tf.cast(self.halvings(step), tf.float32))
        return rate * self.budget_scale if self.budget_scale is not None else rate

    def get_config(self):
        return dict(
            adam_learning_rate=self.adam_learning_rate,
            adam_steps=self.adam_steps,
            sgd_learning_rate=self.sgd_learning_rate,
            decay_start=self.decay_start,
            decay_interval=self.decay_interval,
            decay_count=self.decay_count,
        )


class DeltaSchedule:
    """Section 6: delta annealed from a generous 8.0 to a stringent 1.0.

    CHOICE: linear in the step (lingvo's LinearClippingCapSchedule does the
    same), reaching ``end`` after ``anneal_steps`` and staying there.

    A run bounded in time (``training.max_minutes``) cannot know how many steps
    it will get, so it may also be given ``anneal_seconds``: delta then reaches
    ``end`` after that much training time or ``anneal_steps`` steps, whichever
    comes first, and a run stopped by its clock has finished annealing.
    :class:`gnmt_tf.training.callbacks.DeltaAnnealing` sets the model's delta from
    it before each training batch, and never raises it.
    """

    def __init__(self, start: float, end: float, anneal_steps: int, anneal_seconds: Optional[float] = None):
        if end > start:
            raise ValueError(f"delta must anneal downwards: start {start} < end {end}")
        if anneal_seconds is not None and anneal_seconds <= 0:
            raise ValueError(f"anneal_seconds must be positive, got {anneal_seconds}")
        self.start = start
        self.end = end
        self.anneal_steps = anneal_steps
        self.anneal_seconds = anneal_seconds

    @classmethod
    def from_config_section(cls, config: GNMTConfig, timed: bool = True) -> "DeltaSchedule":
        """The config's schedule; with ``timed`` and ``training.max_minutes`` set, also bounded in time."""
        t = config.training
        seconds = None
        if timed and t.max_minutes is not None and t.delta_anneal_time_fraction is not None:
            seconds = 60.0 * t.max_minutes * t.delta_anneal_time_fraction
        return cls(t.delta_start, config.model.clip_delta, t.delta_anneal_steps, seconds)

    def __call__(self, step: int) -> float:
        """delta at ``step`` by the step count alone."""
        progress = min(float(step) / self.anneal_steps, 1.0) if self.anneal_steps else 1.0
        return self.start + (self.end - self.start) * progress

    def at_time(self, seconds: float) -> float:
        """delta after ``seconds`` of training by the clock alone (the start without ``anneal_seconds``)."""
        progress = min(seconds / self.anneal_seconds, 1.0) if self.anneal_seconds else 0.0
        return self.start + (self.end - self.start) * progress


class BudgetDecay:
    """The learning rate's fall to 0 over the last ``fraction`` of a bounded run (``training.final_decay_fraction``).

    A run bounded by ``max_steps`` and/or ``max_seconds`` is ``progress`` of the way through its
    budget, the larger of the two shares used; the rate is multiplied by
    ``min(1, (1 - progress) / fraction)``: 1 until the last ``fraction`` of the budget, then
    linearly down to 0 at its end, so that a run stopped by its budget ends on small updates
    instead of at the full rate. The clock is the run's own (the time limit's origin), so a
    resumed run, whose clock restarts, decays over its own minutes.
    """

    def __init__(self, fraction: float, max_steps: Optional[int], max_seconds: Optional[float]):
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {fraction}")
        if not max_steps and not max_seconds:
            raise ValueError("a budget decay needs a bound: max_steps or max_seconds")
        self.fraction = fraction
        self.max_steps = max_steps
        self.max_seconds = max_seconds

    @classmethod
    def for_run(cls, fraction: Optional[float], max_steps: Optional[int], max_minutes: Optional[float],
                timed: bool = True) -> Optional["BudgetDecay"]:
        """The decay of a run with these bounds, or None (no ``fraction``, or nothing to decay over).

        ``timed``: whether the run's clock may set the rate. Not where several processes each run
        the callbacks on their own clocks (a synchronous multi-worker cluster): their rates would
        differ, so there the decay follows the steps alone, as delta's anneal does.
        """
        max_seconds = 60.0 * max_minutes if max_minutes and timed else None
        if fraction is None or not (max_steps or max_seconds):
            return None
        return cls(fraction, max_steps, max_seconds)

    def progress(self, step: int, seconds: float) -> float:
        shares = []
        if self.max_steps:
            shares.append(step / self.max_steps)
        if self.max_seconds:
            shares.append(seconds / self.max_seconds)
        return min(max(shares), 1.0)

    def __call__(self, step: int, seconds: float) -> float:
        """The rate's factor after ``step`` steps and ``seconds`` of the run."""
        return max(0.0, min(1.0, (1.0 - self.progress(step, seconds)) / self.fraction))
