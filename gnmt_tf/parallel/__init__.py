"""Data parallelism with tf.distribute and model parallelism over layers (section 3.3)."""
