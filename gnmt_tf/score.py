"""``python -m gnmt_tf.score`` runs the command of :mod:`gnmt_tf.cli.score`."""

from gnmt_tf.cli.score import COMMAND

COMMAND.run_if_main(__name__)
