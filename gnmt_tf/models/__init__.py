"""The GNMT model (section 3): encoder, decoder, and the Keras model with the one-step decoding API."""
