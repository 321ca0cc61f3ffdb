"""Text in, text out: the translator that is exported (:class:`TranslatorModule`), the Python API that
wraps it (:class:`Translator`), and the :class:`Translation` every translator returns.

Names are imported on first use: :mod:`gnmt_tf.inference.results` needs no TensorFlow.
"""

from gnmt_tf.lazy import lazy_names

_PUBLIC = {
    "Translation": "gnmt_tf.inference.results",
    "Translator": "gnmt_tf.inference.translator",
    "TranslatorModule": "gnmt_tf.inference.translator",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _PUBLIC)
