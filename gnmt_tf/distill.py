"""``python -m gnmt_tf.<command>``: runs the command that gnmt_tf/cli/commands.py lists for this module.

Every such module is this same file under the command's name (``python -m`` needs a module of that name).
"""

from gnmt_tf.cli.commands import load_command

COMMAND = load_command(__spec__.name)
COMMAND.run_if_main(__name__)
