"""Section 6: int8 weights (eq. 12), int8 products, quantization-aware training."""
