"""The local TF-Serving-compatible server (serving/): REST and gRPC protocols, bad input, version swaps
under load, batching, its command line (flag errors, a port already taken, draining on SIGTERM and SIGINT).

The REST bodies are TF Serving's documented ones ("RESTful API" of tensorflow/serving), the gRPC
calls use the tensorflow-serving-api stubs; answers are compared with the SavedModel called
directly in this process.
"""

import base64
import contextlib
import math
import io
import json
import os
import re
import shutil
import signal
import socket
import sys
import threading

import grpc
import numpy as np
import pytest
import tensorflow as tf
from conftest import copy_version
from helpers import run_each_in_process
from serving_helpers import (
    Requests,
    ServerProcess,
    free_port,
    rest,
    save_sentence_lengths,
    savedmodel_signatures,
    stubs,
    wait_for,
)
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_management_pb2,
    predict_pb2,
)

from serving.config import (
    Limits,
    ServingConfigError,
    parse_batching_parameters,
    parse_model_config,
    single_model_config,
)
from serving.errors import ServingError
from serving.rest import response_json
from serving.server import ModelServer, build_parser, configure, main
from serving.tensors import array_to_proto

GOOD = {"instances": ["three one four"]}
WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
HOUR_MICROS = 3600 * 10**6  # a batch window no test waits out: batches run when full, or when the server drains
OPTIONS = {"alpha": 0.2, "beta": 0.2, "beamsize": 3.0}


pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def exported(exported_number_model, tmp_path_factory):
    """BASE/NAME holding the fixture model's export as version 1."""
    return copy_version(exported_number_model, str(tmp_path_factory.mktemp("serving_server") / "gnmt"))


@pytest.fixture(scope="module")
def direct(exported):
    """The SavedModel's signatures called in this process: (signature, sentences, **scalars) -> outputs."""
    return savedmodel_signatures(os.path.join(exported, "1"))


@pytest.fixture(scope="module")
def score_of(direct):
    """The eq. 14 score the SavedModel itself gives a sentence's translation (what the server must return)."""
    cache = {}

    def score(sentence):
        if sentence not in cache:
            cache[sentence] = float(direct("serving_default", [sentence])["scores"][0])
        return pytest.approx(cache[sentence], abs=1e-4)

    return score


@pytest.fixture(scope="module")
def server(exported):
    logs = []
    with ModelServer([single_model_config("gnmt", exported)], port=0, rest_api_port=0, log=logs.append) as running:
        running.logs = logs
        yield running


def predict_request(sentences, model="gnmt", signature="", version=None, **scalars):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    if signature:
        request.model_spec.signature_name = signature
    if version is not None:
        request.model_spec.version.value = version
    request.inputs["sentences"].CopyFrom(tf.make_tensor_proto(sentences, dtype=tf.string))
    for name, value in scalars.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value, dtype=tf.float32))
    return request


def texts(proto):
    return [t.decode("utf-8") for t in tf.make_ndarray(proto)]


# ---------------------------------------------------------------------------------------------- REST
def test_rest_documented_bodies_translate_like_the_savedmodel(server, direct):
    port = server.rest_api_port
    sentences = ["three one four", "nine"]
    expected = direct("serving_default", sentences)
    expected_texts = [t.decode() for t in expected["translations"]]
    assert expected_texts[0] == "trois un quatre"

    status, answer = rest(port, "POST", "/v1/models/gnmt:predict", {"instances": sentences})
    assert status == 200 and list(answer) == ["predictions"]
    assert [p["translations"] for p in answer["predictions"]] == expected_texts
    # Floats are written so that they read back as the very same float32.
    assert [np.float32(p["scores"]) for p in answer["predictions"]] == list(expected["scores"])
    assert all(set(p) == {"translations", "scores"} for p in answer["predictions"])

    status, answer = rest(port, "POST", "/v1/models/gnmt:predict", {"inputs": {"sentences": sentences}})
    assert status == 200 and set(answer["outputs"]) == {"translations", "scores"}
    assert answer["outputs"]["translations"] == expected_texts
    assert np.array_equal(np.float32(answer["outputs"]["scores"]), expected["scores"])

    body = {"signature_name": "translate_with_options", "inputs": {"sentences": sentences, **OPTIONS}}
    status, answer = rest(port, "POST", "/v1/models/gnmt:predict", body)
    with_options = direct("translate_with_options", sentences, **OPTIONS)
    assert status == 200
    assert answer["outputs"]["translations"] == [t.decode() for t in with_options["translations"]]

    # Named instances, an explicit signature, a version in the path, binary input as b64.
    encoded = base64.b64encode(b"three one four").decode()
    body = {"signature_name": "serving_default", "instances": [{"sentences": "nine"}, {"sentences": {"b64": encoded}}]}
    status, answer = rest(port, "POST", "/v1/models/gnmt/versions/1:predict", body)
    assert status == 200 and [p["translations"] for p in answer["predictions"]] == ["neuf", "trois un quatre"]
    status, answer = rest(port, "POST", "/V1/Models/gnmt:Predict", {"instances": [{"b64": encoded}]})
    assert status == 200 and answer["predictions"][0]["translations"] == "trois un quatre"

    # n-best: nested outputs in columnar format.
    body = {"signature_name": "translate_nbest", "inputs": {"sentences": sentences, **OPTIONS}}
    status, answer = rest(port, "POST", "/v1/models/gnmt:predict", body)
    nbest = direct("translate_nbest", sentences, **OPTIONS)
    assert status == 200
    assert answer["outputs"]["translations"] == [[t.decode() for t in row] for row in nbest["translations"]]
    attention = np.array(answer["outputs"]["attention"], dtype=np.float32)
    np.testing.assert_array_equal(attention, nbest["attention"])


def test_rest_nbest_attention_is_the_translators(server, trained_number_model):
    """The served n-best attention (eq. 4-5): each target step's weights over the source sum to 1, padding
    is 0, and the values are those the Translator gives the same hypotheses of the same model."""
    from gnmt_tf.inference.translator import Translator
    from gnmt_tf.model_files import load_model_dir

    sentences = ["three one four", "nine", "zero zero seven five two one"]
    body = {"signature_name": "translate_nbest", "inputs": {"sentences": sentences, **OPTIONS}}
    status, answer = rest(server.rest_api_port, "POST", "/v1/models/gnmt:predict", body)
    assert status == 200
    outputs = answer["outputs"]
    attention = np.array(outputs["attention"], dtype=np.float32)  # [sentence, rank, target step, source]
    model, tokenizer, config = load_model_dir(trained_number_model[0])  # the exported checkpoint ("best")
    translator = Translator(model, tokenizer, config.decoding, precompute_target_inputs=True)  # as exported
    expected = translator.translate_nbest(sentences, return_attention=True, **OPTIONS)
    compared = 0
    for row, hypotheses in enumerate(expected):
        source_length = sum(1 for piece in outputs["source_pieces"][row] if piece)  # EOS included
        assert source_length == len(hypotheses[0].source_pieces)
        for rank, hypothesis in enumerate(hypotheses):
            length = outputs["lengths"][row][rank]
            assert outputs["translations"][row][rank] == hypothesis.text
            assert length == len(hypothesis.attention)
            served = attention[row, rank]
            np.testing.assert_allclose(served[:length].sum(axis=1), 1.0, atol=1e-5)
            assert not served[length:].any() and not served[:, source_length:].any()
            np.testing.assert_allclose(served[:length, :source_length], hypothesis.attention, atol=1e-5)
            compared += 1
    assert compared >= len(sentences)


