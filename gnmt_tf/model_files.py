"""The on-disk layout of a trained model: one self-contained directory.

    MODEL_DIR/
      config.yaml        the whole config, with the vocabulary size actually learned
      wordpieces.txt     the shared wordpiece vocabulary (gnmt_tf.data.tokenizer)
      dev.tsv            the dev split, source<TAB>target with whitespace folded (dev BLEU,
                         the export checks, the dev split of a fine-tune)
      shortlist.npz      optional: the vocabulary shortlist (python -m gnmt_tf.shortlist;
                         gnmt_tf.data.shortlist), with its top-k and frequent counts
      glossary.tsv       optional, written by you: terms every translation of the model must use
                         (gnmt_tf.localization.glossary; a model trained with placeholders)
      checkpoints/       tf.train.CheckpointManager: the last N checkpoints (model + optimizer);
                         in a multi-worker run also workertemp_<task>/, a worker's own
                         saves, deleted as soon as written
      best/              the shipped weights (the average, when the run keeps one) with the best
                         dev BLEU so far, model only, and best_bleu.txt: its BLEU, step and signature
      averaged/          the weight average at the last checkpoint (training.average_decay), or
                         the mean of the last N checkpoints (python -m gnmt_tf.average) with
                         sources.txt: the checkpoints it averages
      logs/train, logs/dev   TensorBoard summaries
      training_curves.png    the curves of logs/ (python -m gnmt_tf.report), once drawn

This module names every one of these files and is the one place that reads and
writes the dev split, the shortlist and best_bleu.txt. ``load_model_dir`` gives back the model,
the tokenizer and the config; nothing else (no training data, no command-line
flags) is needed to translate. :func:`build_model` is the one way to build a GNMT
of a config and restore a checkpoint into it.

Every checkpoint holds the delta it was trained at (the model's ``clip_delta``
variable, eq. 10), and a model is always used at that delta: a run stopped
before its anneal reached ``model.clip_delta`` is decoded at its last delta,
with a warning, because clipping it harder than it was trained for costs half
its BLEU.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Callable, List, NamedTuple, Optional, Sequence, Tuple

from gnmt_tf.config import GNMTConfig, load_config
from gnmt_tf.data.readers import DataError, Pair, read_tsv

if TYPE_CHECKING:  # TensorFlow is imported where a model, a tokenizer or a checkpoint is read, so that
    # command lines can name this module's files and choices without starting it
    from gnmt_tf.data.shortlist import Shortlist
    from gnmt_tf.data.tokenizer import WordpieceTokenizer
    from gnmt_tf.models.gnmt import GNMT

CONFIG_FILE = "config.yaml"
WORDPIECES_FILE = "wordpieces.txt"
DEV_FILE = "dev.tsv"
TEST_FILE = "test.tsv"  # the held-out test split, when training held one out
SHORTLIST_FILE = "shortlist.npz"
GLOSSARY_FILE = "glossary.tsv"  # the model's own glossary, applied to every request (optional)
CHECKPOINT_DIR = "checkpoints"
BEST_DIR = "best"
BEST_BLEU_FILE = "best_bleu.txt"  # in best/
AVERAGED_DIR = "averaged"
AVERAGED_SOURCES_FILE = "sources.txt"  # in averaged/
CHECKPOINT_CHOICES = ("best", "latest", "averaged")
LOG_DIR = "logs"
TRAIN_LOGS, DEV_LOGS = "train", "dev"  # in logs/
TRAINING_CURVES_FILE = "training_curves.png"


class ModelDirError(ValueError):
    """A model directory is missing, incomplete or inconsistent."""


def checkpoint_dir(model_dir: str) -> str:
    return os.path.join(model_dir, CHECKPOINT_DIR)


def best_dir(model_dir: str) -> str:
    return os.path.join(model_dir, BEST_DIR)


def averaged_dir(model_dir: str) -> str:
    return os.path.join(model_dir, AVERAGED_DIR)


def worker_checkpoint_dir(model_dir: str, task_id: int) -> str:
    """Where a non-chief worker of a synchronous cluster saves (and at once deletes) its checkpoints."""
    return os.path.join(checkpoint_dir(model_dir), f"workertemp_{task_id}")


def log_dir(model_dir: str) -> str:
    return os.path.join(model_dir, LOG_DIR)


def training_curves_path(model_dir: str) -> str:
    return os.path.join(model_dir, TRAINING_CURVES_FILE)


def train_log_dir(model_dir: str) -> str:
    return os.path.join(model_dir, LOG_DIR, TRAIN_LOGS)


def dev_log_dir(model_dir: str) -> str:
    return os.path.join(model_dir, LOG_DIR, DEV_LOGS)


def has_config(model_dir: str) -> bool:
    return os.path.exists(os.path.join(model_dir, CONFIG_FILE))


def wordpieces_path(model_dir: str) -> str:
    return os.path.join(model_dir, WORDPIECES_FILE)


def has_wordpieces(model_dir: str) -> bool:
    return os.path.exists(wordpieces_path(model_dir))


def read_tokenizer(model_dir: str) -> "WordpieceTokenizer":
    """The model's shared wordpiece vocabulary (wordpieces.txt)."""
    from gnmt_tf.data.tokenizer import WordpieceTokenizer

    return WordpieceTokenizer.load(wordpieces_path(model_dir))


