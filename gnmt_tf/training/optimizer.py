"""Adam, then plain SGD: the optimiser of section 8.3 as one Keras optimizer.

"We run Adam for the first 60k steps, after which we switch to simple SGD."
The phase is a function of the optimizer's own step counter, which every
checkpoint saves, so a resumed run is in the same phase with the same Adam
moments. Gradients are clipped to a global norm of 5.0 (``global_clipnorm``).

Each phase updates a variable with TensorFlow's fused kernel (``ResourceApplyAdam``,
``ResourceApplyGradientDescent``; the ops Keras' legacy optimizers use): one pass over the
variable and its moments instead of the dozen element-wise ops of Keras' Adam, whose update
(Kingma & Ba's, as Keras writes it) the kernel computes with the same formula.
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
        lr = tf.cast(self.learning_rate, variable.dtype)

        def adam_update():
            if self.amsgrad or self.adaptive_epsilon:  # not what the kernel computes: Keras' own ops
                keras.optimizers.Adam.update_step(self, gradient, variable)
                return tf.constant(True)
            index = self._index_dict[self._var_key(variable)]
            step = tf.cast(self.iterations + 1, variable.dtype)
            beta_1 = tf.cast(self.beta_1, variable.dtype)
            beta_2 = tf.cast(self.beta_2, variable.dtype)
            # Adam decays every row's moments, so its update is dense however sparse the gradient
            # (Keras' own sparse branch is dense too); SGD's below is not.
            dense_gradient = tf.convert_to_tensor(gradient)
            tf.raw_ops.ResourceApplyAdam(
                var=variable.handle, m=self._momentums[index].handle, v=self._velocities[index].handle,
                beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step), lr=lr,
                beta1=beta_1, beta2=beta_2, epsilon=tf.cast(self.epsilon, variable.dtype),
                grad=dense_gradient, use_locking=False)
            return tf.constant(True)

        def sgd_update():
            if isinstance(gradient, tf.IndexedSlices):
                variable.scatter_sub(tf.IndexedSlices(gradient.values * lr, gradient.indices))
            else:
                tf.raw_ops.ResourceApplyGradientDescent(var=variable.handle, alpha=lr, delta=gradient,
                                                        use_locking=False)
            return tf.constant(False)

        tf.cond(self.in_adam_phase(), adam_update, sgd_update)

    def get_config(self):
        config = super().get_config()
        config["adam_steps"] = self.adam_steps
        return config