def test_rest_status_and_metadata(server):
    port = server.rest_api_port
    documented = {"model_version_status": [
        {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}]}
    assert rest(port, "GET", "/v1/models/gnmt") == (200, documented)
    assert rest(port, "GET", "/v1/models/gnmt/versions/1") == (200, documented)

    status, answer = rest(port, "GET", "/v1/models/gnmt/metadata")
    assert status == 200
    assert answer["model_spec"] == {"name": "gnmt", "signature_name": "", "version": "1"}
    signatures = answer["metadata"]["signature_def"]["signature_def"]
    assert {"serving_default", "translate_with_options", "translate_nbest"} <= set(signatures)
    default = signatures["serving_default"]
    assert default["method_name"] == "tensorflow/serving/predict"
    assert default["inputs"]["sentences"]["dtype"] == "DT_STRING"
    assert default["inputs"]["sentences"]["tensor_shape"] == {"dim": [{"size": "-1", "name": ""}], "unknown_rank": False}
    assert set(default["outputs"]) == {"translations", "scores"}
    assert set(signatures["translate_with_options"]["inputs"]) == {"sentences", "alpha", "beta", "beamsize"}
    assert rest(port, "GET", "/v1/models/gnmt/versions/1/metadata")[1]["model_spec"]["version"] == "1"


def test_b64_outputs():
    """Outputs named *_bytes (TF Serving's rule) and bytes that are not UTF-8 are written as {"b64": ...}."""
    outputs = {"text": np.array([b"caf\xc3\xa9", b"\xff"], dtype=object),
               "raw_bytes": np.array([b"ok", b"\x00"], dtype=object)}
    assert response_json(outputs, row=False) == {"outputs": {
        "text": ["café", {"b64": "/w=="}], "raw_bytes": [{"b64": "b2s="}, {"b64": "AA=="}]}}
    assert response_json({"text": outputs["text"]}, row=True) == {"predictions": ["café", {"b64": "/w=="}]}


# ---------------------------------------------------------------------------------------------- gRPC
@pytest.mark.parametrize("dtype, field", [
    (np.float32, "float_val"), (np.float64, "double_val"), (np.int32, "int_val"), (np.int16, "int_val"),
    (np.int8, "int_val"), (np.uint8, "int_val"), (np.uint16, "int_val"), (np.int64, "int64_val"),
    (np.bool_, "bool_val")])
def test_grpc_outputs_are_written_in_the_typed_fields(dtype, field):
    """As TF Serving writes them: the values in the dtype's repeated field, not in tensor_content."""
    array = np.array([[1, 0, 1], [0, 1, 1]], dtype=dtype)
    proto = array_to_proto(array)
    assert proto.dtype == tf.as_dtype(dtype).as_datatype_enum and proto.tensor_content == b""
    assert list(getattr(proto, field)) == array.ravel().tolist()
    np.testing.assert_array_equal(tf.make_ndarray(proto), array)


def test_grpc_predict_status_metadata(server, direct):
    channel, predictions, models = stubs(server.grpc_port)
    sentences = ["three one four", "nine", ""]
    expected = direct("serving_default", sentences)
    response = predictions.Predict(predict_request(sentences), timeout=60)
    assert response.model_spec.name == "gnmt" and response.model_spec.version.value == 1
    assert response.model_spec.signature_name == "serving_default"
    assert texts(response.outputs["translations"]) == ["trois un quatre", "neuf", ""]
    assert np.array_equal(tf.make_ndarray(response.outputs["scores"]), expected["scores"])

    request = predict_request(sentences, signature="translate_with_options", version=1, **OPTIONS)
    request.output_filter.append("translations")
    response = predictions.Predict(request, timeout=60)
    assert list(response.outputs) == ["translations"]
    assert texts(response.outputs["translations"]) == [
        t.decode() for t in direct("translate_with_options", sentences, **OPTIONS)["translations"]]

    status_request = get_model_status_pb2.GetModelStatusRequest()
    status_request.model_spec.name = "gnmt"
    status = models.GetModelStatus(status_request, timeout=10)
    [version] = status.model_version_status
    assert version.version == 1 and version.state == get_model_status_pb2.ModelVersionStatus.AVAILABLE
    assert version.status.error_code == 0 and version.status.error_message == ""

    metadata_request = get_model_metadata_pb2.GetModelMetadataRequest()
    metadata_request.model_spec.name = "gnmt"
    metadata_request.metadata_field.append("signature_def")
    metadata = predictions.GetModelMetadata(metadata_request, timeout=10)
    assert metadata.model_spec.name == "gnmt" and metadata.model_spec.version.value == 1
    signature_defs = get_model_metadata_pb2.SignatureDefMap()
    assert metadata.metadata["signature_def"].Unpack(signature_defs)
    assert signature_defs.signature_def["serving_default"].inputs["sentences"].dtype == tf.string.as_datatype_enum

    for call, request in [(predictions.Classify, classification_pb2.ClassificationRequest()),
                          (models.HandleReloadConfigRequest, model_management_pb2.ReloadConfigRequest())]:
        with pytest.raises(grpc.RpcError) as error:
            call(request, timeout=10)
        assert error.value.code() == grpc.StatusCode.UNIMPLEMENTED
    channel.close()


# ---------------------------------------------------------------------------------------------- bad input
def _json(value):
    return json.dumps(value).encode("utf-8")


