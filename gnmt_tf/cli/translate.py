"""Translate text with a trained model: ``python -m gnmt_tf.translate --model-dir DIR``.

Reads one sentence per line from stdin (or --input) and writes one translation
per line to stdout (or --output), in the input order; a blank line stays blank.
Sentences are decoded with the paper's beam search (section 7) in batches of
similar length. With --n-best N > 1 each sentence gets N lines in the Moses
n-best format ``INDEX ||| TRANSLATION ||| SCORE`` (INDEX counts input lines from
0; a blank line gets no entries).

With --alignments each translation is followed by its word alignment, as Marian and
OpenNMT write it: ``TRANSLATION ||| 0-0 1-2 2-1``, one ``SOURCE-TARGET`` pair per word of
the translation (0-based indices of the words of the input line and of the translation,
split on white space), the source word it attends to most (eq. 4-5, summed over the
words' wordpieces; gnmt_tf.inference.alignment). A blank line gets `` ||| ``. With
--n-best the alignment is a fourth field: ``INDEX ||| TRANSLATION ||| SCORE ||| ALIGNMENT``.

With --plot-attention DIR the attention matrix of each sentence's best
translation (eq. 4-5) is also drawn, one PNG per input line in input order:
DIR/0001.png for the first line, DIR/0002.png for the second, ... (a blank line
gets a picture saying it is empty). See gnmt_tf.plots.

With --po FILE a gettext catalog (.po, or a .pot template) is translated
instead: every empty msgstr is filled (a plural entry's msgstr[0] from msgid,
the others from msgid_plural, as many as the header's Plural-Forms says) and
its entry marked fuzzy; translated and fuzzy entries, comments, references,
contexts and obsolete entries stay as they are. --output (default: stdout) gets
the catalog, written whole or not at all. See gnmt_tf.localization.

With --glossary FILE (``source term<TAB>target term`` lines) every occurrence of a
source term, as a word, is translated as its target term, for a model trained
with localization.placeholders (the term is masked like a placeholder and the
beam search writes it exactly once; gnmt_tf.localization.glossary).
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
    parser.add_argument(
        "--alignments", action="store_true",
        help="write each translation's word alignment after it, 'TRANSLATION ||| 0-0 1-2 ...' (source word - "
        "target word, from 0; with --n-best a fourth field)",
    )
    parser.add_argument(
        "--glossary", default=None, metavar="FILE",
        help="required translations of terms, 'source term<TAB>target term' lines: every occurrence of a source "
        "term (as a word) is translated as its target term; for a model trained with localization.placeholders",
    )
    add_catalog_arguments(parser)


def add_catalog_arguments(parser) -> None:
    from gnmt_tf.localization.po_translation import RETRANSLATE_CHOICES

    catalog = parser.add_argument_group("gettext catalogs")
    catalog.add_argument(
        "--po", default=None, metavar="FILE",
        help="translate the gettext catalog FILE (.po or .pot) instead of lines: its empty msgstrs are "
        "filled and their entries marked fuzzy; --output gets the catalog",
    )
    catalog.add_argument(
        "--po-retranslate", choices=RETRANSLATE_CHOICES, default=None,
        help="also translate again the entries marked fuzzy (fuzzy), or every entry (all); default: only "
        "entries without a translation, never one translated or fuzzy already",
    )
    catalog.add_argument(
        "--po-language", default=None, metavar="LANG",
        help="the catalog's language (fr, pt_BR, ...), for a header that has none yet (a .pot's): its "
        "Language line, and its Plural-Forms if that is still the template's (default: gettext's n != 1)",
    )


def check(parser, args) -> None:
    """Usage checks before TensorFlow starts: --plot-attention's directory, the glossary, and what goes with --po."""
    from gnmt_tf.localization.glossary import GlossaryError, read_glossary

    common.check_plot_attention(parser, args)
    try:
        args.glossary_entries = read_glossary(args.glossary) if args.glossary else []
    except GlossaryError as err:
        parser.error(f"--glossary: {err}")
    if args.po is None:
        if args.po_retranslate or args.po_language:
            parser.error("--po-retranslate and --po-language need --po")
        return
    if args.input is not None:
        parser.error("--po reads the catalog: give --po or --input, not both")
    if args.n_best > 1 or args.plot_attention:
        parser.error("--n-best and --plot-attention are for lines, not for --po")
    if args.alignments:
        parser.error("--alignments is for lines, not for --po")


def _overrides(args) -> dict:
    """The decoding options of the command line, and the glossary's entries if one was given."""
    glossary = getattr(args, "glossary_entries", [])
    return {**common.decoding_overrides(args), **({"glossary": glossary} if glossary else {})}


