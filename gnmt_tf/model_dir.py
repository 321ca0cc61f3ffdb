"""The on-disk layout of a trained model: one self-contained directory.

    MODEL_DIR/
      config.yaml        the whole config, with the vocabulary size actually learned
      wordpieces.txt     the shared wordpiece vocabulary (gnmt_tf.data.tokenizer)
      checkpoints/       tf.train.CheckpointManager: the last N checkpoints (model + optimizer)
      best/              the checkpoint with the best dev BLEU so far
      averaged/          the mean of the last N checkpoints (python -m gnmt_tf.average)
      logs/train, logs/dev   TensorBoard summaries

``load_model_dir`` gives back the model, the tokenizer and the config; nothing
else (no training data, no command-line flags) is needed to translate.

Every checkpoint holds the delta it was trained at (the model's ``clip_delta``
variable, eq. 10), and a model is always used at that delta: a run stopped
before its anneal reached ``model.clip_delta`` is decoded at its last delta,
with a warning, because clipping it harder than it was trained for costs half
its BLEU.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Optional, Tuple

import tensorflow as tf

from gnmt_tf.config import GNMTConfig, load_config
from gnmt_tf.models.gnmt import GNMT
from gnmt_tf.data.tokenizer import WordpieceTokenizer

CONFIG_FILE = "config.yaml"
CHECKPOINT_DIR = "checkpoints"
BEST_DIR = "best"
AVERAGED_DIR = "averaged"
CHECKPOINT_CHOICES = ("best", "latest", "averaged")
LOG_DIR = "logs"


class ModelDirError(ValueError):
    """A model directory is missing, incomplete or inconsistent."""


def checkpoint_dir(model_dir: str) -> str:
    return os.path.join(model_dir, CHECKPOINT_DIR)


def best_dir(model_dir: str) -> str:
    return os.path.join(model_dir, BEST_DIR)


def averaged_dir(model_dir: str) -> str:
    return os.path.join(model_dir, AVERAGED_DIR)


def has_config(model_dir: str) -> bool:
    return os.path.exists(os.path.join(model_dir, CONFIG_FILE))


def save_metadata(model_dir: str, config: GNMTConfig, tokenizer: WordpieceTokenizer) -> None:
    """Write config.yaml and wordpieces.txt (each atomically)."""
    os.makedirs(model_dir, exist_ok=True)
    tokenizer.save(model_dir)
    config.save(os.path.join(model_dir, CONFIG_FILE))


def load_metadata(model_dir: str) -> Tuple[GNMTConfig, WordpieceTokenizer]:
    if not os.path.isdir(model_dir):
        raise ModelDirError(f"model directory not found: {model_dir}")
    if not has_config(model_dir):
        raise ModelDirError(f"{model_dir} is not a gnmt_tf model directory: it has no {CONFIG_FILE}")
    config = load_config(os.path.join(model_dir, CONFIG_FILE))
    tokenizer = WordpieceTokenizer.load(model_dir)
    if tokenizer.vocab_size != config.model.vocab_size:
        raise ModelDirError(
            f"{model_dir}: the vocabulary has {tokenizer.vocab_size} wordpieces but the config says "
            f"model.vocab_size = {config.model.vocab_size}"
        )
    return config, tokenizer


def find_checkpoint(model_dir: str, which: str = "best") -> Optional[str]:
    """Path prefix of a checkpoint of ``model_dir``.

    ``which``: "best" (by dev BLEU; falling back to the latest), "latest", or
    "averaged" (written by ``python -m gnmt_tf.average``; no fallback).
    """
    if which not in CHECKPOINT_CHOICES:
        raise ValueError(f"which must be one of {', '.join(CHECKPOINT_CHOICES)}, got {which!r}")
    candidates = {
        "best": [best_dir(model_dir), checkpoint_dir(model_dir)],
        "latest": [checkpoint_dir(model_dir)],
        "averaged": [averaged_dir(model_dir)],
    }[which]
    for directory in candidates:
        path = tf.train.latest_checkpoint(directory) if os.path.isdir(directory) else None
        if path:
            return path
    return None


def anneal_finished(trained_delta: float, final_delta: float) -> bool:
    """Whether a checkpoint trained at ``trained_delta`` had reached the final delta (float32 slack)."""
    return trained_delta <= final_delta * (1 + 1e-6)


def unfinished_anneal_message(checkpoint: str, trained_delta: float, final_delta: float) -> Optional[str]:
    """What to tell a user whose checkpoint was saved before delta reached its final value."""
    if anneal_finished(trained_delta, final_delta):
        return None
    return (
        f"{checkpoint} was trained to delta = {trained_delta:.3g}, not the final {final_delta:g} "
        f"(training stopped before the delta anneal of section 6 ended); it is used at "
        f"delta = {trained_delta:.3g}, the value it was trained at. Train longer (or lower "
        f"training.delta_anneal_steps) for a delta = {final_delta:g} model"
    )


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def load_model_dir(
    model_dir: str, which: str = "best", warn: Callable[[str], None] = _warn
) -> Tuple[GNMT, WordpieceTokenizer, GNMTConfig]:
    """The trained model at the delta it was trained at, its tokenizer and its config.

    ``which`` is "best", "latest" or "averaged" (see :func:`find_checkpoint`). A
    checkpoint saved mid-anneal keeps its delta; ``warn`` is told so.
    """
    config, tokenizer = load_metadata(model_dir)
    path = find_checkpoint(model_dir, which)
    if path is None:
        if which == "averaged":
            raise ModelDirError(
                f"{model_dir} has no averaged checkpoint yet (looked in {AVERAGED_DIR}/; run python -m "
                f"gnmt_tf.cli.average --model-dir {model_dir} first)"
            )
        raise ModelDirError(f"{model_dir} has no checkpoint yet (looked in {CHECKPOINT_DIR}/ and {BEST_DIR}/)")
    model = build_model(config, path)
    message = unfinished_anneal_message(path, model_delta(model), config.model.clip_delta)
    if message:
        warn(message)
    return model, tokenizer, config


def build_model(config: GNMTConfig, checkpoint: Optional[str] = None) -> GNMT:
    """A built GNMT of ``config``, with the weights (and delta) of ``checkpoint`` if given."""
    model = GNMT(config.model)
    model.build()
    if checkpoint:
        tf.train.Checkpoint(model=model).restore(checkpoint).expect_partial()
    return model


def model_delta(model: GNMT) -> float:
    """The delta the model's weights are used at (eq. 10)."""
    return float(model.clip_delta.numpy())
