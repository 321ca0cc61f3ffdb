"""The learning rate's fall over the end of a bounded run, label smoothing and the progress line."""

import io

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf.models.losses import SequenceCrossEntropy, mean_token_loss
from gnmt_tf.training.callbacks import Progress, RunControl
from gnmt_tf.training.schedules import BudgetDecay, GNMTLearningRate


def test_budget_decay_is_flat_then_falls_linearly_to_zero_by_steps_or_time():
    by_steps = BudgetDecay(0.25, max_steps=1000, max_seconds=None)
    # hand-computed: 1 until 750 steps, then (1000 - step) / 250
    assert [by_steps(step, 0.0) for step in (0, 500, 750, 800, 900, 1000, 1200)] == \
        pytest.approx([1.0, 1.0, 1.0, 0.8, 0.4, 0.0, 0.0])
    by_time = BudgetDecay(0.5, max_steps=100_000, max_seconds=600.0)
    assert [by_time(10, seconds) for seconds in (0.0, 300.0, 450.0, 600.0)] == pytest.approx([1.0, 1.0, 0.5, 0.0])
    both = BudgetDecay(0.5, max_steps=100, max_seconds=600.0)  # whichever budget runs out first
    assert both(75, 60.0) == pytest.approx(0.5) and both(10, 450.0) == pytest.approx(0.5)
    for bad in ((0.0, 10, None), (1.5, 10, None), (0.5, None, None)):
        with pytest.raises(ValueError):
            BudgetDecay(*bad)


def test_a_run_decays_by_its_clock_only_where_one_clock_rules_it():
    timed = BudgetDecay.for_run(0.5, max_steps=100_000, max_minutes=10.0)
    assert (timed.max_steps, timed.max_seconds) == (100_000, 600.0) and timed(10, 450.0) == pytest.approx(0.5)
    # A synchronous multi-worker cluster: each worker's clock would give its own rate; the steps alone count.
    by_steps = BudgetDecay.for_run(0.5, max_steps=100_000, max_minutes=10.0, timed=False)
    assert by_steps.max_seconds is None and by_steps(10, 450.0) == 1.0 and by_steps(75_000, 0.0) == pytest.approx(0.5)
    assert BudgetDecay.for_run(None, 100, 10.0) is None  # training.final_decay_fraction: null
    assert BudgetDecay.for_run(0.5, None, 10.0, timed=False) is None  # nothing left to decay over


def test_the_learning_rate_is_the_paper_schedule_times_the_budget_factor():
    scale = tf.Variable(1.0)
    schedule = GNMTLearningRate(0.002, 100, 0.5, 200, 50, 2, budget_scale=scale)
    assert float(schedule(10)) == pytest.approx(0.002)
    scale.assign(0.25)
    assert float(schedule(10)) == pytest.approx(0.0005) and float(schedule(260)) == pytest.approx(0.5 / 4 * 0.25)
    assert "budget_scale" not in schedule.get_config()  # derived each step, not configuration


def test_label_smoothing_matches_a_numpy_derivation_and_perplexity_stays_plain():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 7)).astype(np.float32)
    targets = np.array([[4, 5, 0], [6, 2, 3]], np.int32)  # 0 is padding
    log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_p, targets[..., None], -1)[..., 0]
    smoothed = 0.9 * nll + 0.1 * (-log_p.mean(-1))
    mask = targets != 0
    assert float(mean_token_loss(targets, logits)) == pytest.approx(nll[mask].mean(), rel=1e-5)
    assert float(SequenceCrossEntropy(0.1)(targets, logits)) == pytest.approx(smoothed[mask].mean(), rel=1e-5)
    assert SequenceCrossEntropy.from_config(SequenceCrossEntropy(0.1).get_config()).label_smoothing == 0.1
    with pytest.raises(ValueError, match="label_smoothing"):
        SequenceCrossEntropy(1.0)


def test_progress_speaks_in_steps_and_minutes_of_the_budget():
    class Clock:
        now = 100.0

        def __call__(self):
            return self.now

    clock = Clock()
    control = RunControl(max_steps=10_000, max_minutes=10, last_checkpoint=lambda: None, started=40.0)

    class Model:
        class optimizer:
            iterations = tf.Variable(200, dtype=tf.int64)

    stream = io.StringIO()
    progress = Progress(control, stream, every=30.0, clock=clock)
    progress.set_model(Model)
    progress.on_train_begin()
    Model.optimizer.iterations.assign(260)
    clock.now = 130.0  # 60 steps in 30 s, 1.5 minutes into a 10-minute budget
    progress.on_train_batch_end(0, {"loss": 3.4567, "perplexity": 31.7, "delta": 1.0, "learning_rate": 0.002})
    assert stream.getvalue() == "step 260 | 2.00 steps/s | loss 3.457 | perplexity 31.7 | delta 1 | lr 0.002 | 1.5 min, 8.5 left\n"
    clock.now = 140.0
    progress.on_train_batch_end(1, {})  # within 30 s of the last line: nothing
    assert stream.getvalue().count("\n") == 1
