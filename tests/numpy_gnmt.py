"""An independent NumPy re-derivation of GNMT's forward pass (paper eq. 4, 6, 10, 11, 13).

Written from the paper, not from gnmt_tf's code: plain loops over time and
layers, one sentence at a time, no masking tricks (a sentence is simply cut
to its real length). Weights are read from a built ``GNMT`` model.
"""

import numpy as np


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def lstm_step(x, c, m, kernel, recurrent_kernel, bias, form, forget_bias, delta):
    """Eq. 11 (gate order i, i', f, o) followed by the cell clip of eq. 10."""
    units = c.shape[-1]
    z = x @ kernel + m @ recurrent_kernel
    if bias is not None:
        z = z + bias
    W = [z[..., k * units : (k + 1) * units] for k in range(4)]
    i = sigmoid(W[0])
    i_prime = np.tanh(W[1])
    f = sigmoid(W[2] + forget_bias)
    o = sigmoid(W[3])
    c_new = np.clip(c * f + i_prime * i, -delta, delta)
    m_new = c_new * o if form == "paper" else o * np.tanh(c_new)
    return c_new, m_new


def run_lstm(xs, weights, form, forget_bias, delta):
    """Run one LSTM layer over a [time, features] sequence; returns m for every step."""
    kernel, recurrent_kernel, bias = weights
    units = recurrent_kernel.shape[0]
    c = np.zeros(units)
    m = np.zeros(units)
    outputs = []
    for x in xs:
        c, m = lstm_step(x, c, m, kernel, recurrent_kernel, bias, form, forget_bias, delta)
        outputs.append(m)
    return np.array(outputs)


def cell_weights(cell):
    bias = cell.bias.numpy() if cell.bias is not None else None
    return cell.kernel.numpy(), cell.recurrent_kernel.numpy(), bias


def reference_logits(model, source, target_input):
    """Logits [tgt, vocab] and attention [tgt, src] for ONE unpadded sentence pair."""
    cfg = model.model_config
    delta = float(model.clip_delta.numpy())
    form, fb = cfg.cell, cfg.forget_bias
    src_emb = model.source_embedding.embeddings.numpy()[source]
    tgt_emb = model.target_embedding.embeddings.numpy()[target_input]

    # Encoder: bi-directional layer 1 (fig. 3), then layers 2..N with residuals from layer 3 (eq. 6, 10).
    enc = model.encoder
    forward = run_lstm(src_emb, cell_weights(enc.forward_cell), form, fb, delta)
    backward = run_lstm(src_emb[::-1], cell_weights(enc.backward_cell), form, fb, delta)[::-1]
    x = np.concatenate([forward, backward], axis=-1)
    for k, cell in enumerate(enc.upper.cells):
        layer = 2 + k
        m = run_lstm(x, cell_weights(cell), form, fb, delta)
        x = np.clip(m + x, -delta, delta) if layer >= cfg.residual_start else m
    encoder_outputs = x  # [src, width]

    att = model.decoder.attention
    Wq, Wk, b, v = (att.query_kernel.numpy(), att.key_kernel.numpy(), att.hidden_bias.numpy(), att.score_vector.numpy())

    def attend(query):
        scores = np.array([v @ np.tanh(query @ Wq + x_t @ Wk + b) for x_t in encoder_outputs])  # eq. 4
        p = np.exp(scores - scores.max())
        p = p / p.sum()
        return p @ encoder_outputs, p

    # Decoder: one step at a time, exactly as written in section 3.
    dec = model.decoder
    cells = [dec.bottom_cell] + list(dec.upper.cells)
    weights = [cell_weights(c) for c in cells]
    states = [(np.zeros(c.units), np.zeros(c.units)) for c in cells]
    context = np.zeros(encoder_outputs.shape[-1])
    softmax_w = dec.softmax_projection.kernel.numpy()
    softmax_b = dec.softmax_projection.bias.numpy()
    all_logits, all_probs = [], []
    for y in tgt_emb:
        bottom_in = np.concatenate([y, context]) if cfg.input_feeding else y
        c, m = lstm_step(bottom_in, *states[0], *weights[0], form, fb, delta)
        states[0] = (c, m)
        context, probs = attend(m)  # the bottom layer's output is the query
        x = m
        for k in range(1, len(cells)):
            layer = 1 + k
            c, m = lstm_step(np.concatenate([x, context]), *states[k], *weights[k], form, fb, delta)
            states[k] = (c, m)
            x = np.clip(m + x, -delta, delta) if layer >= cfg.residual_start else m
        logits = np.clip(x @ softmax_w + softmax_b, -cfg.logit_clip, cfg.logit_clip)  # eq. 13
        all_logits.append(logits)
        all_probs.append(probs)
    return np.array(all_logits), np.array(all_probs)
