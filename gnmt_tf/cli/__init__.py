"""The command-line tools: ``python -m gnmt_tf.<command>``, or the console script ``gnmt-<command>``.

Each module here is one command (a :class:`~gnmt_tf.cli.scaffold.Command`, ``COMMAND``), listed with its
names in :mod:`gnmt_tf.cli.commands`; what they share is in :mod:`gnmt_tf.cli.scaffold` (how a command
runs) and :mod:`gnmt_tf.cli.common` (the shared options).
"""
