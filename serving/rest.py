"""TF Serving's REST API over HTTP/1.1 (standard library ``http.server``).

Endpoints (paths case-insensitive, as TF Serving's; model names and labels are URL-decoded):

* ``POST /v1/models/NAME[/versions/N | /labels/L]:predict`` with ``{"signature_name": ..., "instances": [...]}``
  (row format, answered with ``{"predictions": [...]}``) or ``{"signature_name": ..., "inputs": ...}``
  (columnar, answered with ``{"outputs": ...}``). With one output the name is left out (a list of
  values / the value); with several, each prediction is an object / ``outputs`` is an object.
* ``GET /v1/models/NAME[/versions/N | /labels/L]``: ``{"model_version_status": [...]}``.
* ``GET /v1/models/NAME[/versions/N | /labels/L]/metadata``: ``{"model_spec": ..., "metadata": {"signature_def": ...}}``.

Values: strings are JSON strings (UTF-8); ``{"b64": "..."}`` gives binary strings on input, and
outputs whose name ends in ``_bytes`` (or that are not valid UTF-8) are written that way. Floats
are written with the shortest decimal that reads back as the same float32; NaN and infinities as
``NaN`` / ``Infinity`` (as TF Serving).

Errors are ``{"error": "<message>"}`` with TF Serving's HTTP status for the code (400 invalid
argument / failed precondition, 404 unknown model, version or path, 429 resource exhausted, 501
unimplemented, 503 unavailable or shutting down, 500 internal); a body over ``--max_request_bytes``
gets 413 (TF Serving has no such limit; gRPC's equivalent is RESOURCE_EXHAUSTED).

Where this server is stricter than TF Serving (so that a mistake is not silently ignored):

* unknown top-level keys of a predict body and unknown names in an ``inputs`` object are refused
  (TF Serving ignores them: ``{"inputs": {"sentences": [...], "alpha": 0.5}}`` to
  ``serving_default`` would translate without the alpha the client meant);
* signatures with scalar inputs (``translate_with_options``, ``translate_nbest``) take the columnar
  format only: in the row format every named input is batched across instances, so the scalars
  would arrive as ``[batch]`` tensors and fail inside the model (TF Serving's behaviour);
* ``:classify`` and ``:regress`` answer 501 (the translator has no such signatures).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import socket
import threading
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, Optional, Tuple
from urllib.parse import unquote, urlsplit

import numpy as np
import tensorflow as tf

from serving.config import Limits
from serving.errors import ServingError, invalid
from serving.tensors import check_count, check_shape, dtype_name

PREDICT_PATH = re.compile(
    r"/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?:(classify|regress|predict)", re.IGNORECASE)
STATUS_PATH = re.compile(
    r"/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:/(metadata))?", re.IGNORECASE)
API_PATH = re.compile(r"/v1/.*", re.IGNORECASE)
API_HELP = ("POST /v1/models/NAME[/versions/N|/labels/L]:predict, "
            "GET /v1/models/NAME[/versions/N|/labels/L] and GET /v1/models/NAME[/versions/N|/labels/L]/metadata")
BODY_KEYS = ("signature_name", "instances", "inputs")
INT64_MAX = 2**63 - 1


# ---------------------------------------------------------------------------------------- JSON -> numpy
def _short(value, limit: int = 200) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _json_type(value) -> str:
    if value is None:
        return "Null"
    if value is True:
        return "True"
    if value is False:
        return "False"
    if isinstance(value, dict):
        return "Object"
    if isinstance(value, list):
        return "Array"
    if isinstance(value, str):
        return "String"
    return "Number"


def _type_error(value, dtype) -> ServingError:
    return invalid(f"JSON Value: {_short(value)} Type: {_json_type(value)} is not of expected type: {dtype_name(dtype)}")


def is_b64(value) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def _b64decode(text: str) -> bytes:
    padded = text + "=" * (-len(text) % 4)
    try:
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        raise invalid(f"Unable to base64 decode {_short(text, 60)}") from None


def _scalar(value, dtype: tf.DType, name: str):
    if dtype == tf.string:
        if isinstance(value, str):
            try:
                return value.encode("utf-8")
            except UnicodeEncodeError:
                raise invalid(f"a string of input '{name}' is not valid UTF-8 (a lone surrogate \\u escape); "
                              f"the translator takes UTF-8 text") from None
        if isinstance(value, dict):
            if is_b64(value):
                return _b64decode(value["b64"])
            raise invalid(f"JSON Value: {_short(value)} not formatted correctly for base64 data")
        raise _type_error(value, dtype)
    if dtype == tf.bool:
        if isinstance(value, bool):
            return value
        raise _type_error(value, dtype)
    if isinstance(value, bool) or value is None or isinstance(value, (str, dict, list)):
        raise _type_error(value, dtype)
    if dtype.is_floating:
        limit = float(np.finfo(dtype.as_numpy_dtype).max)
        digits = np.finfo(dtype.as_numpy_dtype).nmant + 1
        lossy = (abs(value) > (1 << digits) - 1) if isinstance(value, int) else (np.isfinite(value) and abs(value) > limit)
        if lossy:
            raise invalid(f"Cannot convert JSON value: {_short(value)} to {dtype_name(dtype)} without loss of precision.")
        return value
    if dtype.is_integer:
        if not isinstance(value, int) or not dtype.min <= value <= dtype.max:
            raise _type_error(value, dtype)
        return value
    raise ServingError("UNIMPLEMENTED", f"Conversion of JSON Value: {_short(value)} to type: {dtype_name(dtype)}")


def _dense_shape(value) -> list:
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return shape


def _fill(value, level: int, shape: list, dtype, name: str, out: list) -> None:
    rank = len(shape)
    if not isinstance(value, list):
        if level != rank:
            raise invalid(f"JSON Value: {_short(value)} found at incorrect level: {level + 1} in the JSON DOM. "
                          f"Expected at level: {rank}")
        out.append(_scalar(value, dtype, name))
        return
    if level >= rank:
        raise invalid(f"Encountered list at unexpected level: {level} expected < {rank}")
    if len(value) != shape[level]:
        raise invalid(f"Encountered list at unexpected size: {len(value)} at level: {level} "
                      f"expected size: {shape[level]}")
    for item in value:
        _fill(item, level + 1, shape, dtype, name, out)


def json_to_array(value, signature_name: str, name: str, spec: tf.TensorSpec, limits: Limits) -> np.ndarray:
    """A JSON value (nested lists) as an array of the signature input's dtype and rank."""
    shape = _dense_shape(value)
    check_shape(signature_name, name, spec, shape)
    check_count(name, spec, int(np.prod(shape)) if shape else 1, limits)
    flat: list = []
    _fill(value, 0, shape, spec.dtype, name, flat)
    if spec.dtype == tf.string:
        array = np.empty(len(flat), dtype=object)
        array[:] = flat
    else:
        array = np.array(flat, dtype=spec.dtype.as_numpy_dtype)
    return array.reshape(shape)


