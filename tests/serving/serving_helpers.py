"""What the serving tests share: the exported model called directly, free ports, server processes."""

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
