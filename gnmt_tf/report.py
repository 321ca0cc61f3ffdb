"""``python -m gnmt_tf.report`` runs the command of :mod:`gnmt_tf.cli.report`."""

from gnmt_tf.cli.report import COMMAND

COMMAND.run_if_main(__name__)
