"""bfloat16 products in training (training.product_precision): what is rounded, what is not, and who sees it."""

import numpy as np
import pytest
import tensorflow as tf
import tf_keras as keras

from gnmt_tf.layers.weights import FLOAT_WEIGHTS, WeightReader
from gnmt_tf.models.gnmt import GNMT
from gnmt_tf.models.losses import SequenceCrossEntropy
from gnmt_tf.training.precision import BFloat16Products, training_transform
from gnmt_tf.training.trainer import Trainer
from helpers import SHALLOW, SHALLOW_MODEL, copy_task, tiny_model_config
from number_model import tiny_number_setup


def _bfloat16(values):
    """Values rounded to bfloat16 (to nearest even), back in float64: NumPy's reference."""
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


def test_products_are_of_bfloat16_operands_and_keep_the_float_recurrence(rng):
    x = rng.normal(size=(6, 5, 48)).astype(np.float32)
    kernel = tf.Variable(rng.normal(size=(48, 40)).astype(np.float32))
    transform = BFloat16Products()
    product = transform.product(tf.constant(x), kernel).numpy()
    assert product.dtype == np.float32 and product.shape == (6, 5, 40)
    # The product of the rounded operands, summed exactly, then rounded once more to bfloat16 (oneDNN
    # accumulates in float32 and writes bfloat16): within one bfloat16 unit of that.
    reference = _bfloat16(x) @ _bfloat16(kernel.numpy())
    np.testing.assert_allclose(product, reference, rtol=2 ** -7, atol=1e-6)
    assert np.abs(product - x @ kernel.numpy()).max() > 1e-3  # and not the float32 product
    # A slice of the kernel's input (the decoder's context share) is the same product.
    part = transform.partial_product(kernel, slice(8, 48))(tf.constant(x[..., 8:])).numpy()
    np.testing.assert_allclose(part, _bfloat16(x[..., 8:]) @ _bfloat16(kernel.numpy()[8:]), rtol=2 ** -7, atol=1e-6)
    # The recurrence multiplies by the float kernel itself; the gradient reaches the float weights.
    assert transform.float_kernel(kernel) is kernel
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(transform.product(tf.constant(x), kernel) ** 2)
    gradient = tape.gradient(loss, kernel).numpy()
    exact = np.einsum("btk,btn->kn", x, 2 * (x @ kernel.numpy()))
    np.testing.assert_allclose(gradient, exact, rtol=0.05, atol=0.05 * np.abs(exact).max())
    assert training_transform("float32", None) is None and isinstance(training_transform("bfloat16", None),
                                                                       BFloat16Products)
    assert WeightReader(BFloat16Products()).transform.inner is FLOAT_WEIGHTS


def test_int8_products_are_left_to_the_inner_transform_also_for_softmax_columns(rng):
    from gnmt_tf.quantization.weights import Int8Weights

    model = GNMT(tiny_model_config())
    model.build()
    inner = Int8Weights(model)  # int8 products: no float kernel to round
    kernel = model.decoder.softmax_projection.kernel
    ids = tf.constant([3, 0, 7])
    top = tf.constant(rng.normal(size=(2, kernel.shape[0])).astype(np.float32))
    wrapped = BFloat16Products(inner)
    np.testing.assert_array_equal(wrapped.product(top, kernel, wrapped.columns(kernel, ids)).numpy(),
                                  inner.product(top, kernel, inner.columns(kernel, ids)).numpy())
    np.testing.assert_array_equal(wrapped.product(top, kernel).numpy(), inner.product(top, kernel).numpy())


def test_a_model_trains_with_bfloat16_products_close_to_float32(rng):
    source, target_in, target_out = copy_task(rng, 8, tiny_model_config().vocab_size)
    data = tf.data.Dataset.from_tensors(((source, target_in), target_out)).repeat(3)
    models = [GNMT(tiny_model_config(dropout=0.0, **SHALLOW_MODEL)) for _ in range(2)]
    for model in models:
        model.build()
    models[1].set_weights(models[0].get_weights())
    start = [w.copy() for w in models[0].get_weights()]
    for model, transform in zip(models, (None, BFloat16Products())):
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=1.0), loss=SequenceCrossEntropy(),
                      weight_transform=transform)
        model.fit(data, verbose=0)
    differences = [np.abs(a - b).max() for a, b in zip(models[0].get_weights(), models[1].get_weights())]
    moves = [np.abs(a - b).max() for a, b in zip(start, models[0].get_weights())]
    # Every weight moved as in float32 to within 2% of its move, and not identically (the products
    # really were rounded).
    assert all(d <= 0.02 * m + 1e-7 for d, m in zip(differences, moves)), (differences, moves)
    assert max(differences) > 0


