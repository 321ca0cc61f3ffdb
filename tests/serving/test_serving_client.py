"""The serving client against the local server: REST and gRPC give python -m gnmt_tf.translate's output."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from conftest import copy_version

from serving.client import GrpcClient, RestClient, ServingRequestError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
SENTENCES = ["three one four", "nine", "zero zero seven five two one", "eight six"]


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(args, **kwargs):
    return subprocess.run([sys.executable, *args], env=ENV, capture_output=True, text=True, timeout=300, **kwargs)


@pytest.fixture(scope="module")
def server(trained_number_model, exported_number_model, tmp_path_factory):
    """The exported fixture model behind ``python -m serving.server`` on loopback ports."""
    model_dir, _ = trained_number_model
    base = copy_version(exported_number_model, str(tmp_path_factory.mktemp("client") / "gnmt"))
    grpc_port, rest_port = free_port(), free_port()
    # The timeout is the watchdog: the server is killed even if the test process dies first.
    process = subprocess.Popen(
        ["timeout", "-s", "KILL", "600", sys.executable, "-m", "serving.server", "--port", str(grpc_port),
         "--rest_api_port", str(rest_port), "--model_name", "gnmt", "--model_base_path", base],
        env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    rest = RestClient(f"http://127.0.0.1:{rest_port}", "gnmt", timeout=60, retries=40, backoff=0.25,
                      sleep=lambda s: time.sleep(min(s, 1.0)))
    try:
        status = rest.status()  # retried until the server is up and the version loaded
        assert status[0]["state"] == "AVAILABLE", status
        yield model_dir, rest_port, grpc_port
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="module")
def cli_translations(server):
    model_dir, _, _ = server
    result = run(["-m", "gnmt_tf.translate", "--model-dir", model_dir], input="\n".join(SENTENCES) + "\n")
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.split("\n")[: len(SENTENCES)]


@pytest.fixture(params=["rest", "grpc"])
def client(request, server):
    _, rest_port, grpc_port = server
    if request.param == "rest":
        yield RestClient(f"http://127.0.0.1:{rest_port}", "gnmt", timeout=120)
    else:
        with GrpcClient(f"127.0.0.1:{grpc_port}", "gnmt", timeout=120) as grpc_client:
            yield grpc_client


def test_translations_equal_the_translate_command(client, cli_translations):
    results = client.translate(SENTENCES)
    assert [r.text for r in results] == cli_translations
    assert results[0].text == "trois un quatre"
    assert all(isinstance(r.score, float) and r.score < 0 for r in results)


def test_options_and_nbest(client, cli_translations):
    # The config's own settings through translate_with_options give serving_default's answers.
    with_options = client.translate(SENTENCES, alpha=0.2, beta=0.2, beamsize=3.0)
    assert [r.text for r in with_options] == cli_translations
    nbest = client.translate_nbest(SENTENCES[:2])
    assert len(nbest) == 2 and nbest[0][0].text == "trois un quatre"
    assert [e.score for e in nbest[0]] == sorted((e.score for e in nbest[0]), reverse=True)
    with pytest.raises(ValueError, match="give alpha, beta and beamsize together"):
        client.translate(SENTENCES, alpha=0.5)


def test_status_metadata_and_errors(client):
    [status] = client.status()
    assert status["version"] in ("1", 1) and status["state"] == "AVAILABLE"
    signatures = client.metadata()["metadata"]["signature_def"]["signature_def"]
    assert {"serving_default", "translate_with_options", "translate_nbest"} <= set(signatures)
    assert client.translate([]) == []
    unknown = type(client)(getattr(client, "url", None) or client.target, "no_such_model", timeout=30, retries=0)
    with pytest.raises(ServingRequestError) as caught:
        unknown.translate(["one"])
    assert caught.value.code in (404, "NOT_FOUND")
    with pytest.raises(ServingRequestError) as caught:
        client.translate(["one"], version=99)
    assert caught.value.code in (404, "NOT_FOUND")


@pytest.mark.parametrize("kind", ["rest", "grpc"])
def test_unavailable_server_is_retried_with_backoff_then_reported(kind):
    port = free_port()  # nothing listens there
    waits = []
    if kind == "rest":
        client = RestClient(f"http://127.0.0.1:{port}", "gnmt", timeout=5, retries=3, backoff=0.1, sleep=waits.append)
    else:
        client = GrpcClient(f"127.0.0.1:{port}", "gnmt", timeout=5, retries=3, backoff=0.1, sleep=waits.append)
    with pytest.raises(ServingRequestError, match="unavailable after 4 attempt") as caught:
        client.translate(["one"])
    assert caught.value.code == "UNAVAILABLE"
    assert waits == pytest.approx([0.1, 0.2, 0.4])


def test_client_command_line(server, cli_translations):
    _, rest_port, grpc_port = server
    stdin = "\n".join(SENTENCES) + "\n"
    for where in (["--rest", f"http://127.0.0.1:{rest_port}"], ["--grpc", f"127.0.0.1:{grpc_port}"]):
        result = run(["-m", "serving.client", *where, "--model", "gnmt", "--batch-size", "3"], input=stdin)
        assert result.returncode == 0, result.stderr[-2000:]
        assert result.stdout.splitlines() == cli_translations
    status = run(["-m", "serving.client", "--rest", f"127.0.0.1:{rest_port}", "--status"])
    assert json.loads(status.stdout)[0]["state"] == "AVAILABLE"
    missing = run(["-m", "serving.client", "--rest", f"http://127.0.0.1:{rest_port}", "--model", "nope"],
                  input="one\n")
    assert missing.returncode == 1 and missing.stderr.startswith("error: ")


def doc_commands(path, prefix):
    """The commands starting with ``prefix`` in the ```sh blocks of a docs page."""
    commands, in_block = [], False
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("```"):
                in_block = line.strip() == "```sh"
            elif in_block and line.startswith(prefix):
                commands.append(line.strip())
    return commands


def test_every_curl_command_in_the_serving_docs_works(server):
    """docs/serving.md cannot rot: each curl line runs against the local server and gets no error."""
    _, rest_port, _ = server
    commands = doc_commands(os.path.join(ROOT, "docs", "serving.md"), "curl ")
    assert len(commands) >= 7
    for command in commands:
        command = command.replace("localhost:8501", f"127.0.0.1:{rest_port}")
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (command, done.stderr)
        answer = json.loads(done.stdout)
        assert "error" not in answer, (command, answer)
        if ":predict" in command:
            assert "predictions" in answer or "outputs" in answer
