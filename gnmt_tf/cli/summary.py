"""Build a GNMT from a config and print its layers and parameter counts.

    python -m gnmt_tf.summary --config gnmt_wmt14_enfr
"""

from __future__ import annotations

import argparse
import sys

from gnmt_tf.cli.common import add_verbose_argument, start_tensorflow


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gnmt_tf.summary",
        description="Build the GNMT model of a config and print its layers and parameter counts.",
    )
    parser.add_argument(
        "--config", default="small", help="YAML file or shipped config name (default: %(default)s)"
    )
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override one config field, e.g. --set model.units=512 (repeatable)",
    )
    add_verbose_argument(parser)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    start_tensorflow(args.verbose)

    from gnmt_tf.config import ConfigError, load_config, parse_overrides
    from gnmt_tf.model_files import build_model

    try:
        config = load_config(args.config, overrides=parse_overrides(args.overrides))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    model = build_model(config)
    model.summary(expand_nested=True)
    trainable = sum(int(w.shape.num_elements()) for w in model.trainable_weights)
    print(f"trainable parameters: {trainable:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
