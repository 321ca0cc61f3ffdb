"""The on-disk layout of a trained model: one self-contained directory.

    MODEL_DIR/
      config.yaml        the whole config, with the vocabulary size actually learned
      wordpieces.txt     the shared wordpiece vocabulary (gnmt_tf.tokenizer)
      checkpoints/       tf.train.CheckpointManager: the last N checkpoints (model + optimizer)
      best/              the checkpoint with the best dev BLEU so far
      logs/train, logs/dev   TensorBoard summaries

``load_model_dir`` gives back the model, the tokenizer and the config; nothing
else (no training data, no command-line flags) is needed to translate.
"""

from __future__ import annotations

import os
from typing import Optional, Tuple

import tensorflow as tf

from gnmt_tf.config import GNMTConfig, load_config
from gnmt_tf.model import GNMT
from gnmt_tf.tokenizer import WordpieceTokenizer

CONFIG_FILE = "config.yaml"
CHECKPOINT_DIR = "checkpoints"
BEST_DIR = "best"
LOG_DIR = "logs"


class ModelDirError(ValueError):
    """A model directory is missing, incomplete or inconsistent."""


def checkpoint_dir(model_dir: str) -> str:
    return os.path.join(model_dir, CHECKPOINT_DIR)


def best_dir(model_dir: str) -> str:
    return os.path.join(model_dir, BEST_DIR)


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
    """Path prefix of the best (falling back to the latest) or the latest checkpoint."""
    if which not in ("best", "latest"):
        raise ValueError(f"which must be 'best' or 'latest', got {which!r}")
    candidates = [best_dir(model_dir), checkpoint_dir(model_dir)] if which == "best" else [checkpoint_dir(model_dir)]
    for directory in candidates:
        path = tf.train.latest_checkpoint(directory) if os.path.isdir(directory) else None
        if path:
            return path
    return None


def load_model_dir(model_dir: str, which: str = "best") -> Tuple[GNMT, WordpieceTokenizer, GNMTConfig]:
    """The trained model (delta at its inference value), its tokenizer and its config."""
    config, tokenizer = load_metadata(model_dir)
    path = find_checkpoint(model_dir, which)
    if path is None:
        raise ModelDirError(f"{model_dir} has no checkpoint yet (looked in {CHECKPOINT_DIR}/ and {BEST_DIR}/)")
    model = GNMT(config.model)
    model.build()
    tf.train.Checkpoint(model=model).restore(path).expect_partial()
    model.set_clip_delta(config.model.clip_delta)  # section 6: delta is fixed at 1.0 at inference
    return model, tokenizer, config
