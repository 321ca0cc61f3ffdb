"""Score a trained model on a test set: ``python -m gnmt_tf.evaluate --model-dir DIR --test TSV``.

Translates the test set's source side with the paper's beam search and prints
corpus BLEU with the sacrebleu signature, plus decoding speed: sentences/s and
words/s (whitespace-separated words of the translations). The first batch is
translated once before timing, so graph tracing is not counted. --json prints
the same as one JSON object.
"""

from __future__ import annotations

import json
import sys

from gnmt_tf.cli import common
from gnmt_tf.cli.commands import defined_in
from gnmt_tf.cli.scaffold import Command


def add_arguments(parser) -> None:
    parser.add_argument(
        "--test", required=True,
        help="test pairs: a TSV file (source<TAB>target, .gz accepted) or 'SRC_FILE,TGT_FILE'. For a figure "
        "to report use a held-out test set: the model directory's dev.tsv is the split that chose the best "
        "checkpoint, so its score is optimistic",
    )
    common.add_translator_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument(
        "--hypotheses", default=None, metavar="FILE",
        help="also write the translations of the test sources to FILE, one line per pair in test-set order",
    )


def evaluate(args) -> int:
    from gnmt_tf.data import read_parallel
    from gnmt_tf.inference.evaluation import evaluate as evaluate_translations

    pairs, report = read_parallel(args.test)
    translator, config, checkpoint = common.load_translator(args)
    # Opened before decoding: a path it cannot write fails now, not after the whole test set.
    hypotheses_file = open(args.hypotheses, "w", encoding="utf-8") if args.hypotheses else None
    print(report.summary(), file=sys.stderr)
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
        "skipped_lines": report.skipped_total,
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
