"""The server's refusals and failures as both front ends answer them: UNAVAILABLE / 503 for a full batch
queue, a draining server and a version being unloaded (a client retries those), INTERNAL / 500 for a
model that fails on a request. Each with its message, and each followed by the server answering again.

The server serves a small SavedModel (serving_helpers.save_sentence_lengths) that loads at once. The
states are reached by the order of events, never by timing: the batch window is an hour, so a
request waits in the queue until a full batch or the drain runs it, and the test waits until the
server's counters show the request queued.
"""

import grpc
import numpy as np
import pytest
import tensorflow as tf
from serving_helpers import MISCOUNT, Requests, rest, save_sentence_lengths, stubs, wait_for
from tensorflow_serving.apis import predict_pb2

from serving.config import BatchingOptions, single_model_config
from serving.server import ModelServer

pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test

# One batch of 4 sentences fits in the queue; a batch runs when full (or when the server drains).
QUEUE_OF_FOUR = BatchingOptions(max_batch_size=4, batch_timeout_micros=3600 * 10**6, num_batch_threads=1,
                                max_enqueued_batches=1)
PREDICT = "/v1/models/lengths:predict"
QUEUE_FULL = ("The batch scheduling queue to which this task was submitted is full (2 sentences waiting, room "
              "for 4: max_enqueued_batches 1 x batch size 4); retry later")
SHUTTING_DOWN = "the server is shutting down; retry on another replica"


@pytest.fixture(scope="module")
def lengths_base(tmp_path_factory):
    return save_sentence_lengths(tmp_path_factory.mktemp("errors") / "lengths")


@pytest.fixture
def start_server(lengths_base):
    """Starts a server of ``lengths`` (batching as given); every server started is stopped after the test."""
    started = []

    def start(batching=QUEUE_OF_FOUR):
        server = ModelServer([single_model_config("lengths", lengths_base)], port=0, rest_api_port=0,
                             batching=batching, grace_seconds=60, log=lambda message: None)
        started.append(server.start())
        return server

    yield start
    for server in started:
        server.stop()


def lengths_of(sentences):
    return [len(s.encode()) for s in sentences]


def grpc_predict(server, sentences, signature=""):
    """(status code, details, lengths) of a gRPC Predict to ``lengths``."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "lengths"
    request.model_spec.signature_name = signature
    request.inputs["sentences"].CopyFrom(tf.make_tensor_proto(sentences, dtype=tf.string))
    channel, predictions, _ = stubs(server.grpc_port)
    try:
        response = predictions.Predict(request, timeout=120)
        return grpc.StatusCode.OK, "", tf.make_ndarray(response.outputs["lengths"]).tolist()
    except grpc.RpcError as error:
        return error.code(), error.details(), None
    finally:
        channel.close()


def queue_counters(server):
    return server.stats()["lengths"][1]["batching"]["serving_default"]


def request_in_flight(server, sentences):
    """A REST request of ``sentences`` sent from a thread, returned once it waits in the batch queue."""
    before = queue_counters(server)["requests"]
    requests = Requests(lambda: rest(server.rest_api_port, "POST", PREDICT, {"instances": sentences}))
    requests.start("in flight")
    wait_for(lambda: queue_counters(server)["requests"] > before, timeout=120)
    assert not requests.done("in flight")  # the window is an hour and the batch is not full
    return requests


def test_a_full_queue_is_503_and_unavailable_until_a_batch_runs(start_server):
    server = start_server()
    in_flight = request_in_flight(server, ["one", "three"])
    assert rest(server.rest_api_port, "POST", PREDICT, {"instances": ["a"] * 4}) == (503, {"error": QUEUE_FULL})
    assert grpc_predict(server, ["a"] * 4) == (grpc.StatusCode.UNAVAILABLE, QUEUE_FULL, None)
    assert queue_counters(server)["requests"] == 1  # the refused requests were never queued
    # Two more sentences fit: the batch of 4 is full and runs, answering both.
    assert rest(server.rest_api_port, "POST", PREDICT, {"instances": ["four", "five"]}) == (
        200, {"predictions": [4, 4]})
    assert in_flight.join() == {"in flight": (200, {"predictions": [3, 5]})}
    counters = queue_counters(server)
    assert (counters["requests"], counters["batches"], counters["largest_batch"]) == (2, 1, 4)


def test_a_draining_server_is_503_and_unavailable_and_answers_what_it_holds(start_server):
    server = start_server()
    in_flight = request_in_flight(server, ["one", "three"])
    server.core.begin_drain()  # what stop() does first, before it closes the ports
    assert in_flight.join() == {"in flight": (200, {"predictions": [3, 5]})}  # run at once, not after an hour
    assert rest(server.rest_api_port, "POST", PREDICT, {"instances": ["a"]}) == (503, {"error": SHUTTING_DOWN})
    assert grpc_predict(server, ["a"]) == (grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN, None)
    assert rest(server.rest_api_port, "GET", "/v1/models/lengths/metadata") == (503, {"error": SHUTTING_DOWN})
    assert server.stop() is True  # nothing was cut off


def test_stop_lets_a_queued_request_finish(start_server):
    server = start_server()
    in_flight = request_in_flight(server, ["one", "three"])
    assert server.stop() is True
    assert in_flight.join() == {"in flight": (200, {"predictions": [3, 5]})}


def test_a_version_being_unloaded_is_503_and_unavailable(start_server):
    """A request that reaches a version whose batchers have closed (the unload's grace ran out while it
    held the version) is told to retry, rather than hanging or failing for good."""
    server = start_server()
    [loaded] = server.core.manager("lengths").loaded()
    assert loaded.retire(0) is True  # nothing in flight: it closes the batchers at once
    message = "lengths:1:serving_default is being unloaded; retry"
    assert rest(server.rest_api_port, "POST", PREDICT, {"instances": ["a"] * 4}) == (503, {"error": message})
    assert grpc_predict(server, ["a"] * 4) == (grpc.StatusCode.UNAVAILABLE, message, None)


@pytest.mark.parametrize("batching", [None, QUEUE_OF_FOUR], ids=["unbatched", "batched"])
def test_a_model_failing_on_a_request_is_500_and_internal_and_the_server_goes_on(start_server, batching):
    """The ``miscounted`` signature answers one row too many for a batch holding MISCOUNT: the rows cannot
    be given back per sentence, so the request fails with INTERNAL, and the next request is answered."""
    server = start_server(batching)
    sentences = ["a", MISCOUNT, "abc", "ab"]  # four: a full batch when batched
    message = ("output 'lengths' of signature 'miscounted' has shape [5], not the request's batch size 4 first"
               if batching is None else "output 'lengths' of a batch of 4 has shape [5]; cannot split it per request")
    body = {"signature_name": "miscounted", "instances": sentences}
    assert rest(server.rest_api_port, "POST", PREDICT, body) == (500, {"error": message})
    assert grpc_predict(server, sentences, "miscounted") == (grpc.StatusCode.INTERNAL, message, None)
    good = ["a", "bb", "abc", "ab"]
    body = {"signature_name": "miscounted", "instances": good}
    assert rest(server.rest_api_port, "POST", PREDICT, body) == (200, {"predictions": lengths_of(good)})
    assert grpc_predict(server, good, "miscounted") == (grpc.StatusCode.OK, "", lengths_of(good))
    assert np.array_equal(grpc_predict(server, good)[2], lengths_of(good))  # serving_default too