def test_the_trainer_steps_in_bfloat16_and_evaluates_in_float32(tmp_path):
    config, model_dir, train_pairs, dev_pairs, tokenizer = tiny_number_setup(
        tmp_path, steps=10, **{"training.product_precision": "bfloat16", **SHALLOW})
    trainer = Trainer(config, model_dir, train_pairs, dev_pairs, tokenizer, log=lambda m: None, verbose=0)
    assert isinstance(trainer.model.compiled_weights.transform, BFloat16Products)
    assert trainer.dev_weights.transform is FLOAT_WEIGHTS
    assert trainer.translator.module.weight_transform is FLOAT_WEIGHTS


def test_bfloat16_products_of_quantization_aware_training_round_the_fake_quantized_kernels(rng, tmp_path):
    from gnmt_tf.quantization import int8 as quantization
    from gnmt_tf.quantization import qat

    model = GNMT(tiny_model_config(vocab_size=40, init_scale=0.5, encoder_layers=2, decoder_layers=2))
    model.build()
    fake_quantized = qat.QuantizationAwareTraining(model)
    transform = BFloat16Products(fake_quantized)
    cell = fake_quantized.cells[0]
    x = tf.constant(rng.normal(size=(3, cell.kernel.shape[0])).astype(np.float32))
    eq12 = np.asarray(quantization.fake_quantize(cell.kernel))  # eq. 12's kernel, computed independently of the transform
    np.testing.assert_allclose(transform.float_kernel(cell.kernel).numpy(), eq12, atol=1e-6)
    product = transform.product(x, cell.kernel).numpy()
    reference = _bfloat16(x.numpy()) @ _bfloat16(eq12)
    np.testing.assert_allclose(product, reference, rtol=2 ** -7, atol=1e-5)
    # Both roundings are there: not the bfloat16 product of the raw kernel, nor the float32 one of eq. 12's.
    assert np.abs(product - _bfloat16(x.numpy()) @ _bfloat16(cell.kernel.numpy())).max() > 1e-2
    assert np.abs(product - x.numpy() @ eq12).max() > 1e-3
    # The straight-through gradient of QAT reaches the float kernel through the casts.
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(transform.product(x, cell.kernel))
    gradient = tape.gradient(total, cell.kernel).numpy()
    exact = np.repeat(x.numpy().sum(axis=0)[:, None], cell.kernel.shape[1], axis=1)
    np.testing.assert_allclose(gradient, exact, rtol=2 ** -6, atol=1e-2)

    # The trainer composes them the same way, and evaluates with QAT's kernels in float32.
    config, model_dir, train_pairs, dev_pairs, tokenizer = tiny_number_setup(
        tmp_path, steps=10, **{"training.product_precision": "bfloat16", "training.quantization_aware": True,
                               **SHALLOW})
    trainer = Trainer(config, model_dir, train_pairs, dev_pairs, tokenizer, log=lambda m: None, verbose=0)
    compiled = trainer.model.compiled_weights.transform
    assert isinstance(compiled, BFloat16Products) and compiled.inner is trainer.state.qat_transform
    assert isinstance(trainer.state.qat_transform, qat.QuantizationAwareTraining)
    assert trainer.dev_weights.transform is trainer.state.qat_transform


def test_an_unknown_precision_is_refused():
    from gnmt_tf.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="training.product_precision: 'float16' is not one of"):
        load_config("tiny", overrides={"training.product_precision": "float16"})


# Two processors' worth of /proc/cpuinfo: one CPU that multiplies bfloat16, one (AVX2) that does not but
# names the flags outside its flags lines, where a search of the whole text would find them.
FAKE_CPUINFO = {
    "bfloat16": "".join(
        f"processor\t: {n}\nmodel name\t: Example Xeon\n"
        f"flags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16 avx512_vnni amx_tile\nbugs\t\t: spectre_v1\n\n"
        for n in range(2)),
    "avx2": "".join(
        f"processor\t: {n}\nmodel name\t: Example CPU amx_bf16 avx512_bf16 edition\n"
        f"flags\t\t: fpu sse2 avx2 fma\nbugs\t\t: avx512_bf16\npower management: amx_bf16\n\n"
        for n in range(2)),
}


def _cpuinfo(tmp_path, cpu):
    from gnmt_tf.training.precision import CpuInfoFile

    path = tmp_path / f"cpuinfo_{cpu}"
    path.write_text(FAKE_CPUINFO[cpu])
    return CpuInfoFile(str(path))


