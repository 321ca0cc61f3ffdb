"""8-bit quantization (paper section 6, eq. 12; Marian's 7-sigma rule) and the int8 matmul.

Every reference here is written in NumPy straight from the equations, in the paper's
orientation where it matters (W multiplies a column vector, row i = output unit i),
and compared with gnmt_tf.quantization.int8, which works on Keras kernels [input, output].
"""

import numpy as np
import pytest
import tensorflow as tf

from gnmt_tf.quantization import int8 as Q
from gnmt_tf.layers.weights import WeightReader
from gnmt_tf.quantization.weights import FakeQuantizedWeights
from gnmt_tf.config import load_config
from gnmt_tf.models.gnmt import GNMT

EPS = np.finfo(np.float32).eps


# ------------------------------------------------------------------------------ references
def numpy_eq12(w_paper):
    """Eq. 12 on the paper's W [outputs, inputs]: s_i = max|W[i,:]|, WQ = round(W / s_i * 127).

    An all-zero row gets s_i = 1 (the module's documented choice), so WQ is 0 there.
    Float32 throughout, the same operations in the same order as eq. 12.
    """
    w_paper = np.asarray(w_paper, np.float32)
    s = np.abs(w_paper).max(axis=1)
    s = np.where(s > 0, s, np.float32(1)).astype(np.float32)
    wq = np.round(w_paper / s[:, None] * np.float32(127.0))
    return wq.astype(np.int8), s


def numpy_7sigma(w_keras, sigmas=7.0, tighten=False):
    """Marian: per column j of W [input, output]: clip to mean_j ± k std_j, map to -127..127.

    Float64 reference; returns (real-valued codes before rounding, scales, offsets, lo, hi).
    """
    w = np.asarray(w_keras, np.float64)
    mean = w.mean(axis=0)
    std = w.std(axis=0)  # population std (ddof=0)
    lo, hi = mean - sigmas * std, mean + sigmas * std
    if tighten:
        lo, hi = np.maximum(lo, w.min(axis=0)), np.minimum(hi, w.max(axis=0))
    offsets = (lo + hi) / 2
    scales = (hi - lo) / 2
    scales = np.where(scales > 0, scales, 1.0)
    codes = (np.clip(w, lo, hi) - offsets) / scales * 127
    return codes, scales, offsets, lo, hi


def make_kernel(rng):
    """A Keras kernel [input=48, output=40], columns of very different magnitudes, one all zero."""
    w = rng.normal(size=(48, 40)).astype(np.float32) * rng.uniform(0.01, 2.0, size=40).astype(np.float32)
    w[:, 7] = 0.0
    return w


# ------------------------------------------------------------------------------ eq. 12
def test_eq12_matches_numpy_reference(rng):
    w = make_kernel(rng)
    q, scales = Q.quantize_per_output_unit(w)
    assert q.dtype == tf.int8 and scales.dtype == tf.float32
    assert q.shape == w.shape and scales.shape == (w.shape[1],)
    # The paper's row i is the Keras kernel's column i: quantize W.T as the paper writes it.
    ref_q, ref_s = numpy_eq12(w.T)
    np.testing.assert_array_equal(q.numpy(), ref_q.T)
    np.testing.assert_array_equal(scales.numpy(), ref_s)
    # axis is the reduced (input) axis: the paper-layout matrix with axis=1 gives the same codes.
    q_t, s_t = Q.quantize_per_output_unit(w.T, axis=1)
    np.testing.assert_array_equal(q_t.numpy(), ref_q)
    np.testing.assert_array_equal(s_t.numpy(), ref_s)


def test_eq12_extremes_error_bound_and_zero_unit(rng):
    w = make_kernel(rng)
    q, scales = Q.quantize_per_output_unit(w)
    q, scales = q.numpy(), scales.numpy()
    columns = np.arange(w.shape[1])
    nonzero = columns != 7
    # The max-magnitude element of every output unit maps exactly to +-127, with its sign.
    top = np.abs(w).argmax(axis=0)
    np.testing.assert_array_equal(q[top, columns][nonzero], (np.sign(w[top, columns]) * 127)[nonzero])
    assert np.abs(q).max() <= 127
    np.testing.assert_array_equal(scales[nonzero], np.abs(w).max(axis=0)[nonzero])
    # Rounding to a step of s/127 errs by at most half a step, s/254 (+ float32 slack).
    restored = Q.dequantize(q, scales).numpy()
    error = np.abs(restored - w)
    assert (error <= scales / 254 * (1 + 8 * EPS) + 1e-12).all()
    assert (error.max(axis=0)[nonzero] > 0).all()  # it really is lossy
    # The zero unit: scale 1 (no division by zero), codes 0, reconstructed exactly.
    assert scales[7] == 1.0 and (q[:, 7] == 0).all() and (restored[:, 7] == 0).all()
    # The dequantize of eq. 12 is q * s / 127.
    np.testing.assert_allclose(restored, q.astype(np.float64) * scales / 127, rtol=2 * EPS, atol=0)


