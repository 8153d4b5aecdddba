#!/usr/bin/python3
"""Reference vectors for what=entropy (each query row's attention entropy).

Run with Debian's /usr/bin/python3 (PyTorch 1.13):
    /usr/bin/python3 tests/server/gen_maps_entropy.py
It reads the inputs of fixtures/refs.json (gen_refs.py) and writes
fixtures/maps_entropy.json: for sdpa and sdpa_causal, the weights computed
here anew (manual SDPA, as gen_refs.py's sdpa_ref); for cross and seq, the
weights nn.MultiheadAttention gave with need_weights=True,
average_attn_weights=False, as refs.json holds them (cross: context_lengths
and an explicit mask, masked cells 0; seq: refs.json's causal map, which a
sequence fed that x in steps holds). Each row's entropy in nats,
-(p * p.log()).nansum(-1) in float32 (0 * ln 0 is nan there, and nansum
drops it: 0 ln 0 = 0), [B, H, T], and h=mean's mean of the heads'
entropies, [B, T]. maps_entropy.test.mjs only reads it; it never needs
PyTorch.
"""
import json
import math
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "fixtures")


def flat(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def entropy(p):
    return -(p * p.log()).nansum(-1)


def sdpa(r, causal):
    q = torch.tensor(r["q"]).reshape(r["q_shape"])
    k = torch.tensor(r["k"]).reshape(r["k_shape"])
    s = (q / math.sqrt(q.shape[-1])) @ k.transpose(-1, -2)
    if causal:
        t, n = s.shape[-2], s.shape[-1]
        s = s.masked_fill(torch.triu(torch.ones(t, n, dtype=torch.bool), 1),
                          float("-inf"))
    return torch.softmax(s, dim=-1)


def entry(a):
    if a.dim() == 2:  # sdpa's [T, S]: one item, one head
        a = a[None, None]
    if a.dim() == 3:  # sdpa's [H, T, S]: one item
        a = a[None]
    e = entropy(a)  # [B, H, T]
    return {"shape": list(e.shape), "entropy": flat(e),
            "mean": flat(e.mean(1))}


def main():
    refs = json.load(open(os.path.join(FIX, "refs.json")))
    out = {}
    with torch.no_grad():
        out["sdpa"] = entry(sdpa(refs["sdpa"], False))
        out["sdpa_causal"] = entry(sdpa(refs["sdpa_causal"], True))
        c = refs["cross"]
        B, T, _ = c["shape"]
        S = c["context_shape"][1]
        H = refs["n_heads"]
        a = torch.tensor(c["attention"]).reshape(B, H, T, S)
        out["cross"] = entry(a)
        # a sequence fed refs.json's causal x in steps: its map is the
        # causal nn.MultiheadAttention map of the whole input
        c = refs["causal"]
        B, T, _ = c["shape"]
        out["seq"] = entry(torch.tensor(c["attention"]).reshape(B, H, T, T))
    with open(os.path.join(FIX, "maps_entropy.json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