def test_only_the_flags_lines_of_cpuinfo_count():
    from gnmt_tf.training.precision import cpu_flags

    assert cpu_flags(FAKE_CPUINFO["bfloat16"]) >= {"avx512_bf16", "avx2"}
    avx2 = cpu_flags(FAKE_CPUINFO["avx2"])
    assert avx2 == {"fpu", "sse2", "avx2", "fma"}  # not the model name's words, nor the bugs' or power lines'
    assert "amx_bf16" in FAKE_CPUINFO["avx2"].split()  # what a search of the whole text would have found
    assert cpu_flags("Features\t: fp asimd bf16\n") == frozenset()  # an ARM CPU's line: not x86 flags
    assert cpu_flags("") == frozenset()


def test_auto_is_bfloat16_only_on_a_cpu_that_multiplies_it(tmp_path):
    from gnmt_tf.training.precision import CpuInfoFile, resolve_product_precision

    native, emulated = _cpuinfo(tmp_path, "bfloat16"), _cpuinfo(tmp_path, "avx2")
    assert resolve_product_precision("auto", native, gpus=[]) == "bfloat16"
    assert resolve_product_precision("auto", native, gpus=["/physical_device:GPU:0"]) == "float32"
    assert resolve_product_precision("auto", emulated, gpus=[]) == "float32"
    assert resolve_product_precision("auto", CpuInfoFile(str(tmp_path / "absent")), gpus=[]) == "float32"
    assert resolve_product_precision("float32", native) == "float32"
    assert resolve_product_precision("bfloat16", emulated) == "bfloat16"
    assert isinstance(training_transform("auto", None, native), BFloat16Products) == (
        not tf.config.list_physical_devices("GPU"))
    assert training_transform("auto", None, emulated) is None


@pytest.mark.skipif(bool(tf.config.list_physical_devices("GPU")), reason="auto is float32 wherever a GPU computes")
@pytest.mark.parametrize("cpu", ["bfloat16", "avx2"])
def test_a_trainer_given_a_cpu_steps_in_the_precision_auto_gives_it(tmp_path, cpu):
    """training.product_precision: auto, end to end: the Trainer resolves it on the cpuinfo it is given, and
    its compiled step's loss is the one computed with that precision's products, not the other's."""
    from gnmt_tf.layers.weights import FLOAT_READER
    from gnmt_tf.models.gnmt import unpack_batch
    from gnmt_tf.models.objectives import MaximumLikelihood

    keras.utils.set_random_seed(0)
    config, model_dir, train_pairs, dev_pairs, tokenizer = tiny_number_setup(
        tmp_path, steps=2, **{"training.product_precision": "auto", "model.dropout": 0.0, "model.init_scale": 0.5,
                              **SHALLOW})
    trainer = Trainer(config, model_dir, train_pairs, dev_pairs, tokenizer, log=lambda m: None, verbose=0,
                      cpuinfo=_cpuinfo(tmp_path, cpu))
    in_bfloat16 = cpu == "bfloat16"
    assert trainer.product_precision == ("bfloat16" if in_bfloat16 else "float32")
    assert isinstance(trainer.model.compiled_weights.transform, BFloat16Products) == in_bfloat16

    # The step's loss and gradient norm against each precision's, computed here through each one's reader.
    batch = next(iter(trainer.batches.for_fit(0)))
    objective = MaximumLikelihood(SequenceCrossEntropy(config.training.label_smoothing))  # what the step minimises

    def loss_and_gradient_norm(reader):
        with tf.GradientTape() as tape:
            loss = objective.loss(trainer.model, unpack_batch(batch), training=True, weights=reader)[0]
        gradients = tape.gradient(loss, trainer.model.trainable_variables)
        return np.array([float(loss), float(tf.linalg.global_norm(gradients))])

    in_bfloat16_products = loss_and_gradient_norm(WeightReader(BFloat16Products()))
    in_float32 = loss_and_gradient_norm(FLOAT_READER)
    logs = trainer.model.train_on_batch(*batch, return_dict=True)
    step = np.array([logs["loss"], logs["gradient_norm"]])
    right, wrong = (in_bfloat16_products, in_float32) if in_bfloat16 else (in_float32, in_bfloat16_products)
    np.testing.assert_allclose(step, right, rtol=1e-6)
    assert np.all(np.abs(step - wrong) > 10 * np.abs(step - right) + 1e-6 * np.abs(wrong)), (step, right, wrong)


