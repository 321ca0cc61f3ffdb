"""The command-line tools, ``python -m gnmt_tf.<command>``."""
