"""An ensemble behind the Translator and the command lines: loading, the translator's precomputed and
int8 paths, and the refusals.

The fixture model keeps two checkpoints (600 and 700 steps), two models with one vocabulary.
"""

import shutil

import numpy as np
import pytest
from helpers import run_in_process

from gnmt_tf import model_files
from gnmt_tf.inference.evaluation import load_translator
from gnmt_tf.inference.translator import Translator
from gnmt_tf.models.ensemble import Ensemble
from gnmt_tf.quantization import Int8Weights
from gnmt_tf.vocab import BOS_ID, EOS_ID

pytestmark = pytest.mark.draws_nothing_random

SENTENCES = ["three one four", "nine nine", "two five eight nine", "seven six five four three", "", "one"]


def nbest(translator, sentences=SENTENCES):
    return [[(t.text, t.score, t.log_prob) for t in entries]
            for entries in translator.translate_nbest(sentences, n_best=2)]


def assert_same_translations(found, expected):
    assert [[text for text, _, _ in entries] for entries in found] == \
        [[text for text, _, _ in entries] for entries in expected]
    for got, want in zip(found, expected):
        np.testing.assert_allclose([e[1:] for e in got], [e[1:] for e in want], rtol=1e-5, atol=1e-5)


def test_an_ensemble_of_a_model_with_itself_translates_as_the_model(trained_number_model):
    model_dir, _ = trained_number_model
    alone, _, checkpoint = load_translator(model_dir)
    twice, _, checkpoints = load_translator([model_dir, model_dir])
    assert checkpoints == f"{checkpoint} + {checkpoint}"
    assert isinstance(twice.model, Ensemble) and len(twice.model) == 2
    assert_same_translations(nbest(twice), nbest(alone))
    assert [t.text for t in twice.greedy(SENTENCES)] == [t.text for t in alone.greedy(SENTENCES)]


def test_int8_weights_of_an_ensemble_are_those_of_its_models(trained_number_model):
    model_dir, _ = trained_number_model
    model, tokenizer, config = model_files.load_model_dir(model_dir)
    alone = Translator(model, tokenizer, config.decoding, weight_transform=Int8Weights(model),
                       precompute_target_inputs=True)
    ensemble = Ensemble([model, model])
    twice = Translator(ensemble, tokenizer, config.decoding, weight_transform=Int8Weights(ensemble),
                       precompute_target_inputs=True)
    assert_same_translations(nbest(twice), nbest(alone))


def teacher_forced_log_prob(models, source_ids, target_ids):
    """log P(target | source) under the mean-of-log-probabilities ensemble, from the members' full forward
    passes (the training path), combined and normalized in NumPy."""
    target_in = np.concatenate([[BOS_ID], target_ids[:-1]])[None]
    members = []
    for model in models:
        logits = model((source_ids[None], target_in)).numpy()[0].astype(np.float64)
        members.append(logits - np.log(np.exp(logits).sum(-1, keepdims=True)))
    combined = np.mean(members, axis=0)
    combined -= np.log(np.exp(combined).sum(-1, keepdims=True))
    return sum(combined[j, token] for j, token in enumerate(target_ids))


def test_an_ensemble_of_two_checkpoints_scores_as_its_members_combine(trained_number_model):
    """Two different models (the fixture's checkpoints at 600 and 700 steps) through the Translator's
    preprocessing and precomputed target-input tables: forced scoring gives the NumPy combination of the
    members' forward passes."""
    model_dir, _ = trained_number_model
    paths = model_files.newest_checkpoints(model_dir, 2)
    translator, _, checkpoints = load_translator([model_dir] * 2, paths)
    assert checkpoints == " + ".join(paths)
    members = translator.model.members
    assert not np.allclose(members[0].product_kernels()[0].numpy(), members[1].product_kernels()[0].numpy())
    sources, targets = ["three one four", "nine eight"], ["trois un quatre", "neuf huit"]
    scored = translator.score(sources, targets, alpha=0.0, beta=0.0)
    for source, target, translation in zip(sources, targets, scored):
        source_ids = np.append(translator.tokenizer.tokenize(source).numpy(), EOS_ID).astype(np.int32)
        target_ids = np.append(translator.tokenizer.tokenize(target).numpy(), EOS_ID).astype(np.int32)
        assert translation.log_prob == pytest.approx(teacher_forced_log_prob(members, source_ids, target_ids),
                                                     abs=1e-4)
    # Each member alone scores them differently: the ensemble is neither of them.
    alone = [Translator(member, translator.tokenizer).score(sources, targets, alpha=0.0, beta=0.0)
             for member in members]
    assert all(abs(a[0].log_prob - scored[0].log_prob) > 1e-3 for a in alone)


# ----------------------------------------------------------------------------- command lines
def test_the_command_lines_take_several_models_and_the_newest_checkpoints(trained_number_model, tmp_path):
    model_dir, _ = trained_number_model
    test = tmp_path / "test.tsv"
    test.write_text("three one four\ttrois un quatre\nnine nine\tneuf neuf\n", encoding="utf-8")
    last = run_in_process(["python", "-m", "gnmt_tf.evaluate", "--model-dir", model_dir, "--last-checkpoints", "2",
                           "--test", str(test), "--json"])
    assert last.returncode == 0, last.stderr
    assert '"checkpoint": "' + " + ".join(model_files.newest_checkpoints(model_dir, 2)) + '"' in last.stdout
    translate = run_in_process(["python", "-m", "gnmt_tf.translate", "--model-dir", model_dir, "--model-dir",
                                model_dir, "--checkpoint", "best", "--checkpoint", "latest",
                                "--ensemble-rule", "mean_probs"], stdin="three one four\n")
    assert translate.returncode == 0, translate.stderr
    assert translate.stdout.split("\n")[0] == "trois un quatre"


@pytest.mark.parametrize("args,message", [
    (["--checkpoint", "best", "--checkpoint", "latest", "--checkpoint", "best"],
     "give --checkpoint once, or once per --model-dir (2 --model-dir, 3 --checkpoint)"),
    (["--last-checkpoints", "2"], "--last-checkpoints takes one --model-dir and no --checkpoint"),
])
def test_inconsistent_ensemble_options_are_usage_errors(trained_number_model, args, message):
    model_dir, _ = trained_number_model
    done = run_in_process(["python", "-m", "gnmt_tf.translate", "--model-dir", model_dir, "--model-dir", model_dir,
                           *args], stdin="one\n")
    assert done.returncode == 2 and message in done.stderr, done.stderr


def test_models_with_different_vocabularies_are_refused_naming_both(trained_number_model, tmp_path):
    model_dir, _ = trained_number_model
    other = str(tmp_path / "other")
    shutil.copytree(model_dir, other)
    path = model_files.wordpieces_path(other)
    with open(path, encoding="utf-8") as handle:
        lines = handle.readlines()
    lines[-2], lines[-3] = lines[-3], lines[-2]  # two pieces trade ids: same size, another vocabulary
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(lines)
    done = run_in_process(["python", "-m", "gnmt_tf.translate", "--model-dir", model_dir, "--model-dir", other],
                          stdin="one\n")
    assert done.returncode == 2
    assert f"{model_dir} and {other} cannot translate as one ensemble" in done.stderr
