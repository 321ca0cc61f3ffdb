"""What the serving tests share: the exported model called directly, free ports, server processes."""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")


def savedmodel_signatures(version_dir):
    """The SavedModel's signatures called in this process: (signature, sentences, **scalars) -> numpy outputs.

    The reference every served answer is compared with: what ``tf.saved_model.load(...).signatures``
    gives, as a client of the artifact without any server would get it.
    """
    import tensorflow as tf

    loaded = tf.saved_model.load(version_dir)

    def call(signature, sentences, **scalars):
        inputs = {"sentences": tf.constant(sentences, tf.string)}
        inputs.update({name: tf.constant(value, tf.float32) for name, value in scalars.items()})
        outputs = loaded.signatures[signature](**inputs)
        return {name: value.numpy() for name, value in outputs.items()}

    call.signatures = loaded.signatures
    return call


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(condition, timeout=90.0, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {condition}")


def rest(port, method, path, body=None, raw=None, headers=None):
    """(status, decoded JSON) of one request on a fresh connection."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode("utf-8"))
        connection.request(method, path, body=data, headers=headers or {})
        response = connection.getresponse()
        payload = response.read()
        assert response.getheader("Content-Type") == "application/json"
        return response.status, json.loads(payload)
    finally:
        connection.close()


def stubs(port):
    """(channel, PredictionService stub, ModelService stub) for the gRPC server on ``port``."""
    import grpc
    from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    return (channel, prediction_service_pb2_grpc.PredictionServiceStub(channel),
            model_service_pb2_grpc.ModelServiceStub(channel))


class ServerProcess:
    """``python -m serving.server ARGS`` under coreutils ``timeout`` (the watchdog: it kills the server
    after ``watchdog_seconds`` even if the test process died first), its stderr read by a thread.

    ``timeout`` also signals its process group, so the server may see a signal twice (the SIGTERM
    test's subject: a repeated SIGTERM must not cut the drain short).
    """

    def __init__(self, args, watchdog_seconds=300):
        wrapper = ["timeout", "-k", "10", str(watchdog_seconds)]
        # A session of its own, so that kill() can end the wrapper and the server together.
        self.process = subprocess.Popen(
            [*wrapper, sys.executable, "-m", "serving.server", *args], env=ENV, cwd=ROOT,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.lines = []
        self._reader = threading.Thread(
            target=lambda: self.lines.extend(iter(self.process.stderr.readline, "")), daemon=True)
        self._reader.start()

    @property
    def log(self):
        return "".join(self.lines)

    def wait_until_serving(self, timeout=180):
        """The startup line ``serving NAME (version N), ...; gRPC on ...``; fails if the process exits."""
        wait_for(lambda: self.serving_line() or self.process.poll() is not None, timeout=timeout)
        assert self.process.poll() is None, self.log[-3000:]
        return self.serving_line()

    def serving_line(self):
        return next((line for line in list(self.lines) if re.search(r" serving \S+ \(version", line)), None)

    @property
    def grpc_port(self):
        return int(re.search(r"Running gRPC ModelServer at [\d.]+:(\d+)", self.log)[1])

    def send_signal(self, number=signal.SIGTERM):
        self.process.send_signal(number)

    def wait(self, timeout):
        """The exit status (waits at most ``timeout`` s), with all of stderr read."""
        status = self.process.wait(timeout)
        self._reader.join(10)
        return status

    def kill(self):
        """Ends the server and its watchdog at once (SIGKILL to both: the wrapper cannot pass SIGKILL on)."""
        if self.process.poll() is None:  # the wrapper only exits after the server did
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)
        self._reader.join(10)


# --------------------------------------------------------------------------------- batcher test doubles
WATCHDOG_SECONDS = 120  # how long anything a test waits for may take before the test fails instead of hanging


class ManualClock:
    """A batch window clock that moves only when the test calls :meth:`advance`.

    The batcher's threads wait on it as on the real clock; :meth:`advance` wakes them, so a window
    closes exactly when the test says, however slow the machine.
    """

    def __init__(self):
        self._now = 0.0
        self._lock = threading.Lock()
        self._sleepers = set()

    def now(self):
        with self._lock:
            return self._now

    def wait_until(self, condition, deadline):
        with self._lock:  # checked and registered together: an advance() in between is not missed
            if self._now >= deadline:
                return
            self._sleepers.add(condition)
        condition.wait(WATCHDOG_SECONDS)  # advance() or the batcher's own notify wakes it; the caller waits again

    def advance(self, seconds):
        with self._lock:
            self._now += seconds
            sleepers = list(self._sleepers)
        for condition in sleepers:
            with condition:
                condition.notify_all()


class QueuedRequests:
    """A batcher's ``on_queued`` hook: counts the requests that joined its queue, so a test can wait for them."""

    def __init__(self):
        self._changed = threading.Condition()
        self.count = 0

    def __call__(self, waiting_sentences):
        with self._changed:
            self.count += 1
            self._changed.notify_all()

    def wait_for(self, count):
        with self._changed:
            assert self._changed.wait_for(lambda: self.count >= count, WATCHDOG_SECONDS), (
                f"{self.count} of {count} requests joined the queue")


class Gate:
    """Holds a fake model's call until the test opens it: ``entered`` tells that a call is inside."""

    def __init__(self):
        self.entered = threading.Event()
        self._open = threading.Event()

    def pass_through(self):
        self.entered.set()
        assert self._open.wait(WATCHDOG_SECONDS), "the gate was never opened"

    def open(self):
        self._open.set()

    def wait_entered(self):
        assert self.entered.wait(WATCHDOG_SECONDS), "no call reached the gate"


class Requests:
    """Calls ``submit(*args)`` in daemon threads and collects each answer (or ServingError) by key."""

    def __init__(self, submit):
        self._submit = submit
        self._threads = {}
        self.answers = {}

    def start(self, key, *args):
        def run():
            try:
                self.answers[key] = self._submit(*args)
            except Exception as error:  # noqa: BLE001  the test looks at it
                self.answers[key] = error

        thread = threading.Thread(target=run, name=f"request-{key}", daemon=True)
        self._threads[key] = thread
        thread.start()

    def done(self, key):
        return not self._threads[key].is_alive()

    def join(self, *keys):
        """The answers of ``keys`` (default: all), once each has one (fails after the watchdog instead of hanging)."""
        keys = keys or tuple(self._threads)
        deadline = time.monotonic() + WATCHDOG_SECONDS
        for key in keys:
            self._threads[key].join(max(0.0, deadline - time.monotonic()))
            assert not self._threads[key].is_alive(), f"request {key} got no answer"
        return {key: self.answers[key] for key in keys}


# --------------------------------------------------------------------------------- a model that loads at once
MISCOUNT = "miscount"  # the sentence for which the ``miscounted`` signature answers one row too many


def save_sentence_lengths(base):
    """A small SavedModel as ``base/1`` (returns ``base``): it loads in a moment, where the translator takes seconds.

    ``serving_default``: sentences -> their byte lengths. ``miscounted``: the same, with one row too many
    when a batch holds the sentence MISCOUNT: a model that fails on a request (the server must answer
    INTERNAL), yet passes the built-in warm-up.
    """
    import tensorflow as tf

    class SentenceLengths(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def lengths(self, sentences):
            return {"lengths": tf.strings.length(sentences)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def miscounted(self, sentences):
            extra = tf.cast(tf.reduce_any(tf.equal(sentences, MISCOUNT)), tf.int32)
            return {"lengths": tf.concat([tf.strings.length(sentences), tf.zeros([extra], tf.int32)], 0)}

    module = SentenceLengths()
    tf.saved_model.save(module, os.path.join(str(base), "1"),
                        signatures={"serving_default": module.lengths, "miscounted": module.miscounted})
    return str(base)