PREDICT = "/v1/models/gnmt:predict"
BAD_REST = [
    # (id, method, path, raw body, HTTP status, part of the error message)
    ("malformed_json", "POST", PREDICT, b'{"instances": ["three"', 400, "JSON Parse error"),
    ("not_an_object", "POST", PREDICT, b'["three"]', 400, "Is not object"),
    ("empty_body", "POST", PREDICT, b"", 400, "The document is empty"),
    ("invalid_utf8_json", "POST", PREDICT, b'{"instances": ["\xff"]}', 400, "Invalid encoding"),
    ("wrong_input_name", "POST", PREDICT, _json({"inputs": {"sentence": ["a"]}}), 400, "Missing named input: sentences"),
    ("extra_input_name", "POST", PREDICT, _json({"inputs": {"sentences": ["a"], "alpha": 0.5}}), 400,
     "unknown named input(s) alpha"),
    ("instance_keys", "POST", PREDICT, _json({"instances": [{"text": "a"}]}), 400, "keys must be equal to: sentences"),
    ("number_sentence", "POST", PREDICT, _json({"instances": ["a", 3]}), 400, "is not of expected type: string"),
    ("null_sentence", "POST", PREDICT, _json({"inputs": {"sentences": [None]}}), 400, "Type: Null"),
    ("nested_sentences", "POST", PREDICT, _json({"instances": [["a", "b"]]}), 400, "must be a list of strings"),
    ("ragged", "POST", PREDICT, _json({"inputs": {"sentences": ["a", ["b"]]}}), 400, "Encountered list"),
    ("non_utf8_b64", "POST", PREDICT, _json({"instances": [{"b64": "/w=="}]}), 400, "not valid UTF-8"),
    ("lone_surrogate", "POST", PREDICT, b'{"instances": ["\\ud800"]}', 400, "not valid UTF-8"),
    ("bad_base64", "POST", PREDICT, _json({"instances": [{"b64": "!!!"}]}), 400, "Unable to base64 decode"),
    ("empty_instances", "POST", PREDICT, _json({"instances": []}), 400, "No values in 'instances' array"),
    ("empty_inputs", "POST", PREDICT, _json({"inputs": {"sentences": []}}), 400, "empty batch"),
    ("too_many_sentences", "POST", PREDICT, _json({"instances": ["one two"] * 10_000}), 400, "--max_batch_sentences"),
    ("sentence_too_long", "POST", PREDICT, _json({"instances": ["x" * 1_000_000]}), 400, "--max_sentence_bytes"),
    ("body_too_large", "POST", PREDICT, _json({"instances": ["x" * 5_000_000]}), 413, "--max_request_bytes"),
    ("both_formats", "POST", PREDICT, _json({"instances": ["a"], "inputs": ["a"]}), 400, "only one of"),
    ("neither_format", "POST", PREDICT, _json({"signature_name": "serving_default"}), 400, "Missing 'inputs' or 'instances'"),
    ("unknown_key", "POST", PREDICT, _json({"instances": ["a"], "signature": "translate_nbest"}), 400, "unknown key(s)"),
    ("signature_not_string", "POST", PREDICT, _json({"signature_name": 3, "instances": ["a"]}), 400, "must be a string"),
    ("unknown_signature", "POST", PREDICT, _json({"signature_name": "nope", "instances": ["a"]}), 400,
     'Serving signature name: "nope" not found'),
    ("scalars_in_row_format", "POST", PREDICT,
     _json({"signature_name": "translate_with_options", "instances": [{"sentences": "a", **OPTIONS}]}), 400,
     "Use the columnar format"),
    ("missing_scalar", "POST", PREDICT,
     _json({"signature_name": "translate_with_options", "inputs": {"sentences": ["a"], "alpha": 0.2, "beta": 0.2}}),
     400, "Missing named input: beamsize"),
    ("scalar_as_string", "POST", PREDICT,
     _json({"signature_name": "translate_with_options", "inputs": {"sentences": ["a"], **OPTIONS, "alpha": "x"}}),
     400, "is not of expected type: float"),
    ("scalar_as_list", "POST", PREDICT,
     _json({"signature_name": "translate_with_options", "inputs": {"sentences": ["a"], **OPTIONS, "beta": [0.2]}}),
     400, "must be a float scalar"),
    ("unknown_model", "POST", "/v1/models/nope:predict", _json(GOOD), 404, "Servable not found for request: Latest(nope)"),
    ("unknown_version", "POST", "/v1/models/gnmt/versions/7:predict", _json(GOOD), 404, "Specific(gnmt, 7)"),
    ("unknown_label", "POST", "/v1/models/gnmt/labels/stable:predict", _json(GOOD), 400,
     "Unrecognized servable version label: stable"),
    ("status_unknown_model", "GET", "/v1/models/nope", None, 404, "Could not find any versions of model nope"),
    ("status_unknown_version", "GET", "/v1/models/gnmt/versions/7", None, 404, "Could not find version 7"),
    ("metadata_unknown_model", "GET", "/v1/models/nope/metadata", None, 404, "Servable not found"),
    ("status_without_model", "GET", "/v1/models", None, 400, "Missing model name"),
    ("get_predict", "GET", PREDICT, None, 400, "Malformed request: GET /v1/models/gnmt:predict"),
    ("post_status", "POST", "/v1/models/gnmt", _json(GOOD), 400, "Malformed request: POST"),
    ("delete", "DELETE", "/v1/models/gnmt", None, 400, "Malformed request: DELETE"),
    ("unknown_path", "GET", "/foo", None, 404, "Not found: GET /foo"),
    ("unknown_method", "FOO", "/v1/models/gnmt", None, 501, "Unsupported method"),
    ("classify", "POST", "/v1/models/gnmt:classify", _json({"examples": []}), 501, "classify is not supported"),
]


@pytest.mark.parametrize("method, path, raw, status, message", [case[1:] for case in BAD_REST],
                         ids=[case[0] for case in BAD_REST])
def test_rest_bad_input_gets_a_clear_error_and_the_server_goes_on(server, score_of, method, path, raw, status, message):
    port = server.rest_api_port
    got_status, answer = rest(port, method, path, raw=raw, headers={"Content-Type": "application/json"})
    assert (got_status, list(answer)) == (status, ["error"]), answer
    assert message in answer["error"], answer
    assert rest(port, "POST", PREDICT, GOOD) == (200, {"predictions": [
        {"translations": "trois un quatre", "scores": score_of("three one four")}]})


