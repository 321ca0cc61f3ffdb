"""``python -m gnmt_tf.report``: the command is :mod:`gnmt_tf.cli.report`."""

import sys

from gnmt_tf.cli.report import main

if __name__ == "__main__":
    sys.exit(main())
