"""RL refinement (section 5): sampling, the estimator of eq. 8 against the exact gradient,
the mixed objective of eq. 9, patience, and ``python -m gnmt_tf.train --refine rl``."""

import dataclasses
import itertools
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf import model_files
from gnmt_tf.config import RLConfig, load_config
from gnmt_tf.data import read_tsv
from gnmt_tf.metrics.gleu import sentence_gleu
from gnmt_tf.models.gnmt import GNMT
from gnmt_tf.models.objectives import Batch
from gnmt_tf.training.reinforce import (
    MixedObjective,
    expected_reward,
    refinement_config,
    repeat_memory,
    sample_outputs,
    sequence_log_probs,
    teacher_forcing_inputs,
)
from gnmt_tf.vocab import BOS_ID, EOS_ID, PAD_ID
from helpers import tiny_model_config, write_number_training_tsv

# A model small enough that every output it can produce is enumerable: 6 symbols, of which
# it may emit EOS, UNK and two words (never PAD or BOS), and outputs of at most 3 tokens.
SOURCE = np.array([[4, 5, EOS_ID]], np.int32)  # 3 tokens; max_length_ratio 1 -> at most 3 out
REFERENCE = np.array([[4, 5, EOS_ID]], np.int32)
EMITTABLE = (EOS_ID, 3, 4, 5)


def _tiny_model():
    config = tiny_model_config(
        vocab_size=6, units=8, encoder_layers=1, decoder_layers=2, attention_units=4, init_scale=0.6
    )
    model = GNMT(config)
    model.build()
    return model


def _every_output(max_length=3):
    """All outputs of the sampling distribution: ...EOS within max_length, or max_length words."""
    words = [t for t in EMITTABLE if t != EOS_ID]
    outputs = []
    for length in range(1, max_length + 1):
        for prefix in itertools.product(words, repeat=length - 1):
            outputs.append(list(prefix) + [EOS_ID])
    outputs += [list(p) for p in itertools.product(words, repeat=max_length)]  # stopped at the limit
    return np.array([o + [PAD_ID] * (max_length - len(o)) for o in outputs], np.int32)


def _exact_log_probs(model, outputs):
    memory = repeat_memory(model.encode(SOURCE), len(outputs))
    return sequence_log_probs(model, memory, outputs, sampling_distribution=True)


def test_teacher_forcing_inputs_shift_outputs_and_keep_padding():
    outputs = np.array([[7, 8, EOS_ID, PAD_ID], [9, 6, 5, 4]], np.int32)  # the second stopped at the limit
    np.testing.assert_array_equal(
        teacher_forcing_inputs(outputs).numpy(), [[BOS_ID, 7, 8, PAD_ID], [BOS_ID, 9, 6, 5]]
    )


def test_enumerated_outputs_are_the_whole_sampling_distribution():
    model = _tiny_model()
    probs = np.exp(_exact_log_probs(model, _every_output()).numpy())
    assert len(probs) == 1 + 3 + 9 + 27
    np.testing.assert_allclose(probs.sum(), 1.0, atol=1e-5)


def test_samples_follow_the_model_distribution():
    """Frequencies of 30,000 samples against the enumerated probabilities (a chi-square bound)."""
    model = _tiny_model()
    outputs = _every_output()
    probs = np.exp(_exact_log_probs(model, outputs).numpy())
    samples = sample_outputs(model, np.repeat(SOURCE, 2000, axis=0), 15, max_length_ratio=1.0).numpy()
    assert samples.shape == (30000, 3)
    assert not np.isin(samples, [BOS_ID]).any()
    index = {tuple(o): i for i, o in enumerate(outputs)}
    counts = np.bincount([index[tuple(s)] for s in samples], minlength=len(outputs))  # KeyError: impossible output
    expected = probs * len(samples)
    keep = expected >= 5  # the chi-square approximation needs a few expected counts per cell
    pooled_observed = np.append(counts[keep], counts[~keep].sum())
    pooled_expected = np.append(expected[keep], expected[~keep].sum())
    chi2 = ((pooled_observed - pooled_expected) ** 2 / np.maximum(pooled_expected, 1e-9)).sum()
    dof = len(pooled_observed) - 1
    assert chi2 < dof + 6 * np.sqrt(2 * dof), (chi2, dof)  # about a 6-sigma bound


