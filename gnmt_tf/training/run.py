"""The run loop of training: ``fit`` with the run's callbacks (:mod:`gnmt_tf.training.callbacks`), from the
state's step to a step or time limit or a signal, and what the run ended with (:class:`TrainResult`).

Under a ``tf.distribute`` strategy (:mod:`gnmt_tf.parallel.distribute`) only the chief writes
checkpoints, summaries and the dev evaluation; the other workers of a synchronous cluster save to a
temporary directory and delete it. A restarted cluster resumes from the chief's last checkpoint.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple

import tensorflow as tf
import tf_keras as keras

from gnmt_tf import model_files
from gnmt_tf.config import ConfigError, GNMTConfig
from gnmt_tf.inference.evaluation import Evaluation
from gnmt_tf.metrics.bleu import BleuResult
from gnmt_tf.parallel import distribute
from gnmt_tf.training.batches import TrainingBatches
from gnmt_tf.training.callbacks import (
    DeltaAnnealing, DevEvaluation, FinalRateDecay, PeriodicCheckpoint, Progress, RunControl, SegmentBoundaries,
    StopAgreement, TrainingSummaries,
)
from gnmt_tf.training.dev import DevEvaluator
from gnmt_tf.training.schedules import BudgetDecay, DeltaSchedule
from gnmt_tf.training.state import Cluster, RunCheckpoints, TrainingState

# Errors of a lost cluster task, as fit raises them.
_CLUSTER_ERRORS = (tf.errors.UnavailableError, tf.errors.CancelledError, tf.errors.AbortedError,
                   tf.errors.DeadlineExceededError)


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite."""


@dataclass
class TrainResult:
    """What a run ended with."""

    step: int
    stop_reason: str
    dev: Optional[Evaluation] = None  # the shipped model's dev BLEU, as python -m gnmt_tf.evaluate gives it
    dev_checkpoint: Optional[str] = None  # the checkpoint that figure is of (what translate uses by default)
    dev_perplexity: Optional[float] = None  # of the weights evaluated last (the averaged ones, when kept)
    best_bleu: Optional[float] = None
    delta: Optional[float] = None  # eq. 10's delta of the last checkpoint (it is decoded at it)
    samples: List[Tuple[str, str, str]] = field(default_factory=list)  # (source, reference, translation)

    @property
    def dev_bleu(self) -> Optional[BleuResult]:
        return self.dev.bleu if self.dev is not None else None


