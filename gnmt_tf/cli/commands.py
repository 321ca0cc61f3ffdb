"""Every command of gnmt_tf, listed once: its console script, what ``python -m`` runs, the module that
defines it and what it does, in one sentence.

Everything that names the commands reads :data:`COMMANDS`: setup.py's console scripts, each command's
names (:class:`~gnmt_tf.cli.scaffold.Command`: the usage line shows the one that was started), the
``python -m gnmt_tf.<command>`` modules (gnmt_tf/train.py, ...: each runs the command listed for it)
and the command-line reference (docs/generate_reference.py writes docs/cli.md). A new command is a new
entry here, its module and, for a ``python -m gnmt_tf.<command>`` name, a copy of gnmt_tf/train.py under
that name.

setup.py reads this file by path, without importing gnmt_tf (whose commands need TensorFlow, which may
not be installed yet): it imports nothing but the standard library.
"""

import importlib
from typing import List, NamedTuple


class CommandEntry(NamedTuple):
    """One command's names and summary."""

    script: str  # its console script, e.g. "gnmt-translate"
    python_m: str  # what ``python -m`` runs, e.g. "gnmt_tf.translate"
    defined_in: str  # the module whose COMMAND and main the command is, e.g. "gnmt_tf.cli.translate"
    summary: str  # what it does, one sentence (docs/cli.md's table of commands)


# In the order a newcomer meets them (train, use, inspect, ship): the order of docs/cli.md.
COMMANDS = (
    CommandEntry("gnmt-train", "gnmt_tf.train", "gnmt_tf.cli.train", "Train a GNMT."),
    CommandEntry("gnmt-translate", "gnmt_tf.translate", "gnmt_tf.cli.translate",
                 "Translate text with a trained model."),
    CommandEntry("gnmt-evaluate", "gnmt_tf.evaluate", "gnmt_tf.cli.evaluate",
                 "Score a trained model on a test set."),
    CommandEntry("gnmt-score", "gnmt_tf.score", "gnmt_tf.cli.score",
                 "Score given translations with a trained model."),
    CommandEntry("gnmt-distill", "gnmt_tf.distill", "gnmt_tf.cli.distill",
                 "Translate training data with a teacher model into a student's training data."),
    CommandEntry("gnmt-average", "gnmt_tf.average", "gnmt_tf.cli.average",
                 "Average the last checkpoints of a model."),
    CommandEntry("gnmt-shortlist", "gnmt_tf.shortlist", "gnmt_tf.cli.shortlist",
                 "Build a model's vocabulary shortlist."),
    CommandEntry("gnmt-report", "gnmt_tf.report", "gnmt_tf.cli.report", "Plot a training run's curves."),
    CommandEntry("gnmt-summary", "gnmt_tf.summary", "gnmt_tf.cli.summary", "Print a config's model."),
    CommandEntry("gnmt-export", "export", "export.__main__", "Export a trained model."),
    CommandEntry("gnmt-serve", "serving.server", "serving.server",
                 "Serve exported GNMT SavedModels over TF Serving's gRPC and REST APIs (a stand-in for "
                 "tensorflow_model_server; same flags for what it supports)."),
    CommandEntry("gnmt-client", "serving.client", "serving.client",
                 "Translate stdin (one sentence per line) through TF Serving's REST or gRPC API."),
)


class UnlistedCommand(LookupError):
    """A module asks for a command that :data:`COMMANDS` does not list."""


def console_scripts() -> List[str]:
    """setup.py's ``console_scripts`` entry points: ``gnmt-translate = gnmt_tf.cli.translate:main``, ..."""
    return [f"{entry.script} = {entry.defined_in}:main" for entry in COMMANDS]


def defined_in(module: str) -> CommandEntry:
    """The entry of the command that ``module`` defines: a command module passes its own ``__spec__.name``
    (which, unlike ``__name__``, is its name under ``python -m`` too)."""
    return _find("defined_in", module)


def run_by(python_m: str) -> CommandEntry:
    """The entry of the command that ``python -m PYTHON_M`` runs."""
    return _find("python_m", python_m)


def load_command(python_m: str):
    """The :class:`~gnmt_tf.cli.scaffold.Command` that ``python -m PYTHON_M`` runs, its module imported."""
    return importlib.import_module(run_by(python_m).defined_in).COMMAND


def _find(field: str, value: str) -> CommandEntry:
    for entry in COMMANDS:
        if getattr(entry, field) == value:
            return entry
    raise UnlistedCommand(f"gnmt_tf/cli/commands.py lists no command whose {field} is {value!r}")
