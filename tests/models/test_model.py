"""The GNMT Keras model: wiring against NumPy, masking, step API, params, training, saving."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from gnmt_tf import GNMT, SequenceCrossEntropy
from gnmt_tf.config import load_config
from gnmt_tf.layers.recurrence import STEPWISE, WRITTEN_GRADIENT
from gnmt_tf.vocab import PAD_ID
from helpers import copy_task, random_ids, tiny_model_config
from numpy_gnmt import reference_logits


def build(config, weight_scale=None, seed=0):
    model = GNMT(config)
    model.build()
    if weight_scale is not None:  # larger weights so that clipping and saturation are exercised
        rng = np.random.default_rng(seed)
        for w in model.trainable_weights:
            w.assign(rng.uniform(-weight_scale, weight_scale, w.shape).astype(np.float32))
    return model


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"input_feeding": True},
        {"cell": "standard", "forget_bias": 1.0},
        {"encoder_layers": 4, "decoder_layers": 4, "embedding_dim": 12, "logit_clip": 0.3},
    ],
    ids=["paper", "input_feeding", "standard_cell", "deeper_clipped_logits"],
)
def test_forward_matches_numpy_rederivation(overrides):
    model = build(tiny_model_config(**overrides), weight_scale=0.5)
    model.set_clip_delta(0.8)
    rng = np.random.default_rng(1)
    source = random_ids(rng, 3, 6, 64)
    target = random_ids(rng, 3, 5, 64)
    logits, probs = model.forward(source, target, training=False)
    for b in range(3):
        ref_logits, ref_probs = reference_logits(model, source[b], target[b])
        np.testing.assert_allclose(logits.numpy()[b], ref_logits, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(probs.numpy()[b], ref_probs, rtol=1e-4, atol=1e-5)
    if "logit_clip" in overrides:  # the clip of eq. 13 is really reached in this case
        assert np.isclose(np.abs(logits.numpy()).max(), overrides["logit_clip"])


def test_padding_changes_no_real_position():
    model = build(tiny_model_config(input_feeding=True), weight_scale=0.3)
    rng = np.random.default_rng(2)
    source = random_ids(rng, 2, 5, 64)
    source[1, 3:] = PAD_ID  # sentences of different lengths in one batch
    target = random_ids(rng, 2, 4, 64)
    target[1, 2:] = PAD_ID
    base = model((source, target)).numpy()
    padded_source = np.pad(source, ((0, 0), (0, 7)))
    padded_target = np.pad(target, ((0, 0), (0, 3)))
    padded = model((padded_source, padded_target)).numpy()
    np.testing.assert_allclose(padded[0, :4], base[0, :4], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(padded[1, :2], base[1, :2], rtol=1e-5, atol=1e-6)
    # Each sentence alone, unpadded, gives the same logits as inside the padded batch.
    alone = model((source[1:, :3], target[1:, :2])).numpy()
    np.testing.assert_allclose(padded[1, :2], alone[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("input_feeding", [False, True])
def test_step_api_equals_teacher_forcing(input_feeding):
    model = build(tiny_model_config(input_feeding=input_feeding), weight_scale=0.3)
    rng = np.random.default_rng(3)
    source = random_ids(rng, 2, 6, 64)
    source[0, 4:] = PAD_ID
    target = random_ids(rng, 2, 5, 64)
    logits, probs = model.forward(source, target)
    memory = model.encode(source)
    state = model.initial_state(memory)
    for t in range(5):
        step_logits, step_probs, state = model.step(state, target[:, t])
        np.testing.assert_allclose(step_logits.numpy(), logits.numpy()[:, t], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(step_probs.numpy(), probs.numpy()[:, t], rtol=1e-5, atol=1e-6)
    # No attention on padding.
    assert np.all(probs.numpy()[0, :, 4:] == 0.0)


@pytest.mark.parametrize("input_feeding", [False, True])
def test_the_training_recurrence_computes_what_the_stepwise_one_does_with_autodiff_s_gradient(input_feeding):
    """The model's default recurrence (every layer's back-propagation through time written out) gives the
    logits of the step-by-step recurrence a search runs, bit for bit, and the gradient autodiff takes
    through those steps; padded rows and the clip of eq. 10 included."""
    model = build(tiny_model_config(input_feeding=input_feeding), weight_scale=0.5)
    model.set_clip_delta(0.8)
    rng = np.random.default_rng(8)
    source, target = random_ids(rng, 3, 6, 64), random_ids(rng, 3, 5, 64)
    source[1, 3:], target[2, 2:] = PAD_ID, PAD_ID
    upstream = tf.constant(rng.normal(size=(3, 5, 64)).astype(np.float32))
    results = {}
    for name, recurrence in (("written", WRITTEN_GRADIENT), ("stepwise", STEPWISE)):
        with tf.GradientTape() as tape:
            logits, probs = model.forward(source, target, training=False, recurrence=recurrence)
            loss = tf.reduce_sum(logits * upstream)
        results[name] = (logits.numpy(), probs.numpy(), tape.gradient(loss, model.trainable_variables))
    np.testing.assert_array_equal(results["written"][0], results["stepwise"][0])
    np.testing.assert_array_equal(results["written"][1], results["stepwise"][1])
    gradients = {name: [tf.convert_to_tensor(g).numpy() for g in result[2]] for name, result in results.items()}
    for variable, written, stepwise in zip(model.trainable_variables, gradients["written"], gradients["stepwise"]):
        np.testing.assert_allclose(written, stepwise, rtol=1e-5, atol=1e-6, err_msg=variable.name)
        assert np.abs(written).max() > 0, variable.name  # every variable's gradient reached


def test_dropout_acts_in_training_only():
    """Dropout (section 8.3) on every layer's input and the top output: two training passes differ (each
    drops its own units); outside training, passes and decoding steps compute what the same weights
    without dropout compute."""
    with_dropout = build(tiny_model_config(dropout=0.3), weight_scale=0.3)
    without = build(tiny_model_config(dropout=0.0))
    without.set_weights(with_dropout.get_weights())
    rng = np.random.default_rng(5)
    source, target = random_ids(rng, 2, 6, 64), random_ids(rng, 2, 5, 64)
    first, second = (with_dropout((source, target), training=True).numpy() for _ in range(2))
    assert np.abs(first - second).max() > 1e-2
    reference = without((source, target), training=False).numpy()
    for training in (False, None):  # None: as Keras calls a model outside fit
        np.testing.assert_array_equal(with_dropout((source, target), training=training).numpy(), reference)
    memories = [model.encode(source) for model in (with_dropout, without)]
    states = [model.initial_state(memory) for model, memory in zip((with_dropout, without), memories)]
    for t in range(3):
        (logits, attention, states[0]), (logits_0, attention_0, states[1]) = (
            model.step(state, target[:, t]) for model, state in zip((with_dropout, without), states))
        np.testing.assert_array_equal(logits.numpy(), logits_0.numpy())
        np.testing.assert_array_equal(attention.numpy(), attention_0.numpy())


@pytest.mark.parametrize("logit_clip", [25.0, 0.3], ids=["unclipped", "clipped"])
def test_step_with_softmax_columns_computes_only_those_logits(logit_clip):
    """A vocabulary shortlist's step: NumPy's logits (eq. 13, clip included) at the ids given, -inf elsewhere."""
    model = build(tiny_model_config(logit_clip=logit_clip), weight_scale=0.5)
    rng = np.random.default_rng(4)
    source = random_ids(rng, 2, 6, 64)
    target = random_ids(rng, 2, 4, 64)
    output_ids = np.sort(rng.choice(64, size=17, replace=False)).astype(np.int32)
    excluded = np.setdiff1d(np.arange(64), output_ids)
    state = model.initial_state(model.encode(source))
    columns = model.softmax_columns(output_ids)
    assert columns.kernel.shape == (model.model_config.units, 17) and columns.bias.shape == (17,)
    references = [reference_logits(model, source[b], target[b])[0] for b in range(2)]
    for t in range(4):
        logits, _, state = model.step(state, target[:, t], softmax_columns=columns)
        logits = logits.numpy()
        assert logits.shape == (2, 64)
        for b in range(2):
            np.testing.assert_allclose(logits[b, output_ids], references[b][t, output_ids], rtol=1e-4, atol=1e-4)
            assert np.all(logits[b, excluded] == -np.inf)
    if logit_clip < 1:  # eq. 13's clip is really reached among the ids computed
        assert np.isclose(np.abs(logits[:, output_ids]).max(), logit_clip)


def expected_parameter_count(V, H, E, A, enc_layers, dec_layers, input_feeding, direction=None):
    """Derived by hand from section 3: no biases in the paper's cell (eq. 11)."""
    direction = direction or H // 2
    lstm = lambda inputs, units: 4 * units * (inputs + units)  # noqa: E731  W_odd (input) + W_even (recurrent)
    embeddings = 2 * V * E  # separate source and target embeddings
    encoder = 2 * lstm(E, direction)  # bi-directional bottom layer, half the units each way
    encoder += lstm(2 * direction, H) + (enc_layers - 2) * lstm(H, H)
    decoder = lstm(E + (H if input_feeding else 0), H)  # bottom layer
    decoder += (dec_layers - 1) * lstm(H + H, H)  # upper layers read [x; context]
    attention = H * A + H * A + A + A  # W_query, W_key, hidden bias, score vector
    softmax = H * V + V
    return embeddings + encoder + decoder + attention + softmax