def test_sampled_estimator_matches_the_exact_gradient_of_the_expected_reward():
    """Eq. 8: the mean of the sampled estimator against sum_Y grad P(Y) r(Y), enumerated.

    With the baseline the mean reward of the m samples (the sample itself included) the
    estimator's expectation is (m-1)/m times the exact gradient (see gnmt_tf.training.reinforce).
    """
    model = _tiny_model()
    m = 15
    outputs = _every_output()
    rewards = sentence_gleu(outputs, np.repeat(REFERENCE, len(outputs), axis=0)).numpy()
    assert rewards.max() == 1.0 and rewards.min() == 0.0  # the reward really varies
    with tf.GradientTape() as tape:
        expected = tf.reduce_sum(tf.exp(_exact_log_probs(model, outputs)) * rewards)
    exact = tf.concat([tf.reshape(g, [-1]) for g in tape.gradient(expected, model.trainable_variables)], 0).numpy()

    objective = MixedObjective(RLConfig(samples=m, ml_weight=0.0, max_length_ratio=1.0), sentence_gleu)
    sources = np.repeat(SOURCE, 400, axis=0)  # 6,000 samples per estimate
    target_in = np.repeat([[BOS_ID, 4, 5]], 400, axis=0).astype(np.int32)
    target_out = np.repeat(REFERENCE, 400, axis=0)

    # Run eagerly: tracing the sampling loop into a graph costs more than twice the twelve estimates.
    def estimate():
        with tf.GradientTape() as tape:
            loss, _ = objective.loss(model, Batch(sources, target_in, target_out))
            o_rl = -loss  # alpha = 0
        gradients = tape.gradient(o_rl, model.trainable_variables)
        return tf.concat([tf.reshape(g, [-1]) for g in gradients], 0)

    estimates = np.stack([estimate().numpy() for _ in range(12)])
    target = (m - 1) / m * exact
    direction = exact / np.linalg.norm(exact)
    projections = estimates @ direction
    standard_error = projections.std(ddof=1) / np.sqrt(len(projections))
    assert abs(projections.mean() - target @ direction) < 4 * standard_error + 1e-6, (
        projections.mean(), target @ direction, standard_error)
    mean = estimates.mean(axis=0)
    cosine = mean @ exact / (np.linalg.norm(mean) * np.linalg.norm(exact))
    assert cosine > 0.99, cosine
    # Measured: 1% apart; the bound still tells (m-1)/m from 1 (a 6.7% difference) along the
    # gradient through the projection test above, whose standard error is about 0.5%.
    assert np.linalg.norm(mean - target) < 0.1 * np.linalg.norm(target)


def test_mixed_objective_is_alpha_times_ml_plus_rl(rng):
    """With every reward equal the RL term vanishes (zero advantages): the loss is -alpha * O_ML."""
    model = GNMT(tiny_model_config())
    model.build()
    from helpers import copy_task

    source, target_in, target_out = copy_task(rng, 4, model.model_config.vocab_size)
    objective = MixedObjective(RLConfig(samples=3, ml_weight=0.25), lambda h, r: tf.ones([tf.shape(h)[0]]))
    loss, logs = objective.loss(model, Batch(source, target_in, target_out))
    logits = model((source, target_in)).numpy()
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, target_out[..., None], -1)[..., 0] * (target_out != PAD_ID)
    o_ml = picked.sum(axis=1).mean()  # eq. 7: summed over each sentence's tokens
    np.testing.assert_allclose(loss.numpy(), -0.25 * o_ml, rtol=1e-5)
    np.testing.assert_allclose(logs["reward"].numpy(), 1.0)


