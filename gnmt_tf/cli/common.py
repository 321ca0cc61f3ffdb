"""The options several commands share, and what they do with them: model directory, checkpoint, batching,
beam search, training data, input and output files.

Each option is declared once here, with one help text; how a command runs is :mod:`gnmt_tf.cli.scaffold`.
"""

from __future__ import annotations

import argparse
import os
import sys

from gnmt_tf.cli import text_files
from gnmt_tf.cli.scaffold import UsageError
from gnmt_tf.config import builtin_config_names
from gnmt_tf.decoding.options import SEARCH_OPTIONS, search_option_argument
from gnmt_tf.model_files import CHECKPOINT_CHOICES

MODEL_DIR_HELP = "a model directory written by gnmt-train (python -m gnmt_tf.train)"
SEARCH_OPTION_HELP = {
    "alpha": "length normalization strength of eq. 14; finite, >= 0",
    "beta": "coverage penalty strength of eq. 14; finite, >= 0",
    "beamsize": "the paper's beamsize (section 7): a pruning margin in log probability, not the number of "
    "hypotheses kept (the beam width); a token more than this below the best token of its hypothesis is not "
    "expanded, and a live hypothesis more than this below the best finished one is dropped; finite, >= 0; "
    "0 keeps only what ties with the best, 1e9 never prunes",
}


def positive_int(text: str) -> int:
    """An argparse ``type``: an integer >= 1 ("argument --batch-size: must be an integer >= 1, got 0")."""
    value = int(text)  # not an integer: argparse's own "invalid int value: 'x'"
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}")
    return value


positive_int.__name__ = "int"  # the word argparse uses in "invalid int value"


def config_help(default: str) -> str:
    """The help of a ``--config``: a YAML file or a shipped config, named as configs/ holds them now."""
    return f"YAML file or shipped config name: {', '.join(builtin_config_names())} (default: {default})"


def add_model_dir_argument(parser: argparse.ArgumentParser) -> None:
    """``--model-dir``, the trained model a command reads."""
    parser.add_argument("--model-dir", required=True, help=MODEL_DIR_HELP)


def check_new_directory(flag: str, path) -> None:
    """A directory the command will create (or add to): refused if a file is in its place."""
    if path and os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{flag} {path} exists and is not a directory")


def add_input_output_arguments(parser: argparse.ArgumentParser, lines: str, results: str) -> None:
    """``--input`` (default: stdin), how it is decoded, and ``--output`` (default: stdout), for
    :func:`open_input` and :func:`~gnmt_tf.cli.text_files.open_output`."""
    parser.add_argument("--input", default=None, help=f"file of {lines}, plain or gzip (default: stdin)")
    text_files.add_encoding_errors_argument(parser)
    parser.add_argument("--output", default=None, help=f"where {results} go (default: stdout)")


def add_plot_attention_argument(parser: argparse.ArgumentParser, of: str) -> None:
    parser.add_argument(
        "--plot-attention", default=None, metavar="DIR",
        help=f"also draw the attention (eq. 4-5) of {of} as DIR/0001.png, DIR/0002.png, ..., one per "
        "input line in input order (DIR is created if needed)",
    )


def check_plot_attention(parser, args) -> None:
    """A ``Command.check``: a file where ``--plot-attention`` would go is refused before TensorFlow starts."""
    check_new_directory("--plot-attention", args.plot_attention)


def open_input(args):
    """A context manager: the lines of ``--input`` (or stdin), decoded as ``--encoding-errors`` says."""
    return text_files.open_input(args.input, text_files.ENCODING_ERRORS[args.encoding_errors])


# ------------------------------------------------------------------ train, shortlist
def add_training_data_arguments(parser: argparse.ArgumentParser) -> None:
    """``--train`` and the languages of the built-in data (train, shortlist)."""
    parser.add_argument(
        "--train", default=None, metavar="DATA",
        help="training pairs: a TSV file (source<TAB>target, .gz accepted), 'SRC_FILE,TGT_FILE' "
        "(aligned files) or 'tfds:NAME'. Default: this machine's gettext catalogs",
    )
    parser.add_argument(
        "--source-lang", default="en",
        help="source language: of the built-in data, and the source key of a 'tfds:NAME' dataset "
        "(default: en)",
    )
    parser.add_argument(
        "--target-lang", default="fr",
        help="target language: of the built-in data (the catalogs translated into it), and the target key of "
        "a 'tfds:NAME' dataset (default: fr)",
    )


def load_training_pairs(args):
    """The pairs of ``--train``, or the built-in gettext catalogs of ``--source-lang``/``--target-lang``; says what it read."""
    from gnmt_tf.data import read_parallel
    from gnmt_tf.data.catalogs import load_catalog_pairs

    if args.train:
        train_pairs, report = read_parallel(args.train, source_lang=args.source_lang, target_lang=args.target_lang)
        print(report.summary())
        return train_pairs
    pairs, report = load_catalog_pairs(target_lang=args.target_lang, source_lang=args.source_lang)
    print(f"built-in data: {report.summary()}")
    return pairs


