"""Plot a training run's curves: ``python -m gnmt_tf.report --model-dir DIR``.

Reads the TensorBoard event files that training writes under DIR/logs (train/
and dev/) and draws training loss, dev BLEU, the clipping bound delta (section
6) and the learning rate (section 8.3) against the step, as one PNG (default:
DIR/training_curves.png). Prints where the picture went and a one-line summary:
the last step logged, the last training loss and the best dev BLEU.

Exit status: 0 on success, 2 when DIR does not exist or holds no event files, or the
picture cannot be written.
"""

from __future__ import annotations

from gnmt_tf.cli.common import add_model_dir_argument
from gnmt_tf.cli.commands import defined_in
from gnmt_tf.cli.scaffold import Command


def add_arguments(parser) -> None:
    add_model_dir_argument(parser)
    parser.add_argument(
        "--output", default=None, metavar="PATH",
        help="where the PNG goes (default: MODEL_DIR/training_curves.png); parent directories are created",
    )


def summary_line(scalars) -> str:
    """One line: last step, last training loss, best dev BLEU (and its step)."""
    steps = [series[-1][0] for series in scalars.values() if series]
    parts = [f"last step {max(steps)}" if steps else "no steps logged"]
    loss = scalars.get("train/loss")
    if loss:
        parts.append(f"training loss {loss[-1][1]:.4f}")
    bleu = scalars.get("dev/bleu")
    if bleu:
        step, best = max(bleu, key=lambda point: (point[1], -point[0]))
        parts.append(f"best dev BLEU {best:.2f} (step {step})")
    else:
        parts.append("no dev BLEU logged")
    return ", ".join(parts)


def report(args) -> int:
    from gnmt_tf.plots import save_training_curves

    path, scalars = save_training_curves(args.model_dir, args.output)  # NoTrainingLogs is an OSError: exit 2
    print(f"wrote {path}")
    print(summary_line(scalars))
    return 0


COMMAND = Command(defined_in(__spec__.name), __doc__, add_arguments, report,
                  examples=("--model-dir runs/en-fr",))
main, build_parser = COMMAND.main, COMMAND.build_parser
