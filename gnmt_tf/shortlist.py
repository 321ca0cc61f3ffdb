"""``python -m gnmt_tf.shortlist``: the command is :mod:`gnmt_tf.cli.shortlist`."""

import sys

from gnmt_tf.cli.shortlist import build_parser, main  # noqa: F401  (build_parser: the documented interface)

if __name__ == "__main__":
    sys.exit(main())
