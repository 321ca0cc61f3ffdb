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

from gnmt_tf.lazy import lazy_names

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

__getattr__, __dir__, __all__ = lazy_names(__name__, _PUBLIC)