# ------------------------------------------------------------------ decoding: translate, evaluate, score, ...
def add_translator_arguments(parser: argparse.ArgumentParser, search: bool = True) -> None:
    """What :func:`load_translator` and :func:`decoding_overrides` read (translate, evaluate, score): the
    model and checkpoint, how sentences are batched and truncated, and eq. 14's alpha and beta; with
    ``search`` also the beam width, the pruning margin and the shortlist (defaults: the model's config)."""
    model = parser.add_argument_group("model and batching")
    add_ensemble_arguments(model)
    model.add_argument("--batch-size", type=positive_int, default=32,
                       help="sentences decoded together in one batch, grouped by length (default: 32)")
    model.add_argument(
        "--concurrent-batches", type=positive_int, default=2,
        help="batches decoded at the same time, a thread each; a second one keeps two cores busy while "
        "the first runs its small ops (default: 2; 1 decodes one batch after another)",
    )
    model.add_argument(
        "--max-input-length", type=positive_int, default=None,
        help="longer inputs (in wordpieces) are truncated to this, with a warning (default: the model's "
        "decoding.max_input_length, 250 unless its config says otherwise)",
    )
    decoding = parser.add_argument_group("beam search (section 7; defaults from the model's config)" if search
                                         else "eq. 14 (defaults from the model's config)")
    if search:
        add_beam_width_argument(decoding)
    add_search_option_arguments(decoding, SEARCH_OPTIONS if search else ("alpha", "beta"))
    if search:
        add_shortlist_argument(decoding, "default: decoding.use_shortlist of the model's config, when its "
                                         "directory has a shortlist")


ENSEMBLE_RULES = ("mean_log_probs", "mean_probs")  # gnmt_tf.models.ensemble.COMBINATIONS, without importing TF


def add_ensemble_arguments(group) -> None:
    """``--model-dir`` and ``--checkpoint``, each repeatable: several models translate as one ensemble
    (section 8.6); ``--last-checkpoints``, ``--ensemble-rule``."""
    group.add_argument("--model-dir", required=True, action="append", metavar="DIR",
                       help=MODEL_DIR_HELP + "; give it again for an ensemble of several models, which share "
                       "one vocabulary (the first directory's config, vocabulary and shortlist are used)")
    group.add_argument(
        "--checkpoint", choices=CHECKPOINT_CHOICES, action="append", default=None,
        help="which checkpoint of the model directory: best by dev BLEU (default), the latest, or the "
        "average of the last ones that gnmt-average writes; once for every --model-dir, or once per --model-dir",
    )
    group.add_argument("--last-checkpoints", type=positive_int, default=None, metavar="K",
                       help="an ensemble of the newest K checkpoints of the one --model-dir (DIR/checkpoints/)")
    group.add_argument("--ensemble-rule", choices=ENSEMBLE_RULES, default=ENSEMBLE_RULES[0],
                       help="how an ensemble combines its models' next-token distributions: the mean of their "
                       "log-probabilities (default) or of their probabilities")


def ensemble_members(args):
    """(model directories, checkpoints) of ``--model-dir``, ``--checkpoint`` and ``--last-checkpoints``."""
    from gnmt_tf import model_files

    model_dirs, checkpoints = list(args.model_dir), list(args.checkpoint or ["best"])
    if args.last_checkpoints is not None:
        if len(model_dirs) != 1 or args.checkpoint:
            raise UsageError("--last-checkpoints takes one --model-dir and no --checkpoint")
        paths = model_files.newest_checkpoints(model_dirs[0], args.last_checkpoints, flag="--last-checkpoints")
        return model_dirs * len(paths), paths
    if len(checkpoints) == 1:
        return model_dirs, checkpoints * len(model_dirs)
    if len(checkpoints) != len(model_dirs):
        raise UsageError(f"give --checkpoint once, or once per --model-dir ({len(model_dirs)} --model-dir, "
                         f"{len(checkpoints)} --checkpoint)")
    return model_dirs, checkpoints


def add_beam_width_argument(group) -> None:
    group.add_argument("--beam-width", type=positive_int, default=None, metavar="K",
                       help="hypotheses the beam search keeps per sentence at each step (not the pruning "
                       "margin: that is --beamsize)")


def add_search_option_arguments(group, names=SEARCH_OPTIONS) -> None:
    """``--alpha``, ``--beta``, ``--beamsize``: a value that is not a finite float32 >= 0 is a usage error
    naming the flag (:mod:`gnmt_tf.decoding.options`), before TensorFlow starts."""
    for name in names:
        group.add_argument(f"--{name}", type=search_option_argument(name), default=None,
                           help=SEARCH_OPTION_HELP[name])


def add_shortlist_argument(group, default: str) -> None:
    """``--shortlist`` / ``--no-shortlist``; ``default`` says what giving neither does."""
    group.add_argument(
        "--shortlist", dest="use_shortlist", action=argparse.BooleanOptionalAction, default=None,
        help="decode with (--no-shortlist: without) the model's vocabulary shortlist (gnmt-shortlist builds "
        f"it): each batch's softmax only over the likely translations of its source pieces; {default}",
    )


def decoding_overrides(args) -> dict:
    """The decoding options given on the command line, by the names Translator takes."""
    names = ("beam_width", "alpha", "beta", "beamsize", "use_shortlist")
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


def load_translator(args):
    """The model of ``--model-dir`` at ``--checkpoint`` (several: an ensemble) and a Translator configured from
    the command line, with the directory's vocabulary shortlist if it has one: (translator, config, checkpoint)."""
    from gnmt_tf.inference.evaluation import load_translator as load

    model_dirs, checkpoints = ensemble_members(args)
    return load(model_dirs, checkpoints, batch_size=args.batch_size, max_input_length=args.max_input_length,
                concurrent_batches=args.concurrent_batches, use_shortlist=getattr(args, "use_shortlist", None),
                combination=args.ensemble_rule)


def warn_truncated(translations, max_input_length: int) -> None:
    """Tell stderr how many of ``translations`` (or n-best lists) came from inputs longer than
    ``--max-input-length``."""
    from gnmt_tf.inference.results import count_truncated

    truncated = count_truncated(translations)
    if truncated:
        print(
            f"warning: {truncated} input line(s) longer than {max_input_length} "
            f"wordpieces were truncated (--max-input-length)", file=sys.stderr,
        )