def _grpc_cases():
    def proto(build):
        return build

    def with_tensor(tensor, name="sentences", **kwargs):
        request = predict_request(["a"], **kwargs)
        request.inputs[name].CopyFrom(tensor)
        return request

    def huge_shape():
        request = predict_request(["a"])
        tensor = request.inputs["sentences"]
        del tensor.tensor_shape.dim[:]
        tensor.tensor_shape.dim.add(size=10**9)
        return request

    def renamed():
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "gnmt"
        request.inputs["sentence"].CopyFrom(tf.make_tensor_proto(["a"]))
        return request

    def filtered():
        request = predict_request(["a"])
        request.output_filter.append("nope")
        return request

    invalid, not_found = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND
    return [
        ("float_sentences", "Predict", lambda: with_tensor(tf.make_tensor_proto([1.0])), invalid, "must be DT_STRING"),
        ("non_utf8", "Predict", lambda: with_tensor(tf.make_tensor_proto([b"\xff\xfe"])), invalid, "not valid UTF-8"),
        ("scalar_sentence", "Predict", lambda: with_tensor(tf.make_tensor_proto("a")), invalid, "got shape []"),
        ("empty_batch", "Predict", lambda: with_tensor(tf.make_tensor_proto([], dtype=tf.string)), invalid,
         "empty batch"),
        ("too_many_sentences", "Predict", lambda: predict_request(["one"] * 10_000), invalid, "--max_batch_sentences"),
        ("declared_huge_shape", "Predict", huge_shape, invalid, "--max_batch_sentences"),
        ("sentence_too_long", "Predict", lambda: predict_request(["x" * 1_000_000]), invalid, "--max_sentence_bytes"),
        ("message_too_large", "Predict", lambda: predict_request(["x" * 5_000_000]),
         grpc.StatusCode.RESOURCE_EXHAUSTED, "larger than max"),
        ("wrong_input_name", "Predict", renamed, invalid, "input tensor alias not found in signature: sentence"),
        ("missing_scalars", "Predict", lambda: predict_request(["a"], signature="translate_with_options"), invalid,
         "Missing but required: {alpha,beamsize,beta}"),
        ("scalar_as_vector", "Predict",
         lambda: with_tensor(tf.make_tensor_proto([0.2, 0.3]), "alpha", signature="translate_with_options", **OPTIONS),
         invalid, "must be a float scalar"),
        ("unknown_output", "Predict", filtered, invalid, "output tensor alias not found in signature: nope"),
        ("unknown_signature", "Predict", lambda: predict_request(["a"], signature="nope"),
         grpc.StatusCode.FAILED_PRECONDITION, 'Serving signature key "nope" not found'),
        ("unknown_model", "Predict", lambda: predict_request(["a"], model="nope"), not_found, "Latest(nope)"),
        ("unknown_version", "Predict", lambda: predict_request(["a"], version=7), not_found, "Specific(gnmt, 7)"),
        ("metadata_field", "GetModelMetadata",
         lambda: proto(get_model_metadata_pb2.GetModelMetadataRequest(
             model_spec={"name": "gnmt"}, metadata_field=["nope"])), invalid, "Metadata field nope is not supported"),
        ("status_without_spec", "GetModelStatus", get_model_status_pb2.GetModelStatusRequest, invalid,
         "Missing ModelSpec"),
        ("status_unknown_model", "GetModelStatus",
         lambda: get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "nope"}), not_found,
         "Could not find any versions of model nope"),
    ]


GRPC_CASES = _grpc_cases()


@pytest.mark.parametrize("method, build, code, message", [case[1:] for case in GRPC_CASES],
                         ids=[case[0] for case in GRPC_CASES])
def test_grpc_bad_input_gets_a_clear_error_and_the_server_goes_on(server, method, build, code, message):
    channel, predictions, models = stubs(server.grpc_port)
    call = getattr(models if method == "GetModelStatus" else predictions, method)
    with pytest.raises(grpc.RpcError) as error:
        call(build(), timeout=60)
    assert error.value.code() == code, error.value.details()
    assert message in error.value.details()
    response = predictions.Predict(predict_request(["three one four"]), timeout=60)
    assert texts(response.outputs["translations"]) == ["trois un quatre"]
    channel.close()


# ---------------------------------------------------------------------------------------------- search options
# (signature, option, the value as JSON text, as a float32 tensor, as the message writes it). The server
# checks them itself, by the rule of gnmt_tf.decoding.options; every value here is one of the brief's cases.
BAD_OPTIONS = [
    ("translate_with_options", "alpha", "NaN", math.nan, "nan"),
    ("translate_with_options", "alpha", "Infinity", math.inf, "inf"),
    ("translate_with_options", "alpha", "1e400", math.inf, "inf"),  # JSON's 1e400 reads as inf
    ("translate_with_options", "alpha", "-1", -1.0, "-1"),
    ("translate_with_options", "beta", "-0.5", -0.5, "-0.5"),
    ("translate_with_options", "beamsize", "-5", -5.0, "-5"),
    ("translate_with_options", "beamsize", "NaN", math.nan, "nan"),
    ("translate_with_options", "beamsize", "Infinity", math.inf, "inf"),
    ("translate_nbest", "beamsize", "-5", -5.0, "-5"),
    ("translate_nbest", "alpha", "Infinity", math.inf, "inf"),
]
OPTION_IDS = [f"{signature}-{name}={text}" for signature, name, text, _, _ in BAD_OPTIONS]


def option_message(name, shown):
    hint = " (1e9 never prunes)" if name == "beamsize" else ""
    return f"{name} must be a finite float32 >= 0, got {shown}{hint}"


def options_body(signature, **values):
    """A columnar predict body with OPTIONS, some replaced by raw JSON text (NaN, Infinity, 1e400 as they are)."""
    texts = {name: json.dumps(value) for name, value in OPTIONS.items()}
    texts.update(values)
    inputs = ", ".join(f'"{name}": {text}' for name, text in texts.items())
    return f'{{"signature_name": "{signature}", "inputs": {{"sentences": ["three one four"], {inputs}}}}}'.encode()


@pytest.mark.parametrize("signature, name, text, value, shown", BAD_OPTIONS, ids=OPTION_IDS)
def test_rest_refuses_a_bad_search_option_with_400_then_answers(server, direct, signature, name, text, value, shown):
    port = server.rest_api_port
    assert rest(port, "POST", PREDICT, raw=options_body(signature, **{name: text})) == (
        400, {"error": option_message(name, shown)})
    status, answer = rest(port, "POST", PREDICT, raw=options_body(signature))
    expected = direct(signature, ["three one four"], **OPTIONS)
    assert status == 200, answer
    assert np.array(answer["outputs"]["translations"]).tolist() == np.char.decode(
        expected["translations"].astype(bytes)).tolist()
    np.testing.assert_allclose(answer["outputs"]["scores"], expected["scores"], atol=1e-4)


@pytest.mark.parametrize("signature, name, text, value, shown", BAD_OPTIONS, ids=OPTION_IDS)
def test_grpc_refuses_a_bad_search_option_with_invalid_argument_then_answers(server, direct, signature, name, text,
                                                                           value, shown):
    channel, predictions, _ = stubs(server.grpc_port)
    with pytest.raises(grpc.RpcError) as error:
        predictions.Predict(predict_request(["three one four"], signature=signature, **dict(OPTIONS, **{name: value})),
                            timeout=60)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.value.details() == option_message(name, shown)
    response = predictions.Predict(predict_request(["three one four"], signature=signature, **OPTIONS), timeout=60)
    expected = direct(signature, ["three one four"], **OPTIONS)
    np.testing.assert_array_equal(tf.make_ndarray(response.outputs["translations"]), expected["translations"])
    np.testing.assert_allclose(tf.make_ndarray(response.outputs["scores"]), expected["scores"], atol=1e-4)
    channel.close()


def test_without_the_servers_check_the_graphs_check_is_invalid_argument_too(server, direct):
    """What TF Serving does: the signature's own assertion, mapped to INVALID_ARGUMENT (the request
    bypasses the server's input checks here by calling the loaded version's signature directly)."""
    with server.core.version("gnmt") as loaded:
        signature = loaded.signature("translate_with_options")
        arrays = {"sentences": np.array([b"three one four"], dtype=object),
                  **{name: np.array(value, np.float32) for name, value in OPTIONS.items()}}
        with pytest.raises(ServingError) as error:
            loaded._call(signature, dict(arrays, beamsize=np.array(-5.0, np.float32)))
        assert error.value.code == "INVALID_ARGUMENT"
        assert f"assertion failed: [{option_message('beamsize', '-5')}]" in error.value.message
        outputs = loaded._call(signature, arrays)
    np.testing.assert_array_equal(outputs["translations"],
                                  direct("translate_with_options", ["three one four"], **OPTIONS)["translations"])


