"""Every export artifact of a trained model: size, speed, memory and dev BLEU; plus paper-size step speed.

    python benchmarks/artifact_benchmark.py --model-dir runs/en-fr   # writes benchmarks/results/artifacts.json
    python benchmarks/artifact_benchmark.py --quick                  # a few minutes, for development

Part A, a trained model directory (``python -m gnmt_tf.train`` writes one):

* a setup worker writes every artifact into a work directory with the
  exporters of ``export/`` (without their BLEU check) and records its size on
  disk: SavedModel float, float + XLA step, int8 with float products (the
  exporter default), int8 with int8 products, int8 products + XLA; TFLite
  float and int8 (dynamic range);
* for each artifact and each thread count, a fresh worker process loads it as
  a user would (``tf.saved_model.load(dir).signatures["serving_default"]``, after
  replaying the version's warm-up requests as TF Serving does, which ``load_seconds``
  includes; :class:`export.tflite.TFLiteTranslator`), plus two in-process Python API
  rows: ``keras`` (:class:`gnmt_tf.inference.translator.Translator` on the model
  directory) and ``keras_int8`` (the same with ``weight_transform=Int8Weights(model)``).
  It warms up on one sentence (``first_call_seconds``: includes tracing, and
  XLA compilation for the XLA variants), then translates the first
  ``--sentences`` dev sources in batches of 16 (sorted by length, the same
  batches for every artifact) and a quarter of them one by one, twice: the
  first pass pays XLA's compilation for every new shape (batch rows x source
  length; beam search also shrinks the batch as sentences finish), the second
  reuses it. Throughput is reported for both passes (``words``: whitespace
  words of the translations). ``peak_rss_mb`` is the process' peak resident
  memory (``ru_maxrss``) after these passes, TensorFlow's own footprint
  included; ``baseline_rss_mb`` is the peak after importing tensorflow and
  tensorflow_text, before loading anything;
* with the largest thread count, the worker then translates the whole dev set
  (``--bleu-sentences``, batch 16) for corpus BLEU and the fraction of
  translations identical to the ``keras`` row's (threads do not change outputs).

Part B, the paper's model (``gnmt_wmt14_enfr``: 8+8 layers of 1024, 32k
wordpieces), random weights, in-process graph paths of the SavedModel: beam
search (beam 4, EOS suppressed so every run does the same work) over
``model.step`` in plain float32, with the step under XLA, int8 weights with
int8 products (plain and XLA), int8 with float products, and bfloat16 weights
and products. ``ms_per_step`` is (time at output length L2 - time at L1) /
(L2 - L1), so the encoder and fixed costs cancel; every variant is traced and
warmed up first, then all are timed round robin (``--paper-repeats`` rounds,
the fastest run per length kept) so that bursts of other load hit all alike.
(bfloat16 is benchmark-only: it hooks ``gnmt_tf.quantization.weights``'s product
function in the worker process; no artifact exports it.)

Part C, the trained model again: eq. 12's per-row scales against Marian's
per-column 7-sigma rule, int8 products, through a Translator made with
``weight_transform=Int8Weights(model, method)``: dev BLEU, identity with float,
and the quantization error of the kernels (``gnmt_tf.quantization.int8.quantization_report``).

Each worker is a fresh process (TensorFlow fixes its thread pools at start)
with a timeout; a failed or timed-out worker is recorded as an error and the
rest goes on. Load averages before/after every worker are recorded: other
processes on the machine skew timings.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time

from harness import SITTING, answer_job, last_run, portable_path, run_job_in_worker, write_report

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# name -> how it is made. "runtime" groups the rows compared by target (1).
ARTIFACTS = {
    "keras": dict(runtime="keras", format="keras", quantize="none"),
    "keras_int8": dict(runtime="keras", format="keras", quantize="int8", int8_products="int8"),
    "saved_model_float": dict(runtime="saved_model", format="saved_model", quantize="none"),
    "saved_model_float_xla": dict(runtime="saved_model", format="saved_model", quantize="none", xla=True),
    "saved_model_int8": dict(runtime="saved_model", format="saved_model", quantize="int8", int8_products="float"),
    "saved_model_int8_products": dict(runtime="saved_model", format="saved_model", quantize="int8",
                                      int8_products="int8"),
    "saved_model_int8_products_xla": dict(runtime="saved_model", format="saved_model", quantize="int8",
                                          int8_products="int8", xla=True),
    "tflite_float": dict(runtime="tflite", format="tflite", quantize="none"),
    "tflite_int8": dict(runtime="tflite", format="tflite", quantize="int8"),
}
# The same with the model directory's vocabulary shortlist on (python -m gnmt_tf.shortlist builds it).
SHORTLISTED = ("keras", "saved_model_float", "saved_model_int8", "tflite_float", "tflite_int8")
ARTIFACTS.update({f"{name}_shortlist": dict(ARTIFACTS[name], shortlist=True) for name in SHORTLISTED})
PAPER_VARIANTS = ("float32", "float32_xla", "int8", "int8_xla", "int8_float_products", "bfloat16", "bfloat16_xla")
QUANT_METHODS = ("per_row", "per_column_7sigma")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--model-dir", default="runs/en-fr")
    parser.add_argument("--threads", nargs="+", type=int, default=None,
                        help="TensorFlow / interpreter threads (default: 1 and all cores; --quick: all cores)")
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--sentences", type=int, default=None,
                        help="dev sentences of the batched speed passes (default 128, --quick 16); "
                             "batch 1 translates a quarter of them")
    parser.add_argument("--bleu-sentences", type=int, default=None, help="default 500 (--quick 32)")
    parser.add_argument("--bleu-batch", type=int, default=16)
    parser.add_argument("--artifacts", nargs="+", default=list(ARTIFACTS), choices=list(ARTIFACTS))
    parser.add_argument("--parts", nargs="+", default=["A", "B", "C"], choices=["A", "B", "C"])
    parser.add_argument("--paper-config", default="gnmt_wmt14_enfr")
    parser.add_argument("--paper-variants", nargs="+", default=list(PAPER_VARIANTS), choices=PAPER_VARIANTS)
    parser.add_argument("--paper-threads", nargs="+", type=int, default=None,
                        help="default: the largest --threads")
    parser.add_argument("--paper-batches", nargs="+", type=int, default=None,
                        help="default: --batches (--quick: 1)")
    parser.add_argument("--paper-lengths", nargs=2, type=int, default=None, metavar=("L1", "L2"),
                        help="the two output lengths whose time difference gives ms/step (default 4 20; --quick 2 6)")
    parser.add_argument("--paper-repeats", type=int, default=None,
                        help="timed rounds (round robin over the variants), the fastest is kept (default 3; --quick 1)")
    parser.add_argument("--quick", action="store_true", help="fewer sentences and repeats, largest thread count only")
    parser.add_argument("--work-dir", default=None, help="where the artifacts are written (default: a temp dir)")
    parser.add_argument("--keep-artifacts", action="store_true")
    parser.add_argument("--output", default=None,
                        help="default benchmarks/results/artifacts.json (--quick: artifacts_quick.json in the temp dir)")
    parser.add_argument("--update", action="store_true",
                        help="append to --output its newest run with only the --parts run here measured again "
                             "(targets are re-evaluated)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--job", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cores = os.cpu_count() or 1
    args.threads = args.threads or ([cores] if args.quick else sorted({1, cores}))
    args.output = args.output or (os.path.join(tempfile.gettempdir(), "artifacts_quick.json") if args.quick
                                  else os.path.join(HERE, "results", "artifacts.json"))
    args.sentences = args.sentences or (16 if args.quick else 128)
    args.bleu_sentences = args.bleu_sentences or (32 if args.quick else 500)
    args.paper_threads = args.paper_threads or [max(args.threads)]
    args.paper_batches = args.paper_batches or ([1] if args.quick else args.batches)
    if args.quick and args.paper_variants == list(PAPER_VARIANTS):
        args.paper_variants = ["float32", "float32_xla", "int8_xla", "int8_float_products"]  # skip the slowest
    args.paper_lengths = args.paper_lengths or ([2, 6] if args.quick else [4, 20])
    args.paper_repeats = args.paper_repeats or (1 if args.quick else 3)
    return args


# ================================================================================== workers
def import_tf(threads):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, ROOT)
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the text ops the artifacts use)

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    return tf


def peak_rss_mb():
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux


def _dev_pairs(model_dir, count):
    from export.exporters import dev_pairs

    return dev_pairs(model_dir, count)


def length_batches(sentences, size):
    """(indices, sentences) chunks of ``size``, sorted by character length (the same for every artifact)."""
    order = sorted(range(len(sentences)), key=lambda i: (len(sentences[i]), i))
    return [([i for i in order[s : s + size]], [sentences[i] for i in order[s : s + size]])
            for s in range(0, len(order), size)]


def worker_setup(job, threads):
    """Write every artifact below job["work_dir"]; sizes and export times."""
    tf = import_tf(threads)
    from export.exporters import ExportRequest, SavedModelExporter, TFLiteExporter, directory_bytes
    from gnmt_tf.model_files import load_model_dir

    model, tokenizer, config = load_model_dir(job["model_dir"])
    shortlist, shortlisted = _shortlisted(job["model_dir"], tokenizer, config)
    out = {"tensorflow": tf.__version__, "artifacts": {}}
    parameters = int(sum(int(v.shape.num_elements()) for v in model.variables))
    out["parameters"] = parameters
    for name in job["artifacts"]:
        spec = ARTIFACTS[name]
        if spec["format"] == "keras":
            continue
        request = ExportRequest(model_dir=job["model_dir"], output=job["work_dir"], quantize=spec["quantize"],
                                int8_products=spec.get("int8_products", "float"), xla=spec.get("xla", False),
                                log=lambda message: None)
        exporter = (SavedModelExporter if spec["format"] == "saved_model" else TFLiteExporter)(request)
        path = os.path.join(job["work_dir"], name)
        shutil.rmtree(path, ignore_errors=True)
        started = time.perf_counter()
        if spec.get("shortlist"):
            module = exporter.module(model, tokenizer, shortlisted, shortlist)
        else:
            module = exporter.module(model, tokenizer, config.decoding)
        exporter.write(module, path)
        out["artifacts"][name] = {"path": path, "size_bytes": directory_bytes(path),
                                  "export_seconds": round(time.perf_counter() - started, 1)}
        print(f"  wrote {name}: {out['artifacts'][name]}", file=sys.stderr, flush=True)
    out["peak_rss_mb"] = peak_rss_mb()
    return out


def _shortlisted(model_dir, tokenizer, config):
    """The model directory's shortlist (None without one) and decoding settings that use it."""
    import dataclasses

    from gnmt_tf.model_files import read_shortlist

    return (read_shortlist(model_dir, vocab_size=tokenizer.vocab_size),
            dataclasses.replace(config.decoding, use_shortlist=True))


