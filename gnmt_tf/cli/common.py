"""What the command lines share: a quiet TensorFlow start, ``--verbose``, the training data, and the model and search options.

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

from gnmt_tf.decoding.options import search_option_argument
from gnmt_tf.model_files import CHECKPOINT_CHOICES

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


# ------------------------------------------------------------------ train, shortlist
def add_training_data_arguments(parser: argparse.ArgumentParser) -> None:
    """``--train`` and the languages of the built-in data (train, shortlist)."""
    parser.add_argument(
        "--train", default=None, metavar="DATA",
        help="training pairs: a TSV file (source<TAB>target, .gz accepted), 'SRC_FILE,TGT_FILE' "
        "(aligned files) or 'tfds:NAME'. Default: this machine's gettext catalogs",
    )
    parser.add_argument("--source-lang", default="en", help="source language of the built-in data (default: en)")
    parser.add_argument("--target-lang", default="fr", help="target language of the built-in data (default: fr)")


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


# ------------------------------------------------------------------ translate, evaluate, score
def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """Which checkpoint, and how sentences are batched and truncated (translate, evaluate, score)."""
    group = parser.add_argument_group("model and batching")
    group.add_argument(
        "--checkpoint", choices=CHECKPOINT_CHOICES, default="best",
        help="which checkpoint of the model directory to use: best by dev BLEU (default), the latest, "
        "or the average of the last ones written by python -m gnmt_tf.average",
    )
    group.add_argument("--batch-size", type=positive_int, default=32, help="sentences decoded together (default: 32)")
    group.add_argument(
        "--concurrent-batches", type=positive_int, default=2,
        help="batches decoded at the same time, a thread each; a second one keeps two cores busy while "
        "the first runs its small ops (default: 2; 1 decodes one batch after another)",
    )
    group.add_argument(
        "--max-input-length", type=int, default=250,
        help="longer inputs (in wordpieces) are truncated to this, with a warning (default: 250)",
    )


def positive_int(text: str) -> int:
    """An argparse ``type``: an integer >= 1 ("argument --batch-size: must be an integer >= 1, got 0")."""
    value = int(text)  # not an integer: argparse's own "invalid int value: 'x'"
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}")
    return value


positive_int.__name__ = "int"  # the word argparse uses in "invalid int value"


def add_decoding_arguments(parser: argparse.ArgumentParser, search: bool = True) -> None:
    """Eq. 14's alpha and beta, and with ``search`` the beam width and the pruning margin (defaults: the config's).

    alpha, beta and beamsize follow the search option rule (:mod:`gnmt_tf.decoding.options`): a value
    that is not a finite float32 >= 0 is a usage error naming the flag (exit 2), before TensorFlow starts.
    """
    title = "beam search (defaults from the model's config, section 7)" if search else "eq. 14 (defaults from the model's config)"
    group = parser.add_argument_group(title)
    if search:
        group.add_argument("--beam-width", type=int, default=None, help="hypotheses kept per sentence")
    group.add_argument("--alpha", type=search_option_argument("alpha"), default=None,
                       help="length normalisation strength (eq. 14); finite, >= 0")
    group.add_argument("--beta", type=search_option_argument("beta"), default=None,
                       help="coverage penalty strength (eq. 14); finite, >= 0")
    if search:
        group.add_argument("--beamsize", type=search_option_argument("beamsize"), default=None,
                           help="pruning margin (section 7); finite, >= 0; 0 keeps only each hypothesis' best "
                           "tokens, 1e9 never prunes")
        group.add_argument(
            "--shortlist", dest="use_shortlist", action=argparse.BooleanOptionalAction, default=None,
            help="decode with the model directory's vocabulary shortlist (python -m gnmt_tf.shortlist builds "
            "it): each batch's softmax only over the likely translations of its source pieces "
            "(default: decoding.use_shortlist, when the directory has one)",
        )


def decoding_overrides(args) -> dict:
    """The decoding options given on the command line, by the names Translator takes."""
    names = ("beam_width", "alpha", "beta", "beamsize", "use_shortlist")
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}


def load_translator(args):
    """The model of ``--model-dir`` at ``--checkpoint`` and a Translator configured from the command line,
    with the directory's vocabulary shortlist if it has one."""
    from gnmt_tf.inference.translator import Translator
    from gnmt_tf.model_files import ModelDirError, load_model_dir, read_shortlist, shortlist_path

    model, tokenizer, config = load_model_dir(args.model_dir, which=args.checkpoint)
    shortlist = read_shortlist(args.model_dir, vocab_size=tokenizer.vocab_size)
    if getattr(args, "use_shortlist", None) and shortlist is None:
        raise ModelDirError(f"--shortlist: {args.model_dir} has no vocabulary shortlist "
                            f"({shortlist_path(args.model_dir)}); python -m gnmt_tf.shortlist --model-dir "
                            f"{args.model_dir} builds one")
    translator = Translator(  # the checkpoint's weights stay as loaded: precompute what only they decide
        model, tokenizer, config.decoding, batch_size=args.batch_size, max_input_length=args.max_input_length,
        shortlist=shortlist, precompute_target_inputs=True, concurrent_batches=args.concurrent_batches,
    )
    return translator, config


def warn_truncated(translator) -> None:
    """Tell stderr how many inputs of the last call were longer than ``--max-input-length``."""
    if translator.truncated:
        print(
            f"warning: {translator.truncated} input line(s) longer than {translator.max_input_length} "
            f"wordpieces were truncated (--max-input-length)", file=sys.stderr,
        )