class TrainingRun:
    """Trains ``state`` with ``fit`` and reports the end; ``dev``: the chief's dev evaluation (None elsewhere)."""

    def __init__(self, config: GNMTConfig, model_dir: str, state: TrainingState, checkpoints: RunCheckpoints,
                 dev: Optional[DevEvaluator], cluster: Cluster, log: Callable[[str], None], verbose: int):
        self.config, self.model_dir, self.state, self.checkpoints = config, model_dir, state, checkpoints
        self.dev, self.cluster, self.log, self.verbose = dev, cluster, log, verbose
        # delta's anneal (section 6), bounded in time too where one clock rules the run.
        self.delta_schedule = DeltaSchedule.from_config_section(config, timed=not cluster.distributed)
        self.control: Optional[RunControl] = None
        self.checkpointing: Optional[PeriodicCheckpoint] = None

    def callbacks(self, max_steps: int, max_minutes: Optional[float],
                  extra: Sequence[keras.callbacks.Callback] = ()) -> List[keras.callbacks.Callback]:
        """The run's callbacks (self.control first), each given what it acts on; ``extra`` after the run's own."""
        t = self.config.training
        started = time.monotonic()  # the origin of the time limit, of delta's timed anneal and of the final decay
        annealing = DeltaAnnealing(self.delta_schedule, started=started)
        # The time limit waits for delta's timed anneal to end, so that a run its clock stops is
        # used at the final delta even when one step outlasts the whole budget (a loaded machine).
        self.control = RunControl(
            max_steps, max_minutes, lambda: self.checkpoints.latest, started=started,
            time_limit_waits_for=annealing.annealed if self.delta_schedule.anneal_seconds is not None else None,
            synchronized=self.cluster.multi_worker,
        )
        writers = [self.checkpoints.writer] + (self.dev.writers() if self.cluster.is_chief else [])
        self.checkpointing = PeriodicCheckpoint(writers, t.checkpoint_every, self.control)
        # The state's own (the weight average's moves) before anything saves or evaluates it.
        callbacks = [self.control, annealing, *self.state.callbacks(), self.checkpointing]
        decay = BudgetDecay.for_run(t.final_decay_fraction, max_steps, max_minutes, timed=not self.cluster.multi_worker)
        if self.state.rate_scale is not None and decay is not None:
            callbacks.append(FinalRateDecay(decay, self.state.rate_scale, started=started))
        if self.cluster.is_chief:  # summaries and dev evaluation: the chief's alone
            callbacks += [
                TrainingSummaries(model_files.train_log_dir(self.model_dir), t.log_every,
                                  replicas=self.cluster.strategy.num_replicas_in_sync),
                # RL refinement (section 5) stops once dev BLEU has not improved for rl.patience evaluations.
                DevEvaluation(self.dev.evaluate, self.dev.record, t.eval_every, self.control,
                              patience=self.config.rl.patience if t.objective == "rl" else None),
            ]
        if self.verbose:
            callbacks.append(Progress(self.control, sys.stdout, live=self.verbose == 1))
        callbacks += extra
        if self.cluster.multi_worker:  # last: it sees every other callback's decision
            callbacks.append(StopAgreement(self.control, distribute.stop_agreement(self.cluster.strategy)))
        return callbacks

    def train(self, batches: TrainingBatches, max_steps: int, max_minutes: Optional[float],
              extra_callbacks: Sequence[keras.callbacks.Callback] = ()) -> TrainResult:
        """Train until ``max_steps``, ``max_minutes`` or a signal; ``extra_callbacks`` join the run's own."""
        t, start = self.config.training, self.state.step
        if start >= max_steps:
            self.log(f"already at step {start} >= max_steps {max_steps}: nothing to train")
            return self.result("already done")
        for note in (batches.placeholder_note(), batches.length_filter_note()):
            if note:
                self.log(note)
        data = batches.for_fit(start)
        callbacks = self.callbacks(max_steps, max_minutes, extra_callbacks)
        # Keras "epochs" are only segments of fit here (its progress bar is off); the step counter decides everything.
        segment = min(t.checkpoint_every, max_steps)
        if self.cluster.coordinated:
            # Every step some callback acts on (and max_steps) ends a segment.
            segment = math.gcd(t.log_every, t.checkpoint_every, t.eval_every, start, max_steps)
            callbacks = [SegmentBoundaries(callbacks, segment)]
        initial_epoch = start // segment
        if self.state.product_precision == "bfloat16":
            self.log(f"products: bfloat16 operands for the input projections and the softmax "
                     f"(training.product_precision: {t.product_precision}); dev figures in float32")
        self.log(f"training from step {start} to at most {max_steps}"
                 + (f" or {max_minutes:g} minutes" if max_minutes else "")
                 + f"; checkpoints every {t.checkpoint_every} steps in {self.checkpoints.directory}")
        self.control.install_signal_handlers()
        try:
            with self._fit_errors(batches, start):
                self.state.model.fit(
                    data, steps_per_epoch=segment, initial_epoch=initial_epoch,
                    epochs=initial_epoch + math.ceil((max_steps - start) / segment) + 1,
                    callbacks=callbacks, verbose=0,
                )
        finally:
            self.control.restore_signal_handlers()
        if self.control.stop_reason == "diverged":
            raise TrainingDiverged(self.control.diverged_message)
        path = self.checkpointing.save(self.state.step)
        if self.cluster.is_chief:
            self.log(f"saved {path}")
        return self.result(self.control.stop_reason or "finished")

    @contextlib.contextmanager
    def _fit_errors(self, batches: TrainingBatches, start: int):
        """Turns fit's errors of an empty dataset and of a lost cluster task into what they mean here."""
        t = self.config.training
        try:
            yield
        except ValueError as err:
            if self.state.step != start or "Empty logs" not in str(err):
                raise
            # Keras' words for a dataset that gave no batch at all.
            raise ConfigError(
                f"the training data gave no batch: {len(batches.pairs):,} pairs"
                + (", and with training.jit_compile a length bucket with fewer than training.batch_size "
                   f"({t.batch_size}) pairs gives none" if t.jit_compile else "")
                + "; use more training pairs or a smaller training.batch_size"
            ) from None
        except _CLUSTER_ERRORS as err:
            if not (self.cluster.multi_worker or self.cluster.coordinated):
                raise
            raise distribute.WorkerLost(
                f"lost contact with another task of the cluster ({type(err).__name__}: "
                f"{distribute.failure_reason(err)}). Restart every task with the same command "
                f"and TF_CONFIG: training resumes from the last checkpoint in {self.checkpoints.directory}"
            ) from None

    def result(self, reason: str) -> TrainResult:
        step = self.state.step
        if not self.cluster.is_chief:  # the chief evaluates and reports
            return TrainResult(step=step, stop_reason=reason)
        final, checkpoint = self.dev.final_figure(step)
        return TrainResult(
            step=step, stop_reason=reason, dev=final, dev_checkpoint=checkpoint,
            dev_perplexity=self.dev.last_perplexity, best_bleu=self.dev.record.best,
            delta=model_files.model_delta(self.state.model), samples=self.dev.samples(final),
        )