# ---------------------------------------------------------------------------------------------- versions
def _copy_version(source, base, version, corrupt_warmup=False):
    """Copies a version the way the exporter publishes one: staged in a hidden directory, then renamed."""
    staging = os.path.join(base, f".tmp-{version}")
    shutil.copytree(source, staging)
    if corrupt_warmup:
        extra = os.path.join(staging, "assets.extra")
        os.makedirs(extra, exist_ok=True)
        with open(os.path.join(extra, "tf_serving_warmup_requests"), "wb") as handle:
            handle.write(b"not a TFRecord file")
    os.rename(staging, os.path.join(base, str(version)))


def test_hot_swap_under_load_and_broken_versions(exported, tmp_path):
    base = str(tmp_path / "gnmt")
    os.makedirs(base)
    _copy_version(os.path.join(exported, "1"), base, 1)
    logs = []
    server = ModelServer([single_model_config("gnmt", base)], port=0, rest_api_port=0, poll_seconds=0.2,
                         log=logs.append).start()
    stop = threading.Event()
    seen = {i: [] for i in range(2)}  # gRPC client -> versions that answered, in order
    failures, rest_answers = [], []

    def grpc_client(index):
        channel, predictions, _ = stubs(server.grpc_port)
        while not stop.is_set():
            try:
                response = predictions.Predict(predict_request(["three one four", "nine"]), timeout=60)
                assert texts(response.outputs["translations"]) == ["trois un quatre", "neuf"]
                seen[index].append(response.model_spec.version.value)
            except Exception as error:  # noqa: BLE001  every failure is reported below
                failures.append(f"grpc {index}: {error!r}")
            stop.wait(0.05)  # continuous load that leaves the 2 cores some room to load versions
        channel.close()

    def rest_client():
        while not stop.is_set():
            try:
                status, answer = rest(server.rest_api_port, "POST", PREDICT, GOOD)
                assert status == 200 and answer["predictions"][0]["translations"] == "trois un quatre", answer
                rest_answers.append(status)
            except Exception as error:  # noqa: BLE001
                failures.append(f"rest: {error!r}")
            stop.wait(0.05)

    def status():
        return [(s["version"], s["state"], s["status"]["error_code"])
                for s in rest(server.rest_api_port, "GET", "/v1/models/gnmt")[1]["model_version_status"]]

    threads = [threading.Thread(target=grpc_client, args=(i,)) for i in range(2)] + [threading.Thread(target=rest_client)]
    try:
        for thread in threads:
            thread.start()
        wait_for(lambda: all(seen.values()) and rest_answers)
        _copy_version(os.path.join(exported, "1"), base, 2)
        wait_for(lambda: ("2", "AVAILABLE", "OK") in status())
        wait_for(lambda: all(versions[-1] == 2 for versions in seen.values()))

        # A corrupt saved_model.pb, then a version whose warm-up file is corrupt: both fail, 2 keeps serving.
        os.makedirs(os.path.join(base, "3"))
        with open(os.path.join(base, "3", "saved_model.pb"), "wb") as handle:
            handle.write(b"\x00garbage")
        wait_for(lambda: ("3", "END", "UNKNOWN") in status())
        _copy_version(os.path.join(exported, "1"), base, 4, corrupt_warmup=True)
        wait_for(lambda: ("4", "END", "DATA_LOSS") in status())
        counts = {i: len(v) for i, v in seen.items()}
        wait_for(lambda: all(len(v) > counts[i] + 2 for i, v in seen.items()))
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    try:
        assert not failures, failures[:5]
        for versions in seen.values():  # the switch is atomic: once on 2, never back to 1
            assert versions[0] == 1 and versions[-1] == 2
            assert versions == sorted(versions)
        assert status() == [("4", "END", "DATA_LOSS"), ("3", "END", "UNKNOWN"), ("2", "AVAILABLE", "OK"),
                             ("1", "END", "OK")]
        answer = rest(server.rest_api_port, "GET", "/v1/models/gnmt/versions/3")[1]["model_version_status"][0]
        assert "failed to load" in answer["status"]["error_message"]
        assert rest(server.rest_api_port, "POST", "/v1/models/gnmt/versions/1:predict", GOOD)[0] == 404
        assert rest(server.rest_api_port, "POST", "/v1/models/gnmt/versions/2:predict", GOOD)[0] == 200
        text = "\n".join(logs)
        assert "gnmt version 2 is AVAILABLE" in text and "gnmt version 1 unloaded" in text
        assert re.search(r"gnmt version 3 failed to load .*; still serving version 2", text)
        assert re.search(r"gnmt version 4 failed to load \(DATA_LOSS\).*TFRecord", text)
    finally:
        server.stop()


# ---------------------------------------------------------------------------------------------- batching
BATCH_REQUESTS = [[" ".join(WORDS[(i + k) % 10] for k in range(1 + i % 4)), WORDS[i]] for i in range(8)]


@pytest.fixture(scope="module")
def batched_server(exported):
    """Batches of 8 sentences and a window of an hour: however slow the machine, a batch runs only when full
    (or when the server stops), so what the tests below count does not depend on timing."""
    options = parse_batching_parameters(
        f"max_batch_size {{ value: 8 }} batch_timeout_micros {{ value: {HOUR_MICROS} }}\n"
        "num_batch_threads { value: 1 } max_enqueued_batches { value: 10 }")
    with ModelServer([single_model_config("gnmt", exported)], port=0, rest_api_port=0, batching=options,
                     log=lambda message: None) as server:
        yield server


def _batching_counters(server, signature):
    stats = server.stats()["gnmt"][1]
    return {**stats["batching"][signature], "calls": stats["calls"].get(signature, 0)}


def _predict_each(server, requests, signature, options):
    """{index: translations and scores, or the RpcError} of one gRPC client per request, all at once."""

    def predict(index):
        channel, predictions, _ = stubs(server.grpc_port)
        try:
            response = predictions.Predict(predict_request(requests[index], signature=signature, **options[index]),
                                           timeout=120)
            return texts(response.outputs["translations"]), tf.make_ndarray(response.outputs["scores"])
        except grpc.RpcError as error:
            return error.code(), error.details()
        finally:
            channel.close()

    clients = Requests(predict)
    for index in range(len(requests)):
        clients.start(index, index)
    return clients.join()