def load_translate(tf, name, job, threads):
    """A function list[str] -> list[str] translating with artifact ``name``, loaded as its users would."""
    spec = ARTIFACTS[name]
    if spec["format"] == "keras":
        from gnmt_tf.model_files import load_model_dir
        from gnmt_tf.inference.translator import Translator

        model, tokenizer, config = load_model_dir(job["model_dir"])
        weight_transform = None
        if spec["quantize"] == "int8":
            from gnmt_tf.quantization.weights import Int8Weights

            weight_transform = Int8Weights(model, products=spec["int8_products"])
        decoding, shortlist = config.decoding, None
        if spec.get("shortlist"):
            shortlist, decoding = _shortlisted(job["model_dir"], tokenizer, config)
        translator = Translator(model, tokenizer, decoding, batch_size=max(job["batches"] + [job["bleu_batch"]]),
                                shortlist=shortlist, precompute_target_inputs=True,
                                weight_transform=weight_transform)
        from gnmt_tf.inference.results import texts

        return lambda batch: texts(translator.translate(batch))  # Translations -> their text
    path = job["paths"][name]
    if spec["format"] == "saved_model":
        loaded = tf.saved_model.load(path)
        _replay_warmup(tf, loaded, path)
        serving = loaded.signatures["serving_default"]

        def translate(batch):
            texts = serving(sentences=tf.constant(batch, tf.string))["translations"].numpy()
            return [t.decode("utf-8") for t in texts]

        return translate
    from export.exporters import TFLiteExporter
    from export.tflite import TFLiteTranslator

    interpreter = TFLiteTranslator(os.path.join(path, TFLiteExporter.MODEL_FILE), num_threads=threads)
    return lambda batch: [t.text for t in interpreter.translate(batch)]


