"""Refinement with the expected GLEU reward (paper section 5, eq. 8-9).

After maximum-likelihood training, the model is refined on

    O_mixed = alpha * O_ML + O_RL                                   (eq. 9)
    O_RL    = sum_i sum_Y P(Y | X_i) r(Y, Y*_i)                      (eq. 8)

with r the sentence GLEU (:mod:`gnmt_tf.metrics.gleu`). The gradient of O_RL is
estimated, as the paper does, from m outputs sampled from the model for each
source sentence, with the mean reward of those m samples subtracted as a
baseline:

    grad O_RL ~ 1/m sum_k (r(Y_k) - mean_j r(Y_j)) grad log P(Y_k | X)

Because the baseline includes Y_k itself, this estimator's expectation is
(m-1)/m times the true gradient (the subtracted mean correlates with the
sample); it is the paper's estimator, and the factor, 14/15 for m = 15, only
rescales the learning rate. The tests check the estimator against the exact
gradient computed by enumerating every output of a tiny model.

Samples come from the model's softmax inside the graph (the decoding loop over
:meth:`GNMT.step` with :class:`gnmt_tf.decoding.sampling.RandomSampling`), never the
padding or start symbols, until the end-of-sentence symbol or ``rl.max_length_ratio``
times the source length.
They are then re-scored by teacher forcing, so the gradient of their
log-probability comes from one parallel decoder pass rather than from back-
propagating through the sampling loop.

O_ML is eq. 7: the log-likelihood of each reference sentence summed over its
tokens (not the per-token mean of ML training), which is the scale alpha =
0.017 was chosen for against a reward in [0, 1] per sentence.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Mapping, Tuple

import tensorflow as tf

from gnmt_tf.layers.attention import AttentionMemory
from gnmt_tf.layers.weights import FLOAT_READER, WeightReader
from gnmt_tf.config import RLConfig
from gnmt_tf.decoding.sampling import RandomSampling
from gnmt_tf.decoding.search import ban_special_tokens, decode, repeat_rows
from gnmt_tf.models.objectives import REFERENCE_NLL, Batch
from gnmt_tf.training.fine_tuning import NO_OVERRIDES, fine_tuning_config
from gnmt_tf.vocab import BOS_ID, PAD_ID

RewardFunction = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]

# Added to the logits of symbols a sentence never contains (padding, start); exp() of it is 0.
_BANNED_LOGIT = -1e9


def repeat_memory(memory: AttentionMemory, times: int) -> AttentionMemory:
    """Each sentence's memory ``times`` times in a row: rows b*times .. b*times + times-1."""
    return repeat_rows(memory, times)


def sample_outputs(
    model, source_ids, num_samples: int, max_length_ratio: float = 2.0, seed=None,
    weights: WeightReader = FLOAT_READER,
) -> tf.Tensor:
    """``num_samples`` outputs per source sentence, sampled from the model's softmax (read with ``weights``).

    Returns int32 ids [batch * num_samples, T]; rows ``b * num_samples + k`` are the samples
    of sentence b. A sample ends with EOS when the model chose it, or stops without EOS at
    ``ceil(max_length_ratio * source length)`` tokens; PAD follows the end.
    """
    memory = model.encode(tf.convert_to_tensor(source_ids, tf.int32), weights, training=False)
    step = functools.partial(model.step, weights=weights)
    return decode(step, model.initial_state(memory), memory.mask, RandomSampling(num_samples, seed=seed),
                  max_length_ratio)


def teacher_forcing_inputs(output_ids: tf.Tensor) -> tf.Tensor:
    """Decoder inputs for outputs [N, T] (PAD after the end): BOS, then each output token but the last."""
    output_ids = tf.convert_to_tensor(output_ids, tf.int32)
    shifted = tf.concat([tf.fill([tf.shape(output_ids)[0], 1], BOS_ID), output_ids[:, :-1]], axis=1)
    return tf.where(tf.equal(output_ids, PAD_ID), PAD_ID, shifted)


def sequence_log_probs(
    model, memory: AttentionMemory, output_ids, training=None, sampling_distribution: bool = False,
    weights: WeightReader = FLOAT_READER,
) -> tf.Tensor:
    """log P(Y | X) [N] of whole outputs [N, T] (PAD after the end), by teacher forcing.

    ``sampling_distribution`` scores under the distribution :func:`sample_outputs` draws
    from (PAD and BOS impossible); otherwise under the plain softmax, as in eq. 7.
    """
    output_ids = tf.convert_to_tensor(output_ids, tf.int32)
    inputs = teacher_forcing_inputs(output_ids)
    logits, _ = model.decoder(
        model.embed_target(inputs, weights),
        mask=tf.not_equal(inputs, PAD_ID),
        memory=memory,
        weights=weights,
        training=training,
    )
    if sampling_distribution:
        logits = ban_special_tokens(logits, banned_value=_BANNED_LOGIT)
    token_log_probs = -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=output_ids, logits=logits)
    real = tf.cast(tf.not_equal(output_ids, PAD_ID), token_log_probs.dtype)
    return tf.reduce_sum(token_log_probs * real, axis=1)


