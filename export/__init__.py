"""Exporters for trained GNMT models, behind one command line, ``python -m export``.

``exporters.py`` holds one exporter per artifact format: a TF Serving SavedModel
(``BASE/NAME/<version>/``, with warm-up requests for TF Serving in
``assets.extra/tf_serving_warmup_requests``, written by ``warmup.py``) and a TFLite
file (``tflite.py``: conversion, the allowed custom ops, and an interpreter-backed
translator). Either may be int8 (eq. 12). Each export is staged in a hidden directory,
checked to translate like the Keras model, and only then renamed into place. What is
exported is the in-graph translator (tokenization, beam search and detokenization
inside the graph) of :mod:`gnmt_tf.inference`.
"""
