"""Export a trained model: ``python -m export --model-dir DIR --output BASE/NAME --format saved_model``.

Writes BASE/NAME/<version>/ (TF Serving's layout; the version defaults to the
next free integer) with tokenization, beam search and detokenization inside the
graph, checks that the export translates like the model, and only then moves
it into place. Several ``--model-dir`` (or ``--last-checkpoints K``) export one
ensemble (section 8.6), with the same signatures as one model.

Exit status: 0 exported; 2 a usage error, or a model directory or config that
cannot be used (nothing was attempted); 1 the export could not be made or does
not translate like the model (nothing was written).
"""

from __future__ import annotations

import argparse

from gnmt_tf.cli.common import add_beam_width_argument, add_ensemble_arguments, add_shortlist_argument, ensemble_members
from gnmt_tf.cli.commands import defined_in
from gnmt_tf.cli.scaffold import Command, UsageError

FORMATS = ("saved_model", "tflite")


def add_arguments(parser) -> None:
    add_ensemble_arguments(parser)
    parser.add_argument("--output", required=True, metavar="BASE/NAME", help="model base path; versions go below it")
    parser.add_argument("--format", required=True, help=f"artifact format: {', '.join(FORMATS)}")
    parser.add_argument(
        "--quantize", choices=("none", "int8"), default="none",
        help="int8: eq. 12 weights (one scale per output unit), checked against the float model's dev BLEU",
    )
    parser.add_argument("--version", type=int, default=None, help="version number (default: the next free one)")
    parser.add_argument(
        "--verify-sentences", type=int, default=8,
        help="dev sentences the export translates before it is moved into place; it must translate them as "
        "the model does (default: %(default)s)",
    )
    parser.add_argument(
        "--bleu-tolerance", type=float, default=0.5,
        help="int8: largest dev BLEU drop from the float model accepted (default: %(default)s)",
    )
    parser.add_argument(
        "--bleu-sentences", type=int, default=500,
        help="int8: dev sentences that the float model and the int8 export translate for the BLEU check of "
        "--bleu-tolerance (default: %(default)s)",
    )
    parser.add_argument(
        "--int8-products", choices=("float", "int8"), default="float",
        help="saved_model int8: multiply the dequantized weights in float32 (default; faster on x86 CPUs) "
        "or int8 x int8 with int32 accumulation as in section 6",
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
    built_in = parser.add_argument_group(
        "decoding built into the export",
        "alpha, beta and beamsize (the pruning margin) are inputs of each request;\n"
        "the signatures' defaults are the config's",
    )
    add_beam_width_argument(built_in)
    add_shortlist_argument(
        built_in, "the export's default (its translate_with_shortlist signatures switch it per request; a "
        "TFLite model has only this); default: decoding.use_shortlist of the model's config")


def export_model(args) -> int:
    from export.exporters import ExportError, ExportRequest, export, validate_request

    model_dirs, checkpoints = ensemble_members(args)
    request = ExportRequest(
        model_dir=model_dirs[0], output=args.output, version=args.version, checkpoint=checkpoints[0],
        ensemble_with=tuple(zip(model_dirs[1:], checkpoints[1:])), ensemble_rule=args.ensemble_rule,
        beam_width=args.beam_width, verify_sentences=args.verify_sentences, quantize=args.quantize,
        int8_products=args.int8_products, xla=args.xla, bleu_tolerance=args.bleu_tolerance,
        bleu_sentences=args.bleu_sentences, target_input_table=args.target_input_table,
        use_shortlist=args.use_shortlist,
    )
    try:
        validate_request(request, args.format)
    except ExportError as err:  # nothing was attempted
        raise UsageError(str(err)) from None
    export(request, args.format)
    return 0


def _exit_statuses():
    from export.exporters import ExportError

    return {ExportError: 1}


COMMAND = Command(
    defined_in(__spec__.name), __doc__, add_arguments, export_model, exit_statuses=_exit_statuses,
    examples=("--model-dir runs/en-fr --output serving_models/gnmt --format saved_model",
              "--model-dir runs/en-fr --output tflite_models/gnmt --format tflite --quantize int8"),
)
main, build_parser = COMMAND.main, COMMAND.build_parser
COMMAND.run_if_main(__name__)
