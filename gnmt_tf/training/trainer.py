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

import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple

import tensorflow as tf
import tf_keras as keras

from gnmt_tf.parallel import distribute
from gnmt_tf import model_files
from gnmt_tf.config import ConfigError, GNMTConfig
from gnmt_tf.data import count_filtered, make_dataset
from gnmt_tf.inference.evaluation import Evaluation, evaluate, load_translator
from gnmt_tf.metrics.bleu import BleuResult
from gnmt_tf.models.losses import SequenceCrossEntropy
from gnmt_tf.models.gnmt import GNMT, unpack_batch
from gnmt_tf.training.callbacks import (
    BestScore,
    DeltaAnnealing,
    DevEvaluation,
    FinalRateDecay,
    PeriodicCheckpoint,
    Progress,
    RunControl,
    SegmentBoundaries,
    StopAgreement,
    TrainingSummaries,
    current_step,
)
from gnmt_tf.models.objectives import MaximumLikelihood
from gnmt_tf.training.optimizer import AdamThenSGD
from gnmt_tf.training.averaging import WeightAverage
from gnmt_tf.training.precision import resolve_product_precision, training_transform
from gnmt_tf.training.schedules import BudgetDecay, DeltaSchedule
from gnmt_tf.data.tokenizer import WordpieceTokenizer
from gnmt_tf.inference.translator import Translator
from gnmt_tf.layers.weights import FLOAT_WEIGHTS, WeightReader

Pair = Tuple[str, str]


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


