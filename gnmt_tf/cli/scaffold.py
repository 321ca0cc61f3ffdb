"""How every command line runs: its names, its parser, a quiet TensorFlow start and its exit statuses.

Each command (train, translate, evaluate, score, average, shortlist, report, summary, export, the
serving server and client) is one :class:`Command`: its names (its entry in
:mod:`gnmt_tf.cli.commands`: the module ``python -m`` runs and the console script of the same command,
one script per command with a common prefix, ``gnmt-train``, ``gnmt-translate``, ..., as fairseq ships
``fairseq-train`` and OpenNMT-tf ``onmt-main``), its help, its arguments and its body.
:meth:`Command.main` parses the arguments, runs the command's usage checks, starts TensorFlow quietly
and runs the body.

The usage line names the command as it was started, ``gnmt-translate`` or ``python -m
gnmt_tf.translate`` (argparse's own default names the program that runs, too); the rest of the help
is the same either way.

Exit statuses: 0 done; 2 the command line, or a config, data file, model directory or other file it
names, cannot be used (argparse's usage errors, and :func:`user_errors` as one ``error: ...`` line on
stderr); any other status is the command's own (``Command.exit_statuses``: for train 1 = the
training diverged, 3 = a worker was lost).

TensorFlow's C++ side prints its start-up lines (CUDA libraries not found, cuInit failing on a
machine without a GPU, the CPU features it was built for) through absl before it reads its own log
level, ``TF_CPP_MIN_LOG_LEVEL``, so setting that variable does not hide them; on a CPU machine they
are a screen of noise before any line of ours. :func:`start_tensorflow` imports TensorFlow and
initialises its devices with file descriptor 2 pointed at a temporary file, and shows what was
captured only if the start fails. ``--verbose``, or a ``TF_CPP_MIN_LOG_LEVEL`` the user set, shows
everything, as TensorFlow prints it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Tuple, Type

from gnmt_tf.cli.commands import CommandEntry
from gnmt_tf.config import ConfigError
from gnmt_tf.data.readers import DataError
from gnmt_tf.model_files import ModelDirError

LOG_LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
LEGACY_KERAS_VARIABLE = "TF_USE_LEGACY_KERAS"
USAGE_STATUS = 2  # argparse's status for a usage error


class UsageError(ValueError):
    """The command line asks for something that cannot be done; nothing was attempted."""


def user_errors() -> Tuple[Type[BaseException], ...]:
    """The project's errors that tell the user what to change: exit status 2 with one ``error:`` line.

    OSError: a file or directory named on the command line cannot be read or written.
    """
    return UsageError, ConfigError, DataError, ModelDirError, OSError


@dataclass(frozen=True)
class Command:
    """One command line, run as ``python -m MODULE`` or as the console script ``SCRIPT``."""

    names: CommandEntry  # its console script and what python -m runs (gnmt_tf/cli/commands.py)
    # The help, as a docstring: a summary line (not shown), a paragraph shown above the options, and
    # paragraphs shown below them. A command module's docstring is its help.
    doc: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]  # the command's work; returns the exit status
    examples: Sequence[str] = ()  # arguments, shown after the command's name below the help
    # Usage checks that need no TensorFlow (parser.error, or raise UsageError), run before it starts.
    check: Optional[Callable[[argparse.ArgumentParser, argparse.Namespace], None]] = None
    starts_tensorflow: bool = True  # False: ``run`` starts it itself, if and when it needs it
    # The command's own errors and their exit statuses, beside user_errors(); a function, so that their
    # modules (which may load TensorFlow) are imported only when such an error is raised.
    exit_statuses: Callable[[], Dict[Type[BaseException], int]] = dict

    @property
    def prog(self) -> str:
        """The name in the usage line: the console script if that is what runs, else ``python -m MODULE``."""
        started = os.path.splitext(os.path.basename(sys.argv[0]))[0]  # gnmt-translate(.exe on Windows)
        script = self.names.script
        return script if started == script else f"python -m {self.names.python_m}"

    def build_parser(self, prog: Optional[str] = None) -> argparse.ArgumentParser:
        """The command's parser; ``prog`` names the command in its usage and examples (default: ``prog``)."""
        prog = prog or self.prog
        _, description, *below = self.doc.strip().split("\n\n")
        epilog = "\n\n".join(below)
        if self.examples:
            shown = "\n".join(f"  {prog} {example}".rstrip() for example in self.examples)
            epilog = f"{epilog}\n\nexamples:\n{shown}" if epilog else f"examples:\n{shown}"
        parser = argparse.ArgumentParser(
            prog=prog, description=description, epilog=epilog or None,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        self.add_arguments(parser)
        add_verbose_argument(parser)
        return parser

    def main(self, argv: Optional[Sequence[str]] = None) -> int:
        """Run the command on ``argv`` (default: the process's arguments) and return its exit status.

        argparse's usage errors and ``--help`` raise SystemExit, as argparse does.
        """
        parser = self.build_parser()
        args = parser.parse_args(argv)
        try:
            if self.check is not None:
                self.check(parser, args)
            if self.starts_tensorflow:
                start_tensorflow(args.verbose)
            return self.run(args)
        except Exception as error:  # noqa: BLE001  (re-raised unless it has an exit status)
            status = self.exit_status(error)
            if status is None:
                raise
            print(f"error: {error}", file=sys.stderr)
            return status

    def exit_status(self, error: BaseException) -> Optional[int]:
        """The exit status ``error`` ends the command with; None for a bug (its traceback is shown)."""
        if isinstance(error, user_errors()):
            return USAGE_STATUS
        for kind, status in self.exit_statuses().items():
            if isinstance(error, kind):
                return status
        return None

    def run_if_main(self, name: str) -> None:
        """``COMMAND.run_if_main(__name__)``: if ``python -m`` runs this module, run the command and exit."""
        if name == "__main__":
            sys.exit(self.main())


def add_verbose_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--verbose", action="store_true",
        help=f"also show TensorFlow's own start-up and log lines (CUDA and CPU-feature notices, hidden by "
        f"default; setting {LOG_LEVEL_VARIABLE} shows them too)",
    )