def test_refinement_config_is_the_paper_recipe():
    base = load_config("tiny", overrides={"model.dropout": 0.3, "training.quantization_aware": True,
                                          "training.final_decay_fraction": 0.3})
    config = refinement_config(base, {"rl.samples": 4})
    t = config.training
    assert t.final_decay_fraction is None  # the recipe's rate is constant, whatever the model was trained with
    assert config.model.dropout == 0.0  # no dropout in RL refinement (section 8.3)
    assert t.objective == "rl" and t.adam_steps == 0 and t.decay_count == 0 and not t.quantization_aware
    assert t.delta_start == config.model.clip_delta and t.delta_anneal_steps == 0
    assert config.rl.samples == 4 and config.rl.ml_weight == 0.017  # eq. 9's alpha by default
    with pytest.raises(Exception, match="rl.samples"):
        refinement_config(base, {"rl.samples": 1})


def test_patience_stops_the_run_after_evaluations_without_a_better_bleu():
    """DevEvaluation stops after rl.patience evaluations in a row without a better dev BLEU.

    The counter is the real one (BestScore, as DevEvaluator.evaluate adds each dev BLEU to it);
    only the dev BLEU scores are given.
    """
    from types import SimpleNamespace

    from gnmt_tf.training.callbacks import BestScore, DevEvaluation, RunControl

    def run(scores, patience, best=None, every=2, steps=20):
        control, record, evaluated = RunControl(steps, None, lambda: ""), BestScore(best), []
        scores = iter(scores)

        def evaluate(step):  # as DevEvaluator.evaluate: evaluate, add the BLEU to the record
            evaluated.append(step)
            record.add(next(scores))

        model = SimpleNamespace(stop_training=False,
                                optimizer=SimpleNamespace(iterations=tf.Variable(0, dtype=tf.int64)))
        callback = DevEvaluation(evaluate, record, every=every, control=control, patience=patience)
        callback.set_model(model)
        for step in range(1, steps + 1):
            model.optimizer.iterations.assign(step)
            callback.on_train_batch_end(step)
            if model.stop_training:
                break
        return evaluated, record, control

    # 1, 3 (best), 2, 3 (not better): two evaluations without improvement stop the run at step 8.
    evaluated, record, control = run([1.0, 3.0, 2.0, 3.0, 5.0], patience=2)
    assert evaluated == [2, 4, 6, 8] and record.best == 3.0 and record.evaluations_since_best == 2
    assert control.stop_reason == "dev BLEU did not improve in 2 evaluations (rl.patience)"
    # An improvement resets the count: 1, 2 (no: 1), 4 (best), 3, 3 -> stops at the fifth.
    evaluated, record, _ = run([1.0, 0.5, 4.0, 3.0, 3.0, 9.0], patience=2)
    assert evaluated == [2, 4, 6, 8, 10] and record.best == 4.0
    # A resumed run compares against the best it kept (best/best_bleu.txt): 4.0 is not better than 4.5,
    # nor is 4.5 itself (it takes best/, as every tie does, but is no improvement).
    evaluated, record, _ = run([4.0, 4.5, 6.0], patience=2, best=4.5)
    assert evaluated == [2, 4] and record.best == 4.5
    # What add says: whether the weights become best/ (ties included).
    record = BestScore(2.0)
    assert [record.add(s) for s in (1.0, 2.0, 3.0, 3.0)] == [False, True, True, True]
    assert record.best == 3.0 and record.evaluations_since_best == 1
    # Without a patience (maximum-likelihood training) the run goes on.
    evaluated, record, control = run([5.0] + [1.0] * 9, patience=None)
    assert len(evaluated) == 10 and control.stop_reason is None and record.evaluations_since_best == 9