def request_arrays(doc: dict, signature, limits: Limits) -> Tuple[Dict[str, np.ndarray], bool]:
    """The input arrays of a predict body, and whether it is in the row format."""
    specs = signature.inputs
    names = list(specs)
    has_instances, has_inputs = "instances" in doc, "inputs" in doc
    if has_instances and has_inputs:
        raise invalid(f"JSON Value: {_short(doc)} Not formatted correctly expecting only one of 'inputs' or "
                      f"'instances' keys to exist ")
    if not (has_instances or has_inputs):
        raise invalid("Missing 'inputs' or 'instances' key")
    if has_inputs:
        value = doc["inputs"]
        if not isinstance(value, dict) or is_b64(value):
            if len(names) > 1:
                raise invalid("inputs is a plain value/list, but expecting an object as multiple input tensors "
                              f"required as per tensorinfo_map ({', '.join(sorted(names))})")
            return {names[0]: json_to_array(value, signature.name, names[0], specs[names[0]], limits)}, False
        for name in names:
            if name not in value:
                raise invalid(f"Missing named input: {name} in 'inputs' object.")
        extra = sorted(set(value) - set(names))
        if extra:
            raise invalid(f"unknown named input(s) {', '.join(extra)} in 'inputs' object; signature "
                          f"'{signature.name}' takes {{{','.join(sorted(names))}}}")
        return {n: json_to_array(value[n], signature.name, n, specs[n], limits) for n in names}, False

    instances = doc["instances"]
    if not isinstance(instances, list):
        raise invalid(f"JSON Value: {_short(doc)} Excepting 'instances' to be an list/array")
    if not instances:
        raise invalid(f"JSON Value: {_short(doc)} No values in 'instances' array")
    scalars = [n for n, s in specs.items() if s.shape.rank == 0]
    if scalars:
        raise invalid(
            f"signature '{signature.name}' has scalar inputs ({', '.join(sorted(scalars))}), which the row format "
            f"('instances') cannot carry: every named input of an instance is batched. Use the columnar format: "
            f'{{"signature_name": "{signature.name}", "inputs": {{'
            + ", ".join(f'"{n}": {"[...]" if n not in scalars else "<number>"}' for n in sorted(names)) + "}}"
        )
    if not isinstance(instances[0], dict) and len(names) > 1:
        raise invalid("instances is a plain list, but expecting list of objects as multiple input tensors required "
                      f"as per tensorinfo_map ({', '.join(sorted(names))})")

    def is_object(value):
        return isinstance(value, dict) and not is_b64(value)

    objects = is_object(instances[0])
    columns: Dict[str, list] = {n: [] for n in names}
    for index, item in enumerate(instances):
        if objects:
            if not is_object(item):
                raise invalid(f"Expecting object but got list at item {index} of input list")
            if set(item) != set(names):
                raise invalid(f"Failed to process element: {index} of 'instances' list. JSON object: {_short(item)} "
                              f"keys must be equal to: {','.join(sorted(names))}")
            for name in names:
                columns[name].append(item[name])
        else:
            if is_object(item):
                raise invalid(f"Expecting value/list but got object at item {index} of input list")
            columns[names[0]].append(item)
    return {n: json_to_array(columns[n], signature.name, n, specs[n], limits) for n in names}, True