def test_a_recurrent_kernel_s_gradient_is_one_product_of_bfloat16_operands(rng):
    """``kernel_gradient`` (``x^T dy``, which ``lstm_over_time`` sums its recurrent kernel's gradient with)
    is what autodiff takes through the transform's own product, and a layer run through a reader takes
    its recurrent kernel's gradient from the reader's transform."""
    from gnmt_tf.layers.cell import GNMTLSTMCell
    from gnmt_tf.layers.recurrence import WRITTEN_GRADIENT, run_lstm
    from gnmt_tf.layers.weights import WeightTransform

    transform = BFloat16Products()
    x = tf.constant(rng.normal(size=(50, 24)).astype(np.float32))
    dy = tf.constant(rng.normal(size=(50, 40)).astype(np.float32))
    kernel = tf.Variable(rng.normal(size=(24, 40)).astype(np.float32))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(transform.product(x, kernel) * dy)
    np.testing.assert_array_equal(transform.kernel_gradient(x, dy).numpy(), tape.gradient(loss, kernel).numpy())
    exact = x.numpy().T @ dy.numpy()
    np.testing.assert_allclose(FLOAT_WEIGHTS.kernel_gradient(x, dy).numpy(), exact, rtol=1e-5, atol=1e-5)
    assert np.abs(transform.kernel_gradient(x, dy).numpy() - exact).max() > 1e-3  # really rounded

    class DoubledKernelGradient(WeightTransform):  # float products; a kernel gradient one can tell apart
        def kernel_gradient(self, x, dy):
            return 2.0 * super().kernel_gradient(x, dy)

    cell = GNMTLSTMCell(16, init_scale=0.5)
    cell.build((None, None, 8))
    inputs = tf.constant(rng.normal(size=(4, 6, 8)).astype(np.float32))
    mask = tf.constant(np.arange(6)[None, :] < np.array([[6], [4], [6], [2]]))
    gradients = {}
    for name, reader in (("float", WeightReader()), ("doubled", WeightReader(DoubledKernelGradient()))):
        with tf.GradientTape() as tape:
            outputs, _ = run_lstm(cell, inputs, mask, reader, WRITTEN_GRADIENT)
            loss = tf.reduce_sum(outputs ** 2)
        gradients[name] = [g.numpy() for g in tape.gradient(loss, [cell.recurrent_kernel, cell.kernel])]
    np.testing.assert_allclose(gradients["doubled"][0], 2.0 * gradients["float"][0], rtol=1e-6)
    np.testing.assert_array_equal(gradients["doubled"][1], gradients["float"][1])  # the input kernel's: autodiff


def test_every_method_of_the_inner_transform_is_reached_through_bfloat16_products(rng):
    """A method of WeightTransform that BFloat16Products does not override is the inner one's (QAT's
    fake quantization, int8's tables): a method added later cannot skip the transform underneath."""
    from gnmt_tf.layers.weights import WeightTransform

    calls = []

    class Recording(WeightTransform):
        pass

    public = [name for name, value in vars(WeightTransform).items() if callable(value) and not name.startswith("_")]
    for name in public:
        def recorded(self, *args, _name=name, **kwargs):
            calls.append(_name)
            return getattr(WeightTransform, _name)(self, *args, **kwargs)
        setattr(Recording, name, recorded)

    kernel = tf.Variable(rng.normal(size=(8, 6)).astype(np.float32))
    x = tf.constant(rng.normal(size=(2, 8)).astype(np.float32))
    arguments = {
        "float_kernel": (kernel,), "kernel_gradient": (x, tf.constant(rng.normal(size=(2, 6)).astype(np.float32))),
        "product": (x, kernel), "columns": (kernel, tf.constant([1, 4])), "partial_product": (kernel, slice(0, 4)),
        "lookup": (kernel, tf.constant([0, 2])), "replaces": (kernel,), "stored_rows": (kernel.numpy(),),
        "lookup_columns": (kernel, tf.constant([[0, 5]])),  # a tied model's embeddings: kernel columns as rows
    }
    assert sorted(arguments) == sorted(public), "a new WeightTransform method needs a case here"
    wrapped = BFloat16Products(Recording())
    # What bfloat16 changes reads the inner kernel (float_kernel); the kernel gradient is of the products'
    # operands alone, no weight read through any transform (lstm_over_time's dK = m^T dz).
    reads_through = {"product": "float_kernel", "partial_product": "float_kernel", "kernel_gradient": None}
    for name, args in arguments.items():
        calls.clear()
        getattr(wrapped, name)(*args)
        expected = reads_through.get(name, name)
        assert (expected in calls) if expected else not calls, (name, calls)
