"""Translate through TF Serving's REST or gRPC API: ``python -m serving.client``.

The same client talks to the real ``tensorflow_model_server`` and to the local
``python -m serving.server``; it only uses TF Serving's documented protocol:

* REST: ``POST /v1/models/<name>[/versions/<v>]:predict`` with a columnar body
  ``{"signature_name": ..., "inputs": {"sentences": [...], ...}}``;
  ``GET /v1/models/<name>[/versions/<v>]`` (status) and ``.../metadata``.
* gRPC: ``PredictionService.Predict`` / ``GetModelMetadata`` and
  ``ModelService.GetModelStatus`` from tensorflow-serving-api.

alpha, beta and beamsize must be finite and >= 0 (:mod:`gnmt_tf.decoding.options`, the rule the
server and the exported signatures apply too): another value raises ValueError before anything is
sent (on the command line: a usage error, exit 2).

Every call has a timeout; calls that fail because the server is unavailable
(connection refused or reset, HTTP 503, gRPC UNAVAILABLE) are retried with
exponential backoff; everything else raises :class:`ServingRequestError` at once
with the server's message.

    client = RestClient("http://localhost:8501", model="gnmt")
    client.translate(["Open the file"])  # -> [Translation(text=..., score=...)] (gnmt_tf.inference.results)

Command line::

    echo "Open the file" | python -m serving.client --rest http://localhost:8501 --model gnmt
    python -m serving.client --grpc localhost:8500 --model gnmt --status

A model exported with a vocabulary shortlist takes ``use_shortlist`` per request
(``client.translate(..., use_shortlist=True)`` with the three options; ``--shortlist``).
"""

from __future__ import annotations

import base64
import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, List, Optional, Sequence

from gnmt_tf.cli.common import add_search_option_arguments, add_shortlist_argument, positive_int
from gnmt_tf.cli.commands import defined_in
from gnmt_tf.cli.scaffold import Command, start_tensorflow
from gnmt_tf.decoding.options import SEARCH_OPTIONS, check_search_option
from gnmt_tf.inference.results import Translation


class ServingRequestError(RuntimeError):
    """A request to the model server failed, as the client saw it.

    ``code`` is the HTTP status (REST) or the gRPC status name ("UNAVAILABLE", ...), whichever the
    protocol gave, or None when no answer came (a timeout); "UNAVAILABLE" for either protocol when
    the server was still unavailable after the last retry. Not :class:`serving.errors.ServingError`,
    the local server's internal error: the client knows only TF Serving's protocol, not which server
    answers it.
    """

    def __init__(self, message: str, code: Any = None):
        super().__init__(message)
        self.code = code


def _options(alpha, beta, beamsize) -> Optional[Dict[str, float]]:
    """The translate_with_options scalars, or None for the model's defaults (serving_default).

    Each must be finite and >= 0 (ValueError, as the server would answer, but before sending).
    """
    given = {"alpha": alpha, "beta": beta, "beamsize": beamsize}
    if all(value is None for value in given.values()):
        return None
    missing = [name for name, value in given.items() if value is None]
    if missing:
        raise ValueError(f"give alpha, beta and beamsize together (missing: {', '.join(missing)})")
    return {name: check_search_option(name, value) for name, value in given.items()}