def test_rl_patience_ends_a_trainer_run_and_a_resumed_run_keeps_its_best_bleu(tmp_path):
    """The wiring of the test above in the real Trainer: an RL run (tiny model, dev BLEU every 2 steps,
    rl.patience 1) stops at its first evaluation without a better dev BLEU, and a Trainer resumed from
    its checkpoint compares its dev BLEU with the best the run kept (best/best_bleu.txt), not with none.

    The dev references are Greek, which the number task's vocabulary cannot write: every dev BLEU is 0,
    whatever the model, so only a run's first evaluation is an improvement; each later one equals the
    best and takes best/ (BestScore: ties go to the later weights) without resetting the patience. The
    resumed Trainer evaluates once instead of training on: the record its evaluations go to is the one
    the run's patience reads (the first run stops only through it), and retracing the RL step for a
    second run would double the test's time.
    """
    from gnmt_tf.data.tokenizer import WordpieceTokenizer
    from gnmt_tf.training.trainer import Trainer
    from helpers import SHALLOW, number_word_pairs

    train_pairs = number_word_pairs(200, seed=1, min_len=1)
    dev_pairs = [(source, "μηδέν ένα δύο") for source, _ in number_word_pairs(4, seed=2)]
    tokenizer = WordpieceTokenizer.learn([s for p in train_pairs for s in p], vocab_size=64, max_characters=60)
    base = load_config("tiny", overrides={
        "model.vocab_size": tokenizer.vocab_size, "model.units": 8, "model.attention_units": 4,
        **SHALLOW, "training.batch_size": 4})
    config = refinement_config(base, {"rl.samples": 2, "rl.patience": 1, "training.eval_every": 2,
                                      "training.checkpoint_every": 2, "training.max_steps": 20})
    model_dir = str(tmp_path / "model")
    model_files.save_metadata(model_dir, config, tokenizer)
    logs = []
    trainer = Trainer(config, model_dir, train_pairs, dev_pairs, tokenizer, log=logs.append, verbose=0)
    result = trainer.train()
    dev_lines = [line for line in logs if "dev BLEU" in line]
    evaluated = [int(line.split(":")[0].split()[1]) for line in dev_lines]
    assert evaluated == [2, 4] and result.step == 4  # 2: the first best; 4: not better, patience 1 is spent
    assert result.stop_reason == "dev BLEU did not improve in 1 evaluations (rl.patience)"
    assert dev_lines[0].endswith("(best so far)"), logs
    assert dev_lines[1].endswith("(equals the best: now best/)"), logs
    best = model_files.read_best_bleu(model_dir)
    assert (best.score, best.step) == (0.0, 4)  # the tie at step 4 took best/
    assert model_files.find_checkpoint(model_dir, "latest").endswith("ckpt-4")

    # Resumed: its dev BLEU (0 again) does not beat the kept 0.0, which is one evaluation without a
    # better BLEU, patience 1 spent; a Trainer that forgot the best would count an improvement at step 4.
    resumed = Trainer(config, model_dir, train_pairs, dev_pairs, tokenizer, log=logs.append, verbose=0)
    assert resumed.step == 4 and resumed.best_bleu == 0.0
    resumed.dev.evaluate(resumed.step)
    assert resumed.dev.record.evaluations_since_best == 1
    assert logs[-1].endswith("(equals the best: now best/)")
    assert model_files.read_best_bleu(model_dir) == best
    assert model_files.find_checkpoint(model_dir, "best").endswith("-4")


# ------------------------------------------------------------------------------ end to end
def _train_main(*args):
    from gnmt_tf.cli.train import main

    return main(list(args))


def _held_out_expected_gleu(model_dir, which, pairs, samples=20):
    """Mean sampled GLEU on held-out pairs (eq. 8's expected reward), with a fixed seed."""
    model, tokenizer, config = model_files.load_model_dir(model_dir, which=which)
    model.set_clip_delta(config.model.clip_delta)
    pieces = tokenizer.tokenize([source for source, _ in pairs])
    source = tf.concat([pieces, tf.fill([pieces.nrows(), 1], EOS_ID)], axis=1).to_tensor()
    reference = tokenizer.tokenize([target for _, target in pairs]).to_tensor()
    tf.random.set_seed(7)
    return float(tf.reduce_mean(expected_reward(model, source, reference, sentence_gleu, samples)))


