"""``python -m gnmt_tf.summary`` runs the command of :mod:`gnmt_tf.cli.summary`."""

from gnmt_tf.cli.summary import COMMAND

COMMAND.run_if_main(__name__)
