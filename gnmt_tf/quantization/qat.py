"""Quantization-aware fine-tuning (QAT) of the LSTM weights, with tensorflow-model-optimization.

Why
---
Section 6 of the paper runs inference with 8-bit LSTM weights: one scale per
output unit, eq. 12::

    s_i = max_j |W[i, j]|,    WQ[i, j] = round(W[i, j] / s_i * 127)

(for a Keras kernel ``[input, output]`` used as ``x @ W`` that is one scale per
COLUMN, a max over axis 0; see :mod:`gnmt_tf.quantization.int8`). A model trained in
float only meets this rounding at export time. Section 6 trains with the
quantization in view (delta clipping, logit clipping) so that the int8 model
loses little; QAT goes one step further: a short fine-tune in which every
LSTM cell's ``kernel`` and ``recurrent_kernel`` are replaced, in every forward
pass, by ``dequantize(quantize(W))``, so the loss the optimizer sees is the
loss of the int8 model, while the float weights keep receiving the gradient
(straight-through estimator: the rounding is treated as the identity in the
backward pass). What the fine-tune leaves in float is then what eq. 12 rounds
with the least damage.

How
---
The quantizer is tfmot's ``LastValueQuantizer(num_bits=8, per_axis=True,
symmetric=True, narrow_range=True)``, chosen for each weight by
:class:`GNMTLSTMCellQuantizeConfig` (a ``tfmot.quantization.keras.QuantizeConfig``).
Per axis on a 2-D kernel it reduces over axis 0 (one range per output unit);
symmetric narrow range makes the range ``[-max|W|, max|W|]`` on codes
``-127..127``: eq. 12. It agrees with :func:`gnmt_tf.quantization.int8.fake_quantize`
up to float32 rounding: TensorFlow's fake-quant op computes
``floor((W - min) / step + 0.5)`` on a nudged range instead of
``round(W / s * 127)``, so an element within ~1e-5 of a step of a rounding tie
(about 1 in 100,000 for random weights) may land one code away, and the
dequantized values differ by ~1e-5 of a step elsewhere. Both are eq. 12 to
float32 precision; ``tests/quantization/test_qat.py`` checks this bound.

The GNMT is a subclassed Keras 2 model, which ``tfmot.quantization.keras.
quantize_apply`` cannot wrap. Instead :class:`QuantizationAwareTraining` is a
weight transform (:mod:`gnmt_tf.layers.weights`): with a model compiled with it
(``model.compile(..., weight_transform=qat)``) every product of an LSTM kernel (both products of
each :class:`gnmt_tf.layers.cell.GNMTLSTMCell`: ``project_inputs`` reads ``kernel``,
``recur`` reads ``recurrent_kernel``) passes through
:meth:`~QuantizationAwareTraining.fake_quantize`, which calls the config's
quantizer with its variables. Those variables (tfmot's per-output-unit
``min``/``max``) are created by ``quantizer.build(shape, name, layer)`` on a
separate holder layer, :class:`QuantizerVariables`, never on the model: the
model's weights, ``get_weights()`` order and checkpoints are exactly those of
a plain GNMT, so a QAT run's model directory loads with
:func:`gnmt_tf.model_files.load_model_dir` like any other.

Two details:

* The quantizer always runs in its training mode, which recomputes the range
  from the current kernel (and stores it in its variables). Eq. 12 defines the
  scale by the weights themselves; the stored range would be stale after a
  restore (it is deliberately not checkpointed) and is -6..6 before the first
  call.
* The gradient is the plain straight-through estimator, identity for every
  element: ``W + stop_gradient(fq(W) - W)``, whose forward value is
  bit-identical to ``fq(W)`` (the difference is exact in float32, Sterbenz).
  tfmot's own gradient passes only elements inside the nudged range, and
  float32 rounding of that range puts a column's extreme element (the one that
  sets the scale) just outside it now and then, which would freeze it.

The transform is given where a computation is constructed: to ``compile`` for Keras'
``fit``/``evaluate`` (their training and test steps), to a
:class:`~gnmt_tf.inference.translator.Translator` for dev translations, or as a
:class:`~gnmt_tf.layers.weights.WeightReader` to the model's methods; anything else computes
with the float kernels.

``tensorflow_model_optimization`` is imported only inside functions: importing
it switches ``tf.keras`` to Keras 2 for the whole process (this package uses
``tf_keras`` explicitly either way).

Use::

    qat = QuantizationAwareTraining(model)                   # every LSTM kernel fake-quantized
    model.compile(optimizer=..., weight_transform=qat)
    model.fit(...)
    Translator(model, tokenizer, weight_transform=qat)       # dev translations with the same kernels

The command line, ``python -m gnmt_tf.train --refine qat --init-from MODEL_DIR
--model-dir OUT``, fine-tunes a trained model this way (see
:func:`quantization_aware_config` for the recipe and why).
"""

