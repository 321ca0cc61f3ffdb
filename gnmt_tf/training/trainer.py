"""Maximum-likelihood training with the paper's recipe (section 8.3), on Keras ``fit``.

The training step is ``GNMT.train_step``; the :class:`Trainer` sets up the model, its
optimizer and objective, the data and the callbacks of :mod:`gnmt_tf.training.callbacks`
(stopping, checkpoints, summaries, dev evaluation), and reports how the run ended.

Everything that defines the run's state (weights, optimizer moments and step,
hence the Adam/SGD phase and delta) is in the checkpoint, so a killed run
resumes where its last checkpoint left it.

Under a ``tf.distribute`` strategy (:mod:`gnmt_tf.parallel.distribute`) only the chief writes
checkpoints, summaries and the dev evaluation (on a one-device copy of the weights);
the other workers of a synchronous cluster save to a temporary directory and delete it.
A restarted cluster resumes from the chief's last checkpoint.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple

import tensorflow as tf
import tf_keras as keras

from gnmt_tf.parallel import distribute
from gnmt_tf import model_files
from gnmt_tf.config import GNMTConfig
from gnmt_tf.data import count_filtered, make_dataset
from gnmt_tf.metrics.bleu import BleuResult, corpus_bleu
from gnmt_tf.models.losses import SequenceCrossEntropy
from gnmt_tf.models.gnmt import GNMT, unpack_batch
from gnmt_tf.training.callbacks import (
    BestScore,
    DeltaAnnealing,
    DevEvaluation,
    PeriodicCheckpoint,
    RunControl,
    SegmentBoundaries,
    StopAgreement,
    TrainingSummaries,
    current_step,
)
from gnmt_tf.models.objectives import MaximumLikelihood
from gnmt_tf.training.optimizer import AdamThenSGD
from gnmt_tf.training.schedules import DeltaSchedule
from gnmt_tf.data.tokenizer import WordpieceTokenizer
from gnmt_tf.inference.translator import Translator

Pair = Tuple[str, str]


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite."""


@dataclass
class TrainResult:
    """What a run ended with."""

    step: int
    stop_reason: str
    dev_bleu: Optional[BleuResult] = None
    dev_perplexity: Optional[float] = None
    best_bleu: Optional[float] = None
    delta: Optional[float] = None  # eq. 10's delta of the last checkpoint (it is decoded at it)
    samples: List[Tuple[str, str, str]] = field(default_factory=list)  # (source, reference, translation)