def _replay_warmup(tf, loaded, path):
    """What TF Serving does before it serves a version: replay its warm-up requests (timed)."""
    from export.warmup import read_warmup_requests

    started = time.perf_counter()
    requests = read_warmup_requests(path)
    for request in requests:
        signature = loaded.signatures[request.model_spec.signature_name or "serving_default"]
        signature(**{name: tf.constant(tf.make_ndarray(proto)) for name, proto in request.inputs.items()})
    print(f"  replayed {len(requests)} warm-up requests in {time.perf_counter() - started:.1f} s",
          file=sys.stderr, flush=True)


def timed_pass(translate, chunks):
    latencies, words, outputs = [], 0, []
    for chunk in chunks:
        started = time.perf_counter()
        texts = translate(chunk)
        latencies.append(time.perf_counter() - started)
        words += sum(len(t.split()) for t in texts)
        outputs.append(texts)
    total = sum(latencies)
    sentences = sum(len(c) for c in chunks)
    return {
        "seconds": round(total, 3),
        "sentences_per_second": round(sentences / total, 2),
        "words_per_second": round(words / total, 1),
        "words": words,
        "call_ms_median": round(1000 * statistics.median(latencies), 1),
        "call_ms_min": round(1000 * min(latencies), 1),
        "call_ms_max": round(1000 * max(latencies), 1),
    }, outputs


def two_passes(translate, sources, batch):
    """``sources`` translated twice in batches of ``batch`` (sorted by length; batch 1: in order): the first
    pass pays XLA's compilations for every new shape, the second reuses them."""
    chunks = [c for _, c in length_batches(sources, batch)] if batch > 1 else [[s] for s in sources]
    first, _ = timed_pass(translate, chunks)
    second, _ = timed_pass(translate, chunks)
    return {"batch": batch, "sentences": len(sources), "first_pass": first, "second_pass": second}


