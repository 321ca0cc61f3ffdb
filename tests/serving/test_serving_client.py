"""The serving client against the local server: REST and gRPC give python -m gnmt_tf.translate's translations
and the exported SavedModel's own scores; its command line (--nbest, --version, --metadata, --status, errors).
"""

import json
import math
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from conftest import copy_version
from helpers import run_each_in_process, run_in_process, run_side_by_side
from serving_helpers import ENV, ROOT, ServerProcess, free_port, savedmodel_signatures

from serving.client import GrpcClient, RestClient, ServingRequestError

SENTENCES = ["three one four", "nine", "zero zero seven five two one", "eight six"]
OPTIONS = {"alpha": 0.2, "beta": 0.2, "beamsize": 3.0}  # the client's n-best defaults
OTHER_OPTIONS = {"alpha": 1.0, "beta": 0.0, "beamsize": 2.0}
# (option, its value, as the message writes it): the search option rule (gnmt_tf.decoding.options); the
# command line's table is in tests/cli/test_search_option_flags.py
BAD_OPTIONS = [("alpha", math.nan, "nan"), ("alpha", math.inf, "inf"), ("alpha", float("1e400"), "inf"),
               ("alpha", -1.0, "-1"), ("beta", -0.5, "-0.5"), ("beamsize", -5.0, "-5"), ("beamsize", math.nan, "nan"),
               ("beamsize", math.inf, "inf")]


def option_message(name, shown):
    hint = " (1e9 never prunes)" if name == "beamsize" else ""
    return f"{name} must be a finite float32 >= 0, got {shown}{hint}"


pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test


@pytest.fixture(scope="module")
def served(trained_number_model, exported_number_model, tmp_path_factory):
    """The exported fixture model behind ``python -m serving.server`` on loopback ports.

    While the server starts, python -m gnmt_tf.translate translates SENTENCES in this process (the
    Keras model's answers) and this process loads the SavedModel (its answers, called directly: ``direct``).
    """
    model_dir, _ = trained_number_model
    base = copy_version(exported_number_model, str(tmp_path_factory.mktemp("client") / "gnmt"))
    rest_port = free_port()
    server = ServerProcess(["--port", "0", "--rest_api_port", str(rest_port), "--model_name", "gnmt",
                            "--model_base_path", base], watchdog_seconds=600)
    try:
        direct = savedmodel_signatures(os.path.join(base, "1"))
        translate = run_in_process([sys.executable, "-m", "gnmt_tf.translate", "--model-dir", model_dir],
                                   "\n".join(SENTENCES) + "\n")
        assert translate.returncode == 0, translate.stderr[-2000:]
        server.wait_until_serving()
        status = RestClient(f"http://127.0.0.1:{rest_port}", "gnmt", timeout=60).status()
        assert status[0]["state"] == "AVAILABLE", status
        yield SimpleNamespace(rest_port=rest_port, grpc_port=server.grpc_port, direct=direct,
                              translations=translate.stdout.split("\n")[: len(SENTENCES)])
    finally:
        server.kill()


@pytest.fixture(params=["rest", "grpc"])
def client(request, served):
    if request.param == "rest":
        yield RestClient(f"http://127.0.0.1:{served.rest_port}", "gnmt", timeout=120)
    else:
        with GrpcClient(f"127.0.0.1:{served.grpc_port}", "gnmt", timeout=120) as grpc_client:
            yield grpc_client


def expected_scores(direct, signature, sentences, **scalars):
    """The SavedModel's own scores (a subprocess server may differ from this process in the last bits)."""
    scores = direct(signature, sentences, **scalars)["scores"]
    return [pytest.approx(float(score), abs=1e-4) for score in scores]


def expected_nbest(direct, sentences, **scalars):
    """translate_nbest called directly, as [[(text, score, length), ...] per sentence]."""
    outputs = direct("translate_nbest", sentences, **scalars)
    return [[(text.decode(), pytest.approx(float(score), abs=1e-4), int(length))
             for text, score, length in zip(texts, scores, lengths)]
            for texts, scores, lengths in zip(outputs["translations"], outputs["scores"], outputs["lengths"])]


def signature_names(direct):
    """{signature: (input names, output names)} of the SavedModel, as tf.saved_model.load sees it."""
    return {key: (set(function.structured_input_signature[1]), set(function.structured_outputs))
            for key, function in direct.signatures.items()}


def test_translations_equal_the_translate_command(client, served):
    results = client.translate(SENTENCES)
    assert [r.text for r in results] == served.translations
    assert results[0].text == "trois un quatre"
    assert all(isinstance(r.score, float) and r.score < 0 for r in results)
    assert [r.score for r in results] == expected_scores(served.direct, "serving_default", SENTENCES)


