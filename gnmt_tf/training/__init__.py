"""Training with the paper's recipe (section 8.3): the Trainer, its callbacks, RL refinement, optimizer, schedules.

* :mod:`~gnmt_tf.training.trainer`: :class:`Trainer` runs ``fit`` into a model directory;
  :mod:`~gnmt_tf.training.callbacks` holds the callbacks of its run.
* What ``GNMT.train_step`` minimises is an objective passed to ``compile``: maximum
  likelihood (eq. 7; :mod:`gnmt_tf.models.objectives`, the model's own), or RL
  refinement's mixed objective of eq. 9 (:mod:`~gnmt_tf.training.reinforce`).
* :mod:`~gnmt_tf.training.optimizer`, :mod:`~gnmt_tf.training.schedules`: Adam then SGD,
  the learning rate and delta (eq. 10) schedules.

The public names below are imported on first use, so that importing this package loads
only what is asked for.
"""

import importlib

_PUBLIC = {
    "Trainer": "gnmt_tf.training.trainer",
    "TrainResult": "gnmt_tf.training.trainer",
    "TrainingDiverged": "gnmt_tf.training.trainer",
    "MixedObjective": "gnmt_tf.training.reinforce",
    "AdamThenSGD": "gnmt_tf.training.optimizer",
    "GNMTLearningRate": "gnmt_tf.training.schedules",
    "DeltaSchedule": "gnmt_tf.training.schedules",
    "DeltaAnnealing": "gnmt_tf.training.callbacks",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'gnmt_tf.training' has no attribute {name!r}")


def __dir__():
    return __all__
