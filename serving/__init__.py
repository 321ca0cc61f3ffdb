"""Serving exported GNMT models: launch files for TF Serving, REST/gRPC clients, a local server.

Filled by the serving work; empty until then.
"""
