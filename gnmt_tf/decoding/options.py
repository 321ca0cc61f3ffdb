"""The one rule for the per-request beam search options: ``alpha`` and ``beta`` (eq. 14's length
normalization and coverage penalty strengths) and ``beamsize`` (section 7's pruning margin).

Each must be a finite float32 >= 0. Every entry point applies it before a search starts: the
config (``decoding.*``), the command lines (``--alpha``, ``--beta``, ``--beamsize``), the Python
:class:`~gnmt_tf.inference.translator.Translator`, the serving client and the local server call
:func:`search_option_problem` / :func:`check_search_option` in Python; the exported signatures check
the same rule in the graph with :func:`assert_search_options`, its TensorFlow twin below, so that
TF Serving itself refuses a bad request (``INVALID_ARGUMENT``). Both twins write the same message::

    alpha must be a finite float32 >= 0, got nan
    beamsize must be a finite float32 >= 0, got -5 (1e9 never prunes)

Why: a negative alpha rewards length, a negative beta rewards leaving source words uncovered and a
negative beamsize prunes every token, so the search answers with nothing (score -inf); a NaN or
infinite alpha or beta makes every eq. 14 score NaN or infinite, so the "best" translation is
arbitrary. Every option ends up a float32 scalar, so a value beyond float32's range (3.4e38) is
infinite there and refused here already.

``beamsize`` 0 is allowed: both pruning rules then keep only what ties with the best (each
hypothesis expands only its most probable tokens; a live hypothesis scoring below the best finished
one is dropped). No pruning is a large finite margin, :data:`NO_PRUNING` = 1e9: beam scores are log
probabilities (about -25 per token at worst for a realistic model), so no token and no hypothesis
ever falls 1e9 below the best. ``inf`` is refused like any non-finite value.

This module imports TensorFlow only inside :func:`assert_search_options`, so that the command
lines, the config and the REST client can check options without loading it.
"""

from __future__ import annotations

import argparse
import math
import struct
from typing import Callable, Dict, Optional

SEARCH_OPTIONS = ("alpha", "beta", "beamsize")
NO_PRUNING = 1e9  # the beamsize that never prunes: see the module docstring
FLOAT32_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]  # 3.4028234663852886e38
_HINTS = {"beamsize": " (1e9 never prunes)"}


def no_pruning() -> float:
    """The ``beamsize`` that disables both pruning rules (a finite margin no score falls behind)."""
    return NO_PRUNING


def _problem_template(name: str) -> str:
    """What a bad value of ``name`` is told, with ``{}`` where the value goes (tf.strings.format's placeholder)."""
    return "must be a finite float32 >= 0, got {}" + _HINTS.get(name, "")


def _float32_text(value: float) -> str:
    """``value`` as TensorFlow prints a float32 (tensorflow's FloatToBuffer: %.6g if that reads back as
    the same float32, else %.9g), so that both twins write the same message; beyond float32's range,
    the value as given."""
    if math.isnan(value) or abs(value) > FLOAT32_MAX:
        return f"{value:g}"
    as_float32 = struct.unpack("<f", struct.pack("<f", value))[0]
    short = f"{as_float32:.6g}"
    if struct.pack("<f", float(short)) == struct.pack("<f", as_float32):
        return short
    return f"{as_float32:.9g}"


# ---------------------------------------------------------------------------------- the Python twin
def search_option_problem(name: str, value) -> Optional[str]:
    """What is wrong with ``value`` for the option ``name`` ("must be ..., got ..."), or None if it is good.

    Raises TypeError if ``value`` is not a real number (a bool or a string is not one).
    """
    if isinstance(value, (bool, str, bytes)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    value = float(value)
    # The graph twin's condition: is_finite(float32 value) and value >= 0.
    if math.isfinite(value) and abs(value) <= FLOAT32_MAX and value >= 0:
        return None
    return _problem_template(name).format(_float32_text(value))


def check_search_option(name: str, value) -> float:
    """``value`` as a float if it follows the rule, else ValueError("<name> must be ..., got ...")."""
    problem = search_option_problem(name, value)
    if problem is not None:
        raise ValueError(f"{name} {problem}")
    return float(value)


def search_option_argument(name: str) -> Callable[[str], float]:
    """An argparse ``type`` for the option ``name``: a bad value is a usage error (exit 2),
    "argument --<name>: must be a finite float32 >= 0, got inf"."""

    def parse(text: str) -> float:
        value = float(text)  # not a number: argparse's own "invalid float value: 'x'"
        problem = search_option_problem(name, value)
        if problem is not None:
            raise argparse.ArgumentTypeError(problem)
        return value

    parse.__name__ = "float"  # the word argparse uses in "invalid float value"
    return parse


# ---------------------------------------------------------------------------------- the TensorFlow twin
def assert_search_options(**options) -> Dict[str, "object"]:
    """The rule of :func:`search_option_problem` in the graph: each option (a float32 scalar tensor)
    returned behind an Assert op that raises ``InvalidArgumentError`` ("assertion failed: [<name> must
    be a finite float32 >= 0, got <value>]") before anything computed from it runs.

    The assertions run in the order given (each waits for the previous one), so that the first bad
    option is the one reported, as in Python. Keep this condition and :func:`search_option_problem`'s
    the same: in float32, "finite" is "|value| <= FLOAT32_MAX".
    """
    import tensorflow as tf

    checked, previous = {}, []
    for name, value in options.items():
        if name not in SEARCH_OPTIONS:
            raise ValueError(f"unknown search option {name!r} (known: {', '.join(SEARCH_OPTIONS)})")
        value = tf.convert_to_tensor(value, tf.float32)
        with tf.control_dependencies(previous):
            valid = tf.logical_and(tf.math.is_finite(value), value >= 0.0)
            message = tf.strings.format(f"{name} {_problem_template(name)}", value)
            previous = [tf.debugging.Assert(valid, [message], name=f"check_{name}")]
        with tf.control_dependencies(previous):
            checked[name] = tf.identity(value, name=name)
    return checked