def save_metadata(model_dir: str, config: GNMTConfig, tokenizer: "WordpieceTokenizer") -> None:
    """Write config.yaml and wordpieces.txt (each atomically)."""
    os.makedirs(model_dir, exist_ok=True)
    tokenizer.save(wordpieces_path(model_dir))
    config.save(os.path.join(model_dir, CONFIG_FILE))


# ------------------------------------------------------------------ the dev split
def dev_split_path(model_dir: str) -> str:
    return os.path.join(model_dir, DEV_FILE)


def has_dev_split(model_dir: str) -> bool:
    return os.path.exists(dev_split_path(model_dir))


def folded(pair: Pair) -> Pair:
    """A pair as the dev split stores it: each side's whitespace folded to single spaces.

    A TSV line holds neither tabs nor newlines inside a side (catalog strings have newlines).
    """
    return tuple(" ".join(side.split()) for side in pair)


def write_dev_split(model_dir: str, pairs: Sequence[Pair]) -> str:
    """Keep the dev split with the model (atomically); :func:`read_dev_split` reads it back."""
    return _write_pairs(dev_split_path(model_dir), pairs)


def read_dev_split(model_dir: str) -> List[Pair]:
    """The dev split kept with the model, in its order, through :func:`gnmt_tf.data.read_tsv`.

    Raises :class:`ModelDirError` if the model directory has none (or an empty one).
    """
    if not has_dev_split(model_dir):
        raise ModelDirError(f"{model_dir} has no dev split ({DEV_FILE}); python -m gnmt_tf.train writes one")
    return _read_pairs(model_dir, dev_split_path(model_dir))


def test_split_path(model_dir: str) -> str:
    return os.path.join(model_dir, TEST_FILE)


def has_test_split(model_dir: str) -> bool:
    return os.path.exists(test_split_path(model_dir))


def write_test_split(model_dir: str, pairs: Sequence[Pair]) -> str:
    """Keep the held-out test split with the model (atomically): pairs that chose nothing, for
    ``gnmt-evaluate --test``; :func:`read_test_split` reads it back."""
    return _write_pairs(test_split_path(model_dir), pairs)


def read_test_split(model_dir: str) -> List[Pair]:
    """The test split kept with the model; [] when it has none (trained with a --dev of its own)."""
    return _read_pairs(model_dir, test_split_path(model_dir)) if has_test_split(model_dir) else []


def _write_pairs(path: str, pairs: Sequence[Pair]) -> str:
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        for source, target in map(folded, pairs):
            handle.write(f"{source}\t{target}\n")
    os.replace(path + ".tmp", path)
    return path