# ------------------------------------------------------------------------------ Marian 7 sigma
@pytest.mark.parametrize("tighten", [False, True])
def test_7sigma_matches_numpy_reference_and_saturates_outlier(rng, tighten):
    w = (rng.normal(size=(500, 6)) * 0.05 + 0.02).astype(np.float32)
    w[123, 2] = 2.0  # ~40 sigma of its column: must be saturated to mean + 7 sigma
    w[:, 4] = 0.3  # a constant column: std 0
    q, scales, offsets = Q.quantize_per_column_saturating(w, sigmas=7.0, tighten_to_data=tighten)
    assert q.dtype == tf.int8 and q.shape == w.shape and scales.shape == offsets.shape == (6,)
    codes, ref_s, ref_o, lo, hi = numpy_7sigma(w, tighten=tighten)
    np.testing.assert_allclose(scales.numpy(), ref_s, rtol=1e-5)
    np.testing.assert_allclose(offsets.numpy(), ref_o, rtol=1e-5, atol=1e-7)
    # Codes: equal to the float64 reference except where it sits within float32 noise of
    # a rounding tie (x.5), where they may differ by one.
    q = q.numpy().astype(np.int64)
    ties = np.abs(np.abs(codes - np.floor(codes)) - 0.5) < 1e-3
    np.testing.assert_array_equal(q[~ties], np.round(codes)[~ties])
    assert np.abs(q - np.round(codes)).max() <= 1
    restored = Q.dequantize(q.astype(np.int8), scales, offsets).numpy()
    # The outlier is saturated to the top of its column's interval...
    assert q[123, 2] == 127
    assert restored[123, 2] == pytest.approx(hi[2], rel=1e-5)
    assert hi[2] < 0.4 * w[123, 2]  # ~0.74: the outlier itself inflates sigma from 0.05 to ~0.1
    # ...and every value inside its interval is within half a step, s/254.
    inside = (w >= lo) & (w <= hi)
    bound = np.broadcast_to(ref_s / 254 * (1 + 1e-4) + 1e-9, w.shape)
    assert (np.abs(restored - w)[inside] <= bound[inside]).all()
    # The constant column: scale 1, codes 0, restored exactly as its offset.
    assert scales.numpy()[4] == 1.0 and (q[:, 4] == 0).all()
    np.testing.assert_allclose(restored[:, 4], 0.3, rtol=1e-6)


def test_7sigma_range_is_wider_than_min_max_for_uniform_weights(rng):
    """A fact worth knowing: without outliers mean ± 7 sigma is wider than the data."""
    w = rng.uniform(-0.1, 0.1, size=(256, 64)).astype(np.float32)
    e12 = np.abs(Q.fake_quantize(w, "per_row").numpy() - w).max()
    e7 = np.abs(Q.fake_quantize(w, "per_column_7sigma").numpy() - w).max()
    e7t = np.abs(Q.fake_quantize(w, "per_column_7sigma", tighten_to_data=True).numpy() - w).max()
    # 7 sigma of U(-a, a) is 7a/sqrt(3) ~ 4.04a: steps ~4x coarser than eq. 12's a.
    assert 3.5 * e12 < e7 < 4.5 * e12
    assert e7t <= e12 * 1.05


# ------------------------------------------------------------------------------ int8 matmul
def numpy_int8_matmul(x, q, s_w, offsets=None):
    """On-the-fly activation quantization, exact integer product, float32 rescale (same order)."""
    s_x = np.abs(x).max(axis=1)
    s_x = np.where(s_x > 0, s_x, np.float32(1)).astype(np.float32)
    xq = np.round(x / s_x[:, None] * np.float32(127)).astype(np.int8)
    acc = xq.astype(np.int64) @ q.astype(np.int64)  # exact
    assert np.abs(acc).max() < 2**24  # so float32(acc) is exact too
    rescale = (s_x * np.float32(1 / 127**2))[:, None] * s_w
    y = acc.astype(np.float32) * rescale
    if offsets is not None:
        row_sums = xq.astype(np.int64).sum(axis=1).astype(np.float32)
        y = y + (row_sums * (s_x * np.float32(1 / 127)))[:, None] * offsets
    return xq, s_x, acc, y


