"""What every command line shares: a quiet TensorFlow start and the ``--verbose`` flag.

TensorFlow's C++ side prints its start-up lines (CUDA libraries not found, cuInit
failing on a machine without a GPU, the CPU features it was built for) through absl
before it reads its own log level, ``TF_CPP_MIN_LOG_LEVEL``, so setting that variable
does not hide them; on a CPU machine they are a screen of noise before any line of
ours. :func:`start_tensorflow` imports TensorFlow and initialises its devices with
file descriptor 2 pointed at a temporary file, and shows what was captured only if
the start fails. ``--verbose``, or a ``TF_CPP_MIN_LOG_LEVEL`` the user set, shows
everything, as TensorFlow prints it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

LOG_LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"


def add_verbose_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--verbose", action="store_true",
        help=f"also show TensorFlow's own start-up and log lines (hidden by default; setting "
        f"{LOG_LEVEL_VARIABLE} shows them too)",
    )


def start_tensorflow(verbose: bool = False) -> None:
    """Import TensorFlow, tensorflow-text and tf-keras, hiding their start-up lines unless ``verbose``.

    Call it once, first thing after parsing the arguments: the lines are printed at the
    first import and at the first device query, which is why both happen here.
    """
    if verbose or LOG_LEVEL_VARIABLE in os.environ:
        import tensorflow  # noqa: F401  (its lines go where TensorFlow sends them)

        return
    os.environ[LOG_LEVEL_VARIABLE] = "2"  # warnings and errors of later C++ code, no info lines
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
