"""Translate text with a trained model: ``python -m gnmt_tf.translate --model-dir DIR``.

Reads one sentence per line from stdin (or --input) and writes one translation
per line to stdout (or --output), in the input order; a blank line stays blank.
Sentences are decoded with the paper's beam search (section 7) in batches of
similar length. With --n-best N > 1 each sentence gets N lines in the Moses
n-best format ``INDEX ||| TRANSLATION ||| SCORE`` (INDEX counts input lines from
0; a blank line gets no entries).

With --plot-attention DIR the attention matrix of each sentence's best
translation (eq. 4-5) is also drawn, one PNG per input line in input order:
DIR/0001.png for the first line, DIR/0002.png for the second, ... (a blank line
gets a picture saying it is empty). See gnmt_tf.plots.
"""

from __future__ import annotations

import argparse
import io
import os
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
        prog="python -m gnmt_tf.translate",
        description=__doc__.split("\n\n")[1],
        epilog=__doc__.split("\n\n")[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model-dir", required=True, help="a directory written by python -m gnmt_tf.train")
    parser.add_argument("--input", default=None, help="file of source sentences, one per line (default: stdin)")
    parser.add_argument("--output", default=None, help="where translations go (default: stdout)")
    parser.add_argument("--n-best", type=int, default=1, help="translations per sentence (default: 1)")
    parser.add_argument(
        "--chunk-size", type=int, default=1000,
        help="lines read, sorted by length and translated at a time (default: 1000)",
    )
    parser.add_argument(
        "--plot-attention", default=None, metavar="DIR",
        help="also write the attention matrix of each line's best translation as DIR/0001.png, "
        "DIR/0002.png, ... (one per input line, in input order; DIR is created if needed)",
    )
    add_model_arguments(parser)
    add_decoding_arguments(parser)
    add_verbose_argument(parser)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    start_tensorflow(args.verbose)
    from gnmt_tf.config import ConfigError
    from gnmt_tf.model_files import ModelDirError

    if args.plot_attention and os.path.exists(args.plot_attention) and not os.path.isdir(args.plot_attention):
        print(f"error: --plot-attention {args.plot_attention} exists and is not a directory", file=sys.stderr)
        return 2
    try:
        if args.plot_attention:
            os.makedirs(args.plot_attention, exist_ok=True)
        translator, _ = load_translator(args)
        source = open(args.input, encoding="utf-8", errors="replace") if args.input else io.TextIOWrapper(
            sys.stdin.buffer, encoding="utf-8", errors="replace"
        )
        target = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout
        try:
            count = translate_stream(translator, source, target, args)
        finally:
            if args.input:
                source.close()
            if args.output:
                target.close()
    except (ConfigError, ModelDirError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"translated {count:,} lines", file=sys.stderr)
    return 0


def translate_stream(translator, source, target, args) -> int:
    """Translate ``source`` line by line into ``target``, ``args.chunk_size`` lines at a time."""
    overrides = decoding_overrides(args)
    plot_directory = getattr(args, "plot_attention", None)
    started = time.monotonic()
    count = 0
    chunk = []

    def flush():
        nonlocal count
        lines = [line.rstrip("\n").rstrip("\r") for line in chunk]
        if args.n_best > 1 or plot_directory:
            results = translator.translate_nbest(
                lines, n_best=args.n_best, return_attention=bool(plot_directory), **overrides
            )
            for offset, nbest in enumerate(results):
                if args.n_best == 1:  # what translator.translate gives
                    target.write((nbest[0].text if nbest else "") + "\n")
                    continue
                for hypothesis in nbest:
                    target.write(f"{count + offset} ||| {hypothesis.text} ||| {hypothesis.score:.4f}\n")
        else:
            for translation in translator.translate(lines, **overrides):
                target.write(translation + "\n")
        target.flush()
        if plot_directory:
            from gnmt_tf.plots import write_attention_pictures

            write_attention_pictures(results, plot_directory, sentences=lines, first_index=count + 1)
        warn_truncated(translator)
        count += len(lines)
        rate = count / max(time.monotonic() - started, 1e-9)
        print(f"translated {count:,} lines ({rate:.1f} lines/s)", file=sys.stderr, flush=True)
        chunk.clear()

    for line in source:
        chunk.append(line)
        if len(chunk) >= args.chunk_size:
            flush()
    if chunk:
        flush()
    return count


if __name__ == "__main__":
    sys.exit(main())