class _Client:
    """What both protocols share: argument checks, retries, turning outputs into records."""

    def __init__(self, model: str, timeout: float, retries: int, backoff: float,
                 sleep: Callable[[float], None] = time.sleep):
        if not model:
            raise ValueError("a model name is needed")
        if timeout <= 0 or retries < 0 or backoff < 0:
            raise ValueError("timeout must be > 0, retries and backoff >= 0")
        self.model, self.timeout, self.retries, self.backoff = model, timeout, retries, backoff
        self._sleep = sleep

    def _with_retries(self, call: Callable[[], Any], what: str, retryable: Callable[[Exception], bool],
                      describe: Callable[[Exception], str]):
        """``call()``, tried again after ``backoff``, 2 x ``backoff``, ... while it fails in a ``retryable`` way.

        Gives up after ``retries`` retries with a ServingRequestError (code UNAVAILABLE) that says how
        long it tried and the last failure, as ``describe`` words it (the server's own message).
        """
        waited = 0.0
        for attempt in range(self.retries + 1):
            try:
                return call()
            except Exception as err:  # noqa: BLE001  (classified below)
                if not retryable(err):
                    raise
                if attempt == self.retries:
                    raise ServingRequestError(
                        f"{what}: the server is still unavailable after {attempt + 1} attempt(s) "
                        f"({waited:g} s of backoff between them); last error: {describe(err)}", "UNAVAILABLE"
                    ) from err
                wait = self.backoff * 2**attempt
                self._sleep(wait)
                waited += wait

    def translate(self, sentences: Sequence[str], alpha=None, beta=None, beamsize=None,
                  version: Optional[int] = None, use_shortlist: Optional[bool] = None) -> List[Translation]:
        """Translate a batch; ``alpha``/``beta``/``beamsize`` (all three) override the model's defaults.

        ``use_shortlist`` True or False: decode with or without the vocabulary shortlist of a model
        exported with one (its ``translate_with_shortlist`` signature, which also needs the three
        options); None: the model's default.
        """
        sentences = _check_sentences(sentences)
        use_shortlist = _check_switch(use_shortlist)
        if not sentences:
            return []
        options = _options(alpha, beta, beamsize)
        if use_shortlist is None:
            signature, scalars = ("serving_default", {}) if options is None else ("translate_with_options", options)
        elif options is None:
            raise ValueError("use_shortlist needs alpha, beta and beamsize too: translate_with_shortlist takes all four")
        else:
            signature, scalars = "translate_with_shortlist", {**options, "use_shortlist": use_shortlist}
        outputs = self._predict(signature, sentences, scalars, version)
        return [Translation(text, score=float(score))
                for text, score in zip(outputs["translations"], outputs["scores"])]

    def translate_nbest(self, sentences: Sequence[str], alpha: float = 0.2, beta: float = 0.2,
                        beamsize: float = 3.0, version: Optional[int] = None,
                        use_shortlist: Optional[bool] = None) -> List[List[Translation]]:
        """n-best lists (best first) per sentence: all the model's n_best entries (fixed at export).

        ``use_shortlist``: as for :meth:`translate` (the ``translate_nbest_with_shortlist`` signature).
        """
        sentences = _check_sentences(sentences)
        use_shortlist = _check_switch(use_shortlist)
        if not sentences:
            return []
        signature, scalars = "translate_nbest", _options(alpha, beta, beamsize)
        if use_shortlist is not None:
            signature, scalars = "translate_nbest_with_shortlist", {**scalars, "use_shortlist": use_shortlist}
        outputs = self._predict(signature, sentences, scalars, version)
        result = []
        for texts, scores, lengths in zip(outputs["translations"], outputs["scores"], outputs["lengths"]):
            result.append([Translation(t, score=float(s), length=int(n))
                           for t, s, n in zip(texts, scores, lengths)])
        return result

    # implemented per protocol
    def _predict(self, signature: str, sentences: List[str], scalars: Dict[str, float],
                 version: Optional[int]) -> Dict[str, Any]:
        raise NotImplementedError

    def status(self, version: Optional[int] = None) -> List[Dict[str, Any]]:
        raise NotImplementedError

    def metadata(self, version: Optional[int] = None) -> Dict[str, Any]:
        raise NotImplementedError


def _check_switch(use_shortlist) -> Optional[bool]:
    if use_shortlist is not None and not isinstance(use_shortlist, bool):
        raise TypeError(f"use_shortlist must be True, False or None, got {use_shortlist!r}")
    return use_shortlist


def _check_sentences(sentences: Sequence[str]) -> List[str]:
    if isinstance(sentences, str):
        raise TypeError("pass a list of sentences, not one string")
    sentences = list(sentences)
    bad = [type(s).__name__ for s in sentences if not isinstance(s, str)]
    if bad:
        raise TypeError(f"sentences must be str, got {', '.join(sorted(set(bad)))}")
    return sentences


# ------------------------------------------------------------------------------------ REST
class RestClient(_Client):
    """TF Serving's REST API (``--rest_api_port``, 8501 by default)."""

    def __init__(self, url: str = "http://localhost:8501", model: str = "gnmt", timeout: float = 60.0,
                 retries: int = 3, backoff: float = 0.5, **kwargs):
        super().__init__(model, timeout, retries, backoff, **kwargs)
        if "://" not in url:
            url = "http://" + url
        self.url = url.rstrip("/")

    def _model_path(self, version: Optional[int]) -> str:
        path = f"{self.url}/v1/models/{self.model}"
        return path + (f"/versions/{int(version)}" if version is not None else "")

    def _request(self, method: str, url: str, body: Optional[dict] = None) -> dict:
        data = json.dumps(body).encode("utf-8") if body is not None else None
        request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})

        def call():
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read().decode("utf-8"))

        try:
            return self._with_retries(call, f"{method} {url}", _rest_retryable, _rest_failure)
        except urllib.error.HTTPError as err:
            raise ServingRequestError(
                f"{method} {url}: HTTP {err.code}: {_rest_error_message(err)}", err.code) from None
        except urllib.error.URLError as err:
            raise ServingRequestError(f"{method} {url}: {err.reason}") from None

    def _predict(self, signature, sentences, scalars, version):
        inputs = {"sentences": sentences, **scalars}
        body = {"signature_name": signature, "inputs": inputs}
        outputs = self._request("POST", self._model_path(version) + ":predict", body)["outputs"]
        return {name: _decode_b64(value) for name, value in outputs.items()}

    def status(self, version=None):
        return self._request("GET", self._model_path(version))["model_version_status"]

    def metadata(self, version=None):
        return self._request("GET", self._model_path(version) + "/metadata")


