"""The rule for alpha, beta and beamsize (finite float32 >= 0): its Python twin, its TensorFlow twin, and
that both refuse the same values with the same message."""

import argparse
import math
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import ROOT

from gnmt_tf.decoding.options import (
    NO_PRUNING,
    SEARCH_OPTIONS,
    assert_search_options,
    check_search_option,
    no_pruning,
    search_option_argument,
    search_option_problem,
)

FLOAT32_MAX = float(np.finfo(np.float32).max)
GOOD = [0.0, 0.2, 1.0, 3.0, 1e-30, NO_PRUNING, FLOAT32_MAX]
# (value, how the message writes it): TensorFlow's float32 text, or the value itself beyond float32's range
BAD = [(math.nan, "nan"), (math.inf, "inf"), (-math.inf, "-inf"), (float("1e400"), "inf"), (-1.0, "-1"),
       (-0.5, "-0.5"), (-5.0, "-5"), (-1e-7, "-1e-07"), (-123456.789, "-123456.789"), (1e39, "1e+39"),
       (2 * FLOAT32_MAX, "6.80565e+38")]


def test_good_values_pass_and_come_back_as_floats():
    for name in SEARCH_OPTIONS:
        for value in GOOD + [np.float32(0.2), 2, np.array(0.5)]:
            assert search_option_problem(name, value) is None
            assert check_search_option(name, value) == float(value)
    assert no_pruning() == NO_PRUNING == 1e9


@pytest.mark.parametrize("value, text", BAD, ids=[text for _, text in BAD])
def test_bad_values_are_refused_with_the_value_as_tensorflow_writes_it(value, text):
    assert search_option_problem("alpha", value) == f"must be a finite float32 >= 0, got {text}"
    with pytest.raises(ValueError) as error:
        check_search_option("beta", value)
    assert str(error.value) == f"beta must be a finite float32 >= 0, got {text}"
    assert search_option_problem("beamsize", value) == (
        f"must be a finite float32 >= 0, got {text} (1e9 never prunes)")


def test_a_value_that_is_not_a_number_is_a_type_error():
    for value in (True, "0.2", b"1"):
        with pytest.raises(TypeError, match="alpha must be a number"):
            search_option_problem("alpha", value)


def test_the_argparse_type_makes_a_usage_error_naming_the_flag(capsys):
    parser = argparse.ArgumentParser(prog="p")
    parser.add_argument("--beamsize", type=search_option_argument("beamsize"))
    assert parser.parse_args(["--beamsize", "0"]).beamsize == 0.0  # 0: keep only what ties with the best
    assert parser.parse_args(["--beamsize", "1e9"]).beamsize == 1e9
    for text, expected in (("inf", "argument --beamsize: must be a finite float32 >= 0, got inf (1e9 never prunes)"),
                           ("-5", "argument --beamsize: must be a finite float32 >= 0, got -5 (1e9 never prunes)"),
                           ("abc", "argument --beamsize: invalid float value: 'abc'")):
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args(["--beamsize", text])
        assert exit_.value.code == 2
        assert expected in capsys.readouterr().err


@tf.function(input_signature=[tf.TensorSpec([], tf.float32)] * 3)
def _checked_sum(alpha, beta, beamsize):
    checked = assert_search_options(alpha=alpha, beta=beta, beamsize=beamsize)
    return checked["alpha"] + checked["beta"] + checked["beamsize"]


def test_the_graph_twin_refuses_what_the_python_twin_refuses_with_the_same_message():
    for value in GOOD:
        assert float(_checked_sum(tf.constant(value), tf.constant(0.0), tf.constant(0.0))) == float(np.float32(value))
    for value, _ in BAD:
        as_float32 = float(np.float32(value)) if abs(value) <= FLOAT32_MAX or math.isnan(value) else \
            math.copysign(math.inf, value)  # what a float32 input holds
        for position, name in enumerate(SEARCH_OPTIONS):
            options = [tf.constant(0.2)] * 3
            options[position] = tf.constant(as_float32)
            with pytest.raises(tf.errors.InvalidArgumentError) as error:
                _checked_sum(*options)
            python_message = str(pytest.raises(ValueError, check_search_option, name, as_float32).value)
            assert f"assertion failed: [{python_message}]" in error.value.message


def test_the_first_bad_option_is_the_one_reported():
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        _checked_sum(tf.constant(-1.0), tf.constant(math.nan), tf.constant(-5.0))
    assert "[alpha must be a finite float32 >= 0, got -1]" in error.value.message
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        _checked_sum(tf.constant(0.0), tf.constant(math.nan), tf.constant(-5.0))
    assert "[beta must be a finite float32 >= 0, got nan]" in error.value.message


def test_the_rule_loads_without_tensorflow():
    """The command lines, the config and the REST client check options before (or without) TensorFlow."""
    code = ("import sys\n"
            "import gnmt_tf.config, gnmt_tf.decoding.options, gnmt_tf.cli.common\n"
            "print('tensorflow' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