# ---------------------------------------------------------------------------------------- numpy -> JSON
def _nest(flat: list, shape) -> object:
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return flat
    step = int(np.prod(shape[1:]))
    return [_nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def _flat_values(array: np.ndarray, name: str) -> list:
    flat = array.ravel()
    if array.dtype == object or array.dtype.kind in "SU":
        as_bytes = name.endswith("_bytes")
        values = []
        for value in flat:
            if isinstance(value, str):
                value = value.encode("utf-8")
            if not as_bytes:
                try:
                    values.append(value.decode("utf-8"))
                    continue
                except UnicodeDecodeError:
                    pass
            values.append({"b64": base64.b64encode(value).decode("ascii")})
        return values
    if array.dtype in (np.float32, np.float16):
        return [float(str(v)) for v in flat]  # shortest decimal that reads back as the same float32
    return flat.tolist()


def response_json(outputs: Dict[str, np.ndarray], row: bool) -> dict:
    """``{"predictions": ...}`` (row format) or ``{"outputs": ...}`` (columnar), as TF Serving writes them."""
    if not outputs:
        raise invalid("Cannot convert empty tensor map to JSON")
    if not row:
        values = {name: _nest(_flat_values(value, name), value.shape) for name, value in outputs.items()}
        return {"outputs": next(iter(values.values())) if len(values) == 1 else values}
    batch = None
    for name, value in outputs.items():
        if value.ndim == 0:
            raise invalid(f"Tensor name: {name} has no shape information ")
        if batch is not None and value.shape[0] != batch:
            raise invalid(f"Tensor name: {name} has inconsistent batch size: {value.shape[0]} expecting: {batch}")
        batch = value.shape[0]
    columns = {}
    for name, value in outputs.items():
        flat, step = _flat_values(value, name), int(np.prod(value.shape[1:]))
        columns[name] = [_nest(flat[i * step:(i + 1) * step], value.shape[1:]) for i in range(batch)]
    if len(columns) == 1:
        return {"predictions": next(iter(columns.values()))}
    return {"predictions": [{name: columns[name][i] for name in columns} for i in range(batch)]}


# ---------------------------------------------------------------------------------------- requests
def parse_json_body(body: bytes) -> dict:
    if not body.strip():
        raise invalid("JSON Parse error: The document is empty")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise invalid(f"JSON Parse error: Invalid encoding in string. at offset: {error.start}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as error:
        raise invalid(f"JSON Parse error: {error.msg} at offset: {error.pos}") from None
    except RecursionError:
        raise invalid("JSON Parse error: the document is nested too deeply") from None
    if not isinstance(doc, dict):
        raise invalid(f"JSON Value: {_short(doc)} Is not object")
    return doc


def _version(text: Optional[str]) -> Optional[int]:
    if not text:
        return None
    version = int(text)
    if version > INT64_MAX:
        raise invalid(f"Failed to convert version: {text} to numeric.")
    return version


def predict(core, name: str, version: Optional[int], label: Optional[str], body: bytes) -> dict:
    doc = parse_json_body(body)
    signature_name = doc.get("signature_name", "")
    if not isinstance(signature_name, str):
        raise invalid(f"JSON Value: {_short(doc)} not formatted correctly. 'signature_name' key must be a string value.")
    unknown = sorted(set(doc) - set(BODY_KEYS))
    if unknown:
        raise invalid(f"unknown key(s) {', '.join(repr(k) for k in unknown)} in the request object; a predict request "
                      f"has 'signature_name' (optional) and one of 'instances' (row format) or 'inputs' (columnar)")
    with core.version(name, version, label) as loaded:
        signature = loaded.signature(signature_name, rest=True)
        arrays, row = request_arrays(doc, signature, core.limits)
        outputs = loaded.predict(signature, arrays)
    return response_json(outputs, row)


def status_json(core, name: str, version: Optional[int], label: Optional[str]) -> dict:
    from google.protobuf import json_format

    return json_format.MessageToDict(core.status_response(name, version, label),
                                     always_print_fields_with_no_presence=True)


def metadata_json(core, name: str, version: Optional[int], label: Optional[str]) -> dict:
    """TF Serving's layout: model_spec and the SignatureDefMap, with proto field names."""
    from google.protobuf import json_format
    from tensorflow_serving.apis import get_model_metadata_pb2

    response = core.metadata_response(name, version, label)
    signature_defs = get_model_metadata_pb2.SignatureDefMap()
    response.metadata["signature_def"].Unpack(signature_defs)
    options = dict(preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    return {
        "model_spec": json_format.MessageToDict(response.model_spec, **options),
        "metadata": {"signature_def": json_format.MessageToDict(signature_defs, **options)},
    }


def dispatch(core, method: str, path: str, body: bytes) -> dict:
    """The JSON answer to one REST request (raises :class:`ServingError`)."""
    if not API_PATH.fullmatch(path):
        raise ServingError("NOT_FOUND", f"Not found: {method} {path}. The REST API: {API_HELP}")
    match = PREDICT_PATH.fullmatch(path)
    if method == "POST" and match:
        name, version, label, verb = unquote(match[1]), _version(match[2]), match[3], match[4].lower()
        if verb != "predict":
            raise ServingError("UNIMPLEMENTED", f"{verb} is not supported by this server (the translator has predict "
                                                f"signatures only); use POST /v1/models/{name}:predict")
        return predict(core, name, version, unquote(label) if label else None, body)
    match = STATUS_PATH.fullmatch(path)
    if method == "GET" and match:
        name, version, label = match[1] and unquote(match[1]), _version(match[2]), match[3] and unquote(match[3])
        if not name:
            raise invalid("Missing model name in request.")
        if match[4]:
            return metadata_json(core, name, version, label)
        return status_json(core, name, version, label)
    raise invalid(f"Malformed request: {method} {path} (the REST API: {API_HELP})")


def handle(core, method: str, path: str, body: bytes, log: Callable[[str], None] = print) -> Tuple[int, dict]:
    """(HTTP status, JSON object) for one request; never raises."""
    try:
        return 200, dispatch(core, method, path, body)
    except ServingError as error:
        return error.http_status, {"error": error.message}
    except Exception as error:  # a bug must not take the server down; the client gets a 500
        log(f"ERROR: {method} {path}: {type(error).__name__}: {error}\n{traceback.format_exc()}")
        return 500, {"error": f"internal error: {type(error).__name__}: {error}"}


# ---------------------------------------------------------------------------------------- HTTP server
class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address, handler):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)

    def server_bind(self):  # without HTTPServer's getfqdn(), a DNS lookup that can hang on an offline machine
        import socketserver

        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gnmt-serving"
    sys_version = ""
    timeout = 120  # an idle keep-alive connection is closed after this many seconds
    rest: "RestServer" = None

    def log_message(self, format, *args):  # noqa: A002  (quiet: the server logs errors itself)
        pass

    def setup(self):
        super().setup()
        self.rest._track(self.connection, True)

    def finish(self):
        try:
            super().finish()
        finally:
            self.rest._track(self.connection, False)

    def do_GET(self):
        self._serve("GET")

    def do_POST(self):
        self._serve("POST")

    def do_PUT(self):
        self._serve("PUT")

    def do_DELETE(self):
        self._serve("DELETE")

    def do_PATCH(self):
        self._serve("PATCH")

    def do_OPTIONS(self):
        self._serve("OPTIONS")

    def do_HEAD(self):
        self._serve("HEAD")

    def _serve(self, method: str) -> None:
        rest = self.rest
        if not rest._begin():
            self.close_connection = True
            return self._send(503, {"error": "the server is shutting down; retry on another replica"}, method)
        try:
            try:
                body = self._read_body()
            except ServingError as error:
                self.close_connection = True
                return self._send(error.http_status, {"error": error.message}, method)
            status, payload = handle(rest.core, method, urlsplit(self.path).path, body, rest.log)
            if rest.stopping:
                self.close_connection = True
            self._send(status, payload, method)
        finally:
            rest._end()

    def _read_body(self) -> bytes:
        limit = self.rest.limits.max_request_bytes
        encoding = self.headers.get("Transfer-Encoding")
        if encoding:
            if encoding.strip().lower() != "chunked":
                raise ServingError("UNIMPLEMENTED", f"Transfer-Encoding {encoding!r} is not supported")
            return self._read_chunked(limit)
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        try:
            size = int(length)
            if size < 0:
                raise ValueError
        except ValueError:
            raise invalid(f"invalid Content-Length header: {length!r}") from None
        if size > limit:
            self._discard(size)
            raise _too_large(f"{size} bytes", limit)
        body = self.rfile.read(size)
        if len(body) != size:
            raise invalid(f"the request body ended after {len(body)} of its {size} bytes")
        return body

    def _read_chunked(self, limit: int) -> bytes:
        parts, total = [], 0
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";")[0].strip(), 16)
            except ValueError:
                raise invalid("malformed chunked request body") from None
            if size == 0:
                while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(parts)
            total += size
            if total > limit:
                raise _too_large(f"more than {limit} bytes", limit)
            parts.append(self.rfile.read(size))
            self.rfile.readline(3)

    def _discard(self, size: int, cap: int = 64 * 1024 * 1024) -> None:
        """Reads (and drops) an over-large body, so that the client reads the 413 instead of a reset."""
        remaining = min(size, cap)
        try:
            while remaining > 0:
                chunk = self.rfile.read(min(remaining, 1 << 20))
                if not chunk:
                    break
                remaining -= len(chunk)
        except OSError:
            pass

    def _send(self, status: int, payload: dict, method: str) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if method != "HEAD":
                self.wfile.write(data)
            self.wfile.flush()
        except OSError:  # the client went away
            self.close_connection = True

    def send_error(self, code, message=None, explain=None):
        """Protocol-level errors (bad request line, unknown method, header too long) as JSON too."""
        self.close_connection = True
        text = message or self.responses.get(code, ("error",))[0]
        data = json.dumps({"error": text}).encode("utf-8")
        try:
            self.send_response(code, message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD" and code >= 200 and code not in (204, 304):
                self.wfile.write(data)
        except OSError:
            pass


def _too_large(size: str, limit: int) -> ServingError:
    return ServingError(
        "RESOURCE_EXHAUSTED",
        f"the request body ({size}) is larger than this server's limit of {limit} bytes (--max_request_bytes)",
        http_status=413,
    )


class RestServer:
    """The REST front end: binds at construction (``port`` 0 picks a free port), serves after :meth:`start`."""

    def __init__(self, core, host: str, port: int, limits: Limits, log: Callable[[str], None] = print):
        self.core = core
        self.limits = limits
        self.log = log
        self.stopping = False
        self._cv = threading.Condition()
        self._inflight = 0
        self._connections = set()
        handler = type("Handler", (_Handler,), {"rest": self})
        try:
            self._httpd = _HTTPServer((host, port), handler)
        except OSError as error:
            raise OSError(f"cannot listen for REST on {host}:{port}: {error.strerror or error}") from None
        self.host = host
        self.port = self._httpd.server_address[1]
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="rest-accept", daemon=True)
        self._thread.start()

    def _begin(self) -> bool:
        with self._cv:
            if self.stopping:
                return False
            self._inflight += 1
            return True

    def _end(self) -> None:
        with self._cv:
            self._inflight -= 1
            self._cv.notify_all()

    def _track(self, connection, add: bool) -> None:
        with self._cv:
            (self._connections.add if add else self._connections.discard)(connection)

    def stop_accepting(self) -> None:
        """Closes the listening socket: new connections are refused; open ones get 503 for new requests."""
        with self._cv:
            self.stopping = True
        if self._thread is not None:
            self._httpd.shutdown()
        self._httpd.server_close()

    def wait_idle(self, timeout: float) -> bool:
        """Waits for in-flight requests (at most ``timeout``), then closes the idle keep-alive connections."""
        with self._cv:
            done = self._cv.wait_for(lambda: self._inflight == 0, timeout)
            connections = list(self._connections)
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return done
