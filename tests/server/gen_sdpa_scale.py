#!/usr/bin/python3
"""Reference vectors for sdpa's parameters.scale (PyTorch 2's
scaled_dot_product_attention(..., scale=s)).

Run with Debian's /usr/bin/python3 (PyTorch 1.13, whose SDPA has no scale:
the softmax is written out here, in float64):
    /usr/bin/python3 tests/server/gen_sdpa_scale.py
It reads the inputs of fixtures/refs.json (gen_refs.py) and writes
fixtures/sdpa_scale.json: for each scale, softmax((q * scale) k^T) (with
a causal mask for the causal case), the weights times v, and the scores.
sdpa_scale.test.mjs only reads it; it never needs PyTorch.
"""
import json
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "fixtures")


def flat(t):
    return [float(v) for v in t.to(torch.float32).reshape(-1).tolist()]


def ref(q, k, v, scale, causal=False):
    s = (q * scale) @ k.transpose(-1, -2)
    m = s
    if causal:
        t, n = s.shape[-2], s.shape[-1]
        m = s.masked_fill(torch.triu(torch.ones(t, n, dtype=torch.bool), 1),
                          float("-inf"))
    a = torch.softmax(m, dim=-1)
    return {"scale": scale, "output": flat(a @ v), "attention": flat(a),
            "scores": flat(s)}


def main():
    refs = json.load(open(os.path.join(FIX, "refs.json")))
    out = {}
    for name, causal, scales in (("sdpa", False, [1.0, 0.2, 3.0]),
                                 ("sdpa_causal", True, [0.5])):
        r = refs[name]
        # the float32 inputs attnd reads, computed on in float64
        q, k, v = (torch.tensor(r[x], dtype=torch.float32).reshape(r[x + "_shape"])
                   .to(torch.float64) for x in ("q", "k", "v"))
        out[name] = [ref(q, k, v, s, causal) for s in scales]
    with open(os.path.join(FIX, "sdpa_scale.json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
