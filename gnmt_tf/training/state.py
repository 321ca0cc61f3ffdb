"""The state of a training run: the model, its optimizer and the weights it ships, compiled into the
training step (:class:`TrainingState`), and the checkpoints that save and restore all of it
(:class:`RunCheckpoints`).

Everything that defines the run's state (weights, optimizer moments and step, hence the Adam/SGD
phase and delta, and the weight average) is in the checkpoint, so a killed run resumes where its
last checkpoint left it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import tensorflow as tf

from gnmt_tf import model_files
from gnmt_tf.config import ConfigError, GNMTConfig
from gnmt_tf.data.tokenizer import WordpieceTokenizer
from gnmt_tf.models.gnmt import GNMT
from gnmt_tf.models.losses import SequenceCrossEntropy
from gnmt_tf.models.objectives import MaximumLikelihood
from gnmt_tf.parallel import distribute
from gnmt_tf.training.averaging import AveragedWeights, TrainedWeights, WeightAverage
from gnmt_tf.training.callbacks import current_step
from gnmt_tf.training.optimizer import AdamThenSGD
from gnmt_tf.training.precision import PROC_CPUINFO, resolve_product_precision, training_transform


@dataclass(frozen=True)
class Cluster:
    """Where a run trains: its ``tf.distribute`` strategy (:mod:`gnmt_tf.parallel.distribute`) and the
    role this process has in it."""

    strategy: tf.distribute.Strategy
    distributed: bool  # not the default strategy
    is_chief: bool  # the one writer of the model directory
    multi_worker: bool  # synchronous workers in several processes
    coordinated: bool  # parameter-server training: this process schedules the steps

    @classmethod
    def of(cls, strategy: Optional[tf.distribute.Strategy]) -> "Cluster":
        strategy = strategy or tf.distribute.get_strategy()
        return cls(strategy, strategy is not tf.distribute.get_strategy(), distribute.is_chief(strategy),
                   distribute.is_multi_worker(strategy), distribute.uses_coordinator(strategy))


def training_objective(config: GNMTConfig, tokenizer: WordpieceTokenizer):
    """What training minimises: maximum likelihood (eq. 7), or for RL refinement the mixed objective of eq. 9."""
    if config.training.objective == "rl":
        from gnmt_tf.metrics.gleu import reward_function
        from gnmt_tf.training.reinforce import MixedObjective

        return MixedObjective(config.rl, reward_function(config.rl, tokenizer))
    return MaximumLikelihood(SequenceCrossEntropy(config.training.label_smoothing))


def quantization_aware(config: GNMTConfig, model: GNMT):
    """The transform of quantization-aware training of ``model`` if the config asks for it, else None
    (the float weights)."""
    if not config.training.quantization_aware:
        return None
    from gnmt_tf.quantization.qat import QuantizationAwareTraining

    return QuantizationAwareTraining(model)


class TrainingState:
    """The model, its optimizer and the weights the run ships, compiled into the training step.

    Args:
        config: the run's config.
        objective: what the step minimises (:func:`training_objective`).
        cluster: where the variables are made (under its strategy's scope).
        cpuinfo: the CPU ``training.product_precision: auto`` is resolved for
            (:func:`gnmt_tf.training.precision.resolve_product_precision`): this machine's by default.

    ``shipped`` is what the run ships (:mod:`gnmt_tf.training.averaging`): the weight average with
    ``training.average_decay``, else the weights as trained; :meth:`callbacks` keep it.
    """

    def __init__(self, config: GNMTConfig, objective, cluster: Cluster, cpuinfo=PROC_CPUINFO):
        t = config.training
        if cluster.distributed and t.jit_compile:
            raise ConfigError(
                "training.jit_compile: XLA compiles the step for one device; it is not available with "
                "--strategy (set training.jit_compile=false)"
            )
        with cluster.strategy.scope():
            self.rate_scale = None  # the final decay's factor of the learning rate (training.final_decay_fraction)
            if t.final_decay_fraction is not None:
                self.rate_scale = tf.Variable(1.0, trainable=False, name="learning_rate_budget_scale",
                                              aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
            self.model = GNMT(config.model, parallel=config.parallel)
            self.model.build()
            self.optimizer = AdamThenSGD.from_config_section(config, budget_scale=self.rate_scale)
            self.optimizer.build(self.model.trainable_variables)
            self.shipped = (AveragedWeights(WeightAverage(self.model.trainable_variables, t.average_decay))
                            if t.average_decay is not None else TrainedWeights())
        # Quantization-aware training (section 6): the training steps, the dev loss and the dev
        # translations compute with fake-quantized LSTM kernels. Made outside the strategy's scope:
        # its quantizers' range variables are not the model's.
        self.qat_transform = quantization_aware(config, self.model)
        self.product_precision = resolve_product_precision(t.product_precision, cpuinfo)  # "auto" read once
        with cluster.strategy.scope():
            self.model.compile(optimizer=self.optimizer, loss=SequenceCrossEntropy(t.label_smoothing),
                               objective=objective, jit_compile=t.jit_compile,
                               weight_transform=training_transform(self.product_precision, self.qat_transform))
        if cluster.distributed:
            # Loss, perplexity, learning rate and delta are the same on every replica; Keras'
            # default "sum" would add them up over the replicas.
            self.model.distribute_reduction_method = "first"

    @property
    def step(self) -> int:
        return current_step(self.model)

    def callbacks(self):
        """What ``fit`` needs to keep this state beyond the step itself (the weight average's moves)."""
        return self.shipped.callbacks()


class RunCheckpoints:
    """The run's checkpoints in checkpoints/: the whole training state, saved and restored.

    Under a synchronous cluster every worker takes part in a save; a non-chief worker saves into a
    directory of its own that it deletes (``writer``), so only the chief's checkpoint is kept.
    """

    def __init__(self, state: TrainingState, model_dir: str, cluster: Cluster, keep: int):
        self.state = state
        self.directory = model_files.checkpoint_dir(model_dir)
        self.objects = dict(model=state.model, optimizer=state.optimizer, **state.shipped.checkpointed())
        checkpoint = tf.train.Checkpoint(**self.objects)
        self.manager = tf.train.CheckpointManager(checkpoint, self.directory, max_to_keep=keep)
        self.writer = self.manager if cluster.is_chief else distribute.TemporaryCheckpoints(
            checkpoint, model_files.worker_checkpoint_dir(model_dir, cluster.strategy.cluster_resolver.task_id))

    @property
    def latest(self) -> Optional[str]:
        return self.manager.latest_checkpoint

    def restore(self, config: GNMTConfig, init_checkpoint: Optional[str], log: Callable[[str], None]) -> None:
        """Resume from the latest checkpoint, else start from the model weights of ``init_checkpoint`` (a
        fine-tune: only the model, not its optimizer), else from the initial weights."""
        path = self.latest
        if path:  # delta comes back with the weights, and the anneal goes on from it
            # A run begun without training.average_decay and resumed with it: its checkpoint has no
            # average to restore, so the average starts at the restored weights.
            missing = [name for name in self.state.shipped.checkpointed() if not _holds(path, name)]
            held = {name: value for name, value in self.objects.items() if name not in missing}
            tf.train.Checkpoint(**held).restore(path).assert_existing_objects_matched()
            if missing:
                self.state.shipped.start_at(self.state.model)
            started = "".join(f"; its {name.replace('_', ' ')} starts there" for name in missing)
            log(f"resuming from {path} at step {self.state.step}{started}")
        elif init_checkpoint:
            # Through a plain model: restoring into the compiled one would also restore the
            # optimizer it tracks (step counter, moments), and a fine-tune starts its own.
            self.state.model.set_weights(model_files.build_model(config, init_checkpoint).get_weights())
            self.state.shipped.start_at(self.state.model)  # the average starts at the weights it fine-tunes
            log(f"starting from the weights of {init_checkpoint}")


def _holds(checkpoint_path: str, name: str) -> bool:
    """Whether the checkpoint at ``checkpoint_path`` saved an object under the attribute ``name``."""
    return any(key.split("/", 1)[0] == name for key, _ in tf.train.list_variables(checkpoint_path))