@pytest.mark.parametrize("signature", ["serving_default", "translate_with_options"])
def test_batching_merges_concurrent_requests(batched_server, direct, signature):
    """Eight clients of two sentences each run as two full batches of four requests; each client gets its own
    rows back. translate_with_options's requests alternate two alphas: a batch each (scalars key the batches)."""
    options = [dict(OPTIONS, alpha=0.2 if i % 2 else 1.0) if signature == "translate_with_options" else {}
               for i in range(8)]
    before = _batching_counters(batched_server, signature)
    answers = _predict_each(batched_server, BATCH_REQUESTS, signature, options)
    for index, request in enumerate(BATCH_REQUESTS):
        expected = direct(signature, request, **options[index])
        assert answers[index][0] == [t.decode() for t in expected["translations"]], answers[index]
        np.testing.assert_allclose(answers[index][1], expected["scores"], rtol=1e-4, atol=1e-5)
    after = _batching_counters(batched_server, signature)
    assert {name: after[name] - before[name] for name in ("requests", "batches", "calls", "sentences")} == {
        "requests": 8, "batches": 2, "calls": 2, "sentences": 16}
    assert after["largest_batch"] == 8


def test_batching_refuses_bad_options_before_the_queue(batched_server, direct):
    """Bad options among good requests: refused at once, never queued; the four good ones fill a batch."""
    bad = {1: ("alpha", math.nan, "nan"), 3: ("beamsize", -5.0, "-5"), 5: ("beta", -0.5, "-0.5"),
           7: ("alpha", math.inf, "inf")}  # index: (option, value, as the message writes it)
    options = [dict(OPTIONS, **({bad[i][0]: bad[i][1]} if i in bad else {})) for i in range(8)]
    before = _batching_counters(batched_server, "translate_with_options")
    answers = _predict_each(batched_server, BATCH_REQUESTS, "translate_with_options", options)
    for index, request in enumerate(BATCH_REQUESTS):
        if index in bad:
            name, _, shown = bad[index]
            assert answers[index] == (grpc.StatusCode.INVALID_ARGUMENT, option_message(name, shown))
        else:
            expected = direct("translate_with_options", request, **OPTIONS)["translations"]
            assert answers[index][0] == [t.decode() for t in expected], answers[index]
    after = _batching_counters(batched_server, "translate_with_options")
    assert (after["requests"] - before["requests"], after["batches"] - before["batches"]) == (4, 1)


def test_batching_refuses_more_than_max_batch_size_and_runs_nbest_unbatched(batched_server):
    channel, predictions, _ = stubs(batched_server.grpc_port)
    try:
        # Over max_batch_size: refused (TF Serving's default, no large-batch splitting).
        with pytest.raises(grpc.RpcError) as error:
            predictions.Predict(predict_request(["nine"] * 9), timeout=120)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "Task size 9 is larger than maximum input batch size 8" in error.value.details()
        # n-best runs unbatched (its padded outputs would depend on the other requests of a batch): a single
        # request is answered at once although the window is an hour.
        response = predictions.Predict(predict_request(["three one four"], signature="translate_nbest", **OPTIONS),
                                       timeout=120)
        assert tf.make_ndarray(response.outputs["translations"])[0][0] == b"trois un quatre"
    finally:
        channel.close()


def test_large_batch_splitting(exported):
    """A request of 9 sentences runs as batches of at most 4, and every sentence of it gets the translation
    and score it gets in a request of its own."""
    options = parse_batching_parameters(
        "max_batch_size { value: 64 } enable_large_batch_splitting { value: true } "
        "max_execution_batch_size { value: 4 } num_batch_threads { value: 2 }")
    sentences = ["three one four", "nine", "one two", "zero", "five six", "seven", "eight eight", "two", "four"]
    with ModelServer([single_model_config("gnmt", exported)], port=0, rest_api_port=None, batching=options,
                     log=lambda message: None) as server:
        _, predictions, _ = stubs(server.grpc_port)
        response = predictions.Predict(predict_request(sentences), timeout=60)
        assert server.stats()["gnmt"][1]["batching"]["serving_default"]["largest_batch"] == 4
        alone = [predictions.Predict(predict_request([sentence]), timeout=60) for sentence in sentences]
    assert texts(response.outputs["translations"]) == [texts(a.outputs["translations"])[0] for a in alone]
    np.testing.assert_allclose(tf.make_ndarray(response.outputs["scores"]),
                               [tf.make_ndarray(a.outputs["scores"])[0] for a in alone], rtol=0, atol=1e-4)
    assert texts(response.outputs["translations"])[:2] == ["trois un quatre", "neuf"]


# ---------------------------------------------------------------------------------------------- config
def test_config_files_and_limits():
    options = parse_batching_parameters(
        "# TF Serving's format\nmax_batch_size { value: 32 }\nbatch_timeout_micros { value: 5000 }\n"
        "num_batch_threads { value: 2 }\nmax_enqueued_batches { value: 100 }\nallowed_batch_sizes: [8, 32]\n")
    assert (options.max_batch_size, options.batch_timeout_micros, options.num_batch_threads,
            options.max_enqueued_batches, options.allowed_batch_sizes) == (32, 5000, 2, 100, (8, 32))
    with pytest.raises(ServingConfigError, match='has no field named "max_batch_sise"'):
        parse_batching_parameters("max_batch_sise { value: 32 }")
    with pytest.raises(ServingConfigError, match="max_batch_size must be >= 1"):
        parse_batching_parameters("max_batch_size { value: 0 }")

    models = parse_model_config("""
        model_config_list {
          config { name: "gnmt" base_path: "/models/gnmt" model_platform: "tensorflow"
                   model_version_policy { specific { versions: 1 versions: 2 } }
                   version_labels { key: "stable" value: 1 } }
          config { name: "other" base_path: "/models/other" model_platform: "tensorflow" }
        }""")
    assert [(m.name, m.base_path, m.policy.kind, m.labels) for m in models] == [
        ("gnmt", "/models/gnmt", "specific", {"stable": 1}), ("other", "/models/other", "latest", {})]
    assert models[0].policy.aspired([1, 2, 3]) == {1, 2} and models[1].policy.aspired([1, 2, 3]) == {3}
    for text, message in [("model_config_list {}", "no models"),
                          ('model_config_list { config { name: "a" } }', "base_path is empty"),
                          ('model_config_list { config { name: "a" base_path: "/x" model_platform: "onnx" } }',
                           "model_platform 'onnx' is not supported"),
                          ("bogus: 1", "not a valid ModelServerConfig")]:
        with pytest.raises(ServingConfigError, match=re.escape(message)):
            parse_model_config(text)
    with pytest.raises(ServingConfigError, match="must be a positive integer"):
        Limits(max_batch_sentences=0)