@pytest.fixture(scope="module")
def rl_refined_number_model(trained_number_model, tmp_path_factory):
    """``--refine rl`` for 20 steps of 8 sentences (one dev evaluation, at the end), from a copy of the
    session's number model with a flat softmax.

    The session's model is nearly perfect (its sampled GLEU is above 0.9), which leaves RL
    nothing to show in a few steps. The start here is that model with its softmax weights
    scaled by 0.4: the same greedy translations, but samples spread over many wrong words
    (sampled GLEU about 0.3), as in an undertrained model. RL must sharpen it again. Batches of 8
    sentences (not the model's 64) cost about half the CPU and raise the held-out GLEU at least as
    much (measured: +0.11 to +0.12 in runs at batch 8 and 16; about +0.08 at 64).
    """
    model_dir, _ = trained_number_model
    work = tmp_path_factory.mktemp("rl")
    init_dir = str(work / "init")
    os.makedirs(init_dir)
    for name in (model_files.CONFIG_FILE, "wordpieces.txt", model_files.DEV_FILE, "test.tsv"):
        shutil.copy(os.path.join(model_dir, name), init_dir)
    model, _, _ = model_files.load_model_dir(model_dir, which="latest")
    softmax = model.decoder.softmax_projection
    softmax.kernel.assign(softmax.kernel * 0.4)
    softmax.bias.assign(softmax.bias * 0.4)
    tf.train.Checkpoint(model=model).save(os.path.join(model_files.checkpoint_dir(init_dir), "ckpt"))
    train_tsv = write_number_training_tsv(work / "train.tsv")  # the fixture's training data
    out_dir = str(work / "out")
    code = _train_main(
        "--refine", "rl", "--init-from", init_dir, "--model-dir", out_dir, "--train", train_tsv,
        "--max-steps", "20", "--set", "training.checkpoint_every=10", "--set", "training.eval_every=20",
        "--set", "rl.samples=8", "--set", "training.batch_size=8", "--quiet",
    )
    return init_dir, out_dir, code


def test_cli_refine_rl_writes_a_normal_model_directory(rl_refined_number_model):
    init_dir, out_dir, code = rl_refined_number_model
    assert code == 0
    model, tokenizer, config = model_files.load_model_dir(out_dir)  # a plain GNMT restores it
    init_config, _ = model_files.load_metadata(init_dir)
    assert config.model == dataclasses.replace(init_config.model, dropout=0.0)
    t = config.training
    assert t.objective == "rl" and t.adam_steps == 0 and t.max_steps == 20 and config.rl.samples == 8
    assert model_files.find_checkpoint(out_dir, "best") and model_files.find_checkpoint(out_dir, "latest").endswith("-20")


def test_rl_refinement_raises_the_expected_gleu_on_held_out_data(rl_refined_number_model):
    init_dir, out_dir, code = rl_refined_number_model
    assert code == 0
    held_out, _ = read_tsv(os.path.join(init_dir, "test.tsv"))  # never trained on
    before = _held_out_expected_gleu(init_dir, "latest", held_out)
    after = _held_out_expected_gleu(out_dir, "latest", held_out)
    assert before < 0.5  # the flattened start really is poor under sampling
    assert after > before + 0.05, (before, after)  # measured: 0.31 -> 0.42 to 0.43 (fixture docstring)


def test_cli_refine_rl_resume_guard(rl_refined_number_model, tmp_path):
    """A QAT fine-tune directory is not resumed as an RL refinement (and vice versa)."""
    init_dir, out_dir, _ = rl_refined_number_model
    assert _train_main("--refine", "qat", "--init-from", init_dir, "--model-dir", out_dir) == 2