class MixedObjective:
    """RL refinement's objective: O_mixed of eq. 9, with the sampled estimator of eq. 8.

    Pass it to ``model.compile(optimizer=..., objective=MixedObjective(...))``; the
    shared ``GNMT.train_step`` minimises its :meth:`loss` with the compiled optimizer
    (plain SGD for refinement). See :mod:`gnmt_tf.models.objectives`.

    Args:
        config: the ``rl`` section (samples m, alpha, length limit).
        reward: ``(output_ids [N, T], reference_ids [N, T']) -> [N]`` rewards in [0, 1]; ids
            end at EOS or padding (see :func:`gnmt_tf.metrics.gleu.reward_function`).
    """

    def __init__(self, config: RLConfig, reward: RewardFunction):
        self.config = config
        self.reward = reward

    def loss(self, model, batch: Batch, training=True,
             weights: WeightReader = FLOAT_READER) -> Tuple[tf.Tensor, Dict]:
        """The minimised loss, -O_mixed averaged over the batch's sentences, and what to log.

        Logs: the mean ``reward`` of the samples, ``ml_loss`` (-O_ML per sentence, eq. 7),
        ``sample_length`` (mean tokens per sample) and the references' per-token negative
        log-likelihood (perplexity). Sampling runs first, outside any gradient; then one
        encoder pass serves both terms.
        """
        m = self.config.samples
        source_ids = tf.convert_to_tensor(batch.source_ids, tf.int32)
        target_output_ids = tf.convert_to_tensor(batch.target_output_ids, tf.int32)
        samples = tf.stop_gradient(sample_outputs(model, source_ids, m, self.config.max_length_ratio,
                                                  weights=weights))
        references = tf.repeat(target_output_ids, m, axis=0)
        rewards = tf.stop_gradient(tf.cast(self.reward(samples, references), tf.float32))
        per_sentence = tf.reshape(rewards, [-1, m])
        advantages = tf.reshape(per_sentence - tf.reduce_mean(per_sentence, axis=1, keepdims=True), [-1])

        memory = model.encode(source_ids, weights, training=training)
        sample_log_probs = sequence_log_probs(
            model, repeat_memory(memory, m), samples, training=training, sampling_distribution=True,
            weights=weights,
        )
        reference_log_probs = sequence_log_probs(model, memory, target_output_ids, training=training,
                                                 weights=weights)

        o_rl = tf.reduce_mean(advantages * sample_log_probs)  # eq. 8 per sentence, its gradient's estimate
        o_ml = tf.reduce_mean(reference_log_probs)  # eq. 7 per sentence
        loss = -(self.config.ml_weight * o_ml + o_rl)
        target_tokens = tf.reduce_sum(tf.cast(tf.not_equal(target_output_ids, PAD_ID), tf.float32))
        logs = {
            "reward": tf.reduce_mean(rewards),
            "ml_loss": -o_ml,
            REFERENCE_NLL: -tf.reduce_sum(reference_log_probs) / tf.maximum(target_tokens, 1.0),
            "sample_length": tf.reduce_mean(tf.reduce_sum(tf.cast(tf.not_equal(samples, PAD_ID), tf.float32), 1)),
        }
        return loss, logs


def expected_reward(model, source_ids, reference_ids, reward: RewardFunction, num_samples: int,
                    max_length_ratio: float = 2.0, weights: WeightReader = FLOAT_READER) -> tf.Tensor:
    """Monte-Carlo estimate of E_{Y~P(.|X)} r(Y, Y*) per sentence [batch] (the quantity eq. 8 sums)."""
    samples = sample_outputs(model, source_ids, num_samples, max_length_ratio, weights=weights)
    references = tf.repeat(tf.convert_to_tensor(reference_ids, tf.int32), num_samples, axis=0)
    return tf.reduce_mean(tf.reshape(reward(samples, references), [-1, num_samples]), axis=1)


# The refinement recipe (section 5 gives neither a learning rate nor a step count: "until
# BLEU score on a dev set does not change"). CHOICE: SGD at 0.1, a fifth of the ML phase's
# 0.5, because the sampled gradient of eq. 8 is noisy; the run ends on rl.patience.
RL_LEARNING_RATE = 0.1


def refinement_config(config, overrides: Mapping[str, Any] = NO_OVERRIDES):
    """The config of an RL refinement of a model trained with ``config``.

    The model section is kept but for dropout, which RL refinement does without
    (section 8.3); the training section becomes the recipe: ``objective: rl``, plain
    SGD (``adam_steps: 0``) at ``RL_LEARNING_RATE`` without halvings or a final decay, no quantization-
    aware training, delta fixed at its inference value ``model.clip_delta``; the step
    counter starts from 0 and ``max_steps`` is kept as a bound, the run normally ending
    on ``rl.patience``. ``overrides`` (dotted keys, as ``--set``) are applied last.
    """
    recipe = {"model.dropout": 0.0, "training.objective": "rl", "training.quantization_aware": False}
    return fine_tuning_config(config, RL_LEARNING_RATE, recipe, overrides)
