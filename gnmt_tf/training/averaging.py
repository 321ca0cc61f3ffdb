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

The average is created with the model's trainable variables (under the training strategy's
scope), updated inside the compiled training step (:meth:`gnmt_tf.models.gnmt.GNMT.train_step`,
given to ``GNMT.compile``), and saved in every checkpoint with the model and the optimizer,
so a resumed run goes on averaging where it stopped.
"""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf


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

    def update(self, variables: Sequence[tf.Variable], step) -> None:
        """Move the average towards ``variables`` (the same weights, in the same order), after update ``step``."""
        keep = self.decay_at(step)
        for average, variable in zip(self.averages, variables):
            # average - (1 - d) * (average - w) == d * average + (1 - d) * w, one fused update
            average.assign_sub((1.0 - keep) * (average - tf.cast(variable, average.dtype)))

    def copy_to(self, variables: Sequence[tf.Variable]) -> None:
        """Set ``variables`` (another model's trainable weights, in the same order) to the average."""
        if len(variables) != len(self.averages):
            raise ValueError(f"{len(variables)} variables for an average of {len(self.averages)}")
        for variable, average in zip(variables, self.averages):
            variable.assign(average)
