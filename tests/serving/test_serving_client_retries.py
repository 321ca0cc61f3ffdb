"""The client's retries (serving/client.py): while the server answers 503 / UNAVAILABLE it tries again
after 1, 2, 4, ... x backoff, succeeds when the server recovers, and gives up after ``retries`` retries
with the server's last message; any other failure is reported at once.

The servers are scripted fakes on loopback ports that answer each request with the next entry of
their script (TF Serving's protocol, as the client knows it); the client's sleep is a list that
records the waits, so nothing here waits.
"""

import json
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from serving.client import GrpcClient, RestClient, ServingRequestError

pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test

QUEUE_FULL = "The batch scheduling queue to which this task was submitted is full; retry later"
BACKOFF = 0.25
TRANSLATION = {"translations": ["trois"], "scores": [-0.5]}


class Script:
    """The answers a fake server gives, one per request, in order; counts the requests it got."""

    def __init__(self, answers):
        self._answers = list(answers)
        self._lock = threading.Lock()
        self.requests = 0

    def next(self):
        with self._lock:
            self.requests += 1
            assert self._answers, "the client sent more requests than the script has answers"
            return self._answers.pop(0)


def unavailable(times):
    return [("UNAVAILABLE", QUEUE_FULL)] * times


# ------------------------------------------------------------------------------------ fake servers
HTTP_STATUS = {"OK": 200, "UNAVAILABLE": 503, "INTERNAL": 500}


def serve_rest(script):
    """A REST server answering ``:predict`` by the script: (code, message) -> HTTP status and body."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format, *args):  # noqa: A002
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            code, message = script.next()
            body = {"outputs": TRANSLATION} if code == "OK" else {"error": message}
            data = json.dumps(body).encode()
            self.send_response(HTTP_STATUS[code])
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", lambda: (server.shutdown(), server.server_close())


def serve_grpc(script):
    """A gRPC PredictionService answering Predict by the script: (code, message) -> status and details."""

    class Predictions(prediction_service_pb2_grpc.PredictionServiceServicer):
        def Predict(self, request, context):
            code, message = script.next()
            if code != "OK":
                context.abort(getattr(grpc.StatusCode, code), message)
            response = predict_pb2.PredictResponse()
            for name, values in TRANSLATION.items():
                response.outputs[name].CopyFrom(tf.make_tensor_proto(values))
            return response

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Predictions(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return f"127.0.0.1:{port}", lambda: server.stop(0).wait(30)


@pytest.fixture(params=["rest", "grpc"])
def scripted(request):
    """(make_client(script, retries)) for a fake server of each protocol; the servers are stopped after the test."""
    stops, clients = [], []

    def make_client(script, retries):
        serve, client_class = (serve_rest, RestClient) if request.param == "rest" else (serve_grpc, GrpcClient)
        address, stop = serve(script)
        stops.append(stop)
        waits = []
        client = client_class(address, "gnmt", timeout=30, retries=retries, backoff=BACKOFF, sleep=waits.append)
        clients.append(client)
        return client, waits

    make_client.protocol = request.param
    yield make_client
    for client in clients:
        if isinstance(client, GrpcClient):
            client.close()
    for stop in stops:
        stop()


def test_a_retry_succeeds_when_the_server_recovers(scripted):
    script = Script(unavailable(2) + [("OK", "")])
    client, waits = scripted(script, retries=3)
    [result] = client.translate(["three"])
    assert (result.text, result.score) == ("trois", -0.5)
    assert script.requests == 3 and waits == [BACKOFF, 2 * BACKOFF]


def test_it_gives_up_after_its_retries_with_the_servers_message(scripted):
    script = Script(unavailable(3))
    client, waits = scripted(script, retries=2)
    with pytest.raises(ServingRequestError) as caught:
        client.translate(["three"])
    assert caught.value.code == "UNAVAILABLE"
    last = f"HTTP 503: {QUEUE_FULL}" if scripted.protocol == "rest" else f"UNAVAILABLE: {QUEUE_FULL}"
    assert str(caught.value).endswith(
        f": the server is still unavailable after 3 attempt(s) (0.75 s of backoff between them); last error: {last}")
    assert script.requests == 3 and waits == [BACKOFF, 2 * BACKOFF]


def test_without_retries_one_attempt(scripted):
    script = Script(unavailable(1))
    client, waits = scripted(script, retries=0)
    with pytest.raises(ServingRequestError, match=r"still unavailable after 1 attempt\(s\) \(0 s of backoff"):
        client.translate(["three"])
    assert script.requests == 1 and waits == []


def test_other_failures_are_not_retried(scripted):
    script = Script([("INTERNAL", "output 'scores' has shape [2], not the request's batch size 1 first")])
    client, waits = scripted(script, retries=3)
    with pytest.raises(ServingRequestError) as caught:
        client.translate(["three"])
    expected_code = 500 if scripted.protocol == "rest" else "INTERNAL"
    assert caught.value.code == expected_code
    assert str(caught.value).endswith("output 'scores' has shape [2], not the request's batch size 1 first")
    assert script.requests == 1 and waits == []
