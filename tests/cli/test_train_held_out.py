"""python -m gnmt_tf.train's splits: without --dev it holds out a dev and a test split (no variant of a
string in two of them) and keeps both with the model; with --dev it holds out nothing; too few pairs is an
error that says what to do."""

import argparse

import pytest

from gnmt_tf import model_files
from gnmt_tf.cli.train import _held_out_of, _load_data, _write_held_out
from gnmt_tf.config import load_config
from gnmt_tf.data import DataError
from gnmt_tf.data.variants import variant_key


def _args(train, dev=None):
    return argparse.Namespace(train=str(train), dev=dev and str(dev), source_lang="en", target_lang="fr")


def _write(path, pairs):
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    return path


PAIRS = [(f"{mark}Open file number {i}{end}", f"Ouvrir le fichier {i}{end}") for i in range(1500)
         for mark, end in (("", ""), ("_", "…"))]


def test_without_dev_the_run_holds_out_dev_and_test_and_keeps_both(tmp_path, capsys):
    config = load_config("tiny")
    data = _load_data(_args(_write(tmp_path / "pairs.tsv", PAIRS)), config)
    assert len(data.train) + len(data.dev) + len(data.test) == len(PAIRS)
    assert data.dev and len(data.test) == min(config.data.test_max_pairs, len(data.test))
    keys = [{variant_key(source) for source, _ in split} for split in data]
    assert not keys[0] & keys[1] and not keys[0] & keys[2] and not keys[1] & keys[2]
    assert f"{len(data.test):,} as the test split" in capsys.readouterr().out
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    _write_held_out(str(model_dir), data)
    assert model_files.read_dev_split(str(model_dir)) == data.dev
    assert model_files.read_test_split(str(model_dir)) == data.test

    # A fine-tune from that model evaluates on its dev split and trains on neither split.
    tuned = _held_out_of(str(model_dir), PAIRS)
    assert (tuned.dev, tuned.test) == (data.dev, data.test)
    assert sorted(tuned.train) == sorted(data.train)


def test_with_dev_nothing_is_held_out(tmp_path):
    dev = _write(tmp_path / "dev.tsv", PAIRS[:10])
    data = _load_data(_args(_write(tmp_path / "pairs.tsv", PAIRS), dev), load_config("tiny"))
    assert (len(data.train), len(data.dev), data.test) == (len(PAIRS), 10, [])
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    _write_held_out(str(model_dir), data)
    assert not model_files.has_test_split(str(model_dir)) and model_files.read_test_split(str(model_dir)) == []


def test_too_few_pairs_to_hold_out_splits_from_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="too few to hold out a dev and a test split.*--dev"):
        _load_data(_args(_write(tmp_path / "pairs.tsv", PAIRS[:2])), load_config("tiny"))


def test_another_model_can_share_a_models_vocabulary_and_splits(trained_number_model, tmp_path):
    """--vocab-and-splits-from: the new model's wordpieces, dev and test splits are the given model's, it
    trains on none of their pairs, and the two decode as one ensemble."""
    from helpers import SHALLOW_CLI_ARGS, run_in_process, write_number_training_tsv

    from gnmt_tf.inference.evaluation import load_translator

    first, _ = trained_number_model
    train = tmp_path / "train.tsv"
    write_number_training_tsv(str(train))
    dev, test = model_files.read_dev_split(first), model_files.read_test_split(first)
    with open(train, "a", encoding="utf-8") as handle:  # a held-out pair in the data must be left out
        handle.write(f"{dev[0][0]}\t{dev[0][1]}\n{test[0][0]}\t{test[0][1]}\n")
    second = str(tmp_path / "second")
    done = run_in_process(["python", "-m", "gnmt_tf.train", "--config", "tiny", "--train", str(train),
                           "--model-dir", second, "--vocab-and-splits-from", first, "--max-steps", "2",
                           "--quiet", "--set", "training.delta_start=1.0", *SHALLOW_CLI_ARGS])
    assert done.returncode == 0, done.stderr
    assert f"using the vocabulary of {first}" in done.stdout
    with open(train, encoding="utf-8") as handle:
        pairs = [tuple(line.rstrip("\n").split("\t")) for line in handle]
    held = set(dev) | set(test)
    assert f"{sum(pair in held for pair in pairs):,} training pairs found in them are left out" in done.stdout
    for name in (model_files.WORDPIECES_FILE, model_files.DEV_FILE, model_files.TEST_FILE):
        with open(f"{first}/{name}", "rb") as a, open(f"{second}/{name}", "rb") as b:
            assert a.read() == b.read(), name
    translator, _, _ = load_translator([first, second], ["best", "latest"])
    assert len(translator.model.members) == 2
    refused = run_in_process(["python", "-m", "gnmt_tf.train", "--train", str(train), "--dev", str(train),
                              "--vocab-and-splits-from", first, "--model-dir", str(tmp_path / "third")])
    assert refused.returncode == 2 and "cannot be combined with --dev" in refused.stderr
