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

from gnmt_tf.cli.common import add_verbose_argument, start_tensorflow


def add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    """Beam search options shared by translate and evaluate (defaults: the model's config)."""
    group = parser.add_argument_group("beam search (defaults from the model's config, section 7)")
    group.add_argument("--beam-width", type=int, default=None, help="hypotheses kept per sentence")
    group.add_argument("--alpha", type=float, default=None, help="length normalisation strength (eq. 14)")
    group.add_argument("--beta", type=float, default=None, help="coverage penalty strength (eq. 14)")
    group.add_argument("--beamsize", type=float, default=None, help="pruning margin; 'inf' disables pruning")
    group.add_argument("--batch-size", type=int, default=32, help="sentences decoded together (default: 32)")
    group.add_argument(
        "--max-input-length", type=int, default=250,
        help="longer inputs (in wordpieces) are truncated to this, with a warning (default: 250)",
    )
    group.add_argument(
        "--checkpoint", choices=("best", "latest", "averaged"), default="best",
        help="which checkpoint of the model directory to use: best by dev BLEU (default), the latest, "
        "or the average of the last ones written by python -m gnmt_tf.average",
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
    add_decoding_arguments(parser)
    add_verbose_argument(parser)
    return parser


def load_translator(args):
    """Model, tokenizer and a Translator configured from the command line."""
    from gnmt_tf.model_dir import load_model_dir
    from gnmt_tf.inference.translator import Translator

    model, tokenizer, config = load_model_dir(args.model_dir, which=args.checkpoint)
    translator = Translator(
        model, tokenizer, config.decoding, batch_size=args.batch_size, max_input_length=args.max_input_length
    )
    return translator, config


def decoding_overrides(args) -> dict:
    return {
        key: value
        for key, value in dict(beam_width=args.beam_width, alpha=args.alpha, beta=args.beta, beamsize=args.beamsize).items()
        if value is not None
    }


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    start_tensorflow(args.verbose)
    from gnmt_tf.config import ConfigError
    from gnmt_tf.model_dir import ModelDirError

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
        if translator.truncated:
            print(
                f"warning: {translator.truncated} input line(s) longer than {translator.max_input_length} "
                f"wordpieces were truncated (--max-input-length)", file=sys.stderr,
            )
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
