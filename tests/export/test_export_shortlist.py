"""Exports of a model with a vocabulary shortlist: the SavedModel switches it per request (also through the
serving client), TFLite keeps the export's setting, and with it off both translate as the export of the
same model without one."""

import os
import shutil
import sys

import pytest
import tensorflow as tf

from export.exporters import ExportRequest, export
from gnmt_tf import model_files
from helpers import run_in_process, shortlist_excluding

pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test

SENTENCES = ["three one four", "", "nine", "zero zero seven five two one", "one one", "eight six"]
UN = "\u2581un"


@pytest.fixture(scope="module")
def model_without_un(trained_number_model, tmp_path_factory):
    """A copy of the fixture model whose shortlist allows every wordpiece but "▁un"."""
    model_dir, _ = trained_number_model
    copy = str(tmp_path_factory.mktemp("shortlisted") / "model")
    shutil.copytree(model_dir, copy)
    _, tokenizer = model_files.load_metadata(copy)
    model_files.write_shortlist(copy, shortlist_excluding(tokenizer.vocab_size, [tokenizer.pieces.index(UN)]))
    return copy


@pytest.fixture(scope="module")
def saved_model(model_without_un, tmp_path_factory):
    logs = []
    base = str(tmp_path_factory.mktemp("sl") / "gnmt")
    target = export(ExportRequest(model_dir=model_without_un, output=base, log=logs.append), "saved_model")
    return tf.saved_model.load(target), logs, target


def texts(outputs):
    """The "translations" output as str: a list (best translations) or a list of lists (n-best lists)."""
    return [text.decode("utf-8") if isinstance(text, bytes) else [t.decode("utf-8") for t in text]
            for text in outputs["translations"].numpy()]


def test_saved_model_switches_the_shortlist_per_request(saved_model, exported_number_model):
    loaded, logs, _ = saved_model
    assert any("translate identically with the shortlist on and off" in line for line in logs)
    assert set(loaded.signatures) == {"serving_default", "translate_with_options", "translate_nbest",
                                      "translate_with_shortlist", "translate_nbest_with_shortlist"}
    # Existing clients: the signatures they call take the same inputs as before.
    assert set(loaded.signatures["translate_with_options"].structured_input_signature[1]) == {
        "sentences", "alpha", "beta", "beamsize"}
    sentences = tf.constant(SENTENCES)
    options = dict(alpha=tf.constant(0.2), beta=tf.constant(0.2), beamsize=tf.constant(3.0))

    # Off by default (decoding.use_shortlist): the same outputs as the export without a shortlist.
    without = tf.saved_model.load(exported_number_model).signatures["serving_default"](sentences=sentences)
    default = loaded.signatures["serving_default"](sentences=sentences)
    assert texts(default) == texts(without) and texts(default)[0] == "trois un quatre"
    assert default["scores"].numpy().tolist() == without["scores"].numpy().tolist()
    off = loaded.signatures["translate_with_shortlist"](sentences=sentences, use_shortlist=tf.constant(False),
                                                         **options)
    assert texts(off) == texts(loaded.signatures["translate_with_options"](sentences=sentences, **options))

    on = loaded.signatures["translate_with_shortlist"](sentences=sentences, use_shortlist=tf.constant(True),
                                                        **options)
    assert not any("un" in text.split() for text in texts(on))
    assert texts(on)[2] == "neuf" and texts(on)[1] == ""  # sentences without "un" translate as before
    nbest_with_shortlist = loaded.signatures["translate_nbest_with_shortlist"]
    nbest = nbest_with_shortlist(sentences=sentences, use_shortlist=tf.constant(True), **options)
    pieces = [p.decode("utf-8") for p in nbest["target_pieces"].numpy().ravel()]
    assert pieces and UN not in pieces
    plain_nbest = loaded.signatures["translate_nbest"](sentences=sentences, **options)
    assert UN in [p.decode("utf-8") for p in plain_nbest["target_pieces"].numpy().ravel()]


