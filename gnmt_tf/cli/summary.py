"""Print a config's model: ``python -m gnmt_tf.summary --config NAME``.

Builds the GNMT model of a config and prints its layers and parameter counts.
"""

from __future__ import annotations

from gnmt_tf.cli.commands import defined_in
from gnmt_tf.cli.common import config_help
from gnmt_tf.cli.scaffold import Command


def add_arguments(parser) -> None:
    parser.add_argument(
        "--config", default="small", help=config_help("%(default)s")
    )
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override one config field, e.g. --set model.units=512 (repeatable)",
    )


def summary(args) -> int:
    from gnmt_tf.config import load_config, parse_overrides
    from gnmt_tf.model_files import build_model

    config = load_config(args.config, overrides=parse_overrides(args.overrides))
    model = build_model(config)
    model.summary(expand_nested=True)
    trainable = sum(int(w.shape.num_elements()) for w in model.trainable_weights)
    print(f"trainable parameters: {trainable:,}")
    return 0


COMMAND = Command(defined_in(__spec__.name), __doc__, add_arguments, summary,
                  examples=("--config gnmt_wmt14_enfr",))
main, build_parser = COMMAND.main, COMMAND.build_parser
