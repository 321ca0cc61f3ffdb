"""The model directory (gnmt_tf.model_files): the dev split, best_bleu.txt, and build_model."""

import os

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf import model_files
from gnmt_tf.config import load_config
from gnmt_tf.data import read_tsv


def test_dev_split_round_trip(tmp_path):
    model_dir = str(tmp_path)
    pairs = [
        ("one two", "un deux"),
        ("  Open\tthe\nfile ", "Ouvrir  le\r\nfichier"),  # a catalog string: tabs and newlines inside
        ("word " * 1500, "mot"),  # longer than read_tsv's default word limit
        ("é à ⁇", "ü"),
    ]
    path = model_files.write_dev_split(model_dir, pairs)
    assert path == os.path.join(model_dir, "dev.tsv") == model_files.dev_split_path(model_dir)
    expected = [(" ".join(source.split()), " ".join(target.split())) for source, target in pairs]
    assert expected[1] == ("Open the file", "Ouvrir le fichier")
    assert model_files.read_dev_split(model_dir) == expected  # every pair, in order, whitespace folded
    assert [model_files.folded(pair) for pair in pairs] == expected
    # An ordinary TSV file: one line per pair, which read_tsv reads as they were written.
    with open(path, encoding="utf-8") as handle:
        assert handle.read().splitlines() == [f"{source}\t{target}" for source, target in expected]
    assert read_tsv(path, max_words=10**6)[0] == expected
    model_files.write_dev_split(model_dir, pairs[:1])  # replaced whole, nothing left behind
    assert model_files.read_dev_split(model_dir) == expected[:1] and os.listdir(model_dir) == ["dev.tsv"]


def test_the_exporter_reads_the_dev_split_of_the_model_directory(tmp_path):
    from export.exporters import dev_pairs, verification_sentences

    model_dir = str(tmp_path)
    assert not model_files.has_dev_split(model_dir) and dev_pairs(model_dir, 5) == []
    with pytest.raises(model_files.ModelDirError, match="no dev split"):
        model_files.read_dev_split(model_dir)
    model_files.write_dev_split(model_dir, [("a  b", "c"), ("d", "e\tf"), ("g", "h")])
    assert dev_pairs(model_dir, 2) == [("a b", "c"), ("d", "e f")]
    assert verification_sentences(model_dir, 5) == ["a b", "d", "g", "", "a"]


def test_best_bleu_round_trip(tmp_path):
    model_dir = str(tmp_path)
    os.makedirs(model_files.best_dir(model_dir))
    assert model_files.read_best_bleu(model_dir) is None
    best = model_files.BestBleu(score=23.456789012, step=1200, signature="nrefs:1|case:mixed|eff:no|tok:13a|version:2")
    model_files.write_best_bleu(model_dir, best)
    assert model_files.read_best_bleu(model_dir) == best
    assert os.listdir(model_files.best_dir(model_dir)) == ["best_bleu.txt"]
    better = model_files.BestBleu(30.0, 1400, best.signature)
    model_files.write_best_bleu(model_dir, better)
    assert model_files.read_best_bleu(model_dir) == better
    with open(os.path.join(model_files.best_dir(model_dir), "best_bleu.txt"), "w", encoding="utf-8") as handle:
        handle.write("not a number\n")
    assert model_files.read_best_bleu(model_dir) is None  # unreadable: as if there were none


def test_build_model_restores_every_weight_and_refuses_another_network(tmp_path):
    config = load_config("tiny", overrides={"model.vocab_size": 40})
    trained = model_files.build_model(config)
    rng = np.random.default_rng(0)
    trained.set_weights([rng.normal(size=w.shape).astype(w.dtype) for w in trained.get_weights()])
    trained.set_clip_delta(3.5)
    path = tf.train.Checkpoint(model=trained).save(str(tmp_path / "ckpt"))

    restored = model_files.build_model(config, path)
    assert restored.built and model_files.model_delta(restored) == 3.5
    for expected, got in zip(trained.get_weights(), restored.get_weights()):
        np.testing.assert_array_equal(got, expected)
    fresh = model_files.build_model(config)  # no checkpoint: initial weights, the config's delta
    assert model_files.model_delta(fresh) == config.model.clip_delta
    assert not np.array_equal(fresh.get_weights()[0], trained.get_weights()[0])
    deeper = config.replace(**{"model.encoder_layers": config.model.encoder_layers + 1})
    with pytest.raises(AssertionError):  # the extra layer's weights are not in the checkpoint
        model_files.build_model(deeper, path)
