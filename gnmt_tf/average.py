"""``python -m gnmt_tf.average`` runs the command of :mod:`gnmt_tf.cli.average`."""

from gnmt_tf.cli.average import COMMAND

COMMAND.run_if_main(__name__)