BAD_FLAGS = [
    # (id, flags; {base}: an existing directory, {file}: the file the case writes, {missing}: no such file,
    #  part of the error message)
    ("no_model", [], "Both --model_config_file and --model_base_path are empty"),
    ("empty_model_name", ["--model_name", "", "--model_base_path", "{base}"],
     "--model_name must not be empty"),
    ("port_too_large", ["--model_base_path", "{base}", "--port", "70000"],
     "--port must be between 0 and 65535, got 70000"),
    ("negative_rest_port", ["--model_base_path", "{base}", "--rest_api_port", "-1"],
     "--rest_api_port must be between 0 and 65535, got -1"),
    ("same_ports", ["--model_base_path", "{base}", "--port", "9000", "--rest_api_port", "9000"],
     "--port and --rest_api_port are both 9000; give them different ports"),
    ("negative_grace", ["--model_base_path", "{base}", "--shutdown_grace_seconds", "-1"],
     "--shutdown_grace_seconds must be >= 0"),
    ("zero_batch_sentences", ["--model_base_path", "{base}", "--max_batch_sentences", "0"],
     "--max_batch_sentences must be a positive integer, got 0"),
    ("missing_config_file", ["--model_config_file", "{missing}"], "cannot read --model_config_file"),
    ("invalid_config_file", ["--model_config_file", "{file}"], "not a valid ModelServerConfig text proto"),
    ("batching_file_without_batching",
     ["--model_base_path", "{base}", "--batching_parameters_file", "{file}"],
     "--batching_parameters_file is given but --enable_batching is not"),
    ("invalid_batching_file",
     ["--model_base_path", "{base}", "--enable_batching", "--batching_parameters_file", "{file}"],
     'has no field named "frobnicate"'),
    ("missing_batching_file",
     ["--model_base_path", "{base}", "--enable_batching", "--batching_parameters_file", "{missing}"],
     "cannot read --batching_parameters_file"),
]


@pytest.mark.parametrize("flags, message", [case[1:] for case in BAD_FLAGS],
                         ids=[case[0] for case in BAD_FLAGS])
