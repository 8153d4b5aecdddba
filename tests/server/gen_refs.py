#!/usr/bin/python3
"""Generate the daemon tests' reference vectors with PyTorch.

Run with Debian's /usr/bin/python3 (PyTorch 1.13):
    /usr/bin/python3 tests/server/gen_refs.py
It writes, next to this script:
  fixtures/models/tiny/model.safetensors, config.json
      an nn.MultiheadAttention(8, 2 heads, bias) state dict, seed 1234
  fixtures/refs.json
      inputs and PyTorch outputs for that model and for plain SDPA
The tests only read these files; they never need PyTorch.
"""
import base64
import json
import math
import os
import struct

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "fixtures")
D, H = 8, 2


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().contiguous().to(torch.float32).numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def flat(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def mha_ref(mha, x, lengths=None, causal=False):
    """y [B,T,D] and attention [B,H,T,T]; padded query rows are zero."""
    b, t, _ = x.shape
    mask = None
    if causal:
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    kpm = None
    if lengths is not None:
        kpm = torch.arange(t)[None, :] >= torch.tensor(lengths)[:, None]
    y, a = mha(x, x, x, attn_mask=mask, key_padding_mask=kpm,
               need_weights=True, average_attn_weights=False)
    if lengths is not None:
        for i, n in enumerate(lengths):
            y[i, n:] = 0
            a[i, :, n:] = 0
    return y, a


def sdpa_ref(q, k, v, causal=False):
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = s.clone()
    if causal:
        t, n = s.shape[-2], s.shape[-1]
        s = s.masked_fill(torch.triu(torch.ones(t, n, dtype=torch.bool), 1),
                          float("-inf"))
    a = torch.softmax(s, dim=-1)
    return a @ v, a, scores


def main():
    torch.manual_seed(1234)
    mha = torch.nn.MultiheadAttention(D, H, bias=True, batch_first=True)
    mha.eval()
    tiny = os.path.join(FIX, "models", "tiny")
    os.makedirs(tiny, exist_ok=True)
    write_safetensors(os.path.join(tiny, "model.safetensors"),
                      dict(mha.state_dict()))
    with open(os.path.join(tiny, "config.json"), "w") as f:
        json.dump({"n_heads": H, "description": "test fixture: "
                   "nn.MultiheadAttention(8, 2), seed 1234"}, f)
        f.write("\n")

    refs = {"model": "tiny", "d_model": D, "n_heads": H}
    with torch.no_grad():
        x = torch.randn(2, 5, D)
        y, a = mha_ref(mha, x)
        refs["self"] = {"shape": [2, 5, D], "x": flat(x), "y": flat(y),
                        "attention": flat(a)}
        x = torch.randn(1, 4, D)
        y, a = mha_ref(mha, x, causal=True)
        refs["causal"] = {"shape": [1, 4, D], "x": flat(x), "y": flat(y),
                          "attention": flat(a)}
        x = torch.randn(2, 5, D)
        y, a = mha_ref(mha, x, lengths=[5, 3])
        refs["lengths"] = {"shape": [2, 5, D], "lengths": [5, 3],
                           "x": flat(x), "y": flat(y), "attention": flat(a)}
        # large enough that the daemon spreads it over the pool by stages
        x = torch.randn(1, 700, D)
        x = torch.tensor([[[round(v, 6) for v in row] for row in x[0].tolist()]])
        y, _ = mha_ref(mha, x, causal=True)
        refs["large"] = {"shape": [1, 700, D], "x": [round(v, 6) for v in flat(x)],
                         "y": flat(y)}
        clients = []
        for i in range(12):
            t = 2 + (i * 5) % 11
            x = torch.randn(1, t, D)
            y, _ = mha_ref(mha, x)
            clients.append({"shape": [1, t, D], "x": flat(x), "y": flat(y)})
        refs["clients"] = clients
        # FP16 / BF16: the bytes sent, and the reference of the rounded x
        x = torch.randn(1, 6, D)
        y32, _ = mha_ref(mha, x)
        for name, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
            xr = x.to(dt)
            raw = xr.view(torch.int16).numpy().astype("<i2").tobytes()
            y, _ = mha_ref(mha, xr.to(torch.float32))
            refs[name] = {"shape": [1, 6, D], "x_b64": base64.b64encode(raw).decode(),
                          "y": flat(y), "y_fp32": flat(y32), "x_fp32": flat(x)}
        q, k, v = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 6, 5), torch.randn(2, 3, 6, 7)
        o, a, s = sdpa_ref(q, k, v)
        refs["sdpa"] = {"q": flat(q), "k": flat(k), "v": flat(v), "q_shape": [2, 3, 4, 5],
                        "k_shape": [2, 3, 6, 5], "v_shape": [2, 3, 6, 7],
                        "output": flat(o), "attention": flat(a), "scores": flat(s)}
        q, k, v = torch.randn(5, 4), torch.randn(5, 4), torch.randn(5, 3)
        o, a, s = sdpa_ref(q, k, v, causal=True)
        refs["sdpa_causal"] = {"q": flat(q), "k": flat(k), "v": flat(v),
                               "q_shape": [5, 4], "k_shape": [5, 4], "v_shape": [5, 3],
                               "output": flat(o), "attention": flat(a)}
    with open(os.path.join(FIX, "refs.json"), "w") as f:
        json.dump(refs, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
