"""``python -m gnmt_tf.report``: the command is :mod:`gnmt_tf.cli.report`."""

import sys

from gnmt_tf.cli.report import build_parser, main  # noqa: F401  (build_parser: the documented interface)

if __name__ == "__main__":
    sys.exit(main())
