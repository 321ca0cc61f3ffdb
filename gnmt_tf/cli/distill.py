"""Distil a teacher's translations into training data for a student: ``python -m gnmt_tf.distill``.

Sequence-level knowledge distillation (Kim & Rush 2016), as Marian's WNGT 2019 students are trained: the
teacher (one --model-dir, or several as an ensemble) translates the source of every training pair into an
n-best list, and the entry with the best sentence BLEU against the pair's reference becomes the student's
target (a sentence without entries keeps its reference). The output is a TSV file of source<TAB>target
lines in input order: train the student on it with gnmt-train --train OUTPUT.

The training pairs are --train's, or the built-in data as gnmt-train reads it, in both cases without the
dev and test splits of the teacher's model directories: the student is evaluated on them.

The run can be stopped at any time and run again with the same command to go on: the output grows a
chunk at a time (synced to disk), and OUTPUT.progress.json records what is done and a fingerprint of the
pairs and the teacher; a run with other pairs or another teacher is refused unless --restart is given.
At the end OUTPUT.summary.json holds the sentences, the targets changed, the teacher's corpus BLEU on the
training data (its 1-best, and the chosen entries) and the minutes taken, and the progress file goes.
"""

from __future__ import annotations

import os

from gnmt_tf import model_files
from gnmt_tf.cli import common
from gnmt_tf.cli.commands import defined_in
from gnmt_tf.cli.scaffold import Command, UsageError
from gnmt_tf.data.readers import DataError

DEFAULT_N_BEST, DEFAULT_CHUNK = 8, 512


def add_arguments(parser) -> None:
    common.add_training_data_arguments(parser)
    parser.add_argument("--output", required=True, metavar="TSV",
                        help="the distilled pairs, source<TAB>target (OUTPUT.progress.json and "
                        "OUTPUT.summary.json go beside it)")
    parser.add_argument("--n-best", type=common.positive_int, default=DEFAULT_N_BEST, metavar="N",
                        help="n-best entries per sentence to choose the target from (default: %(default)s); "
                        "the beam width defaults to the larger of this and the model's")
    parser.add_argument("--chunk", type=common.positive_int, default=DEFAULT_CHUNK, metavar="SENTENCES",
                        help="sentences translated and written out at a time; a stopped run loses at most "
                        "one chunk (default: %(default)s)")
    parser.add_argument("--restart", action="store_true",
                        help="start OUTPUT afresh, even though it exists or another distillation into it is "
                        "in progress")
    common.add_translator_arguments(parser)


def check(parser, args) -> None:
    if args.beam_width is not None and args.n_best > args.beam_width:
        raise UsageError(f"--n-best {args.n_best} exceeds --beam-width {args.beam_width}: the beam keeps at "
                         "most that many hypotheses")


def distill(args, after_chunk=lambda progress: None) -> int:
    """The command; ``after_chunk`` is :class:`~gnmt_tf.training.distillation.Distillation`'s (tests stop
    a run there)."""
    from gnmt_tf.training.distillation import Distillation

    translator, config, checkpoint = common.load_translator(args)  # first: a bad model ends it at once
    pairs = student_pairs(args)
    beam_width = args.beam_width or max(config.decoding.beam_width, args.n_best)
    options = {**common.decoding_overrides(args), "beam_width": beam_width}
    about = teacher_description(args, checkpoint, translator, options)
    distillation = Distillation(pairs, args.output, nbest_teacher(translator, args.n_best, options), about,
                                chunk=args.chunk, after_chunk=after_chunk)
    print_summary(distillation.run(restart=args.restart), distillation.summary_path)
    return 0


def student_pairs(args):
    """The training pairs (:func:`~gnmt_tf.cli.common.load_training_pairs`) less the dev and test splits of
    every teacher directory, as a fine-tune leaves them out (gnmt_tf.cli.train): the student is scored on
    them, so it must not learn the teacher's translations of them either."""
    pairs = common.load_training_pairs(args)
    held_out = [pair for model_dir in dict.fromkeys(args.model_dir) for pair in held_out_splits(model_dir)]
    kept = model_files.without_dev_pairs(pairs, held_out)
    print(f"left out {len(pairs) - len(kept):,} pairs of the teacher's dev and test splits; distilling "
          f"{len(kept):,}")
    if not kept:
        raise DataError("no training pair is left to distil")
    return kept


def held_out_splits(model_dir: str):
    """The dev and test pairs kept in a model directory (either may be missing)."""
    dev = model_files.read_dev_split(model_dir) if model_files.has_dev_split(model_dir) else []
    return dev + model_files.read_test_split(model_dir)


def teacher_description(args, checkpoint: str, translator, options) -> dict:
    """What decides the teacher's n-best lists, for the progress file's fingerprint and the summary: its
    directories and checkpoints (as absolute paths: a run resumed from another directory is the same),
    the n-best, the search and the truncation of long inputs."""
    return {
        "model_dirs": [os.path.realpath(model_dir) for model_dir in args.model_dir],
        "checkpoints": [os.path.realpath(path) for path in checkpoint.split(" + ")],
        "ensemble_rule": args.ensemble_rule,
        "n_best": args.n_best,
        "search": options,
        "max_input_length": translator.max_input_length,
    }


def nbest_teacher(translator, n_best: int, options):
    """The translator as the distillation's teacher: each chunk's n-best texts, decoded in the
    translator's batches (sorted by length, ``--concurrent-batches`` at a time). Empty translations are
    left out: gnmt-train skips a pair with an empty side, so choosing one would lose the pair."""
    def teacher(sources):
        results = translator.translate_nbest(sources, n_best=n_best, **options)
        common.warn_truncated(results, translator.max_input_length)
        return [[entry.text for entry in nbest if entry.text.strip()] for nbest in results]

    return teacher


def print_summary(summary: dict, path: str) -> None:
    sentences, changed = summary["sentences"], summary["changed"]
    print(f"distilled {sentences:,} sentences into {summary['output']} in {summary['minutes']:.1f} min; "
          f"{changed:,} targets ({100 * changed / max(sentences, 1):.1f}%) differ from their reference")
    print(f"teacher's BLEU on the training data: {summary['bleu_teacher_1best']:.2f} (1-best), "
          f"{summary['bleu_distilled']:.2f} (the chosen entries of the {summary['teacher']['n_best']}-best "
          f"lists)")
    print(f"summary: {path}")


def _exit_statuses():
    from gnmt_tf.training.distillation import ResumeRefused

    return {ResumeRefused: 2}


COMMAND = Command(
    defined_in(__spec__.name), __doc__, add_arguments, distill, check=check, exit_statuses=_exit_statuses,
    examples=("--model-dir runs/en-fr --train train.tsv --output distilled.tsv",
              "--model-dir runs/a --model-dir runs/b --train train.tsv --output distilled.tsv --n-best 12"),
)
main, build_parser = COMMAND.main, COMMAND.build_parser
