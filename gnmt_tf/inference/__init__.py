"""Text in, text out: the translator that is exported and that the Python API wraps."""