from __future__ import annotations

import functools
from typing import Any, Dict, List, Mapping, Tuple

import tensorflow as tf
import tf_keras as keras

from gnmt_tf.layers.cell import GNMTLSTMCell
from gnmt_tf.layers.weights import WeightTransform
from gnmt_tf.training.fine_tuning import NO_OVERRIDES, fine_tuning_config

# The fine-tuning recipe of ``--refine qat`` (config fields; ``--set`` overrides any of them).
#
# Plain SGD, not Adam: the model arrives converged, and a fresh Adam's first updates move
# every weight by about the learning rate whatever its gradient (the moments start at zero
# and bias correction normalises them), a jolt to every weight; SGD's steps are proportional
# to the gradient, so weights the quantization does not disturb stay where they are. It is
# also the optimizer the paper's recipe ends with (section 8.3), and its learning rate here
# is where that recipe ends: 0.5 halved 4 times = 0.03125. 1,000 steps is a short fine-tune
# (the ML run takes 2M); the quantization error is small, so little has to move.
QAT_MAX_STEPS = 1000
QAT_LEARNING_RATE = 0.03125


def _tfmot():
    import tensorflow_model_optimization as tfmot  # lazily: it switches tf.keras to Keras 2

    return tfmot


def eq12_weight_quantizer():
    """tfmot's quantizer that is eq. 12 for a Keras kernel: 8 bits, one symmetric range per output unit."""
    return _tfmot().quantization.keras.quantizers.LastValueQuantizer(
        num_bits=8, per_axis=True, symmetric=True, narrow_range=True
    )


@functools.lru_cache(maxsize=None)
def _quantize_config_class() -> type:
    """Defined on first use, so that importing this module does not import tfmot."""
    QuantizeConfig = _tfmot().quantization.keras.QuantizeConfig

    class GNMTLSTMCellQuantizeConfig(QuantizeConfig):
        """What QAT quantizes in a :class:`gnmt_tf.layers.cell.GNMTLSTMCell`: its two kernels, eq. 12.

        Weights: ``kernel`` and ``recurrent_kernel``, each with
        :func:`eq12_weight_quantizer`. The "standard" cell's bias and delta stay
        float (int8 inference keeps them float too).

        Activations and outputs: none. At int8 inference
        (:func:`gnmt_tf.quantization.int8.int8_matmul`) the activations are quantized on
        the fly with a scale per input vector computed from the vector itself, so
        there is no range to learn, and the paper fine-tunes nothing for them.
        """

        WEIGHT_ATTRIBUTES = ("kernel", "recurrent_kernel")

        def get_weights_and_quantizers(self, layer) -> List[Tuple[tf.Variable, Any]]:
            _check_cell(layer)
            return [(getattr(layer, name), eq12_weight_quantizer()) for name in self.WEIGHT_ATTRIBUTES]

        def get_activations_and_quantizers(self, layer) -> list:
            return []

        def set_quantize_weights(self, layer, quantize_weights) -> None:
            """tfmot's hand-over for its ``QuantizeWrapper``, which cannot wrap a GNMT cell.

            The cells' products run inside time loops and read their kernels through the
            weight reader they are given, so :class:`QuantizationAwareTraining` quantizes at each
            product instead, in every graph computed with it.
            """
            raise TypeError(
                "a GNMTLSTMCell is not wrapped by tfmot's QuantizeWrapper; quantization-aware training "
                "reads its kernels through a weight transform: "
                "model.compile(..., weight_transform=QuantizationAwareTraining(model))"
            )

        def set_quantize_activations(self, layer, quantize_activations) -> None:
            if quantize_activations:
                raise ValueError("GNMTLSTMCellQuantizeConfig quantizes no activations")

        def get_output_quantizers(self, layer) -> list:
            return []

        def get_config(self) -> Dict[str, Any]:
            return {}  # nothing to configure: eq. 12 fixes bits, axis and range

    return GNMTLSTMCellQuantizeConfig


