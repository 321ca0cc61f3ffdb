"""Score a trained model on a test set: ``python -m gnmt_tf.evaluate --model-dir DIR --test TSV``.

Translates the test set's source side with the paper's beam search and prints
corpus BLEU with the sacrebleu signature, plus decoding speed: sentences/s and
words/s (whitespace-separated words of the translations). The first batch is
translated once before timing, so graph tracing is not counted. --json prints
the same as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


from gnmt_tf.cli.common import (
    add_decoding_arguments,
    add_model_arguments,
    add_verbose_argument,
    decoding_overrides,
    load_translator,
    start_tensorflow,
    warn_truncated,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gnmt_tf.evaluate",
        description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model-dir", required=True, help="a directory written by python -m gnmt_tf.train")
    parser.add_argument(
        "--test", required=True,
        help="test pairs: a TSV file (source<TAB>target, .gz accepted) or 'SRC_FILE,TGT_FILE'",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument("--hypotheses", default=None, help="also write the translations to this file")
    add_model_arguments(parser)
    add_decoding_arguments(parser)
    add_verbose_argument(parser)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    start_tensorflow(args.verbose)
    from gnmt_tf.config import ConfigError
    from gnmt_tf.data import DataError, read_parallel
    from gnmt_tf.metrics.bleu import corpus_bleu
    from gnmt_tf.model_files import ModelDirError

    try:
        pairs, report = read_parallel(args.test)
        translator, config = load_translator(args)
        # Opened before decoding: a path it cannot write fails now, not after the whole test set.
        hypotheses_file = open(args.hypotheses, "w", encoding="utf-8") if args.hypotheses else None
    except (ConfigError, DataError, ModelDirError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(report.summary(), file=sys.stderr)
    overrides = decoding_overrides(args)
    sources = [source for source, _ in pairs]
    references = [" ".join(target.split()) for _, target in pairs]

    translator.translate(sources[: args.batch_size], **overrides)  # warm-up: trace the search
    started = time.monotonic()
    hypotheses = translator.translate(sources, **overrides)
    seconds = time.monotonic() - started
    warn_truncated(translator)
    bleu = corpus_bleu(hypotheses, references)
    words = sum(len(h.split()) for h in hypotheses)
    d = config.decoding
    result = {
        "bleu": round(bleu.score, 2),
        "bleu_text": bleu.text,
        "signature": bleu.signature,
        "sentences": len(pairs),
        "skipped_lines": report.skipped_total,
        "truncated_inputs": translator.truncated,
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
        print(
            f"decoding: {result['sentences_per_second']} sentences/s, {result['words_per_second']} words/s "
            f"({len(pairs)} sentences in {seconds:.1f} s; beam {result['beam_width']}, alpha {result['alpha']}, "
            f"beta {result['beta']}, beamsize {result['beamsize']}, "
            f"shortlist {'on' if result['shortlist'] else 'off'}, batch {args.batch_size} x "
            f"{args.concurrent_batches} at a time)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