def test_options_and_nbest(client, served):
    # The config's own settings through translate_with_options give serving_default's answers.
    with_options = client.translate(SENTENCES, **OPTIONS)
    assert [r.text for r in with_options] == served.translations
    assert [r.score for r in with_options] == expected_scores(
        served.direct, "translate_with_options", SENTENCES, **OPTIONS)
    nbest = client.translate_nbest(SENTENCES[:2])
    assert len(nbest) == 2 and nbest[0][0].text == "trois un quatre"
    assert [e.score for e in nbest[0]] == sorted((e.score for e in nbest[0]), reverse=True)
    assert [[(e.text, e.score, e.length) for e in entries] for entries in nbest] == expected_nbest(
        served.direct, SENTENCES[:2], **OPTIONS)
    with pytest.raises(ValueError, match="give alpha, beta and beamsize together"):
        client.translate(SENTENCES, alpha=0.5)


@pytest.mark.parametrize("kind", ["rest", "grpc"])
def test_bad_options_are_refused_before_sending(kind):
    """A ValueError with the rule's message for each bad value, from a client whose server does not exist (so
    nothing was sent: sending would be a ServingRequestError)."""
    port = free_port()
    nowhere = (RestClient(f"http://127.0.0.1:{port}", "gnmt", timeout=5, retries=0) if kind == "rest"
               else GrpcClient(f"127.0.0.1:{port}", "gnmt", timeout=5, retries=0))
    refused = {}
    for case, (name, value, _) in enumerate(BAD_OPTIONS):
        for call in (nowhere.translate, nowhere.translate_nbest):
            with pytest.raises(ValueError) as error:
                call(["nine"], **dict(OPTIONS, **{name: value}))
            refused[case, call.__name__] = str(error.value)
    assert refused == {(case, call): option_message(name, shown) for case, (name, _, shown) in enumerate(BAD_OPTIONS)
                       for call in ("translate", "translate_nbest")}


def test_status_metadata_and_errors(client, served):
    [status] = client.status()
    assert status["version"] in ("1", 1) and status["state"] == "AVAILABLE"
    metadata = client.metadata(version=1)
    assert metadata["model_spec"]["name"] == "gnmt" and metadata["model_spec"]["version"] == "1"
    signatures = metadata["metadata"]["signature_def"]["signature_def"]
    assert {"serving_default", "translate_with_options", "translate_nbest"} <= set(signatures)
    for key, (inputs, outputs) in signature_names(served.direct).items():
        assert (set(signatures[key]["inputs"]), set(signatures[key]["outputs"])) == (inputs, outputs), key
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
    with pytest.raises(ServingRequestError, match=r"still unavailable after 4 attempt\(s\) \(0.7 s of backoff") as caught:
        client.translate(["one"])
    assert caught.value.code == "UNAVAILABLE"
    last_error = "[Errno 111] Connection refused" if kind == "rest" else "UNAVAILABLE: "
    assert f"; last error: {last_error}" in str(caught.value)
    assert waits == pytest.approx([0.1, 0.2, 0.4])


