"""The GNMT model (section 3): encoder, decoder, the Keras model with the one-step decoding API, and
what its one training step minimises (objectives; maximum likelihood, eq. 7), and ensembles of trained
models that decode as one (section 8.6)."""

from gnmt_tf.models.decoder import DecoderState, GNMTDecoder
from gnmt_tf.models.encoder import GNMTEncoder
from gnmt_tf.models.ensemble import Ensemble
from gnmt_tf.models.gnmt import GNMT
from gnmt_tf.models.losses import SequenceCrossEntropy
from gnmt_tf.models.objectives import Batch, MaximumLikelihood

__all__ = [
    "Batch", "DecoderState", "Ensemble", "GNMT", "GNMTDecoder", "GNMTEncoder", "MaximumLikelihood", "SequenceCrossEntropy",
]
