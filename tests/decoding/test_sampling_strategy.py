"""RandomSampling: frequencies against the softmax derived in NumPy, row order, stopping at
EOS or WITHOUT EOS at the limit; and RL's sample_outputs on a real tiny GNMT."""

import itertools
import math

import numpy as np
import tensorflow as tf

from gnmt_tf.decoding import RandomSampling, decode
from gnmt_tf.models.gnmt import GNMT
from gnmt_tf.training.reinforce import sample_outputs
from gnmt_tf.vocab import BOS_ID, EOS_ID, PAD_ID
from helpers import tiny_model_config

V = 6  # 0 PAD, 1 BOS, 2 EOS, 3 UNK, 4 "A", 5 "B"
WORDS = (3, 4, 5)


def table_step_fn(logits_table, source_len):
    logits_table = tf.constant(logits_table, tf.float32)

    def step(state, tokens):
        return tf.gather(logits_table, tokens), tf.zeros([tf.shape(tokens)[0], source_len]), state

    return step


def sample(logits_table, lengths, num_samples, ratio, seed=None):
    width = max(lengths)
    mask = np.arange(width)[None, :] < np.array(lengths)[:, None]
    step = table_step_fn(logits_table, width)
    return decode(step, {"row": tf.zeros([len(lengths)])}, mask, RandomSampling(num_samples, seed=seed),
                  max_length_ratio=ratio).numpy()


def sampling_probability(logits_table, output):
    """P(output) by hand: each token from the softmax renormalised over every token but PAD/BOS."""
    probability, fed = 1.0, BOS_ID
    for token in output:
        row = np.exp(logits_table[fed].astype(np.float64))
        row[[PAD_ID, BOS_ID]] = 0.0
        probability *= row[token] / row.sum()
        fed = token
    return probability


def every_output(limit):
    """Outputs that end with EOS within ``limit`` tokens, or stop at ``limit`` words without it."""
    outputs = [prefix + (EOS_ID,) for n in range(limit) for prefix in itertools.product(WORDS, repeat=n)]
    return outputs + list(itertools.product(WORDS, repeat=limit))


def test_sample_frequencies_follow_the_softmax_without_pad_and_bos():
    rng = np.random.default_rng(3)
    logits = rng.normal(0.0, 1.0, (V, V))
    logits[:, [PAD_ID, BOS_ID]] = 2.0  # likely under the plain softmax, impossible for the sampler
    limit = 3  # a source of 2 tokens at ratio 1.5
    outputs = every_output(limit)
    probabilities = np.array([sampling_probability(logits, o) for o in outputs])
    np.testing.assert_allclose(probabilities.sum(), 1.0, atol=1e-9)  # these are all the outputs

    samples = sample(logits, [2] * 500, 40, ratio=1.5, seed=11)  # 20,000 samples
    assert samples.shape[0] == 20000 and samples.shape[1] <= limit
    index = {o: i for i, o in enumerate(outputs)}
    ends = [tuple(int(t) for t in row[row != PAD_ID]) for row in samples]
    for row, end in zip(samples, ends):
        assert np.all(row[len(end):] == PAD_ID)  # PAD only after the end
    counts = np.bincount([index[e] for e in ends], minlength=len(outputs))  # KeyError: an impossible output
    expected = probabilities * len(samples)
    keep = expected >= 5  # the chi-square approximation needs a few expected counts per cell
    observed = np.append(counts[keep], counts[~keep].sum())
    pooled = np.append(expected[keep], expected[~keep].sum())
    chi2 = ((observed - pooled) ** 2 / pooled).sum()
    dof = len(observed) - 1
    assert chi2 < dof + 6 * np.sqrt(2 * dof), (chi2, dof)  # about a 6-sigma bound
    # The bound can fail: sampling from the plain softmax renormalised with PAD/BOS, or forcing
    # EOS at the limit, moves probability mass between cells far beyond it.
    stopped_at_limit = sum(len(e) == limit and e[-1] != EOS_ID for e in ends)
    assert stopped_at_limit > 0.5 * probabilities[-len(WORDS) ** limit:].sum() * len(samples)


def test_rows_are_sentence_major_and_stop_without_eos_at_the_limit():
    logits = np.zeros((V, V))
    logits[:, EOS_ID] = -1e9  # EOS impossible: every sample stops at its limit, without EOS
    lengths, m = [1, 4, 2], 5
    samples = sample(logits, lengths, m, ratio=1.0)
    assert samples.shape == (len(lengths) * m, 4)
    for b, length in enumerate(lengths):
        for k in range(m):
            row = samples[b * m + k]
            assert np.isin(row[:length], WORDS).all() and np.all(row[length:] == PAD_ID)


def test_a_fixed_seed_draws_the_same_samples():
    logits = np.random.default_rng(0).normal(0.0, 1.0, (V, V))
    tf.random.set_seed(5)
    first = sample(logits, [3, 2], 8, ratio=2.0, seed=1)
    tf.random.set_seed(5)
    second = sample(logits, [3, 2], 8, ratio=2.0, seed=1)
    np.testing.assert_array_equal(first, second)


def test_rl_sample_outputs_end_at_eos_or_stop_at_the_limit():
    """reinforce.sample_outputs on a real GNMT: the behaviour RL's estimator relies on."""
    config = tiny_model_config(vocab_size=8, units=8, encoder_layers=1, decoder_layers=2, attention_units=4)
    model = GNMT(config)
    model.build()  # small random weights: a nearly flat softmax, samples of every length
    source = np.array([[4, EOS_ID, PAD_ID, PAD_ID], [5, 6, 7, EOS_ID]], np.int32)
    m, ratio = 50, 1.5
    limits = [math.ceil(ratio * 2), math.ceil(ratio * 4)]  # 3 and 6 tokens
    samples = sample_outputs(model, source, m, max_length_ratio=ratio).numpy()
    assert samples.shape == (2 * m, max(limits))
    kinds = set()
    for row_index, row in enumerate(samples):
        limit = limits[row_index // m]
        length = int(np.sum(row != PAD_ID))
        assert np.all(row[length:] == PAD_ID) and not np.isin(row[:length], [PAD_ID, BOS_ID]).any()
        assert 1 <= length <= limit
        if row[length - 1] == EOS_ID:
            assert EOS_ID not in row[: length - 1]
            kinds.add("eos")
        else:  # no EOS: only at the limit
            assert length == limit and EOS_ID not in row
            kinds.add("limit")
    assert kinds == {"eos", "limit"}  # both ways of ending occur
