"""Text in, text out: the translator that is exported (:class:`TranslatorModule`) and the Python API that wraps it (:class:`Translator`)."""

from gnmt_tf.inference.translator import Score, Translation, Translator, TranslatorModule

__all__ = ["Score", "Translation", "Translator", "TranslatorModule"]