def _read_pairs(model_dir: str, path: str) -> List[Pair]:
    try:
        # No length limit: every pair the writer kept is read back.
        pairs, _ = read_tsv(path, max_words=sys.maxsize)
    except DataError as err:
        raise ModelDirError(f"{model_dir}: {err}") from None
    return pairs


def without_dev_pairs(pairs: Sequence[Pair], dev_pairs: Sequence[Pair]) -> List[Pair]:
    """``pairs`` less those in ``dev_pairs``, compared as the dev split stores them (:func:`folded`)."""
    held_out = {folded(pair) for pair in dev_pairs}
    return [pair for pair in pairs if folded(pair) not in held_out]


# ------------------------------------------------------------------ the shortlist
def shortlist_path(model_dir: str) -> str:
    return os.path.join(model_dir, SHORTLIST_FILE)


def has_shortlist(model_dir: str) -> bool:
    return os.path.exists(shortlist_path(model_dir))


def glossary_path(model_dir: str) -> str:
    return os.path.join(model_dir, GLOSSARY_FILE)


def read_model_glossary(model_dir: str) -> List[Tuple[str, str]]:
    """The model's own glossary (its directory's glossary.tsv, gnmt_tf.localization.glossary), [] without one."""
    from gnmt_tf.localization.glossary import read_glossary

    path = glossary_path(model_dir)
    return read_glossary(path) if os.path.exists(path) else []


def write_shortlist(model_dir: str, shortlist: "Shortlist") -> str:
    """Keep the vocabulary shortlist with the model (atomically); :func:`read_shortlist` reads it back."""
    from gnmt_tf.data import shortlist as shortlists

    return shortlists.save(shortlist, shortlist_path(model_dir))


def read_shortlist(model_dir: str, vocab_size: Optional[int] = None) -> Optional["Shortlist"]:
    """The model's vocabulary shortlist, or None if it has none.

    Raises :class:`ModelDirError` if the file cannot be read, or was built for a vocabulary
    of another size than ``vocab_size``.
    """
    if not has_shortlist(model_dir):
        return None
    from gnmt_tf.data import shortlist as shortlists

    try:
        shortlist = shortlists.load(shortlist_path(model_dir))
    except ValueError as err:
        raise ModelDirError(str(err)) from None
    if vocab_size is not None and shortlist.vocab_size != vocab_size:
        raise ModelDirError(
            f"{shortlist_path(model_dir)} was built for a vocabulary of {shortlist.vocab_size} pieces, the model "
            f"has {vocab_size}; build it again with python -m gnmt_tf.shortlist --model-dir {model_dir}"
        )
    return shortlist


# ------------------------------------------------------------------ the best dev BLEU
class BestBleu(NamedTuple):
    """best/best_bleu.txt: the dev BLEU of the checkpoint in best/, its step, and the BLEU signature."""

    score: float
    step: int
    signature: str


def write_best_bleu(model_dir: str, best: BestBleu) -> None:
    """Record the BLEU of the checkpoint just saved in best/ (atomically)."""
    path = os.path.join(best_dir(model_dir), BEST_BLEU_FILE)
    with open(path + ".tmp", "w", encoding="utf-8") as handle:
        handle.write(f"{best.score}\t{best.step}\t{best.signature}\n")
    os.replace(path + ".tmp", path)


def read_best_bleu(model_dir: str) -> Optional[BestBleu]:
    """What :func:`write_best_bleu` recorded; None if there is no (readable) record."""
    try:
        with open(os.path.join(best_dir(model_dir), BEST_BLEU_FILE), encoding="utf-8") as handle:
            score, step, signature = handle.read().rstrip("\n").split("\t", 2)
        return BestBleu(float(score), int(step), signature)
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------ metadata and checkpoints
def load_metadata(model_dir: str) -> Tuple[GNMTConfig, "WordpieceTokenizer"]:
    if not os.path.isdir(model_dir):
        raise ModelDirError(f"model directory not found: {model_dir}")
    if not has_config(model_dir):
        raise ModelDirError(f"{model_dir} is not a gnmt_tf model directory: it has no {CONFIG_FILE}")
    config = load_config(os.path.join(model_dir, CONFIG_FILE))
    tokenizer = read_tokenizer(model_dir)
    if tokenizer.vocab_size != config.model.vocab_size:
        raise ModelDirError(
            f"{model_dir}: the vocabulary has {tokenizer.vocab_size} wordpieces but the config says "
            f"model.vocab_size = {config.model.vocab_size}"
        )
    return config, tokenizer