def _lines(count: int) -> str:
    return f"{count:,} line" if count == 1 else f"{count:,} lines"


def translate(args) -> int:
    if args.po is not None:
        return translate_catalog(args)
    if args.plot_attention:
        os.makedirs(args.plot_attention, exist_ok=True)
    translator, _, _ = common.load_translator(args)
    with common.open_input(args) as source, open_output(args.output) as target:
        count = translate_stream(translator, source, target, args)
    print(f"translated {_lines(count)}", file=sys.stderr)
    return 0


def _alignment_text(translation) -> str:
    """A translation's alignment as "0-0 1-2 ...": source word - target word pairs ("" for no translation)."""
    pairs = translation.alignment if translation is not None else None
    return " ".join(f"{source}-{target}" for source, target in pairs or ())


def translate_stream(translator, source, target, args) -> int:
    """Translate ``source`` line by line into ``target``, ``args.chunk_size`` lines at a time."""
    overrides = _overrides(args)
    plot_directory = getattr(args, "plot_attention", None)
    alignments = getattr(args, "alignments", False)
    started = time.monotonic()
    count = 0
    chunk = []

    def flush():
        nonlocal count
        lines = [line.rstrip("\n").rstrip("\r") for line in chunk]
        if args.n_best > 1 or plot_directory or alignments:
            results = translator.translate_nbest(
                lines, n_best=args.n_best, return_attention=bool(plot_directory), return_alignment=alignments,
                **overrides,
            )
            for offset, nbest in enumerate(results):
                if args.n_best == 1:  # what translator.translate gives
                    best = nbest[0] if nbest else None
                    text = best.text if best else ""
                    target.write((f"{text} ||| {_alignment_text(best)}" if alignments else text) + "\n")
                    continue
                for hypothesis in nbest:
                    fields = [str(count + offset), hypothesis.text, f"{hypothesis.score:.4f}"]
                    fields += [_alignment_text(hypothesis)] if alignments else []
                    target.write(" ||| ".join(fields) + "\n")
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


def translate_catalog(args) -> int:
    """--po: fill the catalog's untranslated entries and write it to --output (or stdout)."""
    from gnmt_tf.localization import po, po_translation

    catalog = po.read_po(args.po)  # a malformed catalog stops the command before the model loads
    translator, _, _ = common.load_translator(args)
    report = po_translation.fill_catalog(catalog, lambda lines: _translate_lines(translator, lines, args),
                                         retranslate=args.po_retranslate, language=args.po_language)
    if args.output:
        catalog.save(args.output)  # a temporary file renamed into place: never half written
    else:
        _write_to_stdout(catalog)
    print(report.summary(), file=sys.stderr)
    return 0


def _translate_lines(translator, lines, args):
    """The translations of ``lines``, ``args.chunk_size`` at a time, with a progress line after each chunk."""
    overrides = _overrides(args)
    started = time.monotonic()
    translations = []
    for start in range(0, len(lines), args.chunk_size):
        results = translator.translate(list(lines[start:start + args.chunk_size]), **overrides)
        common.warn_truncated(results, translator.max_input_length)
        translations.extend(result.text for result in results)
        rate = len(translations) / max(time.monotonic() - started, 1e-9)
        print(f"translated {_lines(len(translations))} of {len(lines):,} ({rate:.1f} lines/s)",
              file=sys.stderr, flush=True)
    return translations


def _write_to_stdout(catalog) -> None:
    """The catalog in its own charset to stdout (as text where stdout has no byte stream)."""
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        sys.stdout.write(catalog.to_text())
        return
    data = catalog.to_bytes()  # encoded before anything is written
    sys.stdout.flush()
    buffer.write(data)
    buffer.flush()


COMMAND = Command(
    defined_in(__spec__.name), __doc__, add_arguments, translate,
    check=check,
    examples=("--model-dir runs/en-fr < in.txt > out.txt",
              "--model-dir runs/en-fr --n-best 4 --beam-width 8 < in.txt",
              "--model-dir runs/en-fr --alignments < in.txt",
              "--model-dir runs/en-fr --po messages.pot --po-language fr --output fr.po"),
    # The translator's ValueError: a request it cannot decode (more n-best entries than the beam holds);
    # gnmt_tf.localization.po.PoError, a ValueError too: a malformed catalog (its file and line).
    exit_statuses=lambda: {ValueError: 2},
)
main, build_parser = COMMAND.main, COMMAND.build_parser