def _rest_retryable(err: Exception) -> bool:
    if isinstance(err, urllib.error.HTTPError):
        return err.code == 503
    return isinstance(err, (urllib.error.URLError, ConnectionError, TimeoutError)) and not isinstance(
        getattr(err, "reason", None), TimeoutError
    )


def _rest_failure(err: Exception) -> str:
    """A failed REST call in a line: the HTTP status and the server's message, or why no answer came."""
    if isinstance(err, urllib.error.HTTPError):
        return f"HTTP {err.code}: {_rest_error_message(err)}"
    if isinstance(err, urllib.error.URLError):  # no answer: connection refused, reset, ...
        return str(err.reason)
    return str(err)


def _rest_error_message(err: urllib.error.HTTPError) -> str:
    body = err.read().decode("utf-8", "replace")
    try:
        return json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return body.strip() or err.reason


def _decode_b64(value):
    """Binary outputs come back as ``{"b64": ...}``; our outputs are UTF-8 text."""
    if isinstance(value, list):
        return [_decode_b64(v) for v in value]
    if isinstance(value, dict) and set(value) == {"b64"}:
        return base64.b64decode(value["b64"]).decode("utf-8")
    return value


# ------------------------------------------------------------------------------------ gRPC
class GrpcClient(_Client):
    """TF Serving's gRPC API (``--port``, 8500 by default), with tensorflow-serving-api's stubs."""

    def __init__(self, target: str = "localhost:8500", model: str = "gnmt", timeout: float = 60.0,
                 retries: int = 3, backoff: float = 0.5, max_message_bytes: int = 64 * 1024 * 1024, **kwargs):
        super().__init__(model, timeout, retries, backoff, **kwargs)
        import grpc
        from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

        self._grpc = grpc
        self.target = target
        self.channel = grpc.insecure_channel(target, options=[
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
        ])
        self.predictions = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
        self.models = model_service_pb2_grpc.ModelServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _spec(self, spec, version: Optional[int], signature: Optional[str] = None):
        spec.name = self.model
        if version is not None:
            spec.version.value = int(version)
        if signature:
            spec.signature_name = signature

    def _call(self, method, request, what: str):
        grpc = self._grpc

        def retryable(err):
            return isinstance(err, grpc.RpcError) and err.code() == grpc.StatusCode.UNAVAILABLE

        def describe(err):
            return f"{err.code().name}: {err.details()}"

        try:
            return self._with_retries(lambda: method(request, timeout=self.timeout), what, retryable, describe)
        except grpc.RpcError as err:
            raise ServingRequestError(
                f"{what}: {err.code().name}: {err.details()}", err.code().name) from None

    def _predict(self, signature, sentences, scalars, version):
        import tensorflow as tf
        from tensorflow_serving.apis import predict_pb2

        request = predict_pb2.PredictRequest()
        self._spec(request.model_spec, version, signature)
        request.inputs["sentences"].CopyFrom(tf.make_tensor_proto(sentences, dtype=tf.string))
        for name, value in scalars.items():  # the search options, and the shortlist's switch
            request.inputs[name].CopyFrom(tf.make_tensor_proto(value, dtype=tf.bool if isinstance(value, bool)
                                                               else tf.float32))
        response = self._call(self.predictions.Predict, request, f"Predict {self.model}/{signature}")
        outputs = {}
        for name, proto in response.outputs.items():
            array = tf.make_ndarray(proto)
            outputs[name] = _decode_strings(array.tolist()) if array.dtype == object else array.tolist()
        return outputs

    def status(self, version=None):
        from google.protobuf import json_format
        from tensorflow_serving.apis import get_model_status_pb2

        request = get_model_status_pb2.GetModelStatusRequest()
        self._spec(request.model_spec, version)
        response = self._call(self.models.GetModelStatus, request, f"GetModelStatus {self.model}")
        return json_format.MessageToDict(response, preserving_proto_field_name=True)["model_version_status"]

    def metadata(self, version=None):
        from google.protobuf import json_format
        from tensorflow_serving.apis import get_model_metadata_pb2

        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        self._spec(request.model_spec, version)
        response = self._call(self.predictions.GetModelMetadata, request, f"GetModelMetadata {self.model}")
        signatures = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signatures)
        return {
            "model_spec": json_format.MessageToDict(response.model_spec, preserving_proto_field_name=True),
            "metadata": {"signature_def": json_format.MessageToDict(signatures, preserving_proto_field_name=True)},
        }


