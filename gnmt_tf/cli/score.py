"""Score given translations with a trained model: ``python -m gnmt_tf.score --model-dir DIR``.

Reads pairs ``SOURCE<TAB>TRANSLATION``, one per line, from stdin (or --input) and
writes one line per pair, in the input order: the eq. 14 score, log P(Y|X) and the
translation's length in wordpieces (EOS included), tab-separated, computed by forced
decoding with the same softmax and penalties as the beam search (section 7), so a
translation the search produced scores what the search reported. A pair with an
empty side gets an empty line.

With --plot-attention DIR the attention of each pair (eq. 4-5) is drawn too, one PNG
per input line in input order (DIR/0001.png, ...).
"""

from __future__ import annotations

import argparse
import io
import os
import sys

from gnmt_tf.cli.common import (
    add_decoding_arguments,
    add_model_arguments,
    add_verbose_argument,
    load_translator,
    start_tensorflow,
    warn_truncated,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gnmt_tf.score",
        description=__doc__.split("\n\n")[1],
        epilog=__doc__.split("\n\n")[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model-dir", required=True, help="a directory written by python -m gnmt_tf.train")
    parser.add_argument("--input", default=None, help="file of SOURCE<TAB>TRANSLATION lines (default: stdin)")
    parser.add_argument("--output", default=None, help="where the scores go (default: stdout)")
    parser.add_argument(
        "--plot-attention", default=None, metavar="DIR",
        help="also draw each pair's attention as DIR/0001.png, DIR/0002.png, ... (DIR is created if needed)",
    )
    add_model_arguments(parser)
    add_decoding_arguments(parser, search=False)
    add_verbose_argument(parser)
    return parser


def read_pairs(lines):
    """(source, translation) of each line; a line without exactly one tab is an error naming it."""
    pairs = []
    for number, line in enumerate(lines, 1):
        fields = line.rstrip("\n").rstrip("\r").split("\t")
        if len(fields) != 2:
            raise ValueError(f"line {number}: expected SOURCE<TAB>TRANSLATION, found {len(fields)} field(s)")
        pairs.append((fields[0], fields[1]))
    return pairs


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.plot_attention and os.path.exists(args.plot_attention) and not os.path.isdir(args.plot_attention):
        print(f"error: --plot-attention {args.plot_attention} exists and is not a directory", file=sys.stderr)
        return 2
    start_tensorflow(args.verbose)
    from gnmt_tf.config import ConfigError
    from gnmt_tf.model_files import ModelDirError

    try:
        if args.input:
            with open(args.input, encoding="utf-8", errors="replace") as handle:
                pairs = read_pairs(handle)
        else:
            pairs = read_pairs(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace"))
        translator, _ = load_translator(args)
        sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
        scores = translator.score(sources, targets, alpha=args.alpha, beta=args.beta,
                                  return_attention=bool(args.plot_attention))
        warn_truncated(translator)
        lines = ["" if s is None else f"{s.score:.6f}\t{s.log_prob:.6f}\t{s.length}" for s in scores]
        if args.output:
            with open(args.output, "w", encoding="utf-8") as handle:
                handle.writelines(line + "\n" for line in lines)
        else:
            sys.stdout.writelines(line + "\n" for line in lines)
        if args.plot_attention:
            from gnmt_tf.plots import write_attention_pictures

            os.makedirs(args.plot_attention, exist_ok=True)
            write_attention_pictures([[s] if s is not None else [] for s in scores], args.plot_attention,
                                     sentences=sources)
    except (ConfigError, ModelDirError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"scored {len(pairs):,} pairs", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
