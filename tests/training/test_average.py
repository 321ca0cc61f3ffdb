"""Checkpoint averaging: python -m gnmt_tf.average, and the averaged checkpoint everywhere a model is used."""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf import model_files
from gnmt_tf.cli.average import average_checkpoints, main as average_main


@pytest.fixture
def model_copy(trained_number_model, tmp_path):
    """A private copy of the fixture model (averaging writes into the model directory)."""
    model_dir, _ = trained_number_model
    copy = str(tmp_path / "model")
    shutil.copytree(model_dir, copy)
    return copy


def test_average_is_the_numpy_mean_of_the_checkpoints(model_copy):
    path, sources = average_checkpoints(model_copy, last=2, log=lambda m: None)
    assert len(sources) == 2 and sources[0] != sources[1]
    averaged = tf.train.load_checkpoint(path)
    readers = [tf.train.load_checkpoint(p) for p in sources]
    names = [name for name, _ in tf.train.list_variables(path) if name.startswith("model/")
             and not name.endswith(".OPTIMIZER_SLOT") and "clip_delta" not in name]
    assert len(names) > 10
    differing = 0
    for name in names:
        values = [reader.get_tensor(name) for reader in readers]
        differing += int(not np.array_equal(values[0], values[1]))
        np.testing.assert_allclose(averaged.get_tensor(name), np.mean(values, axis=0), rtol=1e-6, atol=1e-7)
    assert differing > 10  # the checkpoints really differ, so the mean is not one of them
    # delta: the newest checkpoint's, not averaged.
    delta_name = next(name for name, _ in tf.train.list_variables(path) if "clip_delta" in name)
    assert averaged.get_tensor(delta_name) == readers[-1].get_tensor(delta_name)


def test_averaged_model_loads_translates_and_exports(model_copy, tmp_path, capsys):
    assert average_main(["--model-dir", model_copy, "--last", "2"]) == 0
    assert "averaged 2 checkpoints" in capsys.readouterr().out
    model, tokenizer, _ = model_files.load_model_dir(model_copy, which="averaged")
    from gnmt_tf.inference.translator import Translator

    assert Translator(model, tokenizer).translate(["one two three"]) == ["un deux trois"]

    from gnmt_tf.cli import evaluate
    from gnmt_tf.cli import translate

    source = tmp_path / "in.txt"
    source.write_text("one two\nseven\n", encoding="utf-8")
    output = tmp_path / "out.txt"
    assert translate.main(["--model-dir", model_copy, "--checkpoint", "averaged", "--input", str(source),
                           "--output", str(output)]) == 0
    assert output.read_text(encoding="utf-8").splitlines() == ["un deux", "sept"]
    assert evaluate.main(["--model-dir", model_copy, "--checkpoint", "averaged",
                          "--test", model_files.dev_split_path(model_copy), "--json"]) == 0
    assert '"bleu"' in capsys.readouterr().out

    from export.exporters import ExportRequest, export

    target = export(ExportRequest(model_dir=model_copy, output=str(tmp_path / "gnmt"), checkpoint="averaged",
                                  log=lambda m: None), "saved_model")
    assert os.path.exists(os.path.join(target, "saved_model.pb"))


def test_average_errors(model_copy, tmp_path, capsys):
    assert average_main(["--model-dir", model_copy, "--last", "9"]) == 2
    assert "fewer than --last 9" in capsys.readouterr().err
    assert average_main(["--model-dir", str(tmp_path / "nothing"), "--last", "2"]) == 2
    assert "not found" in capsys.readouterr().err
    with pytest.raises(model_files.ModelDirError, match="no averaged checkpoint"):
        model_files.load_model_dir(model_copy, which="averaged")
