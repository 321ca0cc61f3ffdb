"""TF Serving's gRPC API: ``tensorflow.serving.PredictionService`` and ``tensorflow.serving.ModelService``.

* ``Predict``: ``model_spec`` (name; ``version`` or ``version_label``; ``signature_name``, default
  ``serving_default``), ``inputs`` (TensorProtos), optional ``output_filter``. The response echoes
  the model name, the version that answered and the signature, and holds the outputs as
  TensorProtos with values in the typed fields (``string_val``, ``float_val``, ...) as TF Serving's.
* ``GetModelMetadata``: ``metadata_field: "signature_def"`` only; the answer packs a
  ``SignatureDefMap`` in ``google.protobuf.Any``.
* ``GetModelStatus``: every version seen (newest first) with its state and error.
* ``Classify``, ``Regress``, ``MultiInference`` and ``HandleReloadConfigRequest``: UNIMPLEMENTED.

Status codes: INVALID_ARGUMENT (bad input, unknown label), FAILED_PRECONDITION (unknown signature,
as TF Serving), NOT_FOUND (unknown model or version), RESOURCE_EXHAUSTED (message over
``--max_request_bytes``, from gRPC itself), UNAVAILABLE (shutting down, batch queue full),
UNIMPLEMENTED, INTERNAL.
"""

from __future__ import annotations

import socket
import traceback
from concurrent import futures
from typing import Callable, Optional

import grpc
from tensorflow_serving.apis import (
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from serving.config import Limits
from serving.errors import ServingError, invalid
from serving.tensors import array_to_proto


def _spec_version(spec):
    version = spec.version.value if spec.HasField("version") else None
    label = spec.version_label or None
    return version, label


class _Base:
    def __init__(self, core, log: Callable[[str], None]):
        self.core = core
        self.log = log

    def _answer(self, context, method: str, function, request):
        try:
            return function(request)
        except ServingError as failure:
            error = failure
        except Exception as failure:  # a bug must not take the server down; the client gets INTERNAL
            self.log(f"ERROR: gRPC {method}: {type(failure).__name__}: {failure}\n{traceback.format_exc()}")
            error = ServingError("INTERNAL", f"internal error: {type(failure).__name__}: {failure}")
        context.abort(error.grpc_code, error.message)

    @staticmethod
    def _unimplemented(context, method: str, hint: str):
        context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{method} is not implemented by this server; {hint}")


class PredictionService(_Base, prediction_service_pb2_grpc.PredictionServiceServicer):
    def Predict(self, request, context):
        return self._answer(context, "Predict", self._predict, request)

    def _predict(self, request):
        spec = request.model_spec
        version, label = _spec_version(spec)
        with self.core.version(spec.name, version, label) as loaded:
            signature, outputs = loaded.predict_proto(request)
            response = predict_pb2.PredictResponse()
            response.model_spec.name = spec.name
            response.model_spec.version.value = loaded.version
            response.model_spec.signature_name = signature.name
        for name, value in outputs.items():
            response.outputs[name].CopyFrom(array_to_proto(value))
        return response

    def GetModelMetadata(self, request, context):
        return self._answer(context, "GetModelMetadata", self._metadata, request)

    def _metadata(self, request):
        if not request.HasField("model_spec"):
            raise invalid("Missing ModelSpec")
        if not request.metadata_field:
            raise invalid("GetModelMetadataRequest must specify at least one metadata_field")
        for field in request.metadata_field:
            if field != "signature_def":
                raise invalid(f"Metadata field {field} is not supported")
        version, label = _spec_version(request.model_spec)
        return self.core.metadata_response(request.model_spec.name, version, label)

    def Classify(self, request, context):
        self._unimplemented(context, "Classify", "the translator has predict signatures only; use Predict")

    def Regress(self, request, context):
        self._unimplemented(context, "Regress", "the translator has predict signatures only; use Predict")

    def MultiInference(self, request, context):
        self._unimplemented(context, "MultiInference", "use Predict")


class ModelService(_Base, model_service_pb2_grpc.ModelServiceServicer):
    def GetModelStatus(self, request, context):
        return self._answer(context, "GetModelStatus", self._status, request)

    def _status(self, request):
        if not request.HasField("model_spec"):
            raise invalid("Missing ModelSpec")
        version, label = _spec_version(request.model_spec)
        return self.core.status_response(request.model_spec.name, version, label)

    def HandleReloadConfigRequest(self, request, context):
        self._unimplemented(context, "HandleReloadConfigRequest",
                            "restart the server with the new --model_config_file (new versions of the configured "
                            "models are picked up without a restart)")


class GrpcServer:
    """The gRPC front end: binds at construction (``port`` 0 picks a free port), serves after :meth:`start`.

    ``max_workers`` calls run at once (more wait in gRPC's queue); with batching, requests wait in
    worker threads for their batch, so this bounds how large a batch concurrent gRPC calls can form.
    """

    def __init__(self, core, host: str, port: int, limits: Limits, log: Callable[[str], None] = print,
                 max_workers: int = 64):
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="grpc"),
            options=[
                ("grpc.max_receive_message_length", limits.max_request_bytes),
                ("grpc.max_send_message_length", -1),
                ("grpc.so_reuseport", 0),  # a second server on the same port must fail, not share it
            ],
        )
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(PredictionService(core, log), self._server)
        model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(core, log), self._server)
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            bound = self._server.add_insecure_port(address)
        except RuntimeError as error:
            raise OSError(f"cannot listen for gRPC on {address}: {_bind_failure(host, port) or error}") from None
        if not bound:
            raise OSError(f"cannot listen for gRPC on {address}: {_bind_failure(host, port) or 'bind failed'}")
        self.host = host
        self.port = bound

    def start(self) -> None:
        self._server.start()

    def stop(self, grace: Optional[float]):
        """Refuses new calls at once; in-flight calls get ``grace`` seconds. Returns a threading.Event."""
        return self._server.stop(grace)


def _bind_failure(host: str, port: int) -> str:
    """Why ``host:port`` cannot be bound, in the operating system's words ("Address already in use").

    gRPC's own error only says that binding failed; a plain socket bound to the same address
    gets the reason. Empty if that bind succeeds (the address was freed in between).
    """
    try:
        family, kind, protocol, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, protocol) as probe:
            probe.bind(address)
    except OSError as error:
        return error.strerror or str(error)
    return ""
