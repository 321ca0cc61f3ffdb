"""Tensors in and out: TensorProto <-> numpy, and the checks every request's inputs pass before a model runs.

The checks are the same for REST and gRPC (and for warm-up requests):

* exactly the signature's inputs (TF Serving's messages for missing / extra / unknown names);
* each input of the signature's dtype and rank (a sentence vector is ``[batch]``, alpha/beta/beamsize
  are scalars); all batched inputs of one batch size, and not an empty batch;
* at most ``max_batch_sentences`` values per input (checked on the declared shape, before a gRPC
  tensor is expanded), each string at most ``max_sentence_bytes`` and valid UTF-8 (the translator
  reads text);
* the search options ``alpha``, ``beta`` and ``beamsize`` finite float32 >= 0, by the rule every
  entry point applies (:mod:`gnmt_tf.decoding.options`), with its message. The exported signatures
  check the same rule in the graph (what TF Serving relies on), and that InvalidArgumentError would
  be INVALID_ARGUMENT here too; checking first gives the message without TensorFlow's wrapping, and
  a bad request then never reaches a batch queue or the model.
"""

from __future__ import annotations

from typing import Dict, Mapping, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import tensor_pb2, types_pb2

from gnmt_tf.decoding.options import SEARCH_OPTIONS, search_option_problem
from serving.config import Limits
from serving.errors import ServingError, invalid

# TensorFlow's DataTypeString for the common types (tf.float32.name is "float32", TF says "float").
_TF_NAMES = {tf.float32: "float", tf.float64: "double", tf.float16: "half"}


def dtype_name(dtype: tf.DType) -> str:
    return _TF_NAMES.get(dtype, dtype.name)


def enum_name(datatype: int) -> str:
    try:
        return types_pb2.DataType.Name(datatype)
    except ValueError:
        return f"DataType({datatype})"


def shape_text(shape) -> str:
    return "[" + ",".join("-1" if d is None else str(d) for d in shape) + "]"


def _fits(spec: tf.TensorSpec, shape: Sequence[int]) -> bool:
    if spec.shape.rank is None:
        return True
    return len(shape) == spec.shape.rank and all(e is None or e == d for e, d in zip(spec.shape.as_list(), shape))


def _describe_spec(spec: tf.TensorSpec) -> str:
    if spec.shape.rank == 0:
        return f"a {dtype_name(spec.dtype)} scalar (shape [])"
    if spec.shape.rank == 1 and spec.shape[0] is None:
        what = "strings" if spec.dtype == tf.string else f"{dtype_name(spec.dtype)} values"
        return f"a list of {what} (shape [batch])"
    return f"a {dtype_name(spec.dtype)} tensor of shape {shape_text(spec.shape.as_list())}"


def check_shape(signature_name: str, name: str, spec: tf.TensorSpec, shape: Sequence[int]) -> None:
    if not _fits(spec, shape):
        raise invalid(
            f"input '{name}' of signature '{signature_name}' must be {_describe_spec(spec)}, "
            f"got shape {shape_text(shape)}"
        )


def check_count(name: str, spec: tf.TensorSpec, count: int, limits: Limits) -> None:
    if count > limits.max_batch_sentences:
        what = "sentences" if spec.dtype == tf.string else "values"
        raise invalid(
            f"input '{name}' has {count} {what}, more than this server's limit of {limits.max_batch_sentences} "
            f"per request (--max_batch_sentences); split it into several requests"
        )


# ------------------------------------------------------------------------------------ TensorProto -> numpy
def proto_to_array(proto: tensor_pb2.TensorProto, signature_name: str, name: str, spec: tf.TensorSpec,
                   limits: Limits) -> np.ndarray:
    """A request's TensorProto as a numpy array of the signature's dtype, after the cheap checks."""
    expected = spec.dtype.as_datatype_enum
    if proto.dtype != expected:
        raise invalid(
            f"input '{name}' of signature '{signature_name}' must be {enum_name(expected)} "
            f"({_describe_spec(spec)}), got a {enum_name(proto.dtype)} tensor"
        )
    if proto.tensor_shape.unknown_rank:
        raise invalid(f"input '{name}' has an unknown rank; send its shape")
    shape = [d.size for d in proto.tensor_shape.dim]
    if any(d < 0 for d in shape):
        raise invalid(f"input '{name}' has a negative dimension in its shape {shape_text(shape)}")
    check_shape(signature_name, name, spec, shape)
    check_count(name, spec, int(np.prod(shape, dtype=np.int64)) if shape else 1, limits)
    try:
        array = tf.make_ndarray(proto)
    except Exception as error:  # inconsistent contents: wrong value count, bad tensor_content size, ...
        raise invalid(f"input '{name}' is not a valid TensorProto: {type(error).__name__}: {error}") from None
    if list(array.shape) != shape:
        raise invalid(f"input '{name}' holds {array.size} values, which do not fill its shape {shape_text(shape)}")
    return array


