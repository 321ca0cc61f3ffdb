"""``python -m gnmt_tf.train`` runs the command of :mod:`gnmt_tf.cli.train`."""

from gnmt_tf.cli.train import COMMAND

COMMAND.run_if_main(__name__)