def find_checkpoint(model_dir: str, which: str = "best") -> Optional[str]:
    """Path prefix of a checkpoint of ``model_dir``.

    ``which``: "best" (by dev BLEU; falling back to the averaged weights, then the latest), "latest"
    (the raw weights of the last checkpoint), or "averaged" (the weight average a run keeps with
    ``training.average_decay``, or what ``python -m gnmt_tf.average`` wrote; no fallback).
    """
    if which not in CHECKPOINT_CHOICES:
        raise ValueError(f"which must be one of {', '.join(CHECKPOINT_CHOICES)}, got {which!r}")
    candidates = {
        "best": [best_dir(model_dir), averaged_dir(model_dir), checkpoint_dir(model_dir)],
        "latest": [checkpoint_dir(model_dir)],
        "averaged": [averaged_dir(model_dir)],
    }[which]
    import tensorflow as tf

    for directory in candidates:
        path = tf.train.latest_checkpoint(directory) if os.path.isdir(directory) else None
        if path:
            return path
    return None


def newest_checkpoints(model_dir: str, count: int, flag: str = "--last") -> List[str]:
    """The paths of the newest ``count`` checkpoints in ``model_dir/checkpoints/``, oldest first
    (``flag``: the option that asked for them, named in the errors)."""
    import tensorflow as tf

    if count < 1:
        raise ModelDirError(f"{flag} must be at least 1, got {count}")
    directory = checkpoint_dir(model_dir)
    state = tf.train.get_checkpoint_state(directory) if os.path.isdir(directory) else None
    paths = list(state.all_model_checkpoint_paths) if state else []
    if not paths:
        raise ModelDirError(f"{model_dir} has no checkpoints (looked in {directory})")
    if len(paths) < count:
        raise ModelDirError(
            f"{model_dir} keeps {len(paths)} checkpoint(s), fewer than {flag} {count}; use fewer, or "
            f"keep more while training (training.keep_checkpoints)"
        )
    return paths[-count:]  # get_checkpoint_state puts the directory in front of relative paths


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
) -> Tuple["GNMT", "WordpieceTokenizer", GNMTConfig]:
    """The trained model at the delta it was trained at, its tokenizer and its config.

    ``which`` is "best", "latest" or "averaged" (see :func:`find_checkpoint`). A
    checkpoint saved mid-anneal keeps its delta; ``warn`` is told so.
    """
    config, tokenizer = load_metadata(model_dir)
    return load_checkpoint(config, existing_checkpoint(model_dir, which), warn), tokenizer, config


def existing_checkpoint(model_dir: str, which: str) -> str:
    """:func:`find_checkpoint`'s path, or a :class:`ModelDirError` saying what is missing and what to run."""
    path = find_checkpoint(model_dir, which)
    if path is None:
        if which == "averaged":
            raise ModelDirError(
                f"{model_dir} has no averaged checkpoint yet (looked in {AVERAGED_DIR}/; run python -m "
                f"gnmt_tf.cli.average --model-dir {model_dir} first)"
            )
        raise ModelDirError(f"{model_dir} has no checkpoint yet (looked in {CHECKPOINT_DIR}/ and {BEST_DIR}/)")
    return path


def load_checkpoint(config: GNMTConfig, path: str, warn: Callable[[str], None] = _warn) -> "GNMT":
    """The model of ``config`` with the weights of the checkpoint at ``path``, at the delta it was trained
    at (``warn`` is told when that is not the config's final delta)."""
    model = build_model(config, path)
    message = unfinished_anneal_message(path, model_delta(model), config.model.clip_delta)
    if message:
        warn(message)
    return model


