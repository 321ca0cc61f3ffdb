"""Score a trained model on a test set: ``python -m gnmt_tf.evaluate --model-dir DIR --test TSV``.

Translates the test set's source side with the paper's beam search and prints
corpus BLEU with the sacrebleu signature, plus decoding speed: sentences/s and
words/s (whitespace-separated words of the translations). The first batch is
translated once before timing, so graph tracing is not counted. --json prints
the same as one JSON object.

The test set is scored whole: a line that is not a pair (not two tab-separated
columns, an empty side, not UTF-8) is an error naming its file and line, not a
line skipped, and so is a test set without pairs.
"""

from __future__ import annotations

import json
import os
import sys
from itertools import zip_longest
from typing import List, Tuple

from gnmt_tf.cli import common
from gnmt_tf.cli.commands import defined_in
from gnmt_tf.cli.scaffold import Command
from gnmt_tf.cli.text_files import (
    ENCODING_ERRORS,
    add_encoding_errors_argument,
    open_input,
    tab_separated_pair,
)
from gnmt_tf.data.readers import DataError

Pair = Tuple[str, str]


def add_arguments(parser) -> None:
    parser.add_argument(
        "--test", required=True,
        help="test pairs: a TSV file (source<TAB>target, .gz accepted) or 'SRC_FILE,TGT_FILE'. For a figure "
        "to report use a held-out test set: the model directory's dev.tsv is the split that chose the best "
        "checkpoint, so its score is optimistic",
    )
    add_encoding_errors_argument(parser)
    common.add_translator_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument(
        "--hypotheses", default=None, metavar="FILE",
        help="also write the translations of the test sources to FILE, one line per pair in test-set order",
    )


def read_test_set(spec: str, undecodable) -> List[Pair]:
    """The pairs of ``--test``: a TSV file (plain or gzip) or ``SOURCE_FILE,TARGET_FILE``, every line a pair
    (see the module docstring); ``undecodable`` reads the bytes that are not UTF-8
    (:data:`~gnmt_tf.cli.text_files.ENCODING_ERRORS`)."""
    if "," in spec and not os.path.exists(spec):
        pairs = _read_aligned(spec, undecodable)
    else:
        with open_input(spec, undecodable) as lines:
            pairs = [_test_pair(*tab_separated_pair(line, "SOURCE<TAB>REFERENCE", f"{spec} line {number}"),
                                f"{spec} line {number}") for number, line in enumerate(lines, 1)]
    if not pairs:
        raise DataError(f"{spec} has no lines: a test set needs at least one pair")
    return pairs


def _read_aligned(spec: str, undecodable) -> List[Pair]:
    """The pairs of aligned files ``SOURCE_FILE,TARGET_FILE``: line i of one translates line i of the
    other."""
    paths = [part.strip() for part in spec.split(",")]
    if len(paths) != 2 or not all(paths):
        raise DataError(f"expected a TSV file or 'SOURCE_FILE,TARGET_FILE', got {spec!r}")
    with open_input(paths[0], undecodable) as sources, open_input(paths[1], undecodable) as targets:
        pairs = []
        for number, (source, target) in enumerate(zip_longest(sources, targets), 1):
            if source is None or target is None:
                shorter = paths[source is not None]
                raise DataError(f"{paths[0]} and {paths[1]} differ in length: {shorter} ends after line "
                                f"{number - 1}; line i of one must translate line i of the other")
            pairs.append(_test_pair(source.rstrip("\n"), target.rstrip("\n"), f"{spec} line {number}"))
    return pairs


def _test_pair(source: str, reference: str, where: str) -> Pair:
    """The pair with its surrounding whitespace stripped; an empty side is an error naming ``where``."""
    source, reference = source.strip(), reference.strip()
    if not source or not reference:
        raise DataError(f"{where}: the {'source' if not source else 'reference'} is empty; every line of a "
                        "test set must be a pair")
    return source, reference


def evaluate(args) -> int:
    from gnmt_tf.inference.evaluation import evaluate as evaluate_translations

    pairs = read_test_set(args.test, ENCODING_ERRORS[args.encoding_errors])
    translator, config, checkpoint = common.load_translator(args)
    # Opened before decoding: a path it cannot write fails now, not after the whole test set.
    hypotheses_file = open(args.hypotheses, "w", encoding="utf-8") if args.hypotheses else None
    print(f"read {len(pairs):,} test pairs from {args.test}", file=sys.stderr)
    overrides = common.decoding_overrides(args)
    evaluation = evaluate_translations(translator, pairs, overrides)  # warm-up batch first: tracing not timed
    common.warn_truncated(evaluation.translations, translator.max_input_length)
    bleu, hypotheses, seconds = evaluation.bleu, evaluation.hypotheses, evaluation.seconds
    words = sum(len(h.split()) for h in hypotheses)
    d = config.decoding
    result = {
        "bleu": round(bleu.score, 2),
        "bleu_text": bleu.text,
        "signature": bleu.signature,
        "checkpoint": checkpoint,
        "search": evaluation.search,
        "sentences": len(pairs),
        "truncated_inputs": evaluation.truncated,
        "seconds": round(seconds, 3),
        "sentences_per_second": round(len(pairs) / seconds, 2),
        "words_per_second": round(words / seconds, 2),
        "beam_width": overrides.get("beam_width", d.beam_width),
        "alpha": overrides.get("alpha", d.alpha),
        "beta": overrides.get("beta", d.beta),
        "beamsize": overrides.get("beamsize", d.beamsize),
        "shortlist": overrides.get("use_shortlist", translator.module.uses_shortlist),
        "batch_size": args.batch_size,
        "concurrent_batches": args.concurrent_batches,
    }
    if hypotheses_file:
        with hypotheses_file:
            hypotheses_file.writelines(h + "\n" for h in hypotheses)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{bleu.text}")
        print(f"signature: {bleu.signature}")
        print(f"checkpoint: {checkpoint} ({evaluation.search})")
        print(
            f"decoding: {result['sentences_per_second']} sentences/s, {result['words_per_second']} words/s "
            f"({len(pairs)} sentences in {seconds:.1f} s; beam {result['beam_width']}, alpha {result['alpha']}, "
            f"beta {result['beta']}, beamsize {result['beamsize']}, "
            f"shortlist {'on' if result['shortlist'] else 'off'}, batch {args.batch_size} x "
            f"{args.concurrent_batches} at a time)"
        )
    return 0


COMMAND = Command(defined_in(__spec__.name), __doc__, add_arguments, evaluate,
                  examples=("--model-dir runs/en-fr --test runs/en-fr/dev.tsv --json",))
main, build_parser = COMMAND.main, COMMAND.build_parser