class Trainer:
    """Trains a GNMT on sentence pairs into a self-contained model directory.

    Args:
        config: the run's config (``config.model.vocab_size`` must equal the tokenizer's).
        model_dir: where checkpoints, logs, config and vocabulary go.
        train_pairs, dev_pairs: (source, target) sentences.
        tokenizer: the shared wordpiece tokenizer.
        log: where progress messages go (``print`` by default).
        verbose: Keras progress bar mode (1: bar, 2: one line per segment, 0: silent).
        init_checkpoint: weights to start from when ``model_dir`` has no checkpoint yet
            (a fine-tune of another model; only the model is restored, not its optimizer).

    With ``training.quantization_aware`` every LSTM kernel is fake-quantized (eq. 12) in
    training and in dev evaluation (:mod:`gnmt_tf.quantization.qat`); checkpoints hold the float weights.
    With ``training.objective: rl`` each step is the mixed objective of eq. 9 with the GLEU
    reward (:mod:`gnmt_tf.training.reinforce`), and the run stops once dev BLEU has not improved for
    ``rl.patience`` evaluations.
    """

    def __init__(
        self,
        config: GNMTConfig,
        model_dir: str,
        train_pairs: Sequence[Pair],
        dev_pairs: Sequence[Pair],
        tokenizer: WordpieceTokenizer,
        log: Callable[[str], None] = print,
        verbose: int = 1,
        strategy: Optional[tf.distribute.Strategy] = None,
        init_checkpoint: Optional[str] = None,
    ):
        if config.model.vocab_size != tokenizer.vocab_size:
            raise ValueError(
                f"model.vocab_size ({config.model.vocab_size}) must equal the tokenizer's "
                f"vocabulary size ({tokenizer.vocab_size})"
            )
        self.config = config
        self.model_dir = model_dir
        self.train_pairs = list(train_pairs)
        self.dev_pairs = list(dev_pairs)
        self.tokenizer = tokenizer
        self.log = log
        self.verbose = verbose
        self.strategy = strategy or tf.distribute.get_strategy()
        self.distributed = self.strategy is not tf.distribute.get_strategy()
        self.is_chief = distribute.is_chief(self.strategy)  # the one writer of model_dir
        self.multi_worker = distribute.is_multi_worker(self.strategy)
        self.coordinated = distribute.uses_coordinator(self.strategy)
        # delta's anneal (section 6), bounded in time too where one clock rules the run.
        self.delta_schedule = DeltaSchedule.from_config_section(config, timed=not self.distributed)
        self.last_bleu: Optional[BleuResult] = None
        self.last_perplexity: Optional[float] = None

        with self.strategy.scope():
            self.model = GNMT(config.model, parallel=config.parallel)
            self.model.build()
            optimizer = AdamThenSGD.from_config_section(config)
            optimizer.build(self.model.trainable_variables)
            self.model.compile(optimizer=optimizer, loss=SequenceCrossEntropy(), objective=self._objective())
        if self.distributed:
            # Loss, perplexity, learning rate and delta are the same on every replica; Keras'
            # default "sum" would add them up over the replicas.
            self.model.distribute_reduction_method = "first"
        # Quantization-aware training (section 6): every graph the run traces (training steps,
        # dev loss, dev translations) computes with fake-quantized LSTM kernels; see train().
        self.weight_transforms = []
        if config.training.quantization_aware:
            from gnmt_tf.quantization.qat import QuantizationAwareTraining

            self.weight_transforms.append((self.model, QuantizationAwareTraining(self.model)))
        checkpoint = tf.train.Checkpoint(model=self.model, optimizer=optimizer)
        self.manager = tf.train.CheckpointManager(
            checkpoint, model_files.checkpoint_dir(model_dir), max_to_keep=config.training.keep_checkpoints
        )
        # A non-chief worker of a synchronous cluster takes part in every save, into a
        # directory of its own that it deletes; only the chief's checkpoint is kept.
        self.checkpoint_writer = self.manager if self.is_chief else distribute.TemporaryCheckpoints(
            checkpoint, model_files.worker_checkpoint_dir(model_dir, self.strategy.cluster_resolver.task_id)
        )
        # Distributed, the chief evaluates a one-device copy of the weights: model.evaluate would
        # need every worker (collectives, or the parameter-server coordinator).
        self.dev_model = self.model
        best_checkpoint = checkpoint
        if self.distributed and self.is_chief:
            self.dev_model = model_files.build_model(config)
            if config.training.quantization_aware:
                from gnmt_tf.quantization.qat import QuantizationAwareTraining

                self.weight_transforms.append((self.dev_model, QuantizationAwareTraining(self.dev_model)))
            best_checkpoint = tf.train.Checkpoint(model=self.dev_model)
        self._dev_loss = None
        self.best_manager = tf.train.CheckpointManager(best_checkpoint, model_files.best_dir(model_dir), max_to_keep=1)
        self.dev_writer = (
            tf.summary.create_file_writer(model_files.dev_log_dir(model_dir)) if self.is_chief else None
        )
        self.translator = Translator(self.dev_model, tokenizer, config.decoding) if self.is_chief else None
        self.control: Optional[RunControl] = None
        self._evaluated_step: Optional[int] = None
        self._restore(init_checkpoint)

    def _objective(self):
        """What training minimises: maximum likelihood (eq. 7), or for RL refinement the mixed objective of eq. 9."""
        if self.config.training.objective == "rl":
            from gnmt_tf.metrics.gleu import reward_function
            from gnmt_tf.training.reinforce import MixedObjective

            return MixedObjective(self.config.rl, reward_function(self.config.rl, self.tokenizer))
        return MaximumLikelihood(SequenceCrossEntropy())

    # ------------------------------------------------------------------ state
    def _restore(self, init_checkpoint: Optional[str]) -> None:
        path = self.manager.latest_checkpoint
        if path:  # delta comes back with the weights, and the anneal goes on from it
            self.manager.checkpoint.restore(path).assert_existing_objects_matched()
            self.log(f"resuming from {path} at step {self.step}")
        elif init_checkpoint:
            # Through a plain model: restoring into the compiled one would also restore the
            # optimizer it tracks (step counter, moments), and a fine-tune starts its own.
            self.model.set_weights(model_files.build_model(self.config, init_checkpoint).get_weights())
            self.log(f"starting from the weights of {init_checkpoint}")
        best = model_files.read_best_bleu(self.model_dir) if self.best_manager.latest_checkpoint else None
        # The dev BLEU to beat: a resumed run keeps comparing against its old best.
        self.dev_record = BestScore(best.score if best is not None else None)

    @property
    def step(self) -> int:
        return current_step(self.model)

    @property
    def best_bleu(self) -> Optional[float]:
        return self.dev_record.best

    # ------------------------------------------------------------------ evaluation
    def evaluate_dev(self, step: int) -> Tuple[float, BleuResult]:
        """Dev perplexity (teacher forcing) and greedy-decoding BLEU; keeps the best checkpoint."""
        model = self.dev_model
        if model is not self.model:
            model.set_weights(self.model.get_weights())
        # Evaluated at the delta of this step, which is the delta this checkpoint is saved
        # with and will be decoded at (gnmt_tf.model_files), so "best" means best as used.
        dev_data = make_dataset(
            self.dev_pairs, self.tokenizer.tokenize, batch_size=64, max_length=self.config.data.max_length,
            bucket_width=self.config.data.bucket_width, shuffle_buffer=1, seed=0, training=False,
        )
        if model is self.model:
            results = self.model.evaluate(dev_data, verbose=0, return_dict=True)
        else:
            results = {"loss": self._copy_loss(dev_data)}
        perplexity = float(math.exp(min(results["loss"], 50.0)))
        sources = [source for source, _ in self.dev_pairs]
        references = [" ".join(target.split()) for _, target in self.dev_pairs]
        hypotheses = self.translator.greedy(sources)
        bleu = corpus_bleu(hypotheses, references)
        with self.dev_writer.as_default(step=step):
            tf.summary.scalar("perplexity", perplexity)
            tf.summary.scalar("loss", results["loss"])
            tf.summary.scalar("bleu", bleu.score)
            tf.summary.scalar("delta", model_files.model_delta(model))
        self.dev_writer.flush()
        self.last_bleu, self.last_perplexity = bleu, perplexity
        self._evaluated_step = step
        improved = self.dev_record.add(bleu.score)
        if improved:
            self.best_manager.save(checkpoint_number=step)
            model_files.write_best_bleu(self.model_dir, model_files.BestBleu(bleu.score, step, bleu.signature))
        self.log(
            f"step {step}: dev perplexity {perplexity:.2f}, dev BLEU {bleu.score:.2f} "
            f"at delta {model_files.model_delta(model):.3g}"
            + (" (best so far)" if improved else f" (best {self.best_bleu:.2f})")
        )
        return perplexity, bleu

    def _copy_loss(self, dev_data) -> float:
        """The dev loss of the one-device copy, averaged as ``model.evaluate`` does (per pair).

        Computed in this process alone: inside a strategy's ``fit``, Keras would run
        ``evaluate`` through the strategy even for a model built outside it.
        """
        if self._dev_loss is None:
            objective, model = MaximumLikelihood(SequenceCrossEntropy()), self.dev_model  # as GNMT.test_step
            self._dev_loss = tf.function(  # autograph off: as GNMT.test_step
                lambda x, y: objective.loss(model, unpack_batch((x, y)), training=False)[0], reduce_retracing=True,
                autograph=False,
            )
        total = pairs = 0.0
        for x, y in dev_data:
            count = float(tf.shape(y)[0])
            total += float(self._dev_loss(x, y)) * count
            pairs += count
        return total / max(pairs, 1.0)

    # ------------------------------------------------------------------ the run
    def train(self, max_steps: Optional[int] = None, max_minutes: Optional[float] = None) -> TrainResult:
        """Train until ``max_steps`` (default: the config's), the time limit, or a signal."""
        with contextlib.ExitStack() as scopes:
            for model, transform in self.weight_transforms:
                scopes.enter_context(model.transformed_weights(transform))
            return self._train(max_steps, max_minutes)

    def _train(self, max_steps: Optional[int], max_minutes: Optional[float]) -> TrainResult:
        t = self.config.training
        max_steps = max_steps if max_steps is not None else t.max_steps
        max_minutes = max_minutes if max_minutes is not None else t.max_minutes
        if self.step >= max_steps:
            self.log(f"already at step {self.step} >= max_steps {max_steps}: nothing to train")
            return self._finish("already done")

        dropped = count_filtered(self.train_pairs, self.tokenizer.tokenize, self.config.data.max_length)
        if dropped:
            self.log(
                f"length filter: {dropped:,} of {len(self.train_pairs):,} training pairs have more than "
                f"{self.config.data.max_length} wordpieces on a side and are not trained on (data.max_length)"
            )
        train_data = self._training_data()
        timed_anneal = self.delta_schedule.anneal_seconds is not None
        self.control = RunControl(max_steps, max_minutes, lambda: self.manager.latest_checkpoint,
                                  time_limit_waits_for=(lambda: annealing.annealed()) if timed_anneal else None)
        annealing = DeltaAnnealing(self.delta_schedule, started=self.control.started)
        checkpointing = PeriodicCheckpoint(self.checkpoint_writer, t.checkpoint_every, self.control)
        callbacks = [annealing, self.control, checkpointing]
        if self.is_chief:  # summaries and dev evaluation: the chief's alone
            callbacks += [
                TrainingSummaries(
                    model_files.train_log_dir(self.model_dir), t.log_every,
                    replicas=self.strategy.num_replicas_in_sync,
                ),
                # RL refinement (section 5) stops once dev BLEU has not improved for rl.patience evaluations.
                DevEvaluation(
                    self.evaluate_dev, self.dev_record, t.eval_every, self.control,
                    patience=self.config.rl.patience if t.objective == "rl" else None,
                ),
            ]
        if self.multi_worker:
            self.control.synchronized = True
            callbacks.append(StopAgreement(self.control, distribute.stop_agreement(self.strategy)))
        # Keras "epochs" are only progress-bar segments here; the step counter decides everything.
        segment = min(t.checkpoint_every, max_steps)
        if self.coordinated:
            # Every step some callback acts on (and max_steps) ends a segment.
            segment = math.gcd(t.log_every, t.checkpoint_every, t.eval_every, self.step, max_steps)
            callbacks = [SegmentBoundaries(callbacks, segment)]
        initial_epoch = self.step // segment
        epochs = initial_epoch + math.ceil((max_steps - self.step) / segment) + 1
        self.log(
            f"training from step {self.step} to at most {max_steps}"
            + (f" or {max_minutes:g} minutes" if max_minutes else "")
            + f"; checkpoints every {t.checkpoint_every} steps in {model_files.checkpoint_dir(self.model_dir)}"
        )
        self.control.install_signal_handlers()
        try:
            self.model.fit(
                train_data, steps_per_epoch=segment, epochs=epochs, initial_epoch=initial_epoch,
                callbacks=callbacks, verbose=self.verbose,
            )
        except (tf.errors.UnavailableError, tf.errors.CancelledError, tf.errors.AbortedError,
                tf.errors.DeadlineExceededError) as err:
            if not (self.multi_worker or self.coordinated):
                raise
            raise distribute.WorkerLost(
                f"lost contact with another task of the cluster ({type(err).__name__}: "
                f"{distribute.failure_reason(err)}). Restart every task with the same command "
                f"and TF_CONFIG: training resumes from the last checkpoint in "
                f"{model_files.checkpoint_dir(self.model_dir)}"
            ) from None
        finally:
            self.control.restore_signal_handlers()
        if self.control.stop_reason == "diverged":
            raise TrainingDiverged(self.control.diverged_message)
        checkpointing.model = self.model
        path = checkpointing.save()
        if self.is_chief:
            self.log(f"saved {path}")
        return self._finish(self.control.stop_reason or "finished")

    def _training_data(self):
        """The training batches: a dataset, or for parameter-server training a dataset function."""
        t, d = self.config.training, self.config.data

        def dataset(pairs, seed):
            return make_dataset(
                pairs, self.tokenizer.tokenize, batch_size=t.batch_size, batch_tokens=t.batch_tokens,
                max_length=d.max_length, bucket_width=d.bucket_width, shuffle_buffer=d.shuffle_buffer,
                seed=seed, training=True, repeat=True,
            )

        seed = t.seed + self.step  # a resumed run does not replay the batches it began with
        if self.coordinated:
            # Each worker reads its own shard in its own order, a whole batch per update
            # (the paper's asynchronous replicas). Called in graph mode, once per worker.
            def per_worker(context):
                shard = self.train_pairs[context.input_pipeline_id::context.num_input_pipelines]
                return dataset(shard, seed + context.input_pipeline_id)

            return keras.utils.experimental.DatasetCreator(per_worker)
        data = dataset(self.train_pairs, seed)
        if self.multi_worker:
            # Every worker builds the same batches (same seed) and keeps its share of each;
            # stating it spares tf.data's fallback warning (the data are not files).
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
            data = data.with_options(options)
        return data

    def _finish(self, reason: str) -> TrainResult:
        if not self.is_chief:  # the chief evaluates and reports
            return TrainResult(step=self.step, stop_reason=reason)
        if self._evaluated_step != self.step:
            self.evaluate_dev(self.step)
        samples = []
        chosen = self.dev_pairs[:: max(1, len(self.dev_pairs) // 5)][:5]
        translations = self.translator.greedy([source for source, _ in chosen])
        for (source, reference), translation in zip(chosen, translations):
            samples.append((source, reference, translation))
        return TrainResult(
            step=self.step, stop_reason=reason, dev_bleu=self.last_bleu, dev_perplexity=self.last_perplexity,
            best_bleu=self.best_bleu, delta=model_files.model_delta(self.model), samples=samples,
        )

