"""The whole translator as one float32 TFLite model: strings in, translations out.

Wordpiece tokenization, the GNMT encoder, beam search (section 7) and
detokenization are converted together from
:class:`gnmt_tf.inference.translator.TranslatorModule`'s ``translate``
function (the ``serving_default`` signature). The model uses only TFLite
builtin ops plus the tensorflow-text custom ops, so it runs in LiteRT's
``InterpreterWithCustomOps`` with ``tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS``
registered; no Flex (select TF) ops::

    model = convert_to_tflite(TranslatorModule(model, tokenizer, config.decoding))
    translator = TFLiteTranslator(model)
    translator.translate(["Open the file"])        # [Translation(text=..., score=...)]

A module with a vocabulary shortlist converts with its default setting
(``decoding.use_shortlist``): on, the decoding step gathers the allowed softmax
columns (GATHER, BATCH_MATMUL) and spreads the logits back over the vocabulary
(SCATTER_ND, WHERE, GATHER), all builtins. There is no per-request switch: a
second signature would store every weight a second time.

Conversion notes:

* The translate function is re-traced for TFLite (:func:`tflite_translate_function`):
  with :data:`CONCATENATING_RECURRENCE` as the encoder's recurrence, so its time loops are
  built without TensorArrays (which TFLite cannot lower with a dynamic batch), and with
  each kernel read where it is multiplied, not once before the loop (a constant weight
  of each FULLY_CONNECTED, which the int8 conversion quantizes and XNNPACK packs once;
  padded kernels would only add slices). The TensorFlow functions of the module are
  not touched.
* ``allow_custom_ops`` is needed for the tensorflow-text kernels, but it also
  lets ANY op without a TFLite kernel through as a custom op that then fails
  only at load time; :func:`convert_to_tflite` therefore lists the ops of the
  result and :func:`check_ops` rejects every custom op that is not a
  tensorflow-text one.
"""

from __future__ import annotations

import os
from typing import Iterable, List, Sequence, Tuple, Union

import numpy as np

from gnmt_tf.inference.results import Translation

# The custom ops that tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS registers (tensorflow-text
# 2.21), by their TFLite custom code. The translator uses the first three.
ALLOWED_CUSTOM_OPS = frozenset(
    {
        "TFText>WhitespaceTokenizeWithOffsetsV2",
        "FastWordpieceTokenizeWithOffsets",
        "TFText>FastWordpieceDetokenize",
        "FastBertNormalize",
        "RaggedTensorToTensor",
        "SentenceFragmentsV2",
        "TFText>ByteSplitByOffsets",
        "TFText>ByteSplitWithOffsets",
        "TFText>FastSentencepieceDetokenize",
        "TFText>FastSentencepieceTokenize",
        "TFText>NgramsStringJoin",
        "TFText>RoundRobinGenerateMasks",
        "TFText>RoundRobinTrim",
        "TFText>Utf8Binarize",
    }
)

SIGNATURE = "serving_default"


class ConcatenatingLoop:
    """A time loop that TFLite converts to builtin ops (of :class:`ConcatenatingRecurrence`).

    The same :func:`~gnmt_tf.layers.recurrence.masked_step` at every step as the
    TensorArray loop, so the same results. TFLite's converter cannot lower a TensorArray
    whose element shape is not static (the batch of an exported translator is dynamic)
    without Flex ops, so this loop reads its inputs with a gather and grows its outputs by
    concatenation, with shape invariants. Its cost grows with the square of the length
    (each step copies the outputs so far), which is why it serves export only.
    CHOICE: the outputs grow batch-major, because TFLite's WHILE fails on a loop variable
    that starts empty along axis 0, while an empty axis 1 works.
    """

    def __call__(self, step, inputs_tm, mask_tm, initial_state, output_sizes):
        import tensorflow as tf

        from gnmt_tf.layers.recurrence import masked_step

        steps, batch = tf.shape(mask_tm)[0], tf.shape(mask_tm)[1]
        dtype = tf.nest.flatten(inputs_tm)[0].dtype
        outputs = tf.nest.map_structure(lambda size: tf.zeros(tf.stack([batch, 0, size]), dtype), output_sizes)

        def body(t, state, outputs):
            inputs_t = tf.nest.map_structure(lambda x: tf.gather(x, t), inputs_tm)
            step_outputs, state = masked_step(step, inputs_t, state, tf.gather(mask_tm, t))
            outputs = tf.nest.map_structure(
                lambda grown, o: tf.concat([grown, tf.expand_dims(o, 1)], axis=1), outputs, step_outputs
            )
            return t + 1, state, outputs

        def any_batch(tensor):
            return tf.TensorShape([None] + tensor.shape.as_list()[1:])

        _, final_state, outputs = tf.while_loop(
            lambda t, *_: t < steps,
            body,
            (tf.constant(0), initial_state, outputs),
            shape_invariants=(
                tf.TensorShape([]),
                tf.nest.map_structure(any_batch, initial_state),
                tf.nest.map_structure(lambda o: tf.TensorShape([None, None, o.shape[-1]]), outputs),
            ),
        )
        return tf.nest.map_structure(lambda o: tf.transpose(o, [1, 0, 2]), outputs), final_state


