"""The command lines show only their own output: TensorFlow's start-up lines are hidden unless asked for."""

import builtins
import os
import sys

import pytest

from helpers import run_side_by_side

# Lines TensorFlow's C++ side prints at start-up: absl's pre-init notice and glog-style records.
TENSORFLOW_LINE_STARTS = ("WARNING: All log messages before absl", "I0000", "W0000", "E0000")
# A user's environment: no log level set, and not the TF_USE_LEGACY_KERAS that importing
# tensorflow-model-optimization sets in a test process that ran a QAT test before this one.
USER_ENV = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "TF_USE_LEGACY_KERAS")}


def _tensorflow_lines(text):
    return [line for line in text.splitlines() if line.startswith(TENSORFLOW_LINE_STARTS)]


def test_a_command_prints_only_its_own_lines_unless_verbose():
    env = USER_ENV
    command = [sys.executable, "-m", "gnmt_tf.summary", "--config", "tiny"]
    quiet, verbose = run_side_by_side((command, None), (command + ["--verbose"], None), env=env, timeout=300)
    for result in (quiet, verbose):
        assert result.returncode == 0, result.stderr[-2000:]
        assert "trainable parameters:" in result.stdout
    assert _tensorflow_lines(quiet.stderr) == [], quiet.stderr
    if not _tensorflow_lines(verbose.stderr):
        pytest.skip("this TensorFlow build prints no start-up lines on this machine: nothing to hide")


def test_a_log_level_the_user_set_is_left_to_tensorflow(monkeypatch):
    """A TF_CPP_MIN_LOG_LEVEL in the user's environment is theirs: the start neither captures TensorFlow's
    lines (as --verbose) nor overrides the level with its own "3". In this process, where TensorFlow
    is already imported; what TensorFlow then prints at that level is shown by --verbose above."""
    from gnmt_tf.cli.scaffold import start_tensorflow

    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    start_tensorflow()
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0"
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL")
    start_tensorflow()  # the user set none: the quiet start sets its own
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "3"


def test_a_failing_start_shows_what_tensorflow_printed(monkeypatch, capsys):
    """If the import fails, the captured lines are the diagnosis: they are shown, then the error.

    start_tensorflow runs in this process (its capture of file descriptor 2 is the subject, not a
    fresh interpreter), with a tensorflow_text import that prints there and fails.
    """
    from gnmt_tf.cli.scaffold import start_tensorflow

    real_import = builtins.__import__

    def failing(name, *args, **kwargs):
        if name == "tensorflow_text":
            os.write(2, b"captured diagnosis\n")  # where TensorFlow's C++ side prints
            raise ImportError("no tensorflow_text here")
        return real_import(name, *args, **kwargs)

    for name in ("TF_CPP_MIN_LOG_LEVEL", "TF_USE_LEGACY_KERAS"):  # a user's environment; restored after
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(builtins, "__import__", failing)
    with pytest.raises(ImportError, match="no tensorflow_text here"):
        start_tensorflow()
    monkeypatch.setattr(builtins, "__import__", real_import)
    assert "captured diagnosis" in capsys.readouterr().err
