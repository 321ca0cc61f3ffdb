"""gnmt_tf: Google's Neural Machine Translation system (Wu et al. 2016) on TensorFlow.

Built on Keras 2 (the ``tf_keras`` package), which tensorflow-model-optimization
and the multi-worker / parameter-server ``fit`` paths need; ``gnmt_tf.keras``
is that Keras, for callbacks, optimizers and layers that work with the model.

The public names below are imported on first use, so that command-line tools
(``python -m gnmt_tf.train --help``) answer without loading TensorFlow.
"""

import importlib

from gnmt_tf.lazy import lazy_names

__version__ = "0.1.0"

_PUBLIC = {
    "GNMT": "gnmt_tf.models.gnmt",
    "GNMTConfig": "gnmt_tf.config",
    "ModelConfig": "gnmt_tf.config",
    "ConfigError": "gnmt_tf.config",
    "load_config": "gnmt_tf.config",
    "SequenceCrossEntropy": "gnmt_tf.models.losses",
    "WordpieceTokenizer": "gnmt_tf.data.tokenizer",
    "Translator": "gnmt_tf.inference.translator",
    "load_model_dir": "gnmt_tf.model_files",
    "beam_search": "gnmt_tf.decoding.beam",
    "Int8Weights": "gnmt_tf.quantization.weights",
    "WeightReader": "gnmt_tf.layers.weights",
    "QuantizationAwareTraining": "gnmt_tf.quantization.qat",
}

__getattr__, __dir__, __all__ = lazy_names(__name__, _PUBLIC, {"keras": lambda: importlib.import_module("tf_keras")},
                                           defined=["__version__"])
