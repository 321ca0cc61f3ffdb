"""Exporters for trained GNMT models: TF Serving SavedModels and TFLite files.

Filled by the export work (``python -m export``); empty until then.
"""
