"""``python -m gnmt_tf.translate`` runs the command of :mod:`gnmt_tf.cli.translate`."""

from gnmt_tf.cli.translate import COMMAND

COMMAND.run_if_main(__name__)
