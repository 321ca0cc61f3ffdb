"""An exponential moving average of the weights, kept while training: the weights a run ships.

Polyak averaging as Lingvo and tensor2tensor keep it for evaluation and export: after
every update ``average <- decay_t * average + (1 - decay_t) * weight``, with TensorFlow's
``ExponentialMovingAverage`` rule for the first steps,

    decay_t = min(decay, (1 + t) / (10 + t)),

so that the average follows the weights closely while they change fast (early on, or in a
short run: at step 1,000 it spans about the last 100 steps) and settles to ``decay`` (about
``1 / (1 - decay)`` steps) in a long one. The average smooths the noise of the last updates
at no training cost beyond one multiply-add per weight; benchmarks/README.md, section
"Translation quality per CPU minute", has what it gains here against the raw weights and
against averaging the last checkpoints.

The average is training state, not part of the model: :class:`WeightAverage` is created with the
model's trainable variables (under the training strategy's scope), moved after every update by the
:class:`WeightAveraging` callback of ``fit``, and saved in every checkpoint with the model and the
optimizer, so a resumed run goes on averaging where it stopped. What a run ships is one of two
objects with the same methods: :class:`AveragedWeights` (``training.average_decay``) or
:class:`TrainedWeights` (the weights as trained).
"""

from __future__ import annotations

from typing import Dict, List, Sequence

import tensorflow as tf
import tf_keras as keras

from gnmt_tf import model_files


class WeightAverage(tf.Module):
    """An exponential moving average of ``variables`` (see the module docstring).

    Args:
        variables: the weights to average (a model's ``trainable_variables``), in a fixed order.
        decay: the decay the average settles to, in (0, 1).
    """

    def __init__(self, variables: Sequence[tf.Variable], decay: float, name: str = "weight_average"):
        super().__init__(name=name)
        if not 0.0 < decay < 1.0:
            raise ValueError(f"decay must be in (0, 1), got {decay}")
        self.decay = float(decay)
        with self.name_scope:
            # The average starts at the weights themselves, as decay_0 = 0.1 would nearly make it anyway.
            # Every synchronous replica computes the same average: keep the first's (as for delta).
            self.averages = [
                tf.Variable(variable, trainable=False, name=variable.name.split(":")[0].replace("/", "_"),
                            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
                for variable in variables
            ]

    def decay_at(self, step) -> tf.Tensor:
        """decay_t at the optimizer's step ``step`` (the updates made so far)."""
        step = tf.cast(step, tf.float32)
        return tf.minimum(self.decay, (1.0 + step) / (10.0 + step))

    def update(self, variables: Sequence[tf.Variable], step, updates=1) -> None:
        """Move the average towards ``variables`` (the same weights, in the same order), after update ``step``.

        ``updates``: the updates since the last move (their weights unseen, taken as these): the average
        moves as that many updates to these weights would move it, by the product of their decay_t.
        """
        last = tf.cast(step, tf.float32)
        keep = tf.reduce_prod(self.decay_at(tf.range(last - tf.cast(updates, tf.float32) + 1.0, last + 1.0)))
        for average, variable in zip(self.averages, variables):
            # average - (1 - d) * (average - w) == d * average + (1 - d) * w, one fused update
            average.assign_sub((1.0 - keep) * (average - tf.cast(variable, average.dtype)))

    def copy_to(self, variables: Sequence[tf.Variable]) -> None:
        """Set ``variables`` (another model's trainable weights, in the same order) to the average."""
        if len(variables) != len(self.averages):
            raise ValueError(f"{len(variables)} variables for an average of {len(self.averages)}")
        for variable, average in zip(variables, self.averages):
            variable.assign(average)

    def start_at(self, variables: Sequence[tf.Variable]) -> None:
        """Restart the average at ``variables`` (weights restored without an average, or fine-tuned from)."""
        for average, variable in zip(self.averages, variables):
            average.assign(variable)


class WeightAveraging(keras.callbacks.Callback):
    """Moves ``average`` after every update ``fit`` makes to the model's trainable variables.

    Place it before the callbacks that save or evaluate the average at a step. Where ``fit`` calls
    batch callbacks only at segment ends (parameter-server training:
    :class:`~gnmt_tf.training.callbacks.SegmentBoundaries`), each call moves it over the segment's updates.
    """

    def __init__(self, average: WeightAverage):
        super().__init__()
        self.average = average
        self._moved_at = 0
        self._update = tf.function(average.update, autograph=False)  # traced once: step and updates are tensors

    def on_train_begin(self, logs=None):
        self._moved_at = int(self.model.optimizer.iterations.numpy())

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step > self._moved_at:
            self._update(self.model.trainable_variables, tf.constant(step), tf.constant(step - self._moved_at))
            self._moved_at = step


class AveragedWeights:
    """What a run with ``training.average_decay`` ships: the weight average, saved to averaged/ too."""

    description = "averaged weights"

    def __init__(self, average: WeightAverage):
        self.average = average

    def checkpointed(self) -> Dict[str, tf.Module]:
        """What the training checkpoint holds besides the model and the optimizer."""
        return {"weight_average": self.average}

    def callbacks(self) -> List[keras.callbacks.Callback]:
        return [WeightAveraging(self.average)]

    def start_at(self, model: keras.Model) -> None:
        self.average.start_at(model.trainable_variables)

    def needs_own_model(self) -> bool:
        """Whether the shipped weights need a model of their own (the average is not the trained weights)."""
        return True

    def copy(self, trained: keras.Model, shipped: keras.Model) -> None:
        """Put into ``shipped`` the weights the run ships, with ``trained``'s delta."""
        self.average.copy_to(shipped.trainable_variables)
        shipped.set_clip_delta(model_files.model_delta(trained))

    def checkpoint_dirs(self, model_dir: str) -> List[str]:
        """Where the shipped weights are saved at every checkpoint of the run."""
        return [model_files.averaged_dir(model_dir)]


class TrainedWeights:
    """What a run without a weight average ships: the weights as trained (the paper's)."""

    description = "weights"

    def checkpointed(self) -> Dict[str, tf.Module]:
        return {}

    def callbacks(self) -> List[keras.callbacks.Callback]:
        return []

    def start_at(self, model: keras.Model) -> None:
        pass  # nothing kept apart from the weights

    def needs_own_model(self) -> bool:
        return False

    def copy(self, trained: keras.Model, shipped: keras.Model) -> None:
        if shipped is not trained:  # a one-device copy of distributed weights
            shipped.set_weights(trained.get_weights())

    def checkpoint_dirs(self, model_dir: str) -> List[str]:
        return []