def _matmul_case(rng, rows=16, depth=384, units=200):
    x = rng.normal(size=(rows, depth)).astype(np.float32)
    x[3] = 0.0  # an all-zero activation vector
    x[5] *= 40.0  # a large one
    w = (rng.normal(size=(depth, units)) * 0.05).astype(np.float32)
    return x, w


def test_int8_matmul_is_exact_integer_arithmetic(rng):
    x, w = _matmul_case(rng)
    q, s_w = Q.quantize_per_output_unit(w)
    xq, s_x = Q.quantize_activations(x)
    ref_xq, ref_sx, ref_acc, ref_y = numpy_int8_matmul(x, q.numpy(), s_w.numpy())
    np.testing.assert_array_equal(xq.numpy(), ref_xq)
    np.testing.assert_array_equal(s_x.numpy(), ref_sx)
    assert xq.dtype == tf.int8 and ref_sx[3] == 1.0 and (ref_xq[3] == 0).all()
    y = Q.int8_matmul(x, q, s_w)
    assert y.dtype == tf.float32 and y.shape == (x.shape[0], w.shape[1])
    np.testing.assert_array_equal(y.numpy(), ref_y)  # bit for bit
    assert (y.numpy()[3] == 0).all()
    # Marian-style kernels (offsets): the offset term uses integer row sums too.
    q7, s7, o7 = Q.quantize_per_column_saturating(w + 0.01)
    y7 = Q.int8_matmul(x, q7, s7, o7)
    np.testing.assert_array_equal(y7.numpy(), numpy_int8_matmul(x, q7.numpy(), s7.numpy(), o7.numpy())[3])


def test_int8_matmul_error_bound_against_float(rng):
    """|x~ W~ - x W| <= (s_x/254) sum_k|W_kj| + (s_j/254) sum_k|x_k| + K s_x s_j / 254^2.

    With x~ = x + e, |e_k| <= s_x/254 and W~ = W + E, |E_kj| <= s_j/254 (half a step each),
    x~ W~ - x W = e W + x E + e E; the triangle inequality gives the bound element by element.
    """
    x, w = _matmul_case(rng)
    q, s_w = Q.quantize_per_output_unit(w)
    y = Q.int8_matmul(x, q, s_w).numpy().astype(np.float64)
    exact = x.astype(np.float64) @ w.astype(np.float64)
    s_x = np.abs(x).max(axis=1)[:, None]
    s_j = s_w.numpy()[None, :].astype(np.float64)
    bound = (s_x / 254) * np.abs(w).sum(axis=0) + (s_j / 254) * np.abs(x).sum(axis=1)[:, None]
    bound += x.shape[1] * s_x * s_j / 254**2
    slack = 1e-5 * np.abs(x).astype(np.float64) @ np.abs(w).astype(np.float64)  # float32 rescale
    error = np.abs(y - exact)
    assert (error <= bound + slack).all()
    # The worst case is pessimistic: rounding errors are independent and mostly cancel
    # (measured ~3% of it). Statistically, rounding to a step of max/127 adds noise of
    # rms step/sqrt(12) to each operand; relative to the product that is about
    # sqrt(r_x^2 + r_w^2) / (127 sqrt(12)) with r = max/rms ~ 3.3 for these Gaussians,
    # i.e. ~1.1% (measured 0.9-1.2% over seeds); allow 2%.
    assert np.sqrt(np.mean(error**2)) < 0.1 * np.sqrt(np.mean(bound**2))
    assert np.sqrt(np.mean(error**2)) < 0.02 * np.sqrt(np.mean(exact**2))