def test_client_command_line(served):
    """Every option of python -m serving.client; the REST runs side by side as processes, the two gRPC
    runs in this process (its client imports TensorFlow, which costs a process seconds of CPU).

    Only two go over gRPC: what the options do over gRPC is the same client code, checked in-process
    above for both protocols.
    """
    rest = ["--rest", f"http://127.0.0.1:{served.rest_port}"]
    grpc = ["--grpc", f"127.0.0.1:{served.grpc_port}"]
    stdin = "\n".join(SENTENCES) + "\n"
    two = "\n".join(SENTENCES[:2]) + "\n"
    other_options = [text for name, value in OTHER_OPTIONS.items() for text in (f"--{name}", str(value))]
    cases = {
        "rest": ([*rest, "--model", "gnmt", "--batch-size", "3"], stdin),
        "grpc_v1": ([*grpc, "--model", "gnmt", "--batch-size", "3", "--version", "1"], stdin),
        "status": (["--rest", f"127.0.0.1:{served.rest_port}", "--status"], None),
        "status_v1": ([*rest, "--status", "--version", "1"], None),
        "missing": ([*rest, "--model", "nope"], "one\n"),
        "rest_nbest": ([*rest, "--nbest"], two),
        "grpc_nbest_options": ([*grpc, "--nbest", *other_options, "--batch-size", "1"], two),
        "rest_v1_scores": ([*rest, "--version", "1", "--scores"], stdin),
        "rest_options_scores": ([*rest, *other_options, "--scores"], stdin),
        "rest_v7": ([*rest, "--version", "7"], "one\n"),
        "rest_metadata": ([*rest, "--metadata"], None),
        "rest_metadata_v1": ([*rest, "--metadata", "--version", "1"], None),
    }
    commands = {name: ([sys.executable, "-m", "serving.client", *args], text) for name, (args, text) in cases.items()}
    over_grpc = [name for name, (args, _) in cases.items() if "--grpc" in args]
    results = dict(zip(over_grpc, run_each_in_process(*[commands[name] for name in over_grpc])))
    over_rest = [name for name in cases if name not in over_grpc]
    results.update(zip(over_rest, run_side_by_side(*[commands[name] for name in over_rest], env=ENV)))
    direct = served.direct
    for name in ("rest", "grpc_v1", "status", "status_v1", "rest_nbest", "grpc_nbest_options", "rest_v1_scores",
                 "rest_options_scores", "rest_metadata", "rest_metadata_v1"):
        assert results[name].returncode == 0, (name, results[name].stderr[-2000:])

    assert results["rest"].stdout.splitlines() == served.translations
    assert results["grpc_v1"].stdout.splitlines() == served.translations
    assert json.loads(results["status"].stdout)[0]["state"] == "AVAILABLE"
    status = json.loads(results["status_v1"].stdout)
    assert [(s["version"], s["state"]) for s in status] == [("1", "AVAILABLE")]
    assert results["missing"].returncode == 1 and results["missing"].stderr.startswith("error: ")

    # --nbest: one JSON list per sentence, as translate_nbest gives it (the options passed through).
    for name, options in (("rest_nbest", OPTIONS), ("grpc_nbest_options", OTHER_OPTIONS)):
        lines = [json.loads(line) for line in results[name].stdout.splitlines()]
        got = [[(e["text"], e["score"], e["length"]) for e in entries] for entries in lines]
        assert got == expected_nbest(direct, SENTENCES[:2], **options), name

    # --alpha, --beta, --beamsize: translate_with_options with the values given.
    lines = [line.split("\t") for line in results["rest_options_scores"].stdout.splitlines()]
    with_options = direct("translate_with_options", SENTENCES, **OTHER_OPTIONS)
    assert [text for _, text in lines] == [text.decode() for text in with_options["translations"]]
    assert [float(score) for score, _ in lines] == expected_scores(direct, "translate_with_options", SENTENCES,
                                                                    **OTHER_OPTIONS)

    # --version: the request names the version; 1 is served, 7 is not.
    lines = [line.split("\t") for line in results["rest_v1_scores"].stdout.splitlines()]
    assert [text for _, text in lines] == served.translations
    assert [float(score) for score, _ in lines] == expected_scores(direct, "serving_default", SENTENCES)
    result = results["rest_v7"]
    assert result.returncode == 1 and result.stdout == "" and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("error: POST ") and result.stderr.count("\n") == 1, result.stderr
    assert "/versions/7:predict: HTTP 404: Servable not found for request: Specific(gnmt, 7)" in result.stderr

    # --metadata: the SavedModel's signatures, with their inputs and outputs.
    for name in ("rest_metadata", "rest_metadata_v1"):
        metadata = json.loads(results[name].stdout)
        assert metadata["model_spec"]["name"] == "gnmt" and metadata["model_spec"]["version"] == "1", name
        signatures = metadata["metadata"]["signature_def"]["signature_def"]
        for key, (inputs, outputs) in signature_names(direct).items():
            served_names = set(signatures[key]["inputs"]), set(signatures[key]["outputs"])
            assert served_names == (inputs, outputs), (name, key)
            assert signatures[key]["inputs"]["sentences"]["dtype"] == "DT_STRING"


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


def test_every_curl_command_in_the_serving_docs_works(served):
    """docs/serving.md cannot rot: each curl line runs against the local server and answers what the
    client answers to the same request: the same translations (and scores, n-best lists, status,
    metadata)."""
    import re
    import shlex

    client = RestClient(f"http://127.0.0.1:{served.rest_port}", "gnmt", timeout=120)
    commands = doc_commands(os.path.join(ROOT, "docs", "serving.md"), "curl ")
    assert len(commands) >= 7
    kinds = set()
    for command in commands:
        command = command.replace("localhost:8501", f"127.0.0.1:{served.rest_port}")
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (command, done.stderr)
        answer = json.loads(done.stdout)
        words = shlex.split(command)
        url = next(word for word in words if word.startswith("http"))
        version = re.search(r"/versions/(\d+)", url)
        version = int(version.group(1)) if version else None
        if not url.endswith(":predict"):  # status and metadata
            expected = client.metadata(version) if url.endswith("/metadata") else {
                "model_version_status": client.status(version)}
            assert answer == expected, command
            if "model_version_status" in answer:
                assert [entry["state"] for entry in answer["model_version_status"]] == ["AVAILABLE"]
            kinds.add(url.rsplit("/", 1)[-1])
            continue
        body = json.loads(words[words.index("-d") + 1])
        signature = body.get("signature_name", "serving_default")
        inputs = body.get("inputs", {"sentences": body.get("instances")})
        sentences = inputs["sentences"]
        options = {name: inputs[name] for name in ("alpha", "beta", "beamsize") if name in inputs}
        kinds.add(signature)
        if signature == "translate_nbest":
            expected = client.translate_nbest(sentences, version=version, **options)
            assert answer["outputs"]["translations"] == [[e.text for e in entries] for entries in expected]
            assert answer["outputs"]["scores"] == [[pytest.approx(e.score, abs=1e-5) for e in entries]
                                                   for entries in expected]
            continue
        expected = client.translate(sentences, version=version, **options)
        assert all(e.text for e in expected), expected  # translations present
        if "instances" in body:
            got = [(p["translations"], p["scores"]) for p in answer["predictions"]]
        else:
            got = list(zip(answer["outputs"]["translations"], answer["outputs"]["scores"]))
        assert got == [(e.text, pytest.approx(e.score, abs=1e-5)) for e in expected], command
    assert {"serving_default", "translate_with_options", "translate_nbest", "gnmt", "metadata"} <= kinds
