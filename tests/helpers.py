"""Small shared helpers for the tests."""

import importlib.util
import os
import sys

import numpy as np

from gnmt_tf.config import load_config
from gnmt_tf.vocab import BOS_ID, EOS_ID, PAD_ID


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout


# The tiny config's sizes at the least depth that still translates: the encoder's bi-directional layer
# alone, and two decoder layers (the attention context reaches the softmax through the layer above the
# bottom one, fig. 1). For the tests of what runs around a model (training runs, resuming, signals,
# checkpoints, averaging), which its depth does not change: its first training step (tracing) takes
# about two thirds of the 3+3 layers' time. The residual layers are tested on the 3+3 layers
# (tests/models, the fixture model).
SHALLOW = {"model.encoder_layers": 1, "model.decoder_layers": 2}
SHALLOW_CLI_ARGS = [word for key, value in SHALLOW.items() for word in ("--set", f"{key}={value}")]
SHALLOW_MODEL = {key.split(".", 1)[1]: value for key, value in SHALLOW.items()}  # for tiny_model_config


def tiny_model_config(**overrides):
    """The shipped tiny config's model section, with field overrides."""
    return load_config("tiny", overrides={f"model.{k}": v for k, v in overrides.items()}).model


def random_ids(rng, batch, length, vocab_size):
    """Non-special token ids (>= 4) of shape [batch, length]."""
    return rng.integers(4, vocab_size, size=(batch, length)).astype(np.int32)


def copy_task(rng, n, vocab_size, min_len=2, max_len=6):
    """Source = random tokens + EOS; target is the same sequence. Right-padded int32 arrays."""
    lengths = rng.integers(min_len, max_len + 1, size=n)
    width = max_len + 1
    source = np.full((n, width), PAD_ID, np.int32)
    target_in = np.full((n, width), PAD_ID, np.int32)
    target_out = np.full((n, width), PAD_ID, np.int32)
    for row, length in enumerate(lengths):
        tokens = rng.integers(4, vocab_size, size=length)
        source[row, : length + 1] = np.append(tokens, EOS_ID)
        target_in[row, : length + 1] = np.insert(tokens, 0, BOS_ID)
        target_out[row, : length + 1] = np.append(tokens, EOS_ID)
    return source, target_in, target_out


ENGLISH_NUMBERS = "zero one two three four five six seven eight nine".split()
FRENCH_NUMBERS = "zéro un deux trois quatre cinq six sept huit neuf".split()


def number_word_pairs(n, seed=0, min_len=2, max_len=5):
    """A small synthetic translation task: English digit words -> French digit words.

    "three one four" -> "trois un quatre". Word-for-word, so a tiny model can learn it
    in a minute, but it still needs attention to find which source word to translate.
    """
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(n):
        digits = rng.integers(0, 10, size=rng.integers(min_len, max_len + 1))
        pairs.append((" ".join(ENGLISH_NUMBERS[d] for d in digits), " ".join(FRENCH_NUMBERS[d] for d in digits)))
    return pairs


def write_number_training_tsv(path):
    """The training pairs of the session's number model (tests/number_model.py) as a TSV file, for --train."""
    from number_model import number_training_pairs

    with open(path, "w", encoding="utf-8") as handle:
        for source, target in number_training_pairs():
            handle.write(f"{source}\t{target}\n")
    return str(path)


def run_side_by_side(*commands, env=None, timeout=300):
    """Run independent command lines at once; returns their CompletedProcess results in order.

    Each command is ``(argv, stdin_text_or_None)``. Every process is killed if it outlives
    ``timeout`` (the watchdog that keeps a hung child from hanging the suite).
    """
    import subprocess

    processes = [
        subprocess.Popen(argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for argv, stdin in commands
    ]
    results = []
    try:
        for process, (argv, stdin) in zip(processes, commands):
            stdout, stderr = process.communicate(input=stdin, timeout=timeout)
            results.append(subprocess.CompletedProcess(argv, process.returncode, stdout, stderr))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    return results


def run_in_process(argv, stdin=None):
    """Run ``[python, "-m", MODULE, *args]`` as ``MODULE.COMMAND.main(args)`` in this process.

    For command runs whose subject is the command's work, not the process (signals, start-up
    lines, a fresh interpreter): it spares a TensorFlow start (~6 s of CPU) per run. Returns a
    CompletedProcess with the exit status, stdout and stderr.
    """
    import contextlib
    import importlib
    import io
    import subprocess
    import sys

    module, args = argv[2], list(argv[3:])
    stdout, stderr = io.StringIO(), io.StringIO()
    saved_stdin = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO((stdin or "").encode("utf-8")), encoding="utf-8")
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                python_m = importlib.import_module(f"{module}.__main__" if module == "export" else module)
                code = python_m.COMMAND.main(args)
            except SystemExit as exit:  # argparse's usage errors
                code = exit.code
    finally:
        sys.stdin = saved_stdin
    return subprocess.CompletedProcess(argv, code, stdout.getvalue(), stderr.getvalue())


