#!/usr/bin/python3
"""PyTorch reference for decoder steps over a K/V cache (tests/core/test_kv.c).

Run with Debian's python3-torch (PyTorch 1.13):
    /usr/bin/python3 tests/core/gen_decode_vectors.py
An HF-Llama-style attention layer in plain torch: q/k/v projections with
bias, rotate_half RoPE at position ids (the first rot dims), past_key_values
concatenated along the sequence, GQA by repeat_interleave, a causal mask
aligned bottom-right, softmax, W_o. A prompt is prefilled in one call, then
each further token is one call with the cache the previous calls returned.

Writes tests/core/vectors/decode.bin, little-endian:
  int32 n_cases, then per case:
  int32 d_model, n_heads, n_kv_heads, head_dim, v_head_dim, rot, n_prompt,
        n_steps; float32 rope_theta;
  float32 w_q (d_model, H*dk), w_k, w_v, w_o (H*dv, d_model), b_q, b_k, b_v,
        b_o; x (n_prompt + n_steps, d_model);
        y of the prefill (n_prompt, d_model);
        per step i (0-based): y (d_model), attention (H, n_prompt + i + 1).
"""
import os
import struct

import torch

torch.manual_seed(1)
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vectors",
                   "decode.bin")


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def apply_rope(x, pos, theta, rot):
    """x (heads, T, d); positions pos (T,); inv_freq and the angles in
    float32, as HF's LlamaRotaryEmbedding."""
    inv = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.int64).float()
                           / rot))
    ang = pos.float()[:, None] * inv[None, :]
    ang = torch.cat((ang, ang), dim=-1)
    cos, sin = ang.cos(), ang.sin()
    xr, xp = x[..., :rot], x[..., rot:]
    return torch.cat((xr * cos + rotate_half(xr) * sin, xp), dim=-1)


