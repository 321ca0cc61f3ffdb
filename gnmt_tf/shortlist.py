"""``python -m gnmt_tf.shortlist`` runs the command of :mod:`gnmt_tf.cli.shortlist`."""

from gnmt_tf.cli.shortlist import COMMAND

COMMAND.run_if_main(__name__)