def test_bad_flags_exit_2_with_a_clear_message(tmp_path, capsys, flags, message):
    """Checked before anything loads or binds: main() returns at once (no server to stop)."""
    bad_file = tmp_path / "bad.config"
    bad_file.write_text("max_batch_size { value: 8 }\nfrobnicate: 1\n")  # neither a model config nor batching
    paths = {"{base}": str(tmp_path), "{file}": str(bad_file), "{missing}": str(tmp_path / "missing.config")}
    assert main([paths.get(flag, flag) for flag in flags]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and err.count("\n") == 1, err
    assert message in err


@pytest.mark.parametrize("flags, message", [
    (["--port", "abc"], "argument --port: invalid int value: 'abc'"),
    (["--enable_batching", "maybe"], "expected true or false, got 'maybe'"),
    (["--model_base_path", "x", "--no_such_flag"], "unrecognized arguments: --no_such_flag"),
])
def test_malformed_flags_are_usage_errors(capsys, flags, message):
    with pytest.raises(SystemExit) as exit_:
        main(flags)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m serving.server") and message in err


def test_model_config_file_wins_over_model_flags(tmp_path, capsys):
    """As tensorflow_model_server: with --model_config_file, --model_name/--model_base_path are ignored."""
    config = tmp_path / "models.config"
    config.write_text('model_config_list { config { name: "from_file" base_path: "/models/a" } }')
    args = build_parser().parse_args(["--model_config_file", str(config), "--model_name", "from_flags",
                                      "--model_base_path", str(tmp_path), "--rest_api_port", "0"])
    options = configure(args)
    assert [(m.name, m.base_path) for m in options["models"]] == [("from_file", "/models/a")]
    assert options["rest_api_port"] is None  # --rest_api_port 0 disables REST, as in tensorflow_model_server
    assert capsys.readouterr() == ("", "")


def test_help_lists_the_flags_and_the_differences(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--port", "--rest_api_port", "--model_config_file", "--batching_parameters_file",
                 "--file_system_poll_wait_seconds", "--rest_api_host", "--grpc_host", "--max_batch_sentences",
                 "--max_sentence_bytes", "--max_request_bytes", "binds 0.0.0.0"):
        assert flag in out


# ---------------------------------------------------------------------------------------------- process
def test_cli_startup_failures_exit_1_with_a_clear_message(tmp_path):
    """A corrupt only version, a gRPC port or a REST port already taken: exit 1, a clear error, no traceback.

    The three command runs are main(args) in this process (what ``python -m serving.server`` exits
    with; the process is not the subject, and each run spares a TensorFlow start). The servers that
    meet a taken port serve a base path with no version yet: they load models before they bind (as
    tensorflow_model_server), and an empty base path, served once a version appears, lets them reach
    the ports without the seconds of a load.
    """
    os.makedirs(tmp_path / "empty")
    os.makedirs(tmp_path / "broken" / "1")
    (tmp_path / "broken" / "1" / "saved_model.pb").write_bytes(b"\x00garbage")
    handlers = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            command = [sys.executable, "-m", "serving.server"]
            model = ["--model_name", "gnmt", "--model_base_path", str(tmp_path / "empty")]
            broken, grpc_taken, rest_taken = run_each_in_process(
                ([*command, "--port", "0", "--rest_api_port", "0",
                  "--model_name", "broken", "--model_base_path", str(tmp_path / "broken")], None),
                ([*command, "--port", str(port), "--rest_api_port", "0", *model], None),
                ([*command, "--port", "0", "--rest_api_port", str(port), *model], None))
    finally:  # serve() installs its drain on SIGTERM and SIGINT: pytest's own handlers come back
        for number, handler in handlers.items():
            signal.signal(number, handler)
    # The only version is corrupt: like tensorflow_model_server, the server does not start.
    assert broken.returncode == 1, broken.stderr[-2000:]
    assert "did not become available" in broken.stderr and "broken version 1 failed to load" in broken.stderr
    for result, front_end in [(grpc_taken, "gRPC"), (rest_taken, "REST")]:
        message = f"error: cannot listen for {front_end} on 127.0.0.1:{port}: Address already in use"
        assert result.returncode == 1, result.stderr[-2000:]
        assert message in result.stderr, result.stderr[-2000:]
    for result in (broken, grpc_taken, rest_taken):
        assert "Traceback" not in result.stderr, result.stderr[-3000:]


# Room for 4 sentences in the queue (one batch of 4) and a window of an hour: a request of 2 sentences waits
# until the server drains, and a request of 4 runs at once as a full batch unless the queue holds another.
DRAIN_BATCHING = (f"max_batch_size {{ value: 4 }}\nbatch_timeout_micros {{ value: {HOUR_MICROS} }}\n"
                  "num_batch_threads { value: 1 }\nmax_enqueued_batches { value: 1 }\n")
IN_FLIGHT = ["three one four", "nine"]


def drain_flags(directory):
    """Batching that keeps a request in flight until the drain runs it (DRAIN_BATCHING), and the grace."""
    batching = directory / "batching.config"
    batching.write_text(DRAIN_BATCHING)
    return ["--port", "0", "--enable_batching", "--batching_parameters_file", str(batching),
            "--shutdown_grace_seconds", "30"]


@pytest.fixture(scope="module")
def lengths_base(tmp_path_factory):
    """The base path of a small model that loads at once (serving_helpers.save_sentence_lengths)."""
    return save_sentence_lengths(tmp_path_factory.mktemp("lengths") / "lengths")


@pytest.fixture(scope="module")
def sigterm_server(exported, lengths_base, tmp_path_factory):
    """A ``python -m serving.server`` process serving a --model_config_file of two models.

    The second, ``lengths``, is another SavedModel (a second load of the translator would cost
    seconds of CPU for nothing more). The process stays behind a plain ``timeout`` (which passes the
    signal on and may also signal the group: a repeated SIGTERM must not cut the drain short).
    """
    directory = tmp_path_factory.mktemp("draining")
    config = directory / "models.config"
    config.write_text(
        "model_config_list {\n"
        f'  config {{ name: "gnmt" base_path: "{exported}" model_platform: "tensorflow" }}\n'
        f'  config {{ name: "lengths" base_path: "{lengths_base}" model_platform: "tensorflow" }}\n'
        "}\n")
    rest_port = free_port()
    server = ServerProcess(["--rest_api_port", str(rest_port), "--model_config_file", str(config),
                            *drain_flags(directory)], watchdog_seconds=240)
    try:
        yield server, rest_port
    finally:
        server.kill()


def _lengths_predict(rest_port, sentences):
    return rest(rest_port, "POST", "/v1/models/lengths:predict", {"instances": sentences})


def _start_request_in_flight(rest_port):
    """Sends IN_FLIGHT to ``lengths`` from a thread; returns it (serving_helpers.Requests) once it waits in the queue.

    The server shows that it waits: a probe of 4 sentences (a full batch) then finds the queue full
    (503), where it would otherwise run at once (200). A probe sitting in the queue as the request
    came can have refused it instead; it is then sent again. Each probe has been answered before the
    next, so a 503 can only come from the request in flight. No timing is involved.
    """
    in_flight = Requests(lambda: _lengths_predict(rest_port, IN_FLIGHT))
    in_flight.start("in flight")

    def queue_is_full():
        status, answer = _lengths_predict(rest_port, ["probe"] * 4)
        if status == 503:
            assert "The batch scheduling queue" in answer["error"], answer
            return True
        assert status == 200, answer
        if in_flight.done("in flight"):  # refused while the probe filled the queue: send it again
            refused = in_flight.answers["in flight"]
            assert isinstance(refused, tuple) and refused[0] == 503, refused
            in_flight.start("in flight")
        return False

    wait_for(queue_is_full, timeout=120)
    assert not in_flight.done("in flight"), in_flight.answers  # queued, and the window is an hour
    return in_flight


def _signal_in_flight(send_signal, rest_port, number):
    """Sends ``number`` while a request waits in the batch queue: the drain runs it and it is answered."""
    in_flight = _start_request_in_flight(rest_port)
    send_signal(number)
    assert in_flight.join() == {"in flight": (200, {"predictions": [len(s.encode()) for s in IN_FLIGHT]})}


def _stopped_cleanly(status, log, rest_port, number):
    """Exit status 0, the signal and "stopped" in the log, nothing cut off, and the REST port closed."""
    assert status == 0, log[-3000:]
    assert f"received {number.name}" in log and "stopped" in log and "cut off" not in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", rest_port), timeout=5).close()


def _grpc_port_closed(port):
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        with pytest.raises(grpc.FutureTimeoutError):
            grpc.channel_ready_future(channel).result(timeout=2)
    finally:
        channel.close()


def test_cli_serves_a_config_file_and_drains_on_sigterm(sigterm_server):
    server, rest_port = sigterm_server
    started = server.wait_until_serving()
    assert "gnmt (version 1), lengths (version 1)" in started
    grpc_port = server.grpc_port
    status, answer = rest(rest_port, "GET", "/v1/models/lengths")
    assert status == 200 and answer["model_version_status"][0]["state"] == "AVAILABLE"
    status, answer = rest(rest_port, "GET", "/v1/models/lengths/metadata")  # the second model, by name
    signatures = answer["metadata"]["signature_def"]["signature_def"]
    assert status == 200 and set(signatures["serving_default"]["outputs"]) == {"lengths"}
    _signal_in_flight(server.send_signal, rest_port, signal.SIGTERM)
    _stopped_cleanly(server.wait(60), server.log, rest_port, signal.SIGTERM)
    _grpc_port_closed(grpc_port)


def test_cli_drains_on_sigint_and_says_it_stopped(lengths_base, tmp_path):
    """Ctrl-C once: the same drain as SIGTERM (a second Ctrl-C would exit at once).

    The command is main(args) in this process, which receives the SIGINT, as a terminal's Ctrl-C
    sends it (the SIGTERM test runs the command as a process behind a wrapper; here the subject is
    main's handling of the signal, and the run spares a TensorFlow start). main() stays in the main
    thread, where Python runs signal handlers; a client thread sends the request and the signal.
    """
    rest_port = free_port()
    args = ["--rest_api_port", str(rest_port), "--model_name", "lengths", "--model_base_path", lengths_base,
            *drain_flags(tmp_path)]
    log, outcome = io.StringIO(), {}  # main()'s stderr, read by the client thread as it grows
    running, signalled = threading.Event(), threading.Event()

    def send_signal(number):
        signalled.set()
        os.kill(os.getpid(), number)

    def client():
        try:
            wait_for(lambda: re.search(r" serving \S+ \(version", log.getvalue()) or not running.is_set(),
                     timeout=180)
            outcome["started"] = re.search(r".* serving \S+ \(version.*", log.getvalue())[0]
            grpc_line = re.search(r"Running gRPC ModelServer at [\d.]+:(\d+)", log.getvalue())
            outcome["grpc_port"] = int(grpc_line[1])
            _signal_in_flight(send_signal, rest_port, signal.SIGINT)
        except BaseException as error:  # noqa: BLE001  raised again in the test's thread
            outcome["error"] = error
        finally:
            if running.is_set() and not signalled.is_set():  # failed before the signal: stop the server
                send_signal(signal.SIGINT)

    handlers = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    thread = threading.Thread(target=client, daemon=True)
    # The watchdog: one SIGINT after 240 s stops the server if the client thread has not (the
    # server's grace then bounds the drain; a second SIGINT would end this process).
    watchdog = threading.Timer(240, lambda: running.is_set() and not signalled.is_set()
                               and send_signal(signal.SIGINT))
    running.set()
    try:
        with contextlib.redirect_stderr(log):
            thread.start()
            watchdog.start()
            status = main(args)
    finally:
        running.clear()
        watchdog.cancel()
        # A late SIGINT must not reach serve()'s handler, which takes a second one for "exit now".
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        thread.join(60)
        for number, handler in handlers.items():  # serve() installed its drain: pytest's handlers come back
            signal.signal(number, handler)
    if "error" in outcome:
        raise outcome["error"]
    assert "lengths (version 1)" in outcome["started"]
    text = log.getvalue()
    _stopped_cleanly(status, text, rest_port, signal.SIGINT)
    assert re.search(r"^\S+ \S+ stopped$", text, re.MULTILINE), text[-3000:]  # "<time> stopped"
    assert "received SIGINT again" not in text  # one Ctrl-C, one drain
    _grpc_port_closed(outcome["grpc_port"])