def layer(p, w, x, past):
    """One call: x (T, d_model) new tokens, past = (k, v) or None."""
    H, Hk, dk, dv = p["H"], p["Hk"], p["dk"], p["dv"]
    T = x.shape[0]
    p0 = 0 if past is None else past[0].shape[1]
    pos = torch.arange(p0, p0 + T)
    q = (x @ w["w_q"] + w["b_q"]).view(T, H, dk).transpose(0, 1)
    k = (x @ w["w_k"] + w["b_k"]).view(T, Hk, dk).transpose(0, 1)
    v = (x @ w["w_v"] + w["b_v"]).view(T, Hk, dv).transpose(0, 1)
    q = apply_rope(q, pos, p["theta"], p["rot"])
    k = apply_rope(k, pos, p["theta"], p["rot"])
    if past is not None:
        k = torch.cat((past[0], k), dim=1)
        v = torch.cat((past[1], v), dim=1)
    S = k.shape[1]
    kk = k.repeat_interleave(H // Hk, dim=0)
    vv = v.repeat_interleave(H // Hk, dim=0)
    sc = q @ kk.transpose(1, 2) / dk ** 0.5
    keep = torch.arange(S)[None, :] <= (p0 + torch.arange(T))[:, None]
    a = torch.softmax(sc.masked_fill(~keep, float("-inf")), dim=-1)
    o = (a @ vv).transpose(0, 1).reshape(T, H * dv)
    return o @ w["w_o"] + w["b_o"], a, (k, v)


def case(d_model, H, Hk, dk, dv, rot, theta, n_prompt, n_steps):
    p = dict(H=H, Hk=Hk, dk=dk, dv=dv, rot=rot, theta=theta)
    s = d_model ** -0.5
    w = dict(w_q=torch.randn(d_model, H * dk) * s,
             w_k=torch.randn(d_model, Hk * dk) * s,
             w_v=torch.randn(d_model, Hk * dv) * s,
             w_o=torch.randn(H * dv, d_model) * s,
             b_q=torch.randn(H * dk) * 0.1, b_k=torch.randn(Hk * dk) * 0.1,
             b_v=torch.randn(Hk * dv) * 0.1, b_o=torch.randn(d_model) * 0.1)
    x = torch.randn(n_prompt + n_steps, d_model)
    y0, _, past = layer(p, w, x[:n_prompt], None)
    out = [struct.pack("<8if", d_model, H, Hk, dk, dv, rot, n_prompt, n_steps,
                       theta)]
    for t in (w["w_q"], w["w_k"], w["w_v"], w["w_o"], w["b_q"], w["b_k"],
              w["b_v"], w["b_o"], x, y0):
        out.append(t.contiguous().float().numpy().tobytes())
    for i in range(n_steps):
        r = n_prompt + i
        y, a, past = layer(p, w, x[r:r + 1], past)
        out.append(y.numpy().tobytes())
        out.append(a[:, 0, :].contiguous().numpy().tobytes())
    return b"".join(out)


with torch.no_grad():
    cases = [case(24, 4, 2, 8, 6, 4, 10000.0, 7, 6),   # GQA, partial RoPE
             case(16, 4, 1, 8, 8, 8, 500.0, 70, 4),    # MQA, full RoPE
             # wide enough (k >= 128) that the 20-row prefill's
             # projections take core/skinny.c's GEMM on AVX-512
             case(128, 4, 2, 32, 32, 32, 10000.0, 20, 3),
             # groups of 4 query heads of 64 (core/small_attn.c's 4 x 64
             # blocks) over keys that cross a 64-token page
             case(128, 8, 2, 64, 64, 64, 10000.0, 70, 3)]
with open(OUT, "wb") as f:
    f.write(struct.pack("<i", len(cases)))
    for c in cases:
        f.write(c)
print("wrote", OUT)


# ---- decode_rewind.bin: a long sequence of one-token steps with rewinds ----
# (written after decode.bin, from its own seed, so decode.bin's bytes do not
# change). One sequence over 64-token pages: a prompt of 5, then steps of
# one token each to 140 tokens (across the page edges at 64 and 128); a
# rewind is a step at a position below the length: the cache is cut to that
# position (past_key_values[:, :pos]) and the step's tokens follow it, their
# positions (RoPE) from pos on. Ops (pos, t), in order; every op's x rows
# are new tokens (a rewind's differ from the ones it replaces).
#
# Writes tests/core/vectors/decode_rewind.bin, little-endian:
#   int32 d_model, n_heads, n_kv_heads, head_dim, v_head_dim, rot, n_ops;
#         float32 rope_theta;
#   float32 w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o (as decode.bin);
#   per op: int32 pos, t; float32 x (t, d_model), y (t, d_model),
#           attention (H, t, pos + t) (causal: row i over keys 0 .. pos + i).
REWIND_OUT = os.path.join(os.path.dirname(OUT), "decode_rewind.bin")


def rewind_ops():
    ops = [(0, 5)]
    n = 5
    while n < 140:            # one token a step, across two page edges
        ops.append((n, 1))
        n += 1
    ops += [(128, 1),         # back onto the edge of the third page
            (129, 1), (130, 1),
            (64, 1),          # onto the edge of the second page: the third
            (65, 1),          # page's tokens are gone
            (63, 3),          # a draft that straddles the page edge
            (66, 1), (67, 1),
            (66, 1),          # the last token sent again (a retry)
            (60, 9),          # a longer one, past the old length (67 -> 69)
            (69, 1),
            (10, 1),          # far back: one page
            (11, 1), (12, 1)]
    return ops


def rewind_case(d_model, H, Hk, dk, dv, rot, theta):
    p = dict(H=H, Hk=Hk, dk=dk, dv=dv, rot=rot, theta=theta)
    s = d_model ** -0.5
    w = dict(w_q=torch.randn(d_model, H * dk) * s,
             w_k=torch.randn(d_model, Hk * dk) * s,
             w_v=torch.randn(d_model, Hk * dv) * s,
             w_o=torch.randn(H * dv, d_model) * s,
             b_q=torch.randn(H * dk) * 0.1, b_k=torch.randn(Hk * dk) * 0.1,
             b_v=torch.randn(Hk * dv) * 0.1, b_o=torch.randn(d_model) * 0.1)
    ops = rewind_ops()
    out = [struct.pack("<7if", d_model, H, Hk, dk, dv, rot, len(ops), theta)]
    for t in (w["w_q"], w["w_k"], w["w_v"], w["w_o"], w["b_q"], w["b_k"],
              w["b_v"], w["b_o"]):
        out.append(t.contiguous().float().numpy().tobytes())
    past = None
    for pos, t in ops:
        held = 0 if past is None else past[0].shape[1]
        assert pos <= held
        if past is not None:
            past = (past[0][:, :pos], past[1][:, :pos])
            if pos == 0:
                past = None
        x = torch.randn(t, d_model)
        y, a, past = layer(p, w, x, past)
        assert past[0].shape[1] == pos + t
        out.append(struct.pack("<2i", pos, t))
        out.append(x.contiguous().numpy().tobytes())
        out.append(y.contiguous().numpy().tobytes())
        out.append(a.contiguous().numpy().tobytes())
    return b"".join(out)


with torch.no_grad():
    torch.manual_seed(2)
    rcase = rewind_case(16, 4, 2, 4, 4, 4, 10000.0)  # GQA, RoPE, biases
with open(REWIND_OUT, "wb") as f:
    f.write(rcase)
print("wrote", REWIND_OUT)
