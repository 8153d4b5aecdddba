#!/usr/bin/python3
"""Reference vectors for what=norm (Kobayashi et al. 2020's norm-based
attention, "Attention is Not Only a Weight: Analyzing Transformers with
Vector Norms").

Run with Debian's /usr/bin/python3 (PyTorch 1.13):
    /usr/bin/python3 tests/server/gen_maps_norm.py
It loads fixtures/models/tiny (gen_refs.py's nn.MultiheadAttention(8, 2)
state dict) into an nn.MultiheadAttention, runs it on the inputs of
fixtures/refs.json (self, lengths, cross: context_lengths and a mask) with
need_weights=True, average_attn_weights=False, and writes
fixtures/maps_norm.json: per case the value norms |v_j^h W_O^h|_2 [B, H, S]
(v = context @ W_v^T + b_v, head h's d_v columns; W_O^h = out_proj.weight's
columns of head h, transposed: the d_v rows of W_o head h's output goes
through), the cells alpha_ij^h |v_j^h W_O^h| [B, H, T, S] and h=mean's
mean of the heads' cells [B, T, S]. It checks the decomposition they come
from: sum_h sum_j alpha_ij^h v_j^h W_O^h + b_o is the module's output y
(rows past lengths aside). sdpa (refs.json's [2, 3, 4, 5] q, [2, 3, 6, 7]
v, manual SDPA weights) has no W_o: |v_j^h|_2. Float32 throughout, as
the module computes. maps_norm.test.mjs only reads it; it never needs
PyTorch.
"""
import json
import math
import os
import struct

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "fixtures")


def flat(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def load_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for name, m in head.items():
        if name == "__metadata__":
            continue
        a, b = m["data_offsets"]
        buf = bytearray(raw[8 + n + a:8 + n + b])
        out[name] = torch.frombuffer(buf, dtype=torch.float32).reshape(m["shape"]).clone()
    return out


def mha_norms(mha, x, ctx, kpm=None, blocked=None):
    """attention [B, H, T, S], norms [B, H, S], y [B, T, D]."""
    D, H = mha.embed_dim, mha.num_heads
    dv = D // H
    y, a = mha(x, ctx, ctx, attn_mask=blocked, key_padding_mask=kpm,
               need_weights=True, average_attn_weights=False)
    w_v = mha.in_proj_weight[2 * D:]
    b_v = mha.in_proj_bias[2 * D:]
    v = ctx @ w_v.T + b_v                          # [B, S, D]
    B, S, _ = v.shape
    v = v.reshape(B, S, H, dv).permute(0, 2, 1, 3)  # [B, H, S, dv]
    w_o = mha.out_proj.weight.T                    # [H * dv, D]: y = o W_o + b_o
    f = torch.stack([v[:, h] @ w_o[h * dv:(h + 1) * dv] for h in range(H)], 1)
    # the decomposition: sum over heads and keys of alpha f, plus b_o, is y
    y2 = torch.einsum("bhts,bhsd->btd", a, f) + mha.out_proj.bias
    assert torch.allclose(y, y2, atol=1e-5), (y - y2).abs().max()
    return a, f.norm(dim=-1), y


def entry(a, n):
    if a.dim() == 3:
        a = a[None]
        n = n[None]
    cells = a * n[:, :, None, :]                   # [B, H, T, S]
    return {"shape": list(a.shape), "norms": flat(n), "cells": flat(cells),
            "mean": flat(cells.mean(1))}


def main():
    refs = json.load(open(os.path.join(FIX, "refs.json")))
    sd = load_safetensors(os.path.join(FIX, "models", "tiny", "model.safetensors"))
    D, H = refs["d_model"], refs["n_heads"]
    mha = torch.nn.MultiheadAttention(D, H, bias=True, batch_first=True)
    mha.load_state_dict(sd)
    mha.eval()
    out = {}
    with torch.no_grad():
        c = refs["self"]
        x = torch.tensor(c["x"]).reshape(c["shape"])
        a, n, y = mha_norms(mha, x, x)
        assert torch.allclose(y, torch.tensor(c["y"]).reshape(y.shape), atol=1e-5)
        out["self"] = entry(a, n)
        c = refs["lengths"]
        x = torch.tensor(c["x"]).reshape(c["shape"])
        kpm = torch.arange(x.shape[1])[None, :] >= torch.tensor(c["lengths"])[:, None]
        a, n, _ = mha_norms(mha, x, x, kpm=kpm)
        for i, m in enumerate(c["lengths"]):
            a[i, :, m:] = 0   # padded query rows: 0 (as attnd's)
            n[i, :, m:] = 0   # padded keys: weight 0 whatever their norm
        out["lengths"] = entry(a, n)
        c = refs["cross"]
        x = torch.tensor(c["x"]).reshape(c["shape"])
        ctx = torch.tensor(c["context"]).reshape(c["context_shape"])
        B, T, _ = c["shape"]
        S = c["context_shape"][1]
        allow = torch.tensor(c["mask"]).reshape(B, T, S)
        kpm = torch.arange(S)[None, :] >= torch.tensor(c["context_lengths"])[:, None]
        blocked = (~allow).repeat_interleave(H, dim=0)
        a, n, _ = mha_norms(mha, x, ctx, kpm=kpm, blocked=blocked)
        for i, m in enumerate(c["context_lengths"]):
            n[i, :, m:] = 0
        out["cross"] = entry(a, n)
        r = refs["sdpa"]
        q = torch.tensor(r["q"]).reshape(r["q_shape"])
        k = torch.tensor(r["k"]).reshape(r["k_shape"])
        v = torch.tensor(r["v"]).reshape(r["v_shape"])
        a = torch.softmax((q / math.sqrt(q.shape[-1])) @ k.transpose(-1, -2), dim=-1)
        out["sdpa"] = entry(a, v.norm(dim=-1))
    with open(os.path.join(FIX, "maps_norm.json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