def test_int8_matmul_same_in_eager_graph_and_xla(rng):
    x, w = _matmul_case(rng)
    q, s_w = Q.quantize_per_output_unit(w)
    q7, s7, o7 = Q.quantize_per_column_saturating(w)
    eager = Q.int8_matmul(x, q, s_w).numpy()
    eager7 = Q.int8_matmul(x, q7, s7, o7).numpy()
    for jit in (False, True):
        fn = tf.function(Q.int8_matmul, jit_compile=jit)
        np.testing.assert_array_equal(fn(x, q, s_w).numpy(), eager)
        # With offsets the graph optimizers regroup the final multiply-add (XLA makes it an
        # FMA): differences in the last ulp only.
        ulps = 4 * EPS * np.abs(eager7).max()
        np.testing.assert_allclose(fn(x, q7, s7, o7).numpy(), eager7, rtol=0, atol=ulps)
        quantize = tf.function(Q.quantize_per_output_unit, jit_compile=jit)
        q_graph, s_graph = quantize(w)
        np.testing.assert_array_equal(q_graph.numpy(), q.numpy())
        np.testing.assert_array_equal(s_graph.numpy(), s_w.numpy())
    # Any leading shape; an unknown batch size in the signature.
    x3 = x.reshape(4, 4, -1)
    fn = tf.function(
        Q.int8_matmul,
        input_signature=[tf.TensorSpec([None, None, x.shape[1]], tf.float32), tf.TensorSpec(q.shape, tf.int8),
                         tf.TensorSpec(s_w.shape, tf.float32)],
        jit_compile=True,
    )
    np.testing.assert_array_equal(fn(x3, q, s_w).numpy(), eager.reshape(4, 4, -1))
    with pytest.raises(TypeError, match="int8"):
        Q.int8_matmul(x, tf.cast(q, tf.int32), s_w)


# ------------------------------------------------------------------------------ whole model
@pytest.fixture(scope="module")
def tiny_model():
    import tf_keras as keras

    keras.utils.set_random_seed(99)
    model = GNMT(load_config("tiny").model)
    model.build()
    return model


KERNEL_SUFFIXES = ("/kernel:0", "/recurrent_kernel:0")


def test_fake_quantized_weights_touch_only_lstm_and_softmax_kernels(tiny_model):
    model = tiny_model
    before = model.get_weights()
    names = [w.name for w in model.weights]
    quantized = {v.name for v in Q.quantized_kernel_variables(model)}
    lstm = {n for n in names if "lstm_" in n and n.endswith(KERNEL_SUFFIXES)}
    assert quantized == lstm | {"decoder/softmax/kernel:0"}
    assert len(lstm) == 2 * (2 + 2 + 3)  # encoder: fwd, bwd, 2 upper; decoder: 3 layers
    assert not any("attention" in n or "embedding" in n for n in quantized)
    for method in ("per_row", "per_column_7sigma"):
        transform = FakeQuantizedWeights(model, method)
        for name, old, variable in zip(names, before, model.weights):
            replacement = transform.kernel(variable)
            if name not in quantized:  # attention, embeddings, softmax bias, delta
                assert replacement is None, name
                continue
            value = replacement.numpy()
            assert value.shape == old.shape and value.dtype == old.dtype
            q, *rest = Q.quantize(old, method)
            error = np.abs(value - old)
            if method == "per_row":
                _, s = numpy_eq12(old.T)
                assert (error <= s / 254 * (1 + 8 * EPS)).all(), name
                np.testing.assert_allclose(value, q.numpy() * s / 127, rtol=2 * EPS, atol=0)
            else:  # uniform init: no value is beyond 7 sigma, so half a step bounds it
                assert (error <= rest[0].numpy() / 254 * (1 + 1e-4)).all(), name
            assert error.max() > 0, name
    # The model itself is untouched.
    for old, now in zip(before, model.get_weights()):
        np.testing.assert_array_equal(old, now)


def test_simulated_int8_logits_change_little(tiny_model, rng):
    model = tiny_model
    source = rng.integers(4, 64, size=(4, 7)).astype(np.int32)
    target = rng.integers(4, 64, size=(4, 6)).astype(np.int32)
    before = model.get_weights()
    base = model((source, target)).numpy()
    changes = {}
    for method in ("per_row", "per_column_7sigma"):
        logits, _ = model.forward(source, target, weights=WeightReader(FakeQuantizedWeights(model, method)))
        changes[method] = np.abs(logits.numpy() - base).max()
    # Every quantized weight moves by at most 1/254 (0.4%) of its unit's max |W|, so to first
    # order the logits move by a similar fraction of their scale; allow 1% of the largest logit
    # (measured: ~0.005% for eq. 12, ~0.02% for 7 sigma on this random-weight model).
    scale = np.abs(base).max()
    assert 0 < changes["per_row"] < 0.01 * scale
    assert 0 < changes["per_column_7sigma"] < 0.01 * scale
    # eq. 12 is the finer grid on uniform weights (see the 7-sigma range test).
    assert changes["per_row"] < changes["per_column_7sigma"]
    np.testing.assert_array_equal(model((source, target)).numpy(), base)  # float again outside the scope
    for old, now in zip(before, model.get_weights()):  # the weights themselves never changed
        np.testing.assert_array_equal(old, now)
