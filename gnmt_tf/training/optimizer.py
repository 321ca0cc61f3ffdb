"""Adam, then plain SGD: the optimiser of section 8.3 as one Keras optimizer.

"We run Adam for the first 60k steps, after which we switch to simple SGD."
The phase is a function of the optimizer's own step counter, which every
checkpoint saves, so a resumed run is in the same phase with the same Adam
moments. Gradients are clipped to a global norm of 5.0 (``global_clipnorm``).
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf
import tf_keras as keras

from gnmt_tf.config import GNMTConfig
from gnmt_tf.training.schedules import GNMTLearningRate


@keras.saving.register_keras_serializable(package="gnmt_tf")
class AdamThenSGD(keras.optimizers.Adam):
    """Adam while ``iterations < adam_steps``, plain SGD (``w -= lr * g``) afterwards.

    ``learning_rate`` is usually a :class:`~gnmt_tf.training.schedules.GNMTLearningRate`,
    which gives Adam's rate in the first phase and SGD's (halved on schedule)
    in the second.
    """

    def __init__(self, learning_rate=0.0002, adam_steps: int = 60000, global_clipnorm=5.0, name="AdamThenSGD", **kwargs):
        super().__init__(learning_rate=learning_rate, global_clipnorm=global_clipnorm, name=name, **kwargs)
        self.adam_steps = adam_steps

    @classmethod
    def from_config_section(cls, config: GNMTConfig, budget_scale: Optional[tf.Variable] = None) -> "AdamThenSGD":
        """The optimizer of ``config``'s training section; ``budget_scale``: see :class:`GNMTLearningRate`."""
        return cls(
            learning_rate=GNMTLearningRate.from_config_section(config, budget_scale),
            adam_steps=config.training.adam_steps,
            global_clipnorm=config.training.clip_norm,
        )

    def in_adam_phase(self) -> tf.Tensor:
        return self.iterations < self.adam_steps

    def update_step(self, gradient, variable):
        def adam_update():
            keras.optimizers.Adam.update_step(self, gradient, variable)
            return tf.constant(True)

        def sgd_update():
            lr = tf.cast(self.learning_rate, variable.dtype)
            if isinstance(gradient, tf.IndexedSlices):
                variable.scatter_sub(tf.IndexedSlices(gradient.values * lr, gradient.indices))
            else:
                variable.assign_sub(lr * gradient)
            return tf.constant(False)

        tf.cond(self.in_adam_phase(), adam_update, sgd_update)

    def get_config(self):
        config = super().get_config()
        config["adam_steps"] = self.adam_steps
        return config