def __getattr__(name: str):
    # ``from gnmt_tf.quantization.qat import GNMTLSTMCellQuantizeConfig`` builds the class (and imports tfmot) only then.
    if name == "GNMTLSTMCellQuantizeConfig":
        return _quantize_config_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check_cell(layer) -> None:
    if not isinstance(layer, GNMTLSTMCell):
        raise TypeError(f"GNMTLSTMCellQuantizeConfig is for GNMTLSTMCell, got {type(layer).__name__}")
    if not layer.built:
        raise ValueError(f"cell {layer.name!r} is not built; build the model first")


def lstm_cells(model) -> List[GNMTLSTMCell]:
    """Every :class:`GNMTLSTMCell` of ``model``, in ``model.submodules`` order."""
    return [module for module in model.submodules if isinstance(module, GNMTLSTMCell)]


class QuantizerVariables(keras.layers.Layer):
    """Owns the tfmot quantizers' variables, so that they never become the model's weights."""

    def __init__(self, **kwargs):
        super().__init__(trainable=False, **kwargs)
        self.built = True  # variables are added by the quantizers' build(), not by build()


class QuantizationAwareTraining(WeightTransform):
    """The weight transform of QAT: every LSTM kernel fake-quantized (eq. 12) in every product.

    Use it as ``model.compile(..., weight_transform=QuantizationAwareTraining(model))``, or in
    a :class:`~gnmt_tf.layers.weights.WeightReader`. Attributes:

    * ``cells``: the :class:`GNMTLSTMCell` objects whose kernels it quantizes;
    * ``quantize_configs``: one :class:`GNMTLSTMCellQuantizeConfig` per cell;
    * ``quantizer_variables``: the :class:`QuantizerVariables` layer holding the
      quantizers' per-output-unit ``min``/``max`` (not part of the model).
    """

    def __init__(self, model):
        cells = lstm_cells(model)
        if not cells:
            raise ValueError("the model has no GNMTLSTMCell; is it a built GNMT?")
        config_class = _quantize_config_class()
        self.cells = cells
        self.quantize_configs = []
        self.quantizer_variables = QuantizerVariables(name="qat_quantizer_variables")
        self._quantizers: Dict[Any, Tuple[Any, Dict[str, tf.Variable]]] = {}
        for cell in cells:
            config = config_class()
            self.quantize_configs.append(config)
            for weight, quantizer in config.get_weights_and_quantizers(cell):
                name = weight.name.split(":")[0].replace("/", "_")
                variables = quantizer.build(weight.shape, name, self.quantizer_variables)
                self._quantizers[weight.ref()] = (quantizer, variables)

    def quantizes(self, kernel) -> bool:
        return kernel.ref() in self._quantizers

    @tf.autograph.experimental.do_not_convert
    def fake_quantize(self, kernel: tf.Variable) -> tf.Tensor:
        """``kernel`` through its tfmot quantizer (eq. 12), with an identity gradient."""
        quantizer, variables = self._quantizers[kernel.ref()]
        quantized = quantizer(kernel, True, variables)  # training mode: the range comes from this kernel
        return kernel + tf.stop_gradient(quantized - kernel)  # == quantized; straight-through gradient

    def float_kernel(self, kernel) -> tf.Tensor:
        return self.fake_quantize(kernel) if self.quantizes(kernel) else kernel


def quantization_aware_config(config, overrides: Mapping[str, Any] = NO_OVERRIDES):
    """The config of a QAT fine-tune of a model trained with ``config``.

    The model section is kept; the training section becomes the fine-tuning
    recipe: ``quantization_aware: true``, plain SGD (``adam_steps: 0``) at
    ``QAT_LEARNING_RATE`` without halvings or a final decay, ``QAT_MAX_STEPS`` steps counted from 0,
    and delta fixed at its inference value ``model.clip_delta`` (``delta_start`` =
    ``model.clip_delta``, no annealing): the fine-tune should see the model as it
    will run. ``overrides`` (dotted keys, as ``--set``) are applied last.
    """
    recipe = {"training.quantization_aware": True, "training.max_steps": QAT_MAX_STEPS}
    return fine_tuning_config(config, QAT_LEARNING_RATE, recipe, overrides)