def test_paper_config_parameter_count():
    config = load_config("gnmt_wmt14_enfr").model
    hand = expected_parameter_count(32000, 1024, 1024, 1024, 8, 8, input_feeding=False)
    assert hand == 261_915_904  # ~262M; with input feeding ~266M (below)
    # Built in a graph that is never run: the same layers and weight shapes as an eager build, without
    # allocating and initializing the 1 GB of weights.
    with tf.Graph().as_default():
        model = GNMT(config)
        model.build()
    assert model.count_params() - 1 == hand  # minus the non-trainable delta
    assert sum(int(np.prod(w.shape)) for w in model.trainable_weights) == hand
    with_feeding = expected_parameter_count(32000, 1024, 1024, 1024, 8, 8, input_feeding=True)
    assert with_feeding == 266_110_208


def test_small_config_parameter_count_with_input_feeding():
    config = tiny_model_config(input_feeding=True, encoder_layers=4, decoder_layers=4)
    model = GNMT(config)
    model.build()
    hand = expected_parameter_count(64, 32, 32, 16, 4, 4, input_feeding=True)
    assert sum(int(np.prod(w.shape)) for w in model.trainable_weights) == hand
    # A build in a graph (how the paper config is counted above) makes the same weights.
    with tf.Graph().as_default():
        in_graph = GNMT(config)
        in_graph.build()
    assert [w.shape for w in in_graph.weights] == [w.shape for w in model.weights]