def test_the_serving_client_switches_the_shortlist_per_request(saved_model):
    """REST and gRPC through the local server (in this process): what the signatures answer directly."""
    from serving.client import GrpcClient, RestClient
    from serving.config import single_model_config
    from serving.server import ModelServer

    loaded, _, target = saved_model
    options = dict(alpha=0.2, beta=0.2, beamsize=3.0)
    sentences = tf.constant(SENTENCES)

    # What the signatures answer directly, for each setting: the best translations and the n-best lists.
    direct = {use_shortlist: [texts(loaded.signatures[signature](
        sentences=sentences, use_shortlist=tf.constant(use_shortlist),
        **{name: tf.constant(value) for name, value in options.items()}))
        for signature in ("translate_with_shortlist", "translate_nbest_with_shortlist")]
        for use_shortlist in (True, False)}

    with ModelServer([single_model_config("gnmt", os.path.dirname(target))], port=0, rest_api_port=0,
                     poll_seconds=0, log=lambda message: None) as server, \
            GrpcClient(f"127.0.0.1:{server.grpc_port}", "gnmt", timeout=120) as grpc_client:
        rest_url = f"http://127.0.0.1:{server.rest_api_port}"
        for client in (RestClient(rest_url, "gnmt", timeout=120), grpc_client):
            for use_shortlist in (True, False):
                best, lists = direct[use_shortlist]
                got = client.translate(SENTENCES, use_shortlist=use_shortlist, **options)
                assert [t.text for t in got] == best
                nbest = client.translate_nbest(SENTENCES, use_shortlist=use_shortlist, **options)
                assert [[e.text for e in entries] for entries in nbest] == lists
            assert not any("un" in t.text.split() for t in client.translate(SENTENCES, use_shortlist=True, **options))
            assert "un" in client.translate(SENTENCES, use_shortlist=False, **options)[0].text.split()
        with pytest.raises(ValueError, match="use_shortlist needs alpha, beta and beamsize"):
            grpc_client.translate(["nine"], use_shortlist=True)
        with pytest.raises(TypeError, match="use_shortlist must be True, False or None"):
            grpc_client.translate(["nine"], use_shortlist="yes", **options)

        command = [sys.executable, "-m", "serving.client", "--rest", rest_url, "--model", "gnmt"]
        shortlisted = run_in_process([*command, "--shortlist", "--alpha", "0.2", "--beta", "0.2", "--beamsize", "3"],
                                     "\n".join(SENTENCES) + "\n")
        assert shortlisted.returncode == 0, shortlisted.stderr
        assert shortlisted.stdout.splitlines() == direct[True][0]
        usage = run_in_process([*command, "--no-shortlist"], "nine\n")
        assert usage.returncode == 2 and "need --alpha, --beta and --beamsize" in usage.stderr


def test_tflite_export_keeps_the_exports_setting(model_without_un, tmp_path):
    pytest.importorskip("ai_edge_litert")
    from export.tflite import TFLiteTranslator, custom_ops

    base = str(tmp_path / "gnmt_tflite")
    result = run_in_process([sys.executable, "-m", "export", "--model-dir", model_without_un,
                             "--output", base, "--format", "tflite", "--shortlist"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "on by default" in result.stdout
    assert "checked:" in result.stdout  # translates as the Python translator with the shortlist on
    version = os.path.join(base, "1")
    ops = open(os.path.join(version, "translator.ops.txt"), encoding="utf-8").read().split()
    assert {"SCATTER_ND", "WHERE", "BATCH_MATMUL"} <= set(ops)  # the shortlisted softmax is in there
    assert set(custom_ops(ops)) == {"TFText>WhitespaceTokenizeWithOffsetsV2",
                                    "FastWordpieceTokenizeWithOffsets", "TFText>FastWordpieceDetokenize"}
    tflite = TFLiteTranslator(os.path.join(version, "translator.tflite"))
    translations = [t.text for t in tflite.translate(SENTENCES)]
    assert not any("un" in text.split() for text in translations)
    assert translations[2] == "neuf" and translations[1] == ""


def test_a_shortlist_asked_for_where_there_is_none(trained_number_model, tmp_path):
    model_dir, _ = trained_number_model
    result = run_in_process([sys.executable, "-m", "export", "--model-dir", model_dir, "--output",
                             str(tmp_path / "x"), "--format", "saved_model", "--shortlist"])
    assert result.returncode == 1 and "has no vocabulary shortlist" in result.stderr
    assert not (tmp_path / "x").exists() or not os.listdir(tmp_path / "x")
