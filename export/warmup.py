"""TF Serving warm-up records: ``<version>/assets.extra/tf_serving_warmup_requests``.

TF Serving replays these requests when it loads a version, before it reports
the version AVAILABLE, so the first real request does not pay for the
translator's first run (graph optimisation, memory pools, and with ``--xla``
the compilation of the decoding step for those shapes). The file is a
TFRecord of ``tensorflow_serving.apis.prediction_log_pb2.PredictionLog``
messages, each holding one ``PredictRequest``; TF Serving accepts at most
1000 of them.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable, List, Sequence

WARMUP_DIR = "assets.extra"
WARMUP_FILE = "tf_serving_warmup_requests"
MAX_RECORDS = 1000  # TF Serving's limit


def warmup_path(version_dir: str) -> str:
    return os.path.join(version_dir, WARMUP_DIR, WARMUP_FILE)


def predict_request(model_name: str, sentences: Sequence[str], signature_name: str = "serving_default", **scalars):
    """A ``PredictRequest`` for one of the translator's signatures."""
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature_name
    request.inputs["sentences"].CopyFrom(tf.make_tensor_proto(list(sentences), dtype=tf.string))
    for name, value in scalars.items():  # the options (float32) and the shortlist switch (bool)
        scalar = tf.make_tensor_proto(value, dtype=tf.bool) if isinstance(value, bool) else \
            tf.make_tensor_proto(float(value), dtype=tf.float32)
        request.inputs[name].CopyFrom(scalar)
    return request


def write_warmup_requests(version_dir: str, requests: Iterable) -> str:
    """Write ``requests`` (PredictRequest messages) as TF Serving's warm-up file; returns its path."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    requests = list(requests)
    if not requests or len(requests) > MAX_RECORDS:
        raise ValueError(f"TF Serving replays 1 to {MAX_RECORDS} warm-up requests, got {len(requests)}")
    path = warmup_path(version_dir)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for request in requests:
            log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())
    return path


def read_warmup_requests(version_dir: str) -> List:
    """The ``PredictRequest`` messages of a version's warm-up file ([] if it has none)."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    path = warmup_path(version_dir)
    if not os.path.exists(path):
        return []
    requests = []
    for record in tf.data.TFRecordDataset(path):
        log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        requests.append(log.predict_log.request)
    return requests


def sentence_of_length(sentences: Sequence[str], fits: Callable[[str], int], lower: int) -> str:
    """The shortest run of ``sentences``' words (cycled) whose ``fits`` count (source length) exceeds ``lower``."""
    words = " ".join(sentences).split() or ["a"]
    count = 1
    while fits(" ".join(words[i % len(words)] for i in range(count))) <= lower:
        count *= 2
    low, high = count // 2, count  # the length is monotone in the words taken: bisect
    while high - low > 1:
        middle = (low + high) // 2
        if fits(" ".join(words[i % len(words)] for i in range(middle))) <= lower:
            low = middle
        else:
            high = middle
    return " ".join(words[i % len(words)] for i in range(high))


def bucket_warmup_requests(model_name: str, sentences: Sequence[str], options, buckets, source_length,
                           max_source: int) -> List:
    """Requests that run the compiled step at every (searches, source) bucket of ``buckets``
    (:class:`gnmt_tf.decoding.buckets.ShapeBuckets`), through each search graph of the translator
    (``translate_with_options``, which ``serving_default`` calls, and ``translate_nbest``).

    A bucket's request has as many sentences as the bucket has searches: one as long as the
    shortest source that lands in the bucket, the others short, so that they end early and the
    request costs about one long search (as searches end, the step meets the smaller search
    buckets, which have their own requests too). ``source_length(sentence)``: the translator's
    source length of a sentence (wordpieces + EOS); ``max_source``: the longest source the
    translator keeps.
    """
    requests = []
    smaller = 0
    by_length = {}
    for length in buckets.source:
        if smaller >= max_source:
            break
        sentence = sentence_of_length(sentences, source_length, smaller)
        if not smaller < source_length(sentence) <= length:  # a word longer than the bucket's span
            raise ValueError(f"no warm-up sentence lands in the source bucket {length}")
        by_length[length] = sentence
        smaller = length
    short = by_length[buckets.source[0]]
    for searches, length in buckets.shapes(buckets.searches[-1], max_source):
        batch = [by_length[length]] + [short] * (searches - 1)
        for signature in ("translate_with_options", "translate_nbest"):
            requests.append(predict_request(model_name, batch, signature, **options))
    return requests


def translator_warmup_requests(model_name: str, sentences: Sequence[str], options,
                               shortlist: bool = False) -> List:
    """Warm-up for the translator: each signature, at batch 1 and at a batch of all ``sentences``.

    ``options``: the ``alpha``, ``beta`` and ``beamsize`` inputs of the signatures that take them.
    ``shortlist``: the translator has the shortlist signatures too (warmed up with it on).
    """
    sentences = [s for s in sentences if s] or ["a"]
    batches = [sentences[:1], list(sentences)]
    requests = []
    for batch in batches:
        requests.append(predict_request(model_name, batch))
        requests.append(predict_request(model_name, batch, "translate_with_options", **options))
    requests.append(predict_request(model_name, sentences[:1], "translate_nbest", **options))
    if shortlist:
        for batch in batches:
            requests.append(predict_request(model_name, batch, "translate_with_shortlist", **options,
                                            use_shortlist=True))
        requests.append(predict_request(model_name, sentences[:1], "translate_nbest_with_shortlist",
                                        **options, use_shortlist=True))
    return requests
