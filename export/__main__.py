"""Export a trained model: ``python -m export --model-dir DIR --output BASE/NAME --format saved_model``.

Writes BASE/NAME/<version>/ (TF Serving's layout; the version defaults to the
next free integer) with tokenization, beam search and detokenization inside the
graph, checks that the export translates like the model, and only then moves
it into place.
"""

from __future__ import annotations

import argparse
import sys

from gnmt_tf.cli.common import add_verbose_argument, start_tensorflow
from gnmt_tf.model_files import CHECKPOINT_CHOICES

FORMATS = ("saved_model", "tflite")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m export",
        epilog="examples:\n"
        "  python -m export --model-dir runs/en-fr --output models/gnmt --format saved_model\n"
        "  python -m export --model-dir runs/en-fr --output models/gnmt_tflite --format tflite --quantize int8",
        description=__doc__.split("\n\n")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model-dir", required=True, help="a directory written by python -m gnmt_tf.train")
    parser.add_argument("--output", required=True, metavar="BASE/NAME", help="model base path; versions go below it")
    parser.add_argument("--format", required=True, help=f"artifact format: {', '.join(FORMATS)}")
    parser.add_argument(
        "--quantize", choices=("none", "int8"), default="none",
        help="int8: eq. 12 weights (one scale per output unit), checked against the float model's dev BLEU",
    )
    parser.add_argument("--version", type=int, default=None, help="version number (default: the next free one)")
    parser.add_argument("--checkpoint", choices=CHECKPOINT_CHOICES, default="best",
                        help="which checkpoint of the model directory to export (default: %(default)s)")
    parser.add_argument("--beam-width", type=int, default=None, help="beam width built into the export")
    parser.add_argument("--verify-sentences", type=int, default=8, help="dev sentences translated to check it")
    parser.add_argument(
        "--bleu-tolerance", type=float, default=0.5,
        help="int8: largest dev BLEU drop from the float model accepted (default: %(default)s)",
    )
    parser.add_argument(
        "--bleu-sentences", type=int, default=500, help="int8: dev sentences of the BLEU check (default: %(default)s)"
    )
    parser.add_argument(
        "--int8-products", choices=("float", "int8"), default="float",
        help="saved_model int8: multiply the dequantized weights in float32 (default; faster on x86 CPUs) "
        "or int8 x int8 with int32 accumulation as in section 6",
    )
    parser.add_argument(
        "--shortlist", dest="use_shortlist", action=argparse.BooleanOptionalAction, default=None,
        help="whether the export decodes with the model directory's vocabulary shortlist by default "
        "(the SavedModel's translate_with_shortlist signatures switch it per request; a TFLite model "
        "has only this setting). Default: decoding.use_shortlist of the model's config",
    )
    parser.add_argument(
        "--xla", action="store_true",
        help="saved_model: compile the decoding step with XLA, at a fixed set of padded shapes that the "
        "warm-up requests compile before serving (TF Serving then needs --xla_cpu_compilation_enabled)",
    )
    parser.add_argument(
        "--target-input-table", action=argparse.BooleanOptionalAction, default=None,
        help="store the bottom decoder layer's input projection of every target wordpiece, so that each "
        "decoding step gathers a row instead of a product (faster; the table adds vocabulary x 4 x units "
        "numbers to the artifact). Default: on for saved_model, off for tflite",
    )
    add_verbose_argument(parser)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    start_tensorflow(args.verbose)
    from export.exporters import ExportError, ExportRequest, export, validate_request
    from gnmt_tf.config import ConfigError
    from gnmt_tf.model_files import ModelDirError

    request = ExportRequest(
        model_dir=args.model_dir, output=args.output, version=args.version, checkpoint=args.checkpoint,
        beam_width=args.beam_width, verify_sentences=args.verify_sentences, quantize=args.quantize,
        int8_products=args.int8_products, xla=args.xla, bleu_tolerance=args.bleu_tolerance,
        bleu_sentences=args.bleu_sentences, target_input_table=args.target_input_table,
        use_shortlist=args.use_shortlist,
    )
    try:
        validate_request(request, args.format)
    except ExportError as err:  # a usage error: nothing was attempted
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        export(request, args.format)
    except (ExportError, ModelDirError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