class ConcatenatingRecurrence:
    """The TFLite exporter's :class:`~gnmt_tf.layers.recurrence.Recurrence`: every layer step by step, as
    :class:`~gnmt_tf.layers.recurrence.StepwiseRecurrence` runs it, in a :class:`ConcatenatingLoop`.

    It imports the recurrences (and TensorFlow) only when it runs, so that this module still imports
    where only the interpreter runs (:class:`TFLiteTranslator`).
    """

    def __init__(self):
        self.loop = ConcatenatingLoop()

    def _stepwise(self):
        from gnmt_tf.layers.recurrence import StepwiseRecurrence

        return StepwiseRecurrence(self.loop)

    def lstm(self, cell, projected, mask, weights, initial_state):
        return self._stepwise().lstm(cell, projected, mask, weights, initial_state)

    def steps(self, step, inputs, mask, initial_state, output_sizes):
        return self._stepwise().steps(step, inputs, mask, initial_state, output_sizes)


CONCATENATING_RECURRENCE = ConcatenatingRecurrence()


class TFLiteConversionError(RuntimeError):
    """The converted model needs ops that the LiteRT interpreter with the text ops cannot run."""


def _schema():
    try:
        from ai_edge_litert import schema_py_generated as schema
    except ImportError:  # the converter side always has TensorFlow
        from tensorflow.lite.python import schema_py_generated as schema
    return schema


def _builtin_names():
    schema = _schema()
    return {
        value: name
        for name, value in vars(schema.BuiltinOperator).items()
        if not name.startswith("_") and isinstance(value, int)
    }


def list_ops(tflite_bytes: bytes) -> List[str]:
    """The ops of every subgraph of a .tflite model, sorted, without repeats.

    Builtin ops by their builtin name ("WHILE", "FULLY_CONNECTED"); custom ops (Flex ops included,
    "FlexStridedSlice") by their custom code ("TFText>WhitespaceTokenizeWithOffsetsV2").
    """
    schema = _schema()
    names = _builtin_names()
    model = schema.Model.GetRootAsModel(bytearray(tflite_bytes), 0)
    codes = []
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        # Builtin codes above 127 live in BuiltinCode; the old int8 field holds 127 for them.
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        if builtin == schema.BuiltinOperator.CUSTOM:
            codes.append(code.CustomCode().decode("utf-8"))
        else:
            codes.append(names.get(builtin, f"BUILTIN_{builtin}"))
    used = set()
    for s in range(model.SubgraphsLength()):
        subgraph = model.Subgraphs(s)
        for o in range(subgraph.OperatorsLength()):
            used.add(codes[subgraph.Operators(o).OpcodeIndex()])
    return sorted(used)


def custom_ops(ops: Iterable[str]) -> List[str]:
    """The names in ``ops`` that are not TFLite builtin op names."""
    builtin = set(_builtin_names().values()) - {"CUSTOM"}
    return sorted(op for op in set(ops) if op not in builtin)


def check_ops(ops: Iterable[str]) -> None:
    """Raise :class:`TFLiteConversionError` naming every op that is neither builtin nor tensorflow-text.

    Flex ops (select TF ops) are rejected too: they need the Flex delegate, which this export avoids.
    """
    foreign = [op for op in custom_ops(ops) if op not in ALLOWED_CUSTOM_OPS]
    if foreign:
        flex = [op for op in foreign if op.startswith("Flex")]
        other = [op for op in foreign if not op.startswith("Flex")]
        parts = []
        if flex:
            parts.append(f"Flex (select TensorFlow) ops {', '.join(flex)}")
        if other:
            parts.append(
                f"custom ops {', '.join(other)} (TensorFlow ops without a TFLite kernel that the converter "
                f"let through because allow_custom_ops is on)"
            )
        raise TFLiteConversionError(
            "the TFLite model needs " + " and ".join(parts) + "; only TFLite builtins and the tensorflow-text "
            f"custom ops ({', '.join(sorted(ALLOWED_CUSTOM_OPS))}) can run in the interpreter"
        )


def tflite_translate_function(translator_module):
    """``translator_module.translate`` re-traced for TFLite (time loops without TensorArrays)."""
    from gnmt_tf.inference.translator import GraphTarget, graph_function

    target = GraphTarget(recurrence=CONCATENATING_RECURRENCE, read_kernels_once=False)
    function = graph_function(
        lambda sentences: translator_module.translate_with_defaults(sentences, target=target),
        input_signature=translator_module.translate.input_signature,
    )
    return function.get_concrete_function()


