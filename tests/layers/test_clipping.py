"""The paper's clips (eq. 10, eq. 13) and the gradient of the logits' clip."""

import numpy as np
import tensorflow as tf

from gnmt_tf.layers.clipping import clip_logits


def test_logit_clip_values_and_gradient_are_clip_by_values_at_and_around_the_bounds():
    """Eq. 13 with gamma 2: values as NumPy's clip; the gradient as TensorFlow derives ``clip_by_value``'s
    (passed inside [-2, 2] and at the bounds themselves, 0 beyond them)."""
    values = tf.constant([[-3.0, -2.0, -1.999, 0.0, 1.5, 2.0, 2.001, 40.0]])
    upstream = tf.constant([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]])
    gradients = []
    for clip in (lambda x: clip_logits(x, 2.0), lambda x: tf.clip_by_value(x, -2.0, 2.0)):
        with tf.GradientTape() as tape:
            tape.watch(values)
            clipped = clip(values)
        np.testing.assert_array_equal(clipped.numpy(), np.clip(values.numpy(), -2.0, 2.0))
        gradients.append(tape.gradient(clipped, values, output_gradients=upstream).numpy())
    np.testing.assert_array_equal(gradients[0], gradients[1])
    np.testing.assert_array_equal(gradients[0], [[0.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.0, 0.0]])
