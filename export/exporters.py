"""One exporter per artifact format, behind one command line (``python -m export``).

Every export goes to ``BASE/NAME/<version>/`` (TF Serving's layout; the version
defaults to one more than the highest existing one). It is written into a
hidden temporary directory next to it, checked, and only then renamed into
place, so a server watching ``BASE/NAME`` never sees a half-written or
unverified version, and a failed export leaves nothing behind.

The check, before an export is declared done: dev sentences are translated
with the exported artifact, loaded from disk as a client would load it, and with
the same translator in memory, :class:`gnmt_tf.inference.translator.Translator`
over the model (the artifact is that translator's module, saved or converted).
Float exports must give identical strings on a few sentences; int8 exports
must keep corpus BLEU on the dev set (``dev.tsv`` in the model directory)
within ``bleu_tolerance`` of the float model's. A SavedModel must also use only ops
that TF Serving's runtime registers (TensorFlow 2.20 with tensorflow-text 2.20, whose
op list :mod:`export.serving_runtime` keeps): gnmt_tf exports with a newer TensorFlow,
and an op that runtime lacks would keep TF Serving from loading the version.

A model directory with a vocabulary shortlist (``shortlist.npz``, :mod:`gnmt_tf.data.shortlist`)
exports with it: the translator holds its tables, and the functions without a
``use_shortlist`` input use it as ``decoding.use_shortlist`` (or ``use_shortlist`` of the
request) says. The SavedModel also gets the signatures that switch it per request
(``translate_with_shortlist``, ``translate_nbest_with_shortlist``), and the check covers
both settings. The TFLite model has the one signature, with the export's setting: a
second signature would hold a second copy of every weight (TFLite freezes the weights
into each signature's function).

int8 (``quantize="int8"``), per format, the path measured fastest on CPU
(benchmarks/README.md, section "Artifacts"):

* ``saved_model``: eq. 12 storage (:class:`gnmt_tf.quantization.weights.Int8Weights`:
  int8 LSTM, softmax and embedding weights with one float scale per output
  unit or token). ``int8_products="float"`` (default) dequantizes them once per
  request and multiplies in float32, because TensorFlow's int8 products are
  slower than float32 on x86 CPUs; ``"int8"`` runs section 6's int8 x int8
  products. ``xla`` compiles the decoding step, padded to shape buckets
  (:mod:`gnmt_tf.decoding.buckets`) that the warm-up requests all compile.
* ``tflite``: the converter's dynamic-range quantization: int8 weights with
  one scale per output channel (eq. 12's rule; checked in the tests),
  activations quantized on the fly, int8 kernels in the interpreter.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Type

import tensorflow as tf

from export.serving_runtime import OPS_FILE, TENSORFLOW, runtime_name, unregistered_ops
from gnmt_tf.inference.results import texts
from gnmt_tf.inference.translator import TranslatorModule
from gnmt_tf.localization.in_graph import VERBATIM, text_masking


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
    quantize: str = "none"  # or "int8"
    int8_products: str = "float"  # saved_model int8: "float" (dequantized once) or "int8"
    xla: bool = False  # saved_model: compile the decoding step with XLA
    target_input_table: Optional[bool] = None  # precomputed bottom-layer input projection (None: the format's default)
    bleu_tolerance: float = 0.5  # int8: largest dev BLEU drop accepted
    bleu_sentences: int = 500  # int8: dev sentences the BLEU check translates
    use_shortlist: Optional[bool] = None  # the export's default; None: decoding.use_shortlist of the config
    # Further models decoded with model_dir's as one ensemble (section 8.6): (model directory, checkpoint)
    # each; model_dir gives the config, the dev split and the shortlist.
    ensemble_with: Tuple[Tuple[str, str], ...] = ()
    ensemble_rule: str = "mean_log_probs"  # gnmt_tf.models.ensemble.combination_named
    log: Callable[[str], None] = print


def next_version(base: str) -> int:
    """One more than the highest numeric subdirectory of ``base`` (1 if there is none)."""
    if not os.path.isdir(base):
        return 1
    versions = [int(name) for name in os.listdir(base) if re.fullmatch(r"\d+", name)]
    return max(versions, default=0) + 1


def dev_pairs(model_dir: str, count: int) -> List[Tuple[str, str]]:
    """The first ``count`` (source, reference) pairs of the dev split kept with the model (none without one)."""
    from gnmt_tf import model_files

    return model_files.read_dev_split(model_dir)[:count] if model_files.has_dev_split(model_dir) else []


def verification_sentences(model_dir: str, count: int) -> List[str]:
    """The first ``count`` dev sources kept with the model, plus the edge cases."""
    return [source for source, _ in dev_pairs(model_dir, count)] + ["", "a"]


def _batches(sentences: Sequence[str], size: int = 32) -> List[List[str]]:
    sentences = list(sentences)
    return [sentences[i : i + size] for i in range(0, len(sentences), size)]


class Exporter:
    """Writes one artifact format into a directory and translates with it to check it."""

    format_name = ""
    # Whether a step gathers the bottom decoder layer's input projection from a table by default
    # (Devlin 2017): faster, but the table (vocabulary x 4 units) makes the artifact larger.
    default_target_input_table = False
    switches_shortlist = False  # whether a request can turn a shortlist on or off

    def __init__(self, request: ExportRequest):
        self.request = request

    @property
    def target_input_table(self) -> bool:
        if self.request.target_input_table is not None:
            return self.request.target_input_table
        return self.default_target_input_table

    def module(self, model, tokenizer, decoding, shortlist=None, text=VERBATIM) -> TranslatorModule:
        """The translator module this format converts (``text``: its placeholder masking, or none)."""
        return TranslatorModule(model, tokenizer, decoding, shortlist=shortlist, text=text,
                                precompute_target_inputs=self.target_input_table)

    def write(self, translator: TranslatorModule, directory: str) -> None:
        raise NotImplementedError

    def translate(self, directory: str, sentences: Sequence[str],
                  switch: Optional[Dict[str, object]] = None) -> List[str]:
        """Load the artifact from ``directory`` as its users would, and translate: the best translations'
        texts.

        ``switch``: the inputs of ``translate_with_shortlist`` besides the sentences (``alpha``,
        ``beta``, ``beamsize``, ``use_shortlist``), for a format that switches the shortlist per
        request (``switches_shortlist``); None: the default signature.
        """
        raise NotImplementedError


class SavedModelExporter(Exporter):
    """A SavedModel for TF Serving: signatures serving_default, translate_with_options, translate_nbest.

    With TF Serving's warm-up records (``assets.extra/tf_serving_warmup_requests``), a few dev
    sentences through every signature, which the server replays before serving the version; with
    ``xla``, also a request per shape bucket and search graph, so that the server compiles them all then.
    """

    format_name = "saved_model"
    default_target_input_table = True  # servers: speed over size
    switches_shortlist = True
    _loaded = None  # (directory, the SavedModel loaded from it) of the last translate

    def module(self, model, tokenizer, decoding, shortlist=None, text=VERBATIM):
        from gnmt_tf.quantization.weights import Int8Weights

        int8 = Int8Weights(model, products=self.request.int8_products) if self.request.quantize == "int8" else None
        return TranslatorModule(model, tokenizer, decoding, weight_transform=int8, jit_step=self.request.xla,
                                shortlist=shortlist, text=text, precompute_target_inputs=self.target_input_table)

    def write(self, translator, directory):
        from export.warmup import bucket_warmup_requests, translator_warmup_requests, write_warmup_requests

        tf.saved_model.save(translator, directory, signatures=translator.signatures())
        require_serving_ops(directory)
        self.request.log(f"checked: every op is registered by {runtime_name()}")
        name = os.path.basename(os.path.normpath(self.request.output)) or "gnmt"
        sentences = verification_sentences(self.request.model_dir, 8) if self.request.model_dir else []
        requests = translator_warmup_requests(name, sentences, translator.default_options,
                                              shortlist=translator.shortlist is not None)
        if translator.jit_step:  # compile the step for every shape bucket before serving
            buckets, longest = translator.shape_buckets, translator.max_input_length + 1
            requests += bucket_warmup_requests(name, sentences, translator.default_options, buckets,
                                               translator.source_length, longest)
            self.request.log(f"warm-up requests cover the compiled step's "
                             f"{len(buckets.shapes(buckets.searches[-1], longest))} shape buckets")
        write_warmup_requests(directory, requests)

    def _load(self, directory):
        """The SavedModel in ``directory``, loaded once for every setting the check translates with: each
        load takes seconds, and so does the first call of each signature of a newly loaded one."""
        if self._loaded is None or self._loaded[0] != directory:
            self._loaded = (directory, tf.saved_model.load(directory))
        return self._loaded[1]

    def translate(self, directory, sentences, switch=None):
        loaded = self._load(directory)
        translate = loaded.signatures["serving_default" if switch is None else "translate_with_shortlist"]
        inputs = {name: tf.constant(value) for name, value in (switch or {}).items()}
        translations = []
        for batch in _batches(sentences):
            outputs = translate(sentences=tf.constant(batch, tf.string), **inputs)
            translations += [text.decode("utf-8") for text in outputs["translations"].numpy()]
        return translations


def require_serving_ops(version_dir: str, allowed: Optional[Iterable[str]] = None) -> None:
    """Refuse a SavedModel with an op that TF Serving's runtime does not register (``allowed``: by
    default the committed op list of :mod:`export.serving_runtime`): TF Serving could not load it."""
    missing = unregistered_ops(version_dir, allowed)
    if missing:
        details = "; ".join(f"{op} (in {', '.join(places[:3])}{', ...' if len(places) > 3 else ''})"
                            for op, places in missing.items())
        raise ExportError(
            f"the SavedModel uses {len(missing)} op{'s' if len(missing) > 1 else ''} that {runtime_name()} "
            f"does not register, so TF Serving could not load it: {details}. Build the graph without them, "
            f"or, once TF Serving links a newer TensorFlow, regenerate the op list for it (docs/serving.md; "
            f"the list now is {os.path.basename(OPS_FILE)}, TensorFlow {TENSORFLOW})"
        )


class TFLiteExporter(Exporter):
    """``translator.tflite`` (builtin ops + the tensorflow-text ops only) and its op list beside it."""

    format_name = "tflite"
    MODEL_FILE = "translator.tflite"
    OPS_FILE = "translator.ops.txt"

    def write(self, translator, directory):
        from export.tflite import convert_to_tflite, list_ops

        content = convert_to_tflite(translator, self.request.quantize)  # refuses any op outside the allowed set
        os.makedirs(directory)
        with open(os.path.join(directory, self.MODEL_FILE), "wb") as handle:
            handle.write(content)
        with open(os.path.join(directory, self.OPS_FILE), "w", encoding="utf-8") as handle:
            handle.write("\n".join(list_ops(content)) + "\n")

    def translate(self, directory, sentences, switch=None):
        from export.tflite import TFLiteTranslator

        if switch is not None:
            raise ExportError("a TFLite model has no per-request shortlist switch")

        translator = TFLiteTranslator(os.path.join(directory, self.MODEL_FILE))
        return [translation.text for batch in _batches(sentences)
                for translation in translator.translate(batch)]


EXPORTERS: Dict[str, Type[Exporter]] = {"saved_model": SavedModelExporter, "tflite": TFLiteExporter}


def validate_request(request: ExportRequest, format_name: str) -> None:
    """Raise :class:`ExportError` for a request that cannot be carried out, before any work."""
    if format_name not in EXPORTERS:
        raise ExportError(f"unknown format {format_name!r}; known formats: {', '.join(sorted(EXPORTERS))}")
    if request.quantize not in QUANTIZE:
        raise ExportError(f"unknown quantization {request.quantize!r}; choose one of: {', '.join(QUANTIZE)}")
    if request.int8_products not in ("float", "int8"):
        raise ExportError(f"int8 products must be 'float' or 'int8', got {request.int8_products!r}")
    if request.xla and format_name != "saved_model":
        raise ExportError("--xla applies to --format saved_model only")
    if request.bleu_tolerance < 0 or request.bleu_sentences < 1:
        raise ExportError("--bleu-tolerance must be >= 0 and --bleu-sentences >= 1")
    if request.version is not None and request.version < 1:
        raise ExportError(f"--version must be a positive integer, got {request.version}")
    if request.beam_width is not None and request.beam_width < 1:
        raise ExportError(f"--beam-width must be at least 1, got {request.beam_width}")


def export(request: ExportRequest, format_name: str) -> str:
    """Export the model of ``request.model_dir``; returns the version directory written."""
    from gnmt_tf.model_files import (glossary_path, load_as_one_model, read_model_glossary, read_shortlist,
                                     shortlist_path)

    validate_request(request, format_name)
    exporter = EXPORTERS[format_name](request)
    version = request.version if request.version is not None else next_version(request.output)
    target = os.path.join(request.output, str(version))
    if os.path.exists(target):
        raise ExportError(
            f"{target} already exists; pass another --version (next free: {next_version(request.output)}) "
            f"or remove it"
        )
    loaded = load_as_one_model([request.model_dir, *(directory for directory, _ in request.ensemble_with)],
                               [request.checkpoint, *(which for _, which in request.ensemble_with)],
                               request.ensemble_rule, warn=lambda message: request.log(f"warning: {message}"))
    model, tokenizer, config = loaded.model, loaded.tokenizer, loaded.config
    request.log(f"exporting {loaded.checkpoint} (--checkpoint {request.checkpoint})"
                + (f", one ensemble ({request.ensemble_rule})" if request.ensemble_with else ""))
    if request.quantize == "int8":
        _require_final_delta(request, model, config)
        bleu_pairs = _int8_check_pairs(request)  # before the write: a missing dev split ends the export at once
    shortlist = read_shortlist(request.model_dir, vocab_size=tokenizer.vocab_size)
    if request.use_shortlist and shortlist is None:
        raise ExportError(f"--shortlist: {request.model_dir} has no vocabulary shortlist "
                          f"({shortlist_path(request.model_dir)}); python -m gnmt_tf.shortlist --model-dir "
                          f"{request.model_dir} builds one")
    decoding = config.decoding
    if request.beam_width is not None:
        decoding = dataclasses.replace(decoding, beam_width=request.beam_width)
    if request.use_shortlist is not None:
        decoding = dataclasses.replace(decoding, use_shortlist=request.use_shortlist)
    text = text_masking(config.localization, tokenizer, read_model_glossary(request.model_dir))
    if text.glossary:
        request.log(f"with the glossary of {glossary_path(request.model_dir)}: {len(text.glossary)} terms in every "
                    f"translation")
    translator = exporter.module(model, tokenizer, decoding, shortlist, text)
    if shortlist is not None:
        request.log(f"with the vocabulary shortlist of {shortlist_path(request.model_dir)} (top "
                    f"{shortlist.top_k}, {shortlist.frequent} frequent): "
                    f"{'on' if translator.uses_shortlist else 'off'} by default")

    os.makedirs(request.output, exist_ok=True)
    staging = os.path.join(request.output, f".tmp-{version}-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        request.log(f"writing {format_name}{' int8' if request.quantize == 'int8' else ''} to {staging}")
        exporter.write(translator, staging)
        write_metadata(staging, request, format_name, loaded.checkpoints, decoding)
        request.log(f"written: {directory_bytes(staging) / 1e6:.1f} MB")
        if request.quantize == "int8":
            _check_bleu(request, exporter, staging, model, tokenizer, decoding, bleu_pairs, shortlist, text)
        else:
            _check_identical(request, exporter, staging, model, tokenizer, decoding, shortlist, text)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    request.log(f"exported {target}")
    return target


QUANTIZE = ("none", "int8")
METADATA_FILE = "export.json"  # in the version directory, beside the artifact (TF Serving reads only its own files)


def write_metadata(directory: str, request: ExportRequest, format_name: str, checkpoints: Sequence[str],
                   decoding) -> str:
    """``export.json``: what the export was made from and how, so a served version can be traced to its
    checkpoints (an ensemble's further models under "ensemble_with")."""
    import json

    import gnmt_tf

    metadata = {
        "checkpoint": os.path.abspath(checkpoints[0]),
        "checkpoint_choice": request.checkpoint,
        "model_dir": os.path.abspath(request.model_dir),
        "format": format_name,
        "quantize": request.quantize,
        "beam_width": decoding.beam_width,
        "defaults": {"alpha": decoding.alpha, "beta": decoding.beta, "beamsize": decoding.beamsize},
        "gnmt_tf": gnmt_tf.__version__,
        "tensorflow": tf.__version__,
    }
    if request.ensemble_with:
        metadata.update(ensemble_rule=request.ensemble_rule, ensemble_with=[
            {"model_dir": os.path.abspath(model_dir), "checkpoint": os.path.abspath(path), "checkpoint_choice": which}
            for (model_dir, which), path in zip(request.ensemble_with, checkpoints[1:])])
    path = os.path.join(directory, METADATA_FILE)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(metadata, handle, indent=1)
    return path


def _require_final_delta(request, model, config) -> None:
    """Section 6's int8 ranges assume the final delta: refuse a checkpoint trained to a larger one."""
    from gnmt_tf.model_files import anneal_finished, model_delta

    trained, final = model_delta(model), config.model.clip_delta
    if not anneal_finished(trained, final):
        raise ExportError(
            f"refusing an int8 export: the {request.checkpoint} checkpoint of {request.model_dir} was trained "
            f"to delta = {trained:.3g}, not the final delta = {final:g} (its training stopped mid-anneal), and "
            f"the int8 accumulators of section 6 cover [-{final:g}, {final:g}]. Train it on until delta "
            f"reaches {final:g}, or export it as float"
        )


def directory_bytes(path: str) -> int:
    """Total size of the files below ``path``."""
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


def _check_identical(request, exporter, staging, model, tokenizer, decoding, shortlist=None, text=VERBATIM) -> None:
    """Float: the export must translate a few dev sentences exactly like the Keras model (with a
    shortlist the format switches per request: with it and without it)."""
    from gnmt_tf.inference.translator import Translator

    sentences = verification_sentences(request.model_dir, request.verify_sentences)
    translator = Translator(model, tokenizer, decoding, shortlist=shortlist, text=text,
                            precompute_target_inputs=exporter.target_input_table)
    settings = [None]
    if shortlist is not None and exporter.switches_shortlist:
        settings += [False, True]
    for use_shortlist in settings:
        expected = texts(translator.translate(sentences, use_shortlist=use_shortlist))
        switch = None if use_shortlist is None else dict(
            alpha=decoding.alpha, beta=decoding.beta, beamsize=decoding.beamsize, use_shortlist=use_shortlist)
        got = exporter.translate(staging, sentences, switch)
        mismatches = [(s, e, g) for s, e, g in zip(sentences, expected, got) if e != g]
        if mismatches:
            details = "; ".join(f"{s!r}: model {e!r} vs export {g!r}" for s, e, g in mismatches[:3])
            how = "" if use_shortlist is None else f" with use_shortlist={use_shortlist}"
            raise ExportError(
                f"the exported {exporter.format_name} translates {len(mismatches)} of {len(sentences)} check "
                f"sentences differently from the model{how}: {details}"
            )
    request.log(f"checked: {len(sentences)} sentences translate identically"
                + (" with the shortlist on and off" if len(settings) > 1 else ""))


def _int8_check_pairs(request):
    """The dev pairs an int8 export's BLEU is checked on (the model directory's dev split)."""
    from gnmt_tf.model_files import DEV_FILE

    pairs = dev_pairs(request.model_dir, request.bleu_sentences)
    if not pairs:
        raise ExportError(
            f"{request.model_dir} has no {DEV_FILE} to check the int8 export's BLEU against; "
            f"int8 exports are only made from model directories written by python -m gnmt_tf.train"
        )
    return pairs


def _check_bleu(request, exporter, staging, model, tokenizer, decoding, pairs, shortlist=None,
                text=VERBATIM) -> None:
    """int8: dev BLEU of the export on ``pairs`` must stay within ``bleu_tolerance`` of the float model's."""
    from gnmt_tf.metrics.bleu import corpus_bleu
    from gnmt_tf.inference.translator import Translator

    sources = [source for source, _ in pairs]
    references = [reference for _, reference in pairs]
    request.log(f"checking dev BLEU on {len(pairs)} sentences (float model vs int8 export)")
    float_translator = Translator(model, tokenizer, decoding, shortlist=shortlist, text=text)
    float_bleu = corpus_bleu(texts(float_translator.translate(sources)), references).score
    int8_bleu = corpus_bleu(exporter.translate(staging, sources), references).score
    drop = float_bleu - int8_bleu
    if drop > request.bleu_tolerance:
        raise ExportError(
            f"the int8 {exporter.format_name} loses {drop:.2f} BLEU on {len(pairs)} dev sentences "
            f"(float {float_bleu:.2f}, int8 {int8_bleu:.2f}), more than the tolerance {request.bleu_tolerance}; "
            f"fine-tune with quantization-aware training first, or raise --bleu-tolerance"
        )
    request.log(f"checked: dev BLEU float {float_bleu:.2f}, int8 {int8_bleu:.2f} (drop {drop:+.2f}, "
                f"tolerance {request.bleu_tolerance})")