def run_each_in_process(*commands):
    """``(argv, stdin_text_or_None)`` commands, as for :func:`run_side_by_side`, each run in this process."""
    return [run_in_process(argv, stdin) for argv, stdin in commands]


def shortlist_excluding(vocab_size, excluded):
    """A hand-made vocabulary shortlist that allows every id but ``excluded``: each source piece's table row
    holds all the others, and the excluded ids rank last in frequency (``frequent`` 0), so that no
    ``minimum`` up to ``vocab_size - 3 - len(excluded)`` brings them back."""
    from gnmt_tf.data.shortlist import Shortlist

    kept = [i for i in range(vocab_size) if i not in set(excluded)]
    table = np.tile(np.array(kept, np.int32), (vocab_size, 1))
    special = {PAD_ID, BOS_ID, EOS_ID}
    ranking = [i for i in kept if i not in special] + sorted(set(excluded) - special)
    return Shortlist(table=table, probabilities=np.full(table.shape, 1.0 / len(kept), np.float32),
                     ranking=np.array(ranking, np.int32), top_k=len(kept), frequent=0)


def load_benchmark(name):
    """The script ``benchmarks/<name>.py`` as a module (the benchmarks are scripts, not a package).

    Its folder goes on ``sys.path`` as running the script puts it there: the scripts import
    each other (``harness``, ``quality_benchmark``) by name.
    """
    folder = os.path.join(ROOT, "benchmarks")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "benchmarks", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def package_metadata():
    """What setup.py gives setup() (name, extras, entry points, ...), as setuptools reads it before any command."""
    import setuptools  # noqa: F401  (makes ``distutils`` setuptools' own, also where Python has none)
    from distutils.core import run_setup

    return run_setup(os.path.join(ROOT, "setup.py"), stop_after="init")


def random_gnmt(config, seed=0, eos_bias=-2.0):
    """A built GNMT of ``config.model`` with uniform(-1, 1) weights (larger than training's init, so that
    outputs vary with the input) and EOS made less likely, so that translations are not all empty."""
    import tensorflow as tf

    from gnmt_tf.models.gnmt import GNMT

    model = GNMT(config.model)
    model.build()
    rng = np.random.default_rng(seed)
    for weight in model.trainable_weights:
        weight.assign(rng.uniform(-1.0, 1.0, weight.shape).astype(np.float32))
    bias = model.decoder.softmax_projection.bias
    bias.assign(tf.tensor_scatter_nd_update(bias, [[EOS_ID]], [eos_bias]))
    return model


SOFTWARE_WORDS = "open save file folder the a of to in new delete copy name user".split()


def masked_software_text(seed=0, count=200):
    """Masked software-message-like sentences (words and a "%s"), to learn a vocabulary with slot tokens."""
    from gnmt_tf.localization import placeholders

    rng = np.random.default_rng(seed)
    sentences = [" ".join(rng.choice(SOFTWARE_WORDS, size=rng.integers(1, 7))) + " %s" for _ in range(count)]
    return [placeholders.mask(sentence).text for sentence in sentences]


def slot_vocabulary():
    """A small wordpiece vocabulary learned from :func:`masked_software_text`, the slot tokens reserved."""
    from gnmt_tf.data.tokenizer import WordpieceTokenizer
    from gnmt_tf.localization.placeholders import SLOT_TOKENS

    return WordpieceTokenizer.learn(masked_software_text(), vocab_size=140, max_characters=40,
                                    reserved_characters=SLOT_TOKENS)