def worker_speed(job, threads):
    """Speed, memory (and with job["bleu"], dev translations) of one artifact at one thread count."""
    import os as _os

    tf = import_tf(threads)
    baseline = peak_rss_mb()
    name = job["artifact"]
    started = time.perf_counter()
    translate = load_translate(tf, name, job, threads)
    load_seconds = time.perf_counter() - started
    after_load = peak_rss_mb()
    pairs = _dev_pairs(job["model_dir"], 10**9)
    sources = [s for s, _ in pairs]
    warm = sources[-1]
    started = time.perf_counter()
    translate([warm])
    first_call = time.perf_counter() - started
    rows = []
    for batch in job["batches"]:
        count = job["sentences"] if batch > 1 else max(1, job["sentences"] // 4)
        rows.append(two_passes(translate, sources[:count], batch))
        print(f"  {name} threads={threads} batch={batch}: {rows[-1]['second_pass']['sentences_per_second']} "
              f"sent/s (first pass {rows[-1]['first_pass']['sentences_per_second']})", file=sys.stderr, flush=True)
    peak = peak_rss_mb()
    out = {
        "artifact": name,
        "threads": threads,
        "load_seconds": round(load_seconds, 2),
        "first_call_seconds": round(first_call, 3),
        "baseline_rss_mb": baseline,
        "rss_after_load_mb": after_load,
        "peak_rss_mb": peak,
        "batches": rows,
    }
    if job.get("bleu"):
        bleu_sources = sources[: job["bleu_sentences"]]
        translations = [""] * len(bleu_sources)
        started = time.perf_counter()
        for indices, chunk in length_batches(bleu_sources, job["bleu_batch"]):
            for i, text in zip(indices, translate(chunk)):
                translations[i] = text
        out["bleu_run"] = {"seconds": round(time.perf_counter() - started, 1), "translations": translations,
                           "peak_rss_mb": peak_rss_mb()}
    out["pid"] = _os.getpid()
    return out


def worker_paper(job, threads):
    """ms per decoder step of the SavedModel's graph paths on the paper-size model (random weights)."""
    tf = import_tf(threads)
    import numpy as np

    from gnmt_tf.decoding.beam import beam_search
    from gnmt_tf.decoding.options import no_pruning
    from gnmt_tf.layers.recurrence import STEPWISE
    from gnmt_tf.layers.weights import FLOAT_READER, WeightReader, WeightTransform, matmul
    from gnmt_tf.config import load_config
    from gnmt_tf.quantization.weights import Int8Weights
    from gnmt_tf.models.gnmt import GNMT
    from gnmt_tf.quantization.int8 import quantized_kernel_variables
    from gnmt_tf.vocab import EOS_ID

    config = load_config(job["config"]).model
    model = GNMT(config)
    model.build()
    model.set_clip_delta(1.0)
    parameters = int(sum(int(v.shape.num_elements()) for v in model.variables))
    K, source_length = 4, job["source_length"]
    L1, L2 = job["lengths"]
    suppress_eos = tf.one_hot(EOS_ID, config.vocab_size) * -1e9

    # bfloat16: the kernels int8 would quantize, cast to bfloat16 once (variables), products in bfloat16;
    # a weight transform of this benchmark's own: nothing in gnmt_tf changes.
    class BFloat16Weights(WeightTransform):
        def __init__(self):
            self.kernels = {v.ref(): tf.Variable(tf.cast(v, tf.bfloat16), trainable=False)
                            for v in quantized_kernel_variables(model)}

        def product(self, x, kernel):
            stored = self.kernels.get(kernel.ref())
            if stored is None:
                return matmul(x, kernel)
            return tf.cast(matmul(tf.cast(x, tf.bfloat16), stored.value()), tf.float32)

    readers = {}

    def weights_for(variant):
        if variant.startswith("int8"):
            products = "float" if variant == "int8_float_products" else "int8"
            if products not in readers:
                readers[products] = WeightReader(Int8Weights(model, products=products))
            return readers[products]
        if variant.startswith("bfloat16"):
            if "bf16" not in readers:
                readers["bf16"] = WeightReader(BFloat16Weights())
            return readers["bf16"]
        return FLOAT_READER

    def decoder_for(variant, length):
        jit = variant.endswith("_xla")
        weights = weights_for(variant)

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
        def decode(source_ids):
            memory = model.encode(source_ids, weights, training=False, recurrence=STEPWISE)  # as a search
            weighted_step = functools.partial(model.step, weights=weights)
            raw_step = tf.function(weighted_step, jit_compile=True) if jit else weighted_step

            def step(state, tokens):
                logits, attention, state = raw_step(state, tokens)
                return logits + suppress_eos, attention, state  # fixed output length

            out = beam_search(step, model.initial_state(memory), memory.mask, K, alpha=0.2, beta=0.2,
                              beamsize=no_pruning(), max_length_ratio=length / source_length)
            return out.lengths

        return decode

    def timed(fn, source):
        started = time.perf_counter()
        fn(source).numpy()
        return time.perf_counter() - started

    rng = np.random.default_rng(0)
    rows = []
    for batch in job["batches"]:
        source = rng.integers(4, config.vocab_size, size=(batch, source_length)).astype(np.int32)
        source[:, -1] = EOS_ID
        source = tf.constant(source)
        decoders, first_calls, errors = {}, {}, {}
        for variant in job["variants"]:  # trace, compile and warm up every variant first ...
            try:
                short, long = decoder_for(variant, L1), decoder_for(variant, L2)
                started = time.perf_counter()
                lengths = long(source).numpy()
                first_calls[variant] = time.perf_counter() - started
                assert (lengths == L2).all(), lengths
                short(source)
                long(source)  # a second untimed round: the first calls after tracing run slow
                short(source)
                decoders[variant] = (short, long)
            except Exception as err:  # one variant failing must not lose the others
                errors[variant] = repr(err)[:500]
        times = {variant: ([], []) for variant in decoders}
        for _ in range(job["repeats"]):  # ... then time them round robin, so load bursts hit all alike
            for variant, (short, long) in decoders.items():
                times[variant][0].append(timed(short, source))
                times[variant][1].append(timed(long, source))
        for variant in job["variants"]:
            if variant in errors:
                rows.append({"variant": variant, "threads": threads, "batch": batch, "error": errors[variant]})
                continue
            t1, t2 = times[variant]
            rows.append({
                "variant": variant, "threads": threads, "batch": batch, "beam_width": K,
                "source_length": source_length, "lengths": [L1, L2],
                "ms_per_step": round(1000 * (min(t2) - min(t1)) / (L2 - L1), 2),
                "seconds_at_L1": [round(t, 4) for t in t1], "seconds_at_L2": [round(t, 4) for t in t2],
                "first_call_seconds_at_L2": round(first_calls[variant], 2),
                "sentences_per_second_at_L2": round(batch / min(t2), 3),
            })
            print(f"  paper {variant} batch={batch}: {rows[-1]['ms_per_step']} ms/step", file=sys.stderr, flush=True)
    return {"config": job["config"], "parameters": parameters, "rows": rows, "peak_rss_mb": peak_rss_mb()}


def worker_quant(job, threads):
    """Part C: eq. 12 per-row vs Marian per-column 7-sigma int8, int8 products, through the Translator."""
    tf = import_tf(threads)
    import numpy as np

    from gnmt_tf.metrics.bleu import corpus_bleu
    from gnmt_tf.quantization.weights import Int8Weights
    from gnmt_tf.model_files import load_model_dir
    from gnmt_tf.quantization.int8 import quantization_report, quantized_kernel_variables
    from gnmt_tf.inference.translator import Translator

    model, tokenizer, config = load_model_dir(job["model_dir"])
    pairs = _dev_pairs(job["model_dir"], job["bleu_sentences"])
    sources, references = [s for s, _ in pairs], [r for _, r in pairs]
    batches = length_batches(sources, job["bleu_batch"])

    def translate_all(translator):
        translations = [""] * len(sources)
        for indices, chunk in batches:
            for i, translation in zip(indices, translator.translate(chunk)):
                translations[i] = translation.text
        return translations

    started = time.perf_counter()
    reference_hyps = translate_all(Translator(model, tokenizer, config.decoding, batch_size=job["bleu_batch"]))
    results = {"float": {"bleu": round(corpus_bleu(reference_hyps, references).score, 2),
                         "seconds": round(time.perf_counter() - started, 1)}}
    kernels = {v.name: v.numpy() for v in quantized_kernel_variables(model)}
    for method in QUANT_METHODS:
        report = quantization_report(model, method)
        squared_error = sum(r["rms_error"] ** 2 * kernels[r["name"]].size for r in report)
        squared_weight = sum(float(np.sum(kernels[r["name"]].astype(np.float64) ** 2)) for r in report)
        per_kernel_relative_rms = [r["rms_error"] / float(np.sqrt(np.mean(kernels[r["name"]] ** 2))) for r in report]
        int8 = Int8Weights(model, method=method)
        started = time.perf_counter()
        hyps = translate_all(Translator(model, tokenizer, config.decoding, batch_size=job["bleu_batch"],
                                        weight_transform=int8))
        results[method] = {
            "bleu": round(corpus_bleu(hyps, references).score, 2),
            "seconds": round(time.perf_counter() - started, 1),
            "identical_to_float": round(sum(h == f for h, f in zip(hyps, reference_hyps)) / len(hyps), 3),
            "differs_from_float": any(h != f for h, f in zip(hyps, reference_hyps)),
            "kernels": len(report),
            "relative_max_error_max": round(max(r["relative_max_error"] for r in report), 5),
            "relative_max_error_mean": round(float(np.mean([r["relative_max_error"] for r in report])), 5),
            "relative_rms_error": round(float(np.sqrt(squared_error / squared_weight)), 5),
            "relative_rms_error_max": round(max(per_kernel_relative_rms), 5),
            "report": report,
        }
        print(f"  {method}: BLEU {results[method]['bleu']} (float {results['float']['bleu']})",
              file=sys.stderr, flush=True)
    return {"sentences": len(sources), "batch": job["bleu_batch"], "methods": results}


WORKERS = {"setup": worker_setup, "speed": worker_speed, "paper": worker_paper, "quant": worker_quant}


# ================================================================================== parent
def run_job(task, job, threads, timeout, log):
    """Run one worker; its answer (or an error record) and its duration / load info."""
    answer, info = run_job_in_worker(__file__, {"task": task, **job}, threads, timeout)
    info = {"task": task, **{k: v for k, v in job.items() if k in ("artifact", "config")}, **info}
    log.append(info)
    if isinstance(answer, dict) and "error" not in answer and task == "speed":
        answer["worker"] = {k: v for k, v in info.items() if k.startswith("load_average") or k == "minutes"}
    if "error" in answer:
        print(f"worker {task} {job.get('artifact', '')} failed: {answer['error'][-600:]}", file=sys.stderr)
    return answer


def _ratio(a, b):
    return round(a / b, 2) if a and b else None


def evaluate_targets(speed_rows, quality, paper_rows):
    """The three targets, each with the numbers behind it."""
    targets = {}
    sps = {(r["artifact"], r["threads"], b["batch"]): b["second_pass"]["sentences_per_second"]
           for r in speed_rows if "error" not in r for b in r["batches"]}
    configs = sorted({(t, b) for _, t, b in sps})
    bleu = {name: q["bleu"] for name, q in quality.items() if q.get("bleu") is not None}

    # (1) per runtime: the fastest int8 row vs the fastest float row, and its BLEU loss vs the runtime's float.
    runtimes = {}
    for runtime in ("keras", "saved_model", "tflite"):
        floats = [n for n, s in ARTIFACTS.items() if s["runtime"] == runtime and s["quantize"] == "none"]
        int8s = [n for n, s in ARTIFACTS.items() if s["runtime"] == runtime and s["quantize"] == "int8"]
        plain_float = floats[0]
        per_config = []
        for threads, batch in configs:
            f = {n: sps[(n, threads, batch)] for n in floats if (n, threads, batch) in sps}
            q = {n: sps[(n, threads, batch)] for n in int8s if (n, threads, batch) in sps}
            if not f or not q:
                continue
            best_f, best_q = max(f, key=f.get), max(q, key=q.get)
            loss = round(bleu[plain_float] - bleu[best_q], 2) if plain_float in bleu and best_q in bleu else None
            per_config.append({
                "threads": threads, "batch": batch,
                "fastest_float": best_f, "float_sentences_per_second": f[best_f],
                "fastest_int8": best_q, "int8_sentences_per_second": q[best_q],
                "speedup_vs_fastest_float": _ratio(q[best_q], f[best_f]),
                "speedup_vs_plain_float": _ratio(q[best_q], f.get(plain_float)),
                "bleu_loss": loss,
                "met": bool(q[best_q] > f[best_f] and loss is not None and loss <= 0.2),
            })
        runtimes[runtime] = {"met": bool(per_config) and all(c["met"] for c in per_config), "configs": per_config}
    targets["1_int8_faster_than_float_within_0.2_bleu"] = {
        "met": all(r["met"] for r in runtimes.values()) if runtimes else False,
        "rule": "per runtime and (threads, batch): fastest int8 row faster than fastest float row (2nd pass), "
                "and dev BLEU loss of that int8 row vs the runtime's plain float artifact <= 0.2",
        "runtimes": runtimes,
    }

    # (2) TFLite int8 >= 2.5x TFLite float.
    per_config = []
    for threads, batch in configs:
        f, q = sps.get(("tflite_float", threads, batch)), sps.get(("tflite_int8", threads, batch))
        if f and q:
            per_config.append({"threads": threads, "batch": batch, "float": f, "int8": q,
                               "speedup": _ratio(q, f), "met": q >= 2.5 * f})
    targets["2_tflite_int8_2.5x_tflite_float"] = {
        "met": bool(per_config) and all(c["met"] for c in per_config),
        "met_at": [(c["threads"], c["batch"]) for c in per_config if c["met"]],
        "configs": per_config,
    }

    # (3) SavedModel best path >= 1.4x its plain float32 graph: the trained small model (whole artifact,
    # sentences/s) and the paper-size model (ms per decoder step).
    per_config = []
    saved = [n for n, s in ARTIFACTS.items() if s["runtime"] == "saved_model"]
    for threads, batch in configs:
        base = sps.get(("saved_model_float", threads, batch))
        options = {n: sps[(n, threads, batch)] for n in saved if (n, threads, batch) in sps}
        if base and options:
            best = max(options, key=options.get)
            per_config.append({"model": "small (trained), whole artifact", "threads": threads, "batch": batch,
                               "best": best, "speedup": _ratio(options[best], base),
                               "met": options[best] >= 1.4 * base})
    paper = {}
    for r in paper_rows:
        if "ms_per_step" in r:
            paper.setdefault((r["threads"], r["batch"]), {})[r["variant"]] = r["ms_per_step"]
    for (threads, batch), ms in sorted(paper.items()):
        if "float32" in ms:
            best = min(ms, key=ms.get)
            per_config.append({"model": "gnmt_wmt14_enfr (random weights), decoder step", "threads": threads,
                               "batch": batch, "best": best, "speedup": _ratio(ms["float32"], ms[best]),
                               "met": ms["float32"] >= 1.4 * ms[best]})
    targets["3_saved_model_best_path_1.4x_plain_float32"] = {
        "met": any(c["met"] for c in per_config),
        "met_everywhere": bool(per_config) and all(c["met"] for c in per_config),
        "met_at": [f"{c['model']}: threads {c['threads']}, batch {c['batch']} ({c['best']}, {c['speedup']}x)"
                   for c in per_config if c["met"]],
        "configs": per_config,
    }
    return targets


def markdown(report):
    lines = []
    arts = report.get("artifacts", {})
    quality = report.get("quality", {})
    if arts or quality:
        lines += ["| artifact | size MB | dev BLEU | identical to keras | dev run s |", "|---|---|---|---|---|"]
        for name in report["settings"]["artifacts"]:
            a, q = arts.get(name, {}), quality.get(name, {})
            size = f"{a['size_bytes'] / 1e6:.1f}" if "size_bytes" in a else "-"
            lines.append(f"| {name} | {size} | {q.get('bleu', '-')} | {q.get('identical_to_keras', '-')} | "
                         f"{q.get('seconds', '-')} |")
        lines.append("")
    rows = [r for r in report.get("speed", []) if "error" not in r]
    if rows:
        lines += ["| artifact | threads | batch | sent/s | words/s | sent/s 1st pass | call ms median / max "
                  "(1st pass max) | first call s | peak RSS MB (baseline) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            for b in r["batches"]:
                s, f = b["second_pass"], b["first_pass"]
                lines.append(
                    f"| {r['artifact']} | {r['threads']} | {b['batch']} | {s['sentences_per_second']} | "
                    f"{s['words_per_second']} | {f['sentences_per_second']} | {s['call_ms_median']:.0f} / "
                    f"{s['call_ms_max']:.0f} ({f['call_ms_max']:.0f}) | {r['first_call_seconds']:.2f} | "
                    f"{r['peak_rss_mb']:.0f} ({r['baseline_rss_mb']:.0f}) |")
        lines.append("")
    paper = [r for r in report.get("paper_size", {}).get("rows", []) if "ms_per_step" in r]
    if paper:
        base = {(r["threads"], r["batch"]): r["ms_per_step"] for r in paper if r["variant"] == "float32"}
        lines += ["| variant | threads | batch x beam | ms/step | speed-up vs float32 | first call s |",
                  "|---|---|---|---|---|---|"]
        for r in paper:
            b = base.get((r["threads"], r["batch"]))
            lines.append(f"| {r['variant']} | {r['threads']} | {r['batch']} x {r['beam_width']} | "
                         f"{r['ms_per_step']} | {_ratio(b, r['ms_per_step'])} | {r['first_call_seconds_at_L2']} |")
        lines.append("")
    methods = report.get("quantization_methods", {}).get("methods")
    if methods:
        lines += ["| int8 method (int8 products) | dev BLEU | identical to float | max rel. error (max over kernels) "
                  "| RMS rel. error (all kernels) |", "|---|---|---|---|---|",
                  f"| float32 | {methods['float']['bleu']} | 1.0 | - | - |"]
        for m in QUANT_METHODS:
            if m in methods:
                x = methods[m]
                lines.append(f"| {m} | {x['bleu']} | {x['identical_to_float']} | "
                             f"{100 * x['relative_max_error_max']:.2f}% | {100 * x['relative_rms_error']:.2f}% |")
        lines.append("")
    for key, t in report.get("targets", {}).items():
        lines.append(f"- target {key}: {'MET' if t['met'] else 'NOT met'}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        return answer_job(args.job, args.threads[0], WORKERS)

    started = time.time()
    model_dir = os.path.abspath(args.model_dir)
    if ("A" in args.parts or "C" in args.parts) and not os.path.exists(os.path.join(model_dir, "config.yaml")):
        print(f"no trained model directory at {args.model_dir}: train one first with `python -m gnmt_tf.train` "
              f"(or pass --model-dir)", file=sys.stderr)
        return 2
    top_threads = max(args.threads)
    workers: list = []
    report = {
        "benchmark": "export artifacts: size, speed, memory, dev BLEU; paper-size step speed; int8 methods",
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "processor": platform.processor() or platform.machine(), "python": platform.python_version(),
                    "load_average_at_start": [round(v, 2) for v in os.getloadavg()]},
        "settings": {"model_dir": portable_path(model_dir), "threads": args.threads, "batches": args.batches,
                     "sentences": args.sentences, "batch1_sentences": max(1, args.sentences // 4),
                     "bleu_sentences": args.bleu_sentences, "bleu_batch": args.bleu_batch,
                     "artifacts": args.artifacts, "quick": args.quick, "paper_config": args.paper_config,
                     "paper_threads": args.paper_threads, "paper_batches": args.paper_batches,
                     "paper_variants": args.paper_variants, "paper_lengths": args.paper_lengths,
                     "paper_repeats": args.paper_repeats},
        "workers": workers,
    }
    common = {"model_dir": model_dir, "batches": args.batches, "sentences": args.sentences,
              "bleu_sentences": args.bleu_sentences, "bleu_batch": args.bleu_batch}

    if "A" in args.parts:
        work_dir = args.work_dir or tempfile.mkdtemp(prefix="gnmt_artifacts_")
        os.makedirs(work_dir, exist_ok=True)
        try:
            print(f"part A: writing artifacts to {work_dir}", file=sys.stderr, flush=True)
            setup = run_job("setup", {**common, "work_dir": work_dir, "artifacts": args.artifacts}, top_threads,
                            timeout=1200, log=workers)
            report["machine"]["tensorflow"] = setup.get("tensorflow")
            report["model_parameters"] = setup.get("parameters")
            report["artifacts"] = {n: {k: v for k, v in a.items() if k != "path"}
                                   for n, a in setup.get("artifacts", {}).items()}
            paths = {n: a["path"] for n, a in setup.get("artifacts", {}).items()}
            speed, quality, translations = [], {}, {}
            for name in args.artifacts:
                if ARTIFACTS[name]["format"] != "keras" and name not in paths:
                    continue
                for threads in args.threads:
                    bleu = threads == top_threads
                    answer = run_job("speed", {**common, "artifact": name, "paths": paths, "bleu": bleu}, threads,
                                     timeout=900, log=workers)
                    if "error" in answer:
                        speed.append({"artifact": name, "threads": threads, "error": answer["error"]})
                        continue
                    if bleu and "bleu_run" in answer:
                        run = answer.pop("bleu_run")
                        translations[name] = run["translations"]
                        quality[name] = {"seconds": run["seconds"], "peak_rss_mb": run["peak_rss_mb"]}
                    speed.append(answer)
            report["speed"] = speed
            if translations:
                sys.path.insert(0, ROOT)
                from gnmt_tf.metrics.bleu import corpus_bleu

                references = [r for _, r in _dev_pairs(model_dir, args.bleu_sentences)]
                keras_hyps = translations.get("keras")
                for name, hyps in translations.items():
                    quality[name]["bleu"] = round(corpus_bleu(hyps, references).score, 2)
                    quality[name]["sentences"] = len(hyps)
                    quality[name]["mean_output_words"] = round(sum(len(h.split()) for h in hyps) / len(hyps), 2)
                    if keras_hyps:
                        quality[name]["identical_to_keras"] = round(
                            sum(h == k for h, k in zip(hyps, keras_hyps)) / len(hyps), 3)
                report["quality"] = quality
                report["mean_reference_words"] = round(sum(len(r.split()) for r in references) / len(references), 2)
        finally:
            if not args.keep_artifacts and not args.work_dir:
                shutil.rmtree(work_dir, ignore_errors=True)

    if "B" in args.parts:
        paper_rows, paper_info = [], {}
        for threads in args.paper_threads:
            print(f"part B: {args.paper_config}, {threads} thread(s)", file=sys.stderr, flush=True)
            answer = run_job("paper", {"config": args.paper_config, "batches": args.paper_batches,
                                       "variants": args.paper_variants, "source_length": 10,
                                       "lengths": args.paper_lengths, "repeats": args.paper_repeats},
                             threads, timeout=1500, log=workers)
            if "error" in answer:
                paper_rows.append({"threads": threads, "error": answer["error"]})
                continue
            paper_rows += answer["rows"]
            paper_info = {"config": answer["config"], "parameters": answer["parameters"],
                          "peak_rss_mb": answer["peak_rss_mb"]}
        report["paper_size"] = {**paper_info, "lengths": args.paper_lengths, "repeats": args.paper_repeats,
                                "rows": paper_rows}

    if "C" in args.parts:
        print("part C: int8 methods on the trained model", file=sys.stderr, flush=True)
        report["quantization_methods"] = run_job("quant", common, top_threads, timeout=1500, log=workers)

    report["machine"]["load_average_at_end"] = [round(v, 2) for v in os.getloadavg()]
    report["minutes"] = round((time.time() - started) / 60, 1)
    newest = last_run(args.output, "artifact_benchmark") if args.update else None
    if newest:  # appended as a new run: the newest one, with these parts measured again
        previous = {key: value for key, value in newest.items() if key not in SITTING}
        part_keys = {"A": ["artifacts", "speed", "quality", "mean_reference_words", "model_parameters"],
                     "B": ["paper_size"], "C": ["quantization_methods"]}
        for part in args.parts:
            for key in part_keys[part]:
                if key in report:
                    previous[key] = report[key]
        if "B" in args.parts:
            previous["settings"].update({k: v for k, v in report["settings"].items() if k.startswith("paper_")})
        previous["workers"] = previous.get("workers", []) + [{**w, "update": True} for w in workers]
        previous.setdefault("updates", []).append({
            "parts": args.parts, "minutes": report["minutes"], "settings": report["settings"],
            "other_parts_from": {key: newest.get(key) for key in SITTING},
            "load_average_at_start": report["machine"]["load_average_at_start"],
            "load_average_at_end": report["machine"]["load_average_at_end"],
        })
        report = previous
    report["targets"] = evaluate_targets(report.get("speed", []), report.get("quality", {}),
                                         report.get("paper_size", {}).get("rows", []))
    write_report(args.output, report, __file__, argv)
    print(f"{round((time.time() - started) / 60, 1)} min", file=sys.stderr)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