def _state(translator_module):
    """What ``translator_module``'s functions read (its variables, tables and tokenizer), without the functions.

    The converter saves the object it is given as a SavedModel before converting, and saving a module
    traces every function of it that has an input signature (translate_nbest, ...), none of which
    TFLite converts.
    """
    import tensorflow as tf

    state = tf.Module()
    state.model_variables = translator_module.model_variables
    state.weight_transform = translator_module.weight_transform
    state.target_input_rows = translator_module.target_input_rows
    state.tokenizer = translator_module.tokenizer
    state.shortlist = translator_module.shortlist
    return state


def convert_to_tflite(translator_module, quantize: str = "none") -> bytes:
    """Convert ``translator_module.translate`` (strings [batch] -> translations, scores) to float32 TFLite.

    With the module's default shortlist setting (``TranslatorModule.uses_shortlist``).

    ``translator_module`` is an :class:`gnmt_tf.inference.translator.TranslatorModule`. The result has
    one signature, ``serving_default``: input ``sentences`` (string [batch]), outputs ``translations``
    (string [batch]) and ``scores`` (float32 [batch], eq. 14). Raises :class:`TFLiteConversionError`
    if the model would need any op other than the TFLite builtins and the tensorflow-text ops.
    """
    import tensorflow as tf

    concrete = tflite_translate_function(translator_module)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete], _state(translator_module))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    converter.allow_custom_ops = True  # the tensorflow-text kernels are custom ops; check_ops polices the rest
    if quantize == "int8":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    elif quantize != "none":
        raise ValueError(f"quantize must be 'none' or 'int8', got {quantize!r}")
    model = converter.convert()
    check_ops(list_ops(model))
    return model


class TFLiteTranslator:
    """Translate with a converted model in LiteRT's interpreter, the tensorflow-text ops registered.

    Args:
        model: the .tflite bytes, or a path to them.
        num_threads: interpreter threads.
        xnnpack: apply the XNNPACK delegate (LiteRT's default); False runs the reference builtin kernels.
    """

    def __init__(self, model: Union[bytes, str, os.PathLike], num_threads: int = 1, xnnpack: bool = True):
        from ai_edge_litert.interpreter import InterpreterWithCustomOps, OpResolverType
        from tensorflow_text import tflite_registrar

        if isinstance(model, (str, os.PathLike)):
            with open(model, "rb") as handle:
                model = handle.read()
        self.model_content = bytes(model)
        self.interpreter = InterpreterWithCustomOps(
            custom_op_registerers=tflite_registrar.SELECT_TFTEXT_OPS,
            model_content=self.model_content,
            num_threads=num_threads,
            experimental_op_resolver_type=(
                OpResolverType.AUTO if xnnpack else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
            ),
        )
        self.runner = self.interpreter.get_signature_runner(SIGNATURE)

    def translate(self, sentences: Sequence[str]) -> List[Translation]:
        """The best :class:`~gnmt_tf.inference.results.Translation` (text and eq. 14 score) of each sentence,
        in the order given. The model's signature returns no more: the other fields are None, and
        ``truncated`` is not reported (False)."""
        sentences = list(sentences)
        if not sentences:
            return []
        outputs = self.runner(sentences=np.array([s.encode("utf-8") for s in sentences], dtype=object))
        return [Translation(t.decode("utf-8") if isinstance(t, bytes) else str(t), score=float(s))
                for t, s in zip(outputs["translations"].tolist(), outputs["scores"].tolist())]


def int8_weight_tensors(tflite_bytes: bytes) -> List[dict]:
    """The int8 constant tensors of every subgraph (weights quantized by the converter).

    Each entry: ``name``, ``shape``, ``values`` (int8 array), ``scales`` (float32, one per
    channel, or one for the whole tensor), ``quantized_dimension``. TFLite's FULLY_CONNECTED
    weights are ``[output, input]``, so per-channel scales along dimension 0 are eq. 12's one
    scale per output unit (row).
    """
    schema = _schema()
    model = schema.Model.GetRootAsModel(bytearray(tflite_bytes), 0)
    found = []
    for s in range(model.SubgraphsLength()):
        subgraph = model.Subgraphs(s)
        for t in range(subgraph.TensorsLength()):
            tensor = subgraph.Tensors(t)
            if tensor.Type() != schema.TensorType.INT8:
                continue
            data = model.Buffers(tensor.Buffer()).DataAsNumpy()
            quantization = tensor.Quantization()
            if isinstance(data, int) or quantization is None or quantization.ScaleLength() == 0:
                continue  # not a constant, or not a quantized one
            shape = tensor.ShapeAsNumpy().tolist()
            found.append({
                "name": tensor.Name().decode("utf-8"),
                "shape": shape,
                "values": data.view(np.int8).reshape(shape),
                "scales": quantization.ScaleAsNumpy().astype(np.float32),
                "quantized_dimension": quantization.QuantizedDimension(),
            })
    return found