class Trainer:
    """Trains a GNMT on sentence pairs into a self-contained model directory.

    Args:
        config: the run's config (``config.model.vocab_size`` must equal the tokenizer's).
        model_dir: where checkpoints, logs, config and vocabulary go.
        train_pairs, dev_pairs: (source, target) sentences.
        tokenizer: the shared wordpiece tokenizer.
        log: where progress messages go (``print`` by default).
        verbose: progress while training (:class:`~gnmt_tf.training.callbacks.Progress`): 1, a line
            rewritten after every step (a terminal); 2, a line every 30 seconds; 0, none.
        init_checkpoint: weights to start from when ``model_dir`` has no checkpoint yet
            (a fine-tune of another model; only the model is restored, not its optimizer).

    The weights a run ships: with ``training.average_decay`` an exponential moving average of
    the weights (:mod:`gnmt_tf.training.averaging`), else the raw weights. Dev BLEU is measured
    on them with the config's beam search through :func:`gnmt_tf.inference.evaluation.evaluate`,
    ``best/`` is chosen on it and holds them, and ``averaged/`` holds the average at every checkpoint.
    The final figure is ``python -m gnmt_tf.evaluate``'s on the checkpoint ``translate`` uses by
    default, computed by the same code.

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
        # As the model directory keeps them (dev.tsv), so that evaluate on dev.tsv sees the same sentences.
        self.dev_pairs = [model_files.folded(pair) for pair in dev_pairs]
        self.tokenizer = tokenizer
        self.log = log
        self.verbose = verbose
        self.strategy = strategy or tf.distribute.get_strategy()
        self.distributed = self.strategy is not tf.distribute.get_strategy()
        if self.distributed and config.training.jit_compile:
            raise ConfigError(
                "training.jit_compile: XLA compiles the step for one device; it is not available with "
                "--strategy (set training.jit_compile=false)"
            )
        self.is_chief = distribute.is_chief(self.strategy)  # the one writer of model_dir
        self.multi_worker = distribute.is_multi_worker(self.strategy)
        self.coordinated = distribute.uses_coordinator(self.strategy)
        # delta's anneal (section 6), bounded in time too where one clock rules the run.
        self.delta_schedule = DeltaSchedule.from_config_section(config, timed=not self.distributed)
        self.last_evaluation: Optional[Evaluation] = None
        self.last_perplexity: Optional[float] = None
        self.control: Optional[RunControl] = None
        self._evaluated_step: Optional[int] = None
        self._best_evaluation: Optional[Tuple[str, Evaluation]] = None  # (best/ checkpoint, its figure)
        self._dev_loss = None

        with self.strategy.scope():
            self._build_model()
        # Quantization-aware training (section 6): the training steps, the dev loss and the dev
        # translations compute with fake-quantized LSTM kernels (None: float). Made outside the
        # strategy's scope: its quantizers' range variables are not the model's.
        self.qat_transform = self._quantization_aware(self.model)
        self.product_precision = resolve_product_precision(config.training.product_precision)  # "auto" read once
        with self.strategy.scope():
            self._compile(training_transform(self.product_precision, self.qat_transform))
        self._build_checkpoints()
        if self.is_chief:
            self._build_dev_evaluation()
        self._restore(init_checkpoint)

    # ------------------------------------------------------------------ construction
    def _build_model(self) -> None:
        """The model, its optimizer (with the final decay's factor) and the weight average."""
        t = self.config.training
        self.rate_scale = None
        if t.final_decay_fraction is not None:
            self.rate_scale = tf.Variable(1.0, trainable=False, name="learning_rate_budget_scale",
                                          aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        self.model = GNMT(self.config.model, parallel=self.config.parallel)
        self.model.build()
        self.optimizer = AdamThenSGD.from_config_section(self.config, budget_scale=self.rate_scale)
        self.optimizer.build(self.model.trainable_variables)
        self.weight_average = (WeightAverage(self.model.trainable_variables, t.average_decay)
                               if t.average_decay is not None else None)

    def _compile(self, weight_transform) -> None:
        """The model compiled with the run's loss, objective, weight average and weight transform."""
        t = self.config.training
        self.model.compile(optimizer=self.optimizer, loss=SequenceCrossEntropy(t.label_smoothing),
                           objective=self._objective(), weight_average=self.weight_average,
                           weight_transform=weight_transform, jit_compile=t.jit_compile)
        if self.distributed:
            # Loss, perplexity, learning rate and delta are the same on every replica; Keras'
            # default "sum" would add them up over the replicas.
            self.model.distribute_reduction_method = "first"

    def _objective(self):
        """What training minimises: maximum likelihood (eq. 7), or for RL refinement the mixed objective of eq. 9."""
        if self.config.training.objective == "rl":
            from gnmt_tf.metrics.gleu import reward_function
            from gnmt_tf.training.reinforce import MixedObjective

            return MixedObjective(self.config.rl, reward_function(self.config.rl, self.tokenizer))
        return MaximumLikelihood(SequenceCrossEntropy(self.config.training.label_smoothing))

    def _build_checkpoints(self) -> None:
        """The run's checkpoints: model, optimizer and weight average (the whole training state)."""
        state = dict(model=self.model, optimizer=self.optimizer)
        if self.weight_average is not None:
            state["weight_average"] = self.weight_average
        checkpoint = tf.train.Checkpoint(**state)
        self.manager = tf.train.CheckpointManager(
            checkpoint, model_files.checkpoint_dir(self.model_dir), max_to_keep=self.config.training.keep_checkpoints
        )
        # A non-chief worker of a synchronous cluster takes part in every save, into a
        # directory of its own that it deletes; only the chief's checkpoint is kept.
        self.checkpoint_writer = self.manager if self.is_chief else distribute.TemporaryCheckpoints(
            checkpoint, model_files.worker_checkpoint_dir(self.model_dir, self.strategy.cluster_resolver.task_id)
        )

    def _build_dev_evaluation(self) -> None:
        """The chief's dev evaluation: the weights evaluated (a one-device copy when they are the average
        or the run is distributed), best/ and averaged/, the dev summaries and the dev translator."""
        self.dev_model = self.model
        # What the dev loss and translations read: the weights as the shipped model reads them (the
        # training step's bfloat16 products, if any, are how it computes, not what the model is).
        self.dev_weights = WeightReader(self.qat_transform)
        if self.distributed or self.weight_average is not None:
            # model.evaluate would need every worker (collectives, or the parameter-server
            # coordinator); and the average is not the training weights.
            self.dev_model = model_files.build_model(self.config)
            self.dev_weights = WeightReader(self._quantization_aware(self.dev_model))
        shipped = tf.train.Checkpoint(model=self.dev_model)
        self.best_manager = tf.train.CheckpointManager(shipped, model_files.best_dir(self.model_dir), max_to_keep=1)
        self.averaged_manager = None
        if self.weight_average is not None:
            self.averaged_manager = tf.train.CheckpointManager(
                shipped, model_files.averaged_dir(self.model_dir), max_to_keep=1)
        self.dev_writer = tf.summary.create_file_writer(model_files.dev_log_dir(self.model_dir))
        self.translator = Translator(self.dev_model, self.tokenizer, self.config.decoding,
                                     weight_transform=self.dev_weights.transform)

    def _quantization_aware(self, model):
        """The transform of quantization-aware training of ``model`` if the config asks for it, else None."""
        if not self.config.training.quantization_aware:
            return None
        from gnmt_tf.quantization.qat import QuantizationAwareTraining

        return QuantizationAwareTraining(model)

    # ------------------------------------------------------------------ state
    def _restore(self, init_checkpoint: Optional[str]) -> None:
        path = self.manager.latest_checkpoint
        if path and self.weight_average is not None and not _holds(path, "weight_average"):
            # A run begun without training.average_decay and resumed with it: its checkpoint has no
            # average to restore, so the average starts at the restored weights.
            without_average = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer)
            without_average.restore(path).assert_existing_objects_matched()
            self._start_average_at_weights()
            self.log(f"resuming from {path} at step {self.step}; its weight average starts there")
        elif path:  # delta comes back with the weights, and the anneal goes on from it
            self.manager.checkpoint.restore(path).assert_existing_objects_matched()
            self.log(f"resuming from {path} at step {self.step}")
        elif init_checkpoint:
            # Through a plain model: restoring into the compiled one would also restore the
            # optimizer it tracks (step counter, moments), and a fine-tune starts its own.
            self.model.set_weights(model_files.build_model(self.config, init_checkpoint).get_weights())
            self._start_average_at_weights()  # the average starts at the weights it fine-tunes
            self.log(f"starting from the weights of {init_checkpoint}")
        best = (model_files.read_best_bleu(self.model_dir)
                if self.is_chief and self.best_manager.latest_checkpoint else None)
        # The dev BLEU to beat: a resumed run keeps comparing against its old best.
        self.dev_record = BestScore(best.score if best is not None else None)

    def _start_average_at_weights(self) -> None:
        if self.weight_average is not None:
            for average, variable in zip(self.weight_average.averages, self.model.trainable_variables):
                average.assign(variable)

    @property
    def step(self) -> int:
        return current_step(self.model)

    @property
    def best_bleu(self) -> Optional[float]:
        return self.dev_record.best

    # ------------------------------------------------------------------ evaluation
    def _shipped_weights(self):
        """The dev model holding the weights the run ships: the average, or a copy of the raw weights."""
        model = self.dev_model
        if self.weight_average is not None:
            self.weight_average.copy_to(model.trainable_variables)
            model.set_clip_delta(model_files.model_delta(self.model))
        elif model is not self.model:
            model.set_weights(self.model.get_weights())
        return model

    def save_averaged(self, step: int) -> Optional[str]:
        """Write the weight average at ``step`` to averaged/ (a model checkpoint like any other)."""
        if self.averaged_manager is None:
            return None
        self._shipped_weights()
        return self.averaged_manager.save(checkpoint_number=step)

    def evaluate_dev(self, step: int) -> Tuple[float, Evaluation]:
        """Dev perplexity (teacher forcing) and BLEU (the config's beam search) of the shipped weights;
        keeps them in best/ when their BLEU is the best so far."""
        # Evaluated at the delta of this step, which is the delta this checkpoint is saved
        # with and will be decoded at (gnmt_tf.model_files), so "best" means best as used.
        model = self._shipped_weights()
        # Dev pairs are not length-filtered: a batch is bounded to the cells of a training batch
        # (training.batch_cells, or 64 of the longest pairs trained on), so that a long dev pair cannot
        # exhaust memory (make_dataset).
        longest = self.config.data.max_length + 1
        dev_data = make_dataset(
            self.dev_pairs, self.tokenizer.tokenize, batch_size=64, max_length=self.config.data.max_length,
            bucket_width=self.config.data.bucket_width, shuffle_buffer=1, seed=0, training=False,
            batch_cells=self.config.training.batch_cells or 64 * longest * longest,
        )
        loss = self._dev_loss_of(dev_data)
        perplexity = float(math.exp(min(loss, 50.0)))
        evaluation = evaluate(self.translator, self.dev_pairs, warm_up=False)
        delta = model_files.model_delta(model)
        with self.dev_writer.as_default(step=step):
            tf.summary.scalar("perplexity", perplexity)
            tf.summary.scalar("loss", loss)
            tf.summary.scalar("bleu", evaluation.bleu.score)
            tf.summary.scalar("delta", delta)
        self.dev_writer.flush()
        self.last_evaluation, self.last_perplexity = evaluation, perplexity
        self._evaluated_step = step
        kept = self.dev_record.add(evaluation.bleu.score)
        if kept:
            self._best_evaluation = (os.path.abspath(self.best_manager.save(checkpoint_number=step)), evaluation)
            model_files.write_best_bleu(self.model_dir, model_files.BestBleu(
                evaluation.bleu.score, step, evaluation.bleu.signature))
        weights = "averaged weights" if self.weight_average is not None else "weights"
        if not kept:
            standing = f"best {self.best_bleu:.2f}"
        elif self.dev_record.evaluations_since_best == 0:
            standing = "best so far"
        else:
            standing = "equals the best: now best/"
        self.log(
            f"step {step}: dev perplexity {perplexity:.2f}, dev BLEU {evaluation.bleu.score:.2f} "
            f"({weights}, {evaluation.search}, delta {delta:.3g}) ({standing})"
        )
        return perplexity, evaluation

    def _dev_loss_of(self, dev_data) -> float:
        """The dev model's per-token negative log-likelihood (unsmoothed), averaged per pair.

        Computed by a function of its own rather than ``model.evaluate``: inside a strategy's
        ``fit``, Keras would run ``evaluate`` through the strategy even for a model built outside it.
        """
        if self._dev_loss is None:
            objective = MaximumLikelihood(SequenceCrossEntropy())  # as GNMT.test_step
            model, weights = self.dev_model, self.dev_weights
            ids = tf.TensorSpec([None, None], tf.int32)  # any batch and lengths: traced once
            self._dev_loss = tf.function(  # autograph off: as GNMT.test_step
                lambda x, y: objective.loss(model, unpack_batch((x, y)), training=False, weights=weights)[0],
                input_signature=[(ids, ids), ids], autograph=False,
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
        return self._train(max_steps, max_minutes)

    def _callbacks(self, max_steps: int, max_minutes: Optional[float]) -> List[keras.callbacks.Callback]:
        """The run's callbacks (self.control first), each given what it acts on."""
        t = self.config.training
        started = time.monotonic()  # the origin of the time limit, of delta's timed anneal and of the final decay
        annealing = DeltaAnnealing(self.delta_schedule, started=started)
        # The time limit waits for delta's timed anneal to end, so that a run its clock stops is
        # used at the final delta even when one step outlasts the whole budget (a loaded machine).
        self.control = RunControl(
            max_steps, max_minutes, lambda: self.manager.latest_checkpoint, started=started,
            time_limit_waits_for=annealing.annealed if self.delta_schedule.anneal_seconds is not None else None,
            synchronized=self.multi_worker,
        )
        writers = [self.checkpoint_writer] + ([_AveragedWriter(self)] if self.is_chief and self.weight_average else [])
        self.checkpointing = PeriodicCheckpoint(writers, t.checkpoint_every, self.control)
        callbacks = [self.control, annealing, self.checkpointing]
        decay = BudgetDecay.for_run(t.final_decay_fraction, max_steps, max_minutes, timed=not self.multi_worker)
        if self.rate_scale is not None and decay is not None:
            callbacks.append(FinalRateDecay(decay, self.rate_scale, started=started))
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
        if self.verbose:
            callbacks.append(Progress(self.control, sys.stdout, live=self.verbose == 1))
        if self.multi_worker:
            callbacks.append(StopAgreement(self.control, distribute.stop_agreement(self.strategy)))
        return callbacks

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
        callbacks = self._callbacks(max_steps, max_minutes)
        # Keras "epochs" are only segments of fit here (its progress bar is off); the step counter decides everything.
        segment = min(t.checkpoint_every, max_steps)
        if self.coordinated:
            # Every step some callback acts on (and max_steps) ends a segment.
            segment = math.gcd(t.log_every, t.checkpoint_every, t.eval_every, self.step, max_steps)
            callbacks = [SegmentBoundaries(callbacks, segment)]
        initial_epoch = self.step // segment
        epochs = initial_epoch + math.ceil((max_steps - self.step) / segment) + 1
        if self.product_precision == "bfloat16":
            self.log(f"products: bfloat16 operands for the input projections and the softmax "
                     f"(training.product_precision: {t.product_precision}); dev figures in float32")
        self.log(
            f"training from step {self.step} to at most {max_steps}"
            + (f" or {max_minutes:g} minutes" if max_minutes else "")
            + f"; checkpoints every {t.checkpoint_every} steps in {model_files.checkpoint_dir(self.model_dir)}"
        )
        self.control.install_signal_handlers()
        start_step = self.step
        try:
            self.model.fit(
                train_data, steps_per_epoch=segment, epochs=epochs, initial_epoch=initial_epoch,
                callbacks=callbacks, verbose=0,
            )
        except ValueError as err:
            if self.step != start_step or "Empty logs" not in str(err):
                raise
            # Keras' words for a dataset that gave no batch at all.
            raise ConfigError(
                f"the training data gave no batch: {len(self.train_pairs):,} pairs"
                + (", and with training.jit_compile a length bucket with fewer than training.batch_size "
                   f"({t.batch_size}) pairs gives none" if t.jit_compile else "")
                + "; use more training pairs or a smaller training.batch_size"
            ) from None
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
        path = self.checkpointing.save(self.step)
        if self.is_chief:
            self.log(f"saved {path}")
        return self._finish(self.control.stop_reason or "finished")

    def _training_data(self):
        """The training batches: a dataset, or for parameter-server training a dataset function."""
        t, d = self.config.training, self.config.data

        def dataset(pairs, seed):
            return make_dataset(
                pairs, self.tokenizer.tokenize, batch_size=t.batch_size, batch_tokens=t.batch_tokens,
                batch_cells=t.batch_cells,
                max_length=d.max_length, bucket_width=d.bucket_width, shuffle_buffer=d.shuffle_buffer,
                seed=seed, training=True, repeat=True, bucket_shapes=t.jit_compile,
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
        final, checkpoint = self._default_checkpoint_figure()
        chosen = list(range(0, len(self.dev_pairs), max(1, len(self.dev_pairs) // 5)))[:5]
        samples = [(*self.dev_pairs[i], final.hypotheses[i]) for i in chosen]
        return TrainResult(
            step=self.step, stop_reason=reason, dev=final, dev_checkpoint=checkpoint,
            dev_perplexity=self.last_perplexity, best_bleu=self.best_bleu,
            delta=model_files.model_delta(self.model), samples=samples,
        )

    def _default_checkpoint_figure(self) -> Tuple[Evaluation, str]:
        """Dev BLEU of the checkpoint translate and evaluate load by default, and its path: the figure of
        python -m gnmt_tf.evaluate --model-dir DIR --test DIR/dev.tsv.

        When that checkpoint is the best/ this run saved, its figure is the one measured when it was
        saved: the same evaluate() on the same weights, decoded as load_translator decodes them
        (float weights, no shortlist). Otherwise (best/ from before a restart, quantization-aware dev
        translations, a shortlist) the checkpoint is loaded and evaluated.
        """
        checkpoint = model_files.find_checkpoint(self.model_dir)
        if (self._best_evaluation is not None and self._best_evaluation[0] == os.path.abspath(checkpoint)
                and self.dev_weights.transform is FLOAT_WEIGHTS and not model_files.has_shortlist(self.model_dir)):
            return self._best_evaluation[1], checkpoint
        translator, _, checkpoint = load_translator(self.model_dir)
        return evaluate(translator, self.dev_pairs), checkpoint


class _AveragedWriter:
    """Saves the weight average to averaged/ whenever the run checkpoints (a writer for PeriodicCheckpoint)."""

    def __init__(self, trainer: Trainer):
        self.trainer = trainer

    def save(self, checkpoint_number: int) -> Optional[str]:
        return self.trainer.save_averaged(checkpoint_number)


def _holds(checkpoint_path: str, name: str) -> bool:
    """Whether the checkpoint at ``checkpoint_path`` saved an object under the attribute ``name``."""
    return any(key.split("/", 1)[0] == name for key, _ in tf.train.list_variables(checkpoint_path))
