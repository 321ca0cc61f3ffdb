"""``python -m gnmt_tf.evaluate`` runs the command of :mod:`gnmt_tf.cli.evaluate`."""

from gnmt_tf.cli.evaluate import COMMAND

COMMAND.run_if_main(__name__)
