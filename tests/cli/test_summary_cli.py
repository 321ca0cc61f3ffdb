"""python -m gnmt_tf.summary: the parameter count it prints is the config's, counted by hand; its errors."""

import re
import sys

import pytest
from helpers import run_each_in_process

from gnmt_tf.config import load_config



def parameters_by_hand(model):
    """Trainable parameters of the GNMT a ModelConfig describes, from the paper's structure (section 3).

    An LSTM layer of eq. 11 reading ``n`` features has the four gates' input weights (n x 4u), their
    recurrent weights (u x 4u) and, in the 'standard' form only, their biases (4u). The encoder's
    bottom layer is a forward and a backward LSTM of ``bidirectional_units`` each (fig. 3); the
    layers above read the layer below (layer 2: the two directions concatenated); the top encoder
    output is what attention reads. The bottom decoder layer reads the target embedding (and with
    input feeding the last context); the layers above read the layer below and the context (fig. 1).
    The attention network of eq. 4 has W_q, W_k, the hidden bias and v; the softmax a kernel and a bias;
    source and target have an embedding table each. delta (eq. 10) is not trained.
    """
    units, vocab, attention_units = model.units, model.vocab_size, model.attention_units
    embedding = model.embedding_dim if model.embedding_dim is not None else units
    direction = model.bidirectional_units if model.bidirectional_units is not None else units // 2
    biases = model.cell == "standard"

    def lstm(inputs, width):
        return inputs * 4 * width + width * 4 * width + (4 * width if biases else 0)

    encoder_width = units if model.encoder_layers > 1 else 2 * direction
    encoder = 2 * lstm(embedding, direction) + sum(
        lstm(2 * direction if layer == 2 else units, units) for layer in range(2, model.encoder_layers + 1))
    decoder = lstm(embedding + (encoder_width if model.input_feeding else 0), units) + sum(
        lstm(units + encoder_width, units) for _ in range(2, model.decoder_layers + 1))
    attention = units * attention_units + encoder_width * attention_units + 2 * attention_units
    softmax = units * vocab + vocab
    return 2 * vocab * embedding + encoder + decoder + attention + softmax


def printed_count(stdout):
    [count] = re.findall(r"^trainable parameters: ([\d,]+)$", stdout, flags=re.M)
    return int(count.replace(",", ""))


# name: (--config, --set overrides); None: the default config
CASES = {
    "default": (None, {}),
    "tiny_variants": ("tiny", {"model.cell": "standard", "model.forget_bias": 1.0, "model.input_feeding": True,
                               "model.embedding_dim": 24, "model.bidirectional_units": 10, "model.encoder_layers": 1}),
    "on_paper": ("tiny", {"model.units": 4, "model.vocab_size": 5, "model.encoder_layers": 1,
                          "model.decoder_layers": 1, "model.input_feeding": True, "model.attention_units": 3}),
}
# The on_paper case counted by hand: embeddings 2*5*4 = 40; encoder: two directions of 2 units reading
# 4 features, 2*(4*8 + 2*8) = 96, 4 wide together; decoder bottom, reading the embedding and the fed
# 4-wide context: 8*16 + 4*16 = 192; attention 4*3 + 4*3 + 3 + 3 = 30; softmax 4*5 + 5 = 25.
ON_PAPER = 40 + 96 + 192 + 30 + 25


def summary_args(config, overrides):
    args = ["--config", config] if config else []
    for key, value in overrides.items():
        args += ["--set", f"{key}={str(value).lower() if isinstance(value, bool) else value}"]
    return args


def test_printed_parameter_count_is_the_count_by_hand():
    commands = [([sys.executable, "-m", "gnmt_tf.summary", *summary_args(*case)], None) for case in CASES.values()]
    results = dict(zip(CASES, run_each_in_process(*commands)))
    for name, result in results.items():
        assert result.returncode == 0, (name, result.stderr[-2000:])
        config, overrides = CASES[name]
        model = load_config(config or "small", overrides).model  # the default is the small config
        assert printed_count(result.stdout) == parameters_by_hand(model), name
        assert "encoder" in result.stdout and "decoder" in result.stdout  # the layer table precedes it
    assert printed_count(results["on_paper"].stdout) == ON_PAPER  # the count on paper, and so the rule above


@pytest.mark.parametrize("args, message", [
    (["--set", "model.units"], "--set 'model.units': expected section.field=value"),
    (["--set", "model.unitz=3"], "unknown key 'model.unitz'; did you mean 'units'?"),
    (["--set", "model.units=many"], "model.units: expected an integer, got 'many'"),
    (["--set", "model.units=33"], "model.units: must be even when bidirectional_units is null"),
    (["--config", "no_such_config"], "no config file or shipped config named 'no_such_config'"),
    (["--config", "{missing}"], "config file not found: {missing}"),
])
def test_bad_config_is_one_error_line_and_exit_2(args, message, tmp_path, capsys):
    from gnmt_tf.cli.summary import main

    missing = str(tmp_path / "missing.yaml")
    assert main([arg.format(missing=missing) for arg in args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith("error: ") and message.format(missing=missing) in line, line
