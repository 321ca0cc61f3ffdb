"""The GNMT model (section 3): encoder, decoder, and the Keras model with the one-step decoding API."""

from gnmt_tf.models.decoder import DecoderState, GNMTDecoder, clip_logits
from gnmt_tf.models.encoder import GNMTEncoder
from gnmt_tf.models.gnmt import GNMT

__all__ = ["DecoderState", "GNMT", "GNMTDecoder", "GNMTEncoder", "clip_logits"]
