"""Software localization: the message catalogs translators work in, and what translating them needs.

:mod:`gnmt_tf.localization.po` reads and writes gettext PO and POT files (standard library only);
:mod:`gnmt_tf.localization.po_translation` fills a catalog's untranslated messages through a
translate function (``python -m gnmt_tf.translate --po``). Nothing here imports TensorFlow.
"""
