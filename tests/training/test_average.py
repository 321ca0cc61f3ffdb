"""Checkpoint averaging: python -m gnmt_tf.average, and the averaged checkpoint everywhere a model is used."""

import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf import model_files
from gnmt_tf.cli.average import average_checkpoints, main as average_main
from gnmt_tf.vocab import BOS_ID, EOS_ID, PAD_ID

pytestmark = pytest.mark.draws_nothing_random  # conftest does not reseed before each test


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


def _model_values(path):
    """{name: value} of the model's variables in a checkpoint (not its optimizer's, nor its bookkeeping)."""
    reader = tf.train.load_checkpoint(path)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name.startswith("model/") and not name.endswith(".OPTIMIZER_SLOT")}


def _teacher_forced_log_probs(model, tokenizer, pairs):
    """log P(target | source) of each pair from one teacher-forced forward pass (eq. 7's terms)."""
    source = tokenizer.tokenize([s for s, _ in pairs])
    target = tokenizer.tokenize([t for _, t in pairs])
    column = lambda token: tf.fill([len(pairs), 1], token)  # noqa: E731
    source = tf.concat([source, column(EOS_ID)], axis=1).to_tensor(PAD_ID)
    target_in = tf.concat([column(BOS_ID), target], axis=1).to_tensor(PAD_ID)
    target_out = tf.concat([target, column(EOS_ID)], axis=1).to_tensor(PAD_ID).numpy()
    log_probs = tf.nn.log_softmax(model((source, target_in))).numpy()
    picked = np.take_along_axis(log_probs, target_out[..., None], axis=-1)[..., 0]
    return np.where(target_out != PAD_ID, picked, 0.0).sum(axis=1)


def test_the_averaged_weights_are_the_ones_loaded_used_and_exported(model_copy, tmp_path, capsys):
    """--checkpoint averaged, wherever a model is used, is the mean of the sources (the test above): the
    loaded model holds it bit for bit, a command scores with it (not with the latest checkpoint, whose
    log P differ), and the export holds it bit for bit."""
    assert average_main(["--model-dir", model_copy, "--last", "2"]) == 0
    assert "averaged 2 checkpoints" in capsys.readouterr().out
    averaged = _model_values(model_files.find_checkpoint(model_copy, "averaged"))
    latest = _model_values(model_files.find_checkpoint(model_copy, "latest"))
    assert sum(not np.array_equal(averaged[name], latest[name]) for name in averaged) > 10

    model, tokenizer, _ = model_files.load_model_dir(model_copy, which="averaged")
    loaded = str(tmp_path / "loaded" / "model")
    tf.train.Checkpoint(model=model).write(loaded)
    loaded_values = _model_values(loaded)
    assert sorted(loaded_values) == sorted(averaged)
    assert all(np.array_equal(loaded_values[name], value) for name, value in averaged.items())
    # It translates as the NumPy mean of its sources does: a model given that mean (computed here, in
    # float64 as the formula is, then cast to the variables' float32) searches to the same translations
    # with the same scores. Not a fixed expected text: the average of two checkpoints is not the checked
    # fixture model (tests/number_model.py gates "best" and "latest" alone), so what it translates
    # correctly depends on what training reached, while this comparison holds on any kernels.
    from gnmt_tf.inference.translator import Translator

    config, _ = model_files.load_metadata(model_copy)
    state = tf.train.get_checkpoint_state(model_files.checkpoint_dir(model_copy))
    newest_two = state.all_model_checkpoint_paths[-2:]
    sources = [model_files.build_model(config, path) for path in newest_two]
    reference = model_files.build_model(config)
    mean = [np.mean([np.asarray(s.get_weights()[i], np.float64) for s in sources], axis=0)
            for i in range(len(reference.weights))]
    delta_index = next(i for i, w in enumerate(reference.weights) if w is reference.clip_delta)
    mean[delta_index] = sources[-1].get_weights()[delta_index]  # delta: the newest source's, not averaged
    reference.set_weights([m.astype(w.dtype.as_numpy_dtype) for m, w in zip(mean, reference.weights)])
    dev_sources = [source for source, _ in model_files.read_dev_split(model_copy)]
    ours = Translator(model, tokenizer).translate(dev_sources)
    theirs = Translator(reference, tokenizer).translate(dev_sources)
    assert [t.text for t in ours] == [t.text for t in theirs]
    # Same weights, same kernels: the same scores to float32 rounding (measured: identical). The latest
    # checkpoint's differ by more than 1e-2 (below), 1,000 times this tolerance.
    np.testing.assert_allclose([t.log_prob for t in ours], [t.log_prob for t in theirs], rtol=0, atol=1e-5)

    # The command lines load it with --checkpoint averaged (all through one loader; score shows which
    # weights it used): log P of the averaged model, not of the latest checkpoint.
    pairs = model_files.read_dev_split(model_copy)[:6]
    expected = _teacher_forced_log_probs(model, tokenizer, pairs)
    latest_model, _, _ = model_files.load_model_dir(model_copy, which="latest")
    of_latest = _teacher_forced_log_probs(latest_model, tokenizer, pairs)
    assert np.abs(of_latest - expected).max() > 1e-2, (of_latest, expected)
    from gnmt_tf.cli import score

    input_file, output_file = tmp_path / "pairs.tsv", tmp_path / "scores.tsv"
    input_file.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    assert score.main(["--model-dir", model_copy, "--checkpoint", "averaged", "--input", str(input_file),
                       "--output", str(output_file)]) == 0
    scored = [float(line.split("\t")[1]) for line in output_file.read_text(encoding="utf-8").splitlines()]
    np.testing.assert_allclose(scored, expected, atol=1e-3)

    # The export of --checkpoint averaged holds those very weights (and delta), and no other weights.
    from export.exporters import ExportRequest, export

    target = export(ExportRequest(model_dir=model_copy, output=str(tmp_path / "gnmt"), checkpoint="averaged",
                                  log=lambda m: None), "saved_model")
    reader = tf.train.load_checkpoint(os.path.join(target, "variables", "variables"))
    exported = [reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
                if name != "_CHECKPOINTABLE_OBJECT_GRAPH"]

    def key(array):
        return array.dtype.str, array.shape, array.tobytes()

    exported_keys = {key(array) for array in exported}
    assert all(key(value) in exported_keys for value in averaged.values())
    assert not any(key(value) in exported_keys for name, value in latest.items()
                   if not np.array_equal(value, averaged[name]))


def test_average_errors(model_copy, tmp_path, capsys):
    assert average_main(["--model-dir", model_copy, "--last", "9"]) == 2
    assert "fewer than --last 9" in capsys.readouterr().err
    assert average_main(["--model-dir", str(tmp_path / "nothing"), "--last", "2"]) == 2
    assert "not found" in capsys.readouterr().err
    with pytest.raises(model_files.ModelDirError, match="no averaged checkpoint"):
        model_files.load_model_dir(model_copy, which="averaged")
