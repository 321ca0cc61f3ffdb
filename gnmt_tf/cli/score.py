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

import os
import sys

from gnmt_tf.cli import common
from gnmt_tf.cli.commands import defined_in
from gnmt_tf.cli.scaffold import Command
from gnmt_tf.cli.text_files import input_name, open_output, tab_separated_pair


def add_arguments(parser) -> None:
    common.add_translator_arguments(parser, search=False)
    common.add_input_output_arguments(parser, "SOURCE<TAB>TRANSLATION lines", "the scores")
    common.add_plot_attention_argument(parser, "each pair")


def read_pairs(lines, name: str):
    """(source, translation) of each line; a line without exactly one tab is an error naming the input
    ``name`` and the line."""
    return [tab_separated_pair(line, "SOURCE<TAB>TRANSLATION", f"{name} line {number}")
            for number, line in enumerate(lines, 1)]


def score(args) -> int:
    with common.open_input(args) as source:
        pairs = read_pairs(source, input_name(args.input))
    translator, _, _ = common.load_translator(args)
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    scores = translator.score(sources, targets, alpha=args.alpha, beta=args.beta,
                              return_attention=bool(args.plot_attention))
    common.warn_truncated(scores, translator.max_input_length)
    lines = ["" if s is None else f"{s.score:.6f}\t{s.log_prob:.6f}\t{s.length}" for s in scores]
    with open_output(args.output) as target:
        target.writelines(line + "\n" for line in lines)
    if args.plot_attention:
        from gnmt_tf.plots import write_attention_pictures

        os.makedirs(args.plot_attention, exist_ok=True)
        write_attention_pictures([[s] if s is not None else [] for s in scores], args.plot_attention,
                                 sentences=sources)
    print(f"scored {len(pairs):,} pairs", file=sys.stderr)
    return 0


COMMAND = Command(
    defined_in(__spec__.name), __doc__, add_arguments, score, check=common.check_plot_attention,
    examples=("--model-dir runs/en-fr < pairs.tsv > scores.txt",),
    exit_statuses=lambda: {ValueError: 2},  # what the translator refuses to score
)
main, build_parser = COMMAND.main, COMMAND.build_parser
