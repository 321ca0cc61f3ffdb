"""One exporter per artifact format, behind one command line (``python -m export``).

Every export goes to ``BASE/NAME/<version>/`` (TF Serving's layout; the version
defaults to one more than the highest existing one). It is written into a
hidden temporary directory next to it, checked, and only then renamed into
place, so a server watching ``BASE/NAME`` never sees a half-written or
unverified version, and a failed export leaves nothing behind.

The check: a few dev sentences are translated with the exported artifact, as
a client would load it, and with the Keras model through
:class:`gnmt_tf.translator.Translator` with the same beam settings; float
exports must give identical strings.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Type

import tensorflow as tf

from export.translator_module import ExportableTranslator


class ExportError(RuntimeError):
    """An export could not be made, or made something that does not translate like the model."""


@dataclass
class ExportRequest:
    model_dir: str
    output: str  # BASE/NAME
    version: Optional[int] = None
    checkpoint: str = "best"
    beam_width: Optional[int] = None
    verify_sentences: int = 8
    log: Callable[[str], None] = print


def next_version(base: str) -> int:
    """One more than the highest numeric subdirectory of ``base`` (1 if there is none)."""
    if not os.path.isdir(base):
        return 1
    versions = [int(name) for name in os.listdir(base) if re.fullmatch(r"\d+", name)]
    return max(versions, default=0) + 1


def verification_sentences(model_dir: str, count: int) -> List[str]:
    """The first ``count`` dev sources kept with the model, plus the edge cases."""
    sentences: List[str] = []
    path = os.path.join(model_dir, "dev.tsv")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                source = line.split("\t", 1)[0].strip()
                if source:
                    sentences.append(source)
                if len(sentences) >= count:
                    break
    return sentences + ["", "a"]


class Exporter:
    """Writes one artifact format into a directory and translates with it to check it."""

    format_name = ""

    def write(self, translator: ExportableTranslator, directory: str) -> None:
        raise NotImplementedError

    def translate(self, directory: str, sentences: Sequence[str]) -> List[str]:
        """Load the artifact from ``directory`` as its users would, and translate."""
        raise NotImplementedError


class SavedModelExporter(Exporter):
    """A SavedModel for TF Serving: signatures serving_default, translate_with_options, translate_nbest."""

    format_name = "saved_model"

    def write(self, translator, directory):
        tf.saved_model.save(translator, directory, signatures=translator.signatures())

    def translate(self, directory, sentences):
        loaded = tf.saved_model.load(directory)
        outputs = loaded.signatures["serving_default"](sentences=tf.constant(list(sentences), tf.string))
        return [text.decode("utf-8") for text in outputs["translations"].numpy()]


class TFLiteExporter(Exporter):
    """``translator.tflite`` (builtin ops + the tensorflow-text ops only) and its op list beside it."""

    format_name = "tflite"
    MODEL_FILE = "translator.tflite"
    OPS_FILE = "translator.ops.txt"

    def write(self, translator, directory):
        from export.tflite import convert_to_tflite, list_ops

        content = convert_to_tflite(translator)  # refuses any op outside the allowed set
        os.makedirs(directory)
        with open(os.path.join(directory, self.MODEL_FILE), "wb") as handle:
            handle.write(content)
        with open(os.path.join(directory, self.OPS_FILE), "w", encoding="utf-8") as handle:
            handle.write("\n".join(list_ops(content)) + "\n")

    def translate(self, directory, sentences):
        from export.tflite import TFLiteTranslator

        translations, _ = TFLiteTranslator(os.path.join(directory, self.MODEL_FILE)).translate(list(sentences))
        return translations


EXPORTERS: Dict[str, Type[Exporter]] = {"saved_model": SavedModelExporter, "tflite": TFLiteExporter}


def export(request: ExportRequest, format_name: str) -> str:
    """Export the model of ``request.model_dir``; returns the version directory written."""
    from gnmt_tf.model_dir import load_model_dir
    from gnmt_tf.translator import Translator

    if format_name not in EXPORTERS:
        raise ExportError(f"unknown format {format_name!r}; known formats: {', '.join(sorted(EXPORTERS))}")
    exporter = EXPORTERS[format_name]()
    version = request.version if request.version is not None else next_version(request.output)
    target = os.path.join(request.output, str(version))
    if os.path.exists(target):
        raise ExportError(
            f"{target} already exists; pass another --version (next free: {next_version(request.output)}) "
            f"or remove it"
        )
    model, tokenizer, config = load_model_dir(request.model_dir, which=request.checkpoint)
    decoding = config.decoding
    if request.beam_width:
        decoding = type(decoding)(**{**decoding.__dict__, "beam_width": request.beam_width})
    translator = ExportableTranslator(model, tokenizer, decoding)

    os.makedirs(request.output, exist_ok=True)
    staging = os.path.join(request.output, f".tmp-{version}-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        request.log(f"writing {format_name} to {staging}")
        exporter.write(translator, staging)
        sentences = verification_sentences(request.model_dir, request.verify_sentences)
        expected = Translator(model, tokenizer, decoding).translate(sentences)
        got = exporter.translate(staging, sentences)
        mismatches = [(s, e, g) for s, e, g in zip(sentences, expected, got) if e != g]
        if mismatches:
            details = "; ".join(f"{s!r}: model {e!r} vs export {g!r}" for s, e, g in mismatches[:3])
            raise ExportError(
                f"the exported {format_name} translates {len(mismatches)} of {len(sentences)} check sentences "
                f"differently from the model: {details}"
            )
        request.log(f"checked: {len(sentences)} sentences translate identically")
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    request.log(f"exported {target}")
    return target