class LoadedModel(NamedTuple):
    """A model read from a model directory (:func:`load_models`)."""

    model: "GNMT"  # or an Ensemble of several (load_as_one_model)
    tokenizer: "WordpieceTokenizer"
    config: GNMTConfig
    checkpoints: Tuple[str, ...]  # the path of each model's checkpoint

    @property
    def checkpoint(self) -> str:
        """The checkpoints' paths, joined by " + " (one model: its path)."""
        return " + ".join(self.checkpoints)


def load_models(model_dirs: Sequence[str], checkpoints: Sequence[str],
                warn: Callable[[str], None] = _warn) -> List[LoadedModel]:
    """The models of an ensemble: ``model_dirs[i]`` at ``checkpoints[i]`` ("best", "latest", "averaged",
    or a checkpoint path such as :func:`newest_checkpoints` gives). Every directory must hold the first
    one's wordpiece vocabulary (one tokenizer translates for all of them)."""
    if len(model_dirs) != len(checkpoints):
        raise ValueError(f"{len(model_dirs)} model directories but {len(checkpoints)} checkpoints")
    loaded, first_wordpieces = [], None
    for model_dir, which in zip(model_dirs, checkpoints):
        config, tokenizer = load_metadata(model_dir)
        wordpieces = _wordpieces(model_dir)
        first_wordpieces = first_wordpieces or wordpieces
        if wordpieces != first_wordpieces:  # refused before any checkpoint is read
            raise ModelDirError(f"{model_dirs[0]} and {model_dir} cannot translate as one ensemble: their "
                                f"wordpiece vocabularies ({WORDPIECES_FILE}) differ")
        path = existing_checkpoint(model_dir, which) if which in CHECKPOINT_CHOICES else which
        loaded.append(LoadedModel(load_checkpoint(config, path, warn), tokenizer, config, (path,)))
    return loaded


def load_as_one_model(model_dirs: Sequence[str], checkpoints: Sequence[str], combination: str = "mean_log_probs",
                      warn: Callable[[str], None] = _warn) -> LoadedModel:
    """:func:`load_models`, and with several of them, their :class:`gnmt_tf.models.Ensemble` (section 8.6;
    ``combination`` names its rule, :func:`gnmt_tf.models.ensemble.combination_named`). The tokenizer and
    config are the first model's."""
    from gnmt_tf.models.ensemble import Ensemble, IncompatibleMembers, combination_named

    members = load_models(model_dirs, checkpoints, warn)
    first = members[0]
    if len(members) == 1:
        return first
    names = [f"{directory} ({member.checkpoint})" for directory, member in zip(model_dirs, members)]
    try:
        ensemble = Ensemble([member.model for member in members], combination_named(combination), names=names)
    except IncompatibleMembers as error:
        raise ModelDirError(str(error)) from error
    return LoadedModel(ensemble, first.tokenizer, first.config, sum((member.checkpoints for member in members), ()))


def _wordpieces(model_dir: str) -> bytes:
    with open(wordpieces_path(model_dir), "rb") as handle:
        return handle.read()


def build_model(config: GNMTConfig, checkpoint: Optional[str] = None) -> "GNMT":
    """A built GNMT of ``config`` on one device, with the weights (and delta) of ``checkpoint`` if given.

    Every variable of the model must be in the checkpoint (a checkpoint of another config
    fails here instead of leaving weights at their initial values); what else the
    checkpoint holds, such as the optimizer's state, is not read.
    """
    import tensorflow as tf

    from gnmt_tf.models.gnmt import GNMT

    model = GNMT(config.model)
    model.build()
    if checkpoint:
        tf.train.Checkpoint(model=model).restore(checkpoint).assert_existing_objects_matched().expect_partial()
    return model


def model_delta(model: "GNMT") -> float:
    """The delta the model's weights are used at (eq. 10)."""
    return float(model.clip_delta.numpy())