def start_tensorflow(verbose: bool = False) -> None:
    """Import TensorFlow, tensorflow-text and tf-keras, hiding their start-up lines unless ``verbose``.

    Call it once, first thing after parsing the arguments: the lines are printed at the
    first import and at the first device query, which is why both happen here.
    """
    # tf.keras as tf-keras, the Keras this package is built on: TensorFlow then does not import Keras 3
    # at start-up, which it would for nothing. Importing
    # tensorflow-model-optimization sets the same.
    os.environ.setdefault(LEGACY_KERAS_VARIABLE, "1")
    if verbose or LOG_LEVEL_VARIABLE in os.environ:
        import tensorflow  # noqa: F401  (its lines go where TensorFlow sends them)

        return
    # Nor the C++ side's later error-level lines: they are notices, not failures (an error reaches the
    # command as a Python exception with its message). On a CPU without AVX-512 the first training step
    # logs "oneDNN supports DT_BOOL only on platforms with AVX-512. Falling back to the default Eigen-based
    # implementation" as an error, mid-run; --verbose shows it.
    os.environ[LOG_LEVEL_VARIABLE] = "3"
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow as tf
            import tensorflow_text  # noqa: F401  (registers the wordpiece ops)
            import tf_keras  # noqa: F401

            # Finds the platforms (the cuInit line comes here) without creating the logical devices,
            # which --logical-cpus may still split.
            tf.config.list_physical_devices()
        except BaseException:
            os.dup2(saved, 2)
            captured.seek(0)
            sys.stderr.write(captured.read().decode("utf-8", errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    tf.get_logger().setLevel("ERROR")  # TensorFlow's Python-side deprecation and retracing notices
