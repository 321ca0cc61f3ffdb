"""Build a model's vocabulary shortlist: ``python -m gnmt_tf.shortlist --model-dir DIR``.

For every source wordpiece, its --top-k likeliest target wordpieces by IBM Model 1's
lexical translation probability (a few EM iterations over the training pairs, tokenized
with the model's own wordpieces), plus the target pieces ranked by frequency, the
--frequent most common of which are always allowed, written to DIR/shortlist.npz.
Decoding a batch with it computes the softmax only over the likely translations of
the batch's source pieces, the frequent pieces and EOS (Marian's lexical shortlist):
python -m gnmt_tf.translate / evaluate --shortlist, the exports' translate_with_shortlist
signatures, or decoding.use_shortlist: true.

The training pairs are read as python -m gnmt_tf.train reads them (--train, default: the
built-in gettext catalogs); pairs of the model's dev split are left out, and so are pairs
with more than data.max_length wordpieces on a side, as training leaves them out. The
summary gives the allowed ids per dev sentence and per batch, and the share of the dev
split's reference wordpieces that a dev sentence's shortlist allows.
"""

from __future__ import annotations

import sys
import time

from gnmt_tf.cli.common import (
    add_model_dir_argument,
    add_training_data_arguments,
    load_training_pairs,
    positive_int,
)
from gnmt_tf.cli.commands import defined_in
from gnmt_tf.cli.scaffold import Command

DEFAULT_TOP_K = 50  # measured on the default data: benchmarks/README.md, section "Vocabulary shortlist"
DEFAULT_FREQUENT = 100
DEFAULT_ITERATIONS = 5
BATCH = 32  # python -m gnmt_tf.translate's default --batch-size, for the per-batch size reported


def add_arguments(parser) -> None:
    add_model_dir_argument(parser)
    add_training_data_arguments(parser)
    parser.add_argument("--top-k", type=positive_int, default=DEFAULT_TOP_K, metavar="K",
                        help="target pieces kept per source piece (default: %(default)s)")
    parser.add_argument("--frequent", type=int, default=DEFAULT_FREQUENT, metavar="N",
                        help="most frequent target pieces always allowed (default: %(default)s)")
    parser.add_argument("--iterations", type=positive_int, default=DEFAULT_ITERATIONS,
                        help="EM iterations of IBM Model 1, which estimates the probability that a source "
                        "piece translates as a target piece (default: %(default)s)")


def check(parser, args) -> None:
    if args.frequent < 0:
        parser.error(f"--frequent must be 0 or more, got {args.frequent}")


def build_shortlist(args) -> int:
    import numpy as np

    from gnmt_tf import model_files
    from gnmt_tf.data import shortlist as shortlists
    from gnmt_tf.vocab import EOS_ID

    config, tokenizer = model_files.load_metadata(args.model_dir)  # first: fails for a directory not a model's
    dev_pairs = model_files.read_dev_split(args.model_dir) if model_files.has_dev_split(args.model_dir) else []
    pairs = load_training_pairs(args)
    kept = model_files.without_dev_pairs(pairs, dev_pairs)
    if len(kept) < len(pairs):
        print(f"left out {len(pairs) - len(kept):,} pairs of the dev split "
              f"({model_files.dev_split_path(args.model_dir)})")
    started = time.monotonic()
    max_length = config.data.max_length
    sources, targets = shortlists.wordpiece_pairs(
        kept, tokenizer.tokenize, max_length=max_length,
        progress=lambda done: _progress(f"tokenizing: {done:,}/{len(kept):,} pairs"))
    _progress(f"tokenized {len(kept):,} pairs in {time.monotonic() - started:.1f} s; {len(sources):,} have "
              f"at most {max_length} wordpieces a side (data.max_length)", done=True)
    if not sources:
        raise model_files.ModelDirError(f"no training pair of at most {max_length} wordpieces a side to learn "
                                   f"from")
    learning = time.monotonic()
    shortlist = shortlists.learn_shortlist(
        sources, targets, tokenizer.vocab_size, top_k=args.top_k, frequent=args.frequent,
        iterations=args.iterations,
        progress=lambda i: _progress(f"IBM Model 1: EM iteration {i}/{args.iterations}"))
    _progress(f"learned t(f|e) with {args.iterations} EM iterations in {time.monotonic() - learning:.1f} s",
              done=True)
    replacing = model_files.has_shortlist(args.model_dir)
    path = model_files.write_shortlist(args.model_dir, shortlist)
    print(f"{'replaced' if replacing else 'wrote'} {path}: top {args.top_k} translations of each of "
          f"{shortlist.vocab_size:,} pieces, the {args.frequent} most frequent target pieces, EOS "
          f"({time.monotonic() - started:.1f} s in all)")
    if not dev_pairs:
        print(f"{args.model_dir} has no dev split ({model_files.DEV_FILE}): no coverage to report")
        return 0
    dev_sources, dev_targets = shortlists.wordpiece_pairs(dev_pairs, tokenizer.tokenize)
    eos = np.array([EOS_ID], np.int32)
    decoded = [np.concatenate([source, eos]) for source in dev_sources]  # as the translator decodes them
    tables = shortlists.ShortlistTables(shortlist)
    coverage = shortlists.reference_coverage(tables, decoded, dev_targets, minimum=config.decoding.beam_width)
    batch_sizes = []
    by_length = sorted(decoded, key=len)  # batched as the translator batches them (section 7)
    for start in range(0, len(by_length), BATCH):
        batch = by_length[start:start + BATCH]
        width = max(len(source) for source in batch)
        padded = np.stack([np.pad(source, (0, width - len(source))) for source in batch])
        batch_sizes.append(int(tables.allowed_ids(padded, config.decoding.beam_width).shape[0]))
    print(f"summary: {shortlist.vocab_size:,} pieces; allowed ids on average "
          f"{coverage.allowed_sizes.mean():.0f} per dev sentence, {np.mean(batch_sizes):.0f} per batch of "
          f"{BATCH}; dev reference pieces allowed for their own sentence: {100 * coverage.fraction:.2f}% of "
          f"{sum(map(len, coverage.covered)):,} ({len(dev_pairs):,} dev pairs)")
    return 0


def _progress(message: str, done: bool = False) -> None:
    """A progress line, rewritten in place on a terminal; elsewhere only a stage's last line (``done``)."""
    if sys.stdout.isatty():
        print(f"\r{message}\033[K", end="\n" if done else "", flush=True)
    elif done:
        print(message, flush=True)


COMMAND = Command(
    defined_in(__spec__.name), __doc__, add_arguments, build_shortlist, check=check,
    examples=("--model-dir runs/en-fr",
              "--model-dir runs/wmt14-enfr --train train.tsv.gz --top-k 75 --frequent 75"),
)
main, build_parser = COMMAND.main, COMMAND.build_parser