def test_initialisation_is_uniform_and_distinct():
    scale = 0.04  # the paper's (section 8.3), not small's own
    model = build(load_config("small", overrides={"model.init_scale": scale}).model)
    seen = set()
    for w in model.trainable_weights:
        values = w.numpy()
        assert np.abs(values).max() <= scale + 1e-7, w.name
        # Uniform on [-s, s] has standard deviation s / sqrt(3).
        assert abs(values.std() - scale / np.sqrt(3)) < 0.1 * scale, w.name
        key = values.ravel()[:8].tobytes()
        assert key not in seen, f"{w.name} starts identical to another weight"
        seen.add(key)


def test_delta_is_shared_by_every_cell_and_residual():
    model = build(tiny_model_config())
    deltas = {id(model.clip_delta)}
    cells = [model.encoder.forward_cell, model.encoder.backward_cell, model.decoder.bottom_cell]
    cells += model.encoder.upper.cells + model.decoder.upper.cells
    deltas |= {id(c.clip_delta) for c in cells}
    deltas |= {id(model.encoder.upper.clip_delta), id(model.decoder.upper.clip_delta)}
    assert len(deltas) == 1
    model.set_clip_delta(3.0)
    assert all(float(c.clip_delta.numpy()) == 3.0 for c in cells)
    assert model.clip_delta in model.non_trainable_weights


def test_tiny_model_learns_a_copy_task():
    config = tiny_model_config()
    model = GNMT(config)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=SequenceCrossEntropy())
    rng = np.random.default_rng(4)
    source, target_in, target_out = copy_task(rng, 256, 20)
    history = model.fit((source, target_in), target_out, batch_size=32, epochs=6, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.7 * losses[0], losses


def test_loss_ignores_padding():
    loss = SequenceCrossEntropy()
    logits = tf.constant(np.random.default_rng(5).normal(size=(2, 3, 7)).astype(np.float32))
    labels = tf.constant([[4, 5, 0], [6, 0, 0]])
    nll = -tf.nn.log_softmax(logits).numpy()
    expected = (nll[0, 0, 4] + nll[0, 1, 5] + nll[1, 0, 6]) / 3
    assert np.isclose(loss(labels, logits).numpy(), expected, rtol=1e-6)


def _sample_inputs():
    rng = np.random.default_rng(6)
    source = random_ids(rng, 2, 5, 64)
    target = random_ids(rng, 2, 4, 64)
    return source, target


def test_keras_format_round_trip(tmp_path):
    model = build(tiny_model_config(), weight_scale=0.2)
    model.set_clip_delta(0.5)
    source, target = _sample_inputs()
    expected = model((source, target)).numpy()
    path = str(tmp_path / "gnmt.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    assert isinstance(restored, GNMT)
    assert restored.model_config == model.model_config
    assert float(restored.clip_delta.numpy()) == 0.5
    np.testing.assert_array_equal(restored((source, target)).numpy(), expected)


def test_checkpoint_round_trip(tmp_path):
    model = build(tiny_model_config(), weight_scale=0.2)
    source, target = _sample_inputs()
    expected = model((source, target)).numpy()
    path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
    fresh = build(tiny_model_config())
    assert not np.array_equal(fresh((source, target)).numpy(), expected)
    tf.train.Checkpoint(model=fresh).restore(path).assert_existing_objects_matched()
    np.testing.assert_array_equal(fresh((source, target)).numpy(), expected)


def test_bad_inputs_get_clear_errors():
    model = build(tiny_model_config())
    with pytest.raises(ValueError, match="source_ids"):
        model({"source": np.ones((1, 2), np.int32)})
    with pytest.raises(ValueError, match=r"\(source_ids, target_input_ids\)"):
        model(np.ones((1, 2), np.int32))