# ------------------------------------------------------------------------------------ numpy -> TensorProto
# numpy dtype -> (TensorProto dtype, the repeated field TF Serving writes its values to)
_TYPED_FIELDS = {
    np.dtype(np.float32): (types_pb2.DT_FLOAT, "float_val"),
    np.dtype(np.float64): (types_pb2.DT_DOUBLE, "double_val"),
    np.dtype(np.int32): (types_pb2.DT_INT32, "int_val"),
    np.dtype(np.int16): (types_pb2.DT_INT16, "int_val"),
    np.dtype(np.int8): (types_pb2.DT_INT8, "int_val"),
    np.dtype(np.uint8): (types_pb2.DT_UINT8, "int_val"),
    np.dtype(np.uint16): (types_pb2.DT_UINT16, "int_val"),
    np.dtype(np.int64): (types_pb2.DT_INT64, "int64_val"),
    np.dtype(np.bool_): (types_pb2.DT_BOOL, "bool_val"),
}


def array_to_proto(array: np.ndarray) -> tensor_pb2.TensorProto:
    """An output as TF Serving writes it (values in the typed repeated fields, not tensor_content)."""
    array = np.asarray(array)
    proto = tensor_pb2.TensorProto()
    for size in array.shape:
        proto.tensor_shape.dim.add(size=int(size))
    flat = array.ravel()
    if array.dtype == object or array.dtype.kind in "SU":
        proto.dtype = types_pb2.DT_STRING
        proto.string_val.extend(v if isinstance(v, bytes) else str(v).encode("utf-8") for v in flat)
        return proto
    if array.dtype not in _TYPED_FIELDS:
        return tf.make_tensor_proto(array)
    proto.dtype, values = _TYPED_FIELDS[array.dtype]
    getattr(proto, values).extend(flat.tolist())
    return proto


# ------------------------------------------------------------------------------------------ input checks
def check_input_names(signature_name: str, specs: Mapping[str, tf.TensorSpec], given: Sequence[str]) -> None:
    expected, sent = set(specs), set(given)
    if sent == expected:
        return
    if len(sent) != len(expected):
        extra, missing = sorted(sent - expected), sorted(expected - sent)
        raise invalid(
            f"input size does not match signature: {len(sent)}!={len(expected)} len({{{','.join(sorted(sent))}}}) "
            f"!= len({{{','.join(sorted(expected))}}}). Sent extra: {{{','.join(extra)}}}. "
            f"Missing but required: {{{','.join(missing)}}}."
        )
    unknown = sorted(sent - expected)[0]
    raise invalid(
        f"input tensor alias not found in signature: {unknown}. "
        f"Inputs expected to be in the set {{{','.join(sorted(expected))}}}."
    )


def validate_inputs(signature_name: str, specs: Mapping[str, tf.TensorSpec], arrays: Dict[str, np.ndarray],
                    limits: Limits) -> int:
    """Checks a request's inputs (see the module docstring); returns its batch size (1 if none)."""
    check_input_names(signature_name, specs, list(arrays))
    batch = None
    for name, spec in specs.items():
        array = arrays[name]
        check_shape(signature_name, name, spec, array.shape)
        check_count(name, spec, array.size, limits)
        if spec.shape.rank and spec.shape[0] is None:
            size = array.shape[0]
            if size == 0:
                raise invalid(f"input '{name}' is an empty batch (0 values); send at least one sentence")
            if batch is not None and size != batch[1]:
                raise invalid(f"inputs '{batch[0]}' and '{name}' have different batch sizes ({batch[1]} and {size})")
            batch = (name, size)
        if spec.dtype == tf.string:
            _check_strings(name, array, limits)
        elif name in SEARCH_OPTIONS and spec.shape.rank == 0:
            problem = search_option_problem(name, array.item())
            if problem is not None:
                raise invalid(f"{name} {problem}")
    return batch[1] if batch else 1


def _check_strings(name: str, array: np.ndarray, limits: Limits) -> None:
    for index, value in enumerate(array.ravel()):
        if isinstance(value, str):
            value = value.encode("utf-8", "surrogatepass")
        if not isinstance(value, bytes):
            raise invalid(f"value {index} of input '{name}' is not a string")
        if len(value) > limits.max_sentence_bytes:
            raise invalid(
                f"sentence {index} of input '{name}' is {len(value)} bytes long, more than this server's limit of "
                f"{limits.max_sentence_bytes} bytes per sentence (--max_sentence_bytes)"
            )
        try:
            value.decode("utf-8")
        except UnicodeDecodeError as error:
            raise invalid(
                f"sentence {index} of input '{name}' is not valid UTF-8 (byte {error.start}: {error.reason}); "
                f"the translator takes UTF-8 text"
            ) from None


def check_outputs(signature_name: str, outputs: Mapping[str, np.ndarray], batch: int, batched: bool) -> None:
    """A model's outputs must have the request's batch size first, or the answer could not be split per sentence."""
    if not batched:
        return
    for name, value in outputs.items():
        if value.ndim == 0 or value.shape[0] != batch:
            raise ServingError(
                "INTERNAL",
                f"output '{name}' of signature '{signature_name}' has shape {shape_text(value.shape)}, "
                f"not the request's batch size {batch} first",
            )
