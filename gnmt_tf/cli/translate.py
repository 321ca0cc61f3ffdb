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

import os
import sys
import time

from gnmt_tf.cli import common
from gnmt_tf.cli.commands import defined_in
from gnmt_tf.cli.scaffold import Command
from gnmt_tf.cli.text_files import open_output


def add_arguments(parser) -> None:
    common.add_translator_arguments(parser)
    common.add_input_output_arguments(parser, "source sentences, one per line", "translations")
    parser.add_argument("--n-best", type=int, default=1, help="translations per sentence (default: 1)")
    parser.add_argument(
        "--chunk-size", type=int, default=1000,
        help="input lines read at a time: each chunk is sorted by length into batches, translated and "
        "written out in input order before the next is read; bounds memory on long inputs (default: 1000)",
    )
    common.add_plot_attention_argument(parser, "each line's best translation")


def _lines(count: int) -> str:
    return f"{count:,} line" if count == 1 else f"{count:,} lines"


def translate(args) -> int:
    if args.plot_attention:
        os.makedirs(args.plot_attention, exist_ok=True)
    translator, _, _ = common.load_translator(args)
    with common.open_input(args) as source, open_output(args.output) as target:
        count = translate_stream(translator, source, target, args)
    print(f"translated {_lines(count)}", file=sys.stderr)
    return 0


def translate_stream(translator, source, target, args) -> int:
    """Translate ``source`` line by line into ``target``, ``args.chunk_size`` lines at a time."""
    overrides = common.decoding_overrides(args)
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
            results = translator.translate(lines, **overrides)
            for translation in results:
                target.write(translation.text + "\n")
        target.flush()
        if plot_directory:
            from gnmt_tf.plots import write_attention_pictures

            write_attention_pictures(results, plot_directory, sentences=lines, first_index=count + 1)
        common.warn_truncated(results, translator.max_input_length)
        count += len(lines)
        rate = count / max(time.monotonic() - started, 1e-9)
        print(f"translated {_lines(count)} ({rate:.1f} lines/s)", file=sys.stderr, flush=True)
        chunk.clear()

    for line in source:
        chunk.append(line)
        if len(chunk) >= args.chunk_size:
            flush()
    if chunk:
        flush()
    return count


COMMAND = Command(
    defined_in(__spec__.name), __doc__, add_arguments, translate,
    check=common.check_plot_attention,
    examples=("--model-dir runs/en-fr < in.txt > out.txt",
              "--model-dir runs/en-fr --n-best 4 --beam-width 8 < in.txt"),
    # The translator's ValueError: a request it cannot decode (more n-best entries than the beam holds).
    exit_statuses=lambda: {ValueError: 2},
)
main, build_parser = COMMAND.main, COMMAND.build_parser