def _decode_strings(values):
    if isinstance(values, list):
        return [_decode_strings(v) for v in values]
    return values.decode("utf-8") if isinstance(values, bytes) else values


# ------------------------------------------------------------------------------------ CLI
def add_arguments(parser) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--rest", metavar="URL", help="REST endpoint, e.g. http://localhost:8501")
    where.add_argument("--grpc", metavar="HOST:PORT", help="gRPC endpoint, e.g. localhost:8500")
    parser.add_argument("--model", default="gnmt", help="model name on the server (default: %(default)s)")
    parser.add_argument("--version", type=int, default=None,
                        help="the model version to ask for (default: the latest the server serves)")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--status", action="store_true",
                      help="print the model's versions and their states as JSON instead of translating")
    what.add_argument("--metadata", action="store_true",
                      help="print the model's signatures (their inputs and outputs) as JSON instead of "
                      "translating")
    what.add_argument("--nbest", action="store_true",
                      help="print each sentence's n-best list as one JSON line (translate_nbest; alpha, beta "
                      "and beamsize 0.2, 0.2 and 3 unless given, not the model's config)")
    search = parser.add_argument_group(
        "beam search", "--alpha, --beta and --beamsize go together (translate_with_options), or none of\n"
        "them (the model's defaults); with --nbest they default to 0.2, 0.2 and 3",
    )
    add_search_option_arguments(search)
    add_shortlist_argument(search, "without --nbest it needs --alpha, --beta and --beamsize; default: the "
                                   "setting the model was exported with")
    parser.add_argument("--scores", action="store_true", help="print 'score<TAB>translation'")
    parser.add_argument("--batch-size", type=positive_int, default=32,
                        help="sentences per request (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds each request may take before it fails (default: %(default)s)")
    parser.add_argument("--retries", type=int, default=3,
                        help="times a request is retried, with exponential backoff, while the server is "
                        "unavailable (connection refused or reset, HTTP 503, gRPC UNAVAILABLE) (default: "
                        "%(default)s)")


def check(parser, args) -> None:
    if args.use_shortlist is not None and not args.nbest and None in (args.alpha, args.beta, args.beamsize):
        parser.error("--shortlist and --no-shortlist need --alpha, --beta and --beamsize (or --nbest)")


def translate_stdin(args) -> int:
    if args.rest:
        client = RestClient(args.rest, args.model, timeout=args.timeout, retries=args.retries)
    else:
        start_tensorflow(args.verbose)  # the gRPC protos come with TensorFlow
        client = GrpcClient(args.grpc, args.model, timeout=args.timeout, retries=args.retries)
    if args.status:
        print(json.dumps(client.status(args.version), indent=2))
        return 0
    if args.metadata:
        print(json.dumps(client.metadata(args.version), indent=2))
        return 0
    sentences = [line.rstrip("\n") for line in sys.stdin]
    for start in range(0, len(sentences), args.batch_size):
        batch = sentences[start : start + args.batch_size]
        if args.nbest:
            given = {name: getattr(args, name) for name in SEARCH_OPTIONS if getattr(args, name) is not None}
            for entries in client.translate_nbest(batch, version=args.version,
                                                  use_shortlist=args.use_shortlist, **given):
                print(json.dumps([{"text": e.text, "score": e.score, "length": e.length} for e in entries],
                                 ensure_ascii=False))
            continue
        for result in client.translate(batch, args.alpha, args.beta, args.beamsize, version=args.version,
                                       use_shortlist=args.use_shortlist):
            print(f"{result.score:.4f}\t{result.text}" if args.scores else result.text)
        sys.stdout.flush()
    return 0


HELP = """``python -m serving.client`` (gnmt-client): the serving client's command line.

Translate stdin (one sentence per line) through TF Serving's REST or gRPC API.

Exit status: 0 done; 2 a usage error (nothing was sent); 1 the server refused a request or
did not answer.
"""

COMMAND = Command(
    defined_in(__spec__.name), HELP, add_arguments, translate_stdin, check=check,
    starts_tensorflow=False,  # REST needs no TensorFlow; translate_stdin starts it for gRPC
    # ValueError: what the client refuses before sending (a search option, an empty model name, a timeout).
    exit_statuses=lambda: {ServingRequestError: 1, ValueError: 2},
    examples=("--rest http://localhost:8501 --model gnmt < in.txt",
              "--grpc localhost:8500 --model gnmt --status"),
)
main, build_parser = COMMAND.main, COMMAND.build_parser
COMMAND.run_if_main(__name__)
