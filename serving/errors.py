"""Errors with TF Serving's status codes, and how each code shows on REST and gRPC.

Every failure a client can see is a :class:`ServingError`: a canonical status
code name (the gRPC code, which TF Serving also uses internally) and a message.
REST answers ``{"error": message}`` with the HTTP status TF Serving's REST
front end maps that code to (``ToHTTPStatusCode`` in its ``http_server.cc``);
gRPC aborts the call with the code itself.
"""

from __future__ import annotations

import re
from typing import Optional

# TF Serving's http_server.cc, code -> HTTP status.
HTTP_STATUS = {
    "OK": 200,
    "CANCELLED": 499,
    "UNKNOWN": 500,
    "INVALID_ARGUMENT": 400,
    "DEADLINE_EXCEEDED": 504,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "PERMISSION_DENIED": 403,
    "RESOURCE_EXHAUSTED": 429,
    "FAILED_PRECONDITION": 400,
    "ABORTED": 409,
    "OUT_OF_RANGE": 400,
    "UNIMPLEMENTED": 501,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DATA_LOSS": 500,
    "UNAUTHENTICATED": 401,
}

# TensorFlow's / gRPC's numeric codes (tf.errors.OpError.error_code uses the same numbering).
CODE_NAMES = [
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
    "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
    "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
]


class ServingError(Exception):
    """A request (or load) failure: a status code name such as ``"INVALID_ARGUMENT"`` and a message.

    ``http_status`` overrides the code's usual HTTP status where REST has a more precise one
    (413 for a request body over ``--max_request_bytes``).
    """

    def __init__(self, code: str, message: str, http_status: Optional[int] = None):
        if code not in HTTP_STATUS:
            raise ValueError(f"unknown status code {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message
        self._http_status = http_status

    @property
    def http_status(self) -> int:
        return self._http_status or HTTP_STATUS[self.code]

    @property
    def grpc_code(self):
        import grpc

        return getattr(grpc.StatusCode, self.code)

    def __repr__(self) -> str:
        return f"ServingError({self.code}, {self.message!r})"


def invalid(message: str) -> ServingError:
    return ServingError("INVALID_ARGUMENT", message)


def not_found(message: str) -> ServingError:
    return ServingError("NOT_FOUND", message)


def code_name(numeric_code: int) -> str:
    """The name of a numeric TensorFlow / gRPC status code (UNKNOWN if out of range)."""
    return CODE_NAMES[numeric_code] if 0 <= numeric_code < len(CODE_NAMES) else "UNKNOWN"


def from_exception(error: BaseException) -> ServingError:
    """A :class:`ServingError` for any exception raised while running a model (TF errors keep their code)."""
    if isinstance(error, ServingError):
        return error
    numeric = getattr(error, "error_code", None)  # tf.errors.OpError
    if isinstance(numeric, int):
        return ServingError(code_name(numeric), clean_tf_message(getattr(error, "message", None) or str(error)))
    return ServingError("INTERNAL", f"{type(error).__name__}: {error}")


def clean_tf_message(message: str) -> str:
    """A TensorFlow error message without the function-node prefix and op suffix eager execution adds."""
    message = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", message.strip())
    return re.sub(r"\s*\[Op:[^\]]*\](\s*name:\s*\S*)?\s*$", "", message).strip()
