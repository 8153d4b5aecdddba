#!/usr/bin/python3
"""Reference vectors for whole retained maps (b=all, h=all) and .npy answers.

Run with Debian's /usr/bin/python3 (PyTorch 1.13, numpy):
    /usr/bin/python3 tests/server/gen_maps_whole.py
It reads the inputs of fixtures/refs.json (gen_refs.py) and writes
fixtures/maps_whole.json: PyTorch's attention, scores, head means and
max-pooled planes of those inputs, computed here anew, and the header
bytes numpy.save writes for each shape a test asks for. maps_whole.test.mjs
only reads it; it never needs PyTorch or numpy.
"""
import base64
import io
import json
import math
import os

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "fixtures")


def flat(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def npy_header(shape):
    """The bytes numpy.save puts before the data of a float32 array."""
    buf = io.BytesIO()
    np.save(buf, np.zeros(shape, dtype="<f4"))
    raw = buf.getvalue()
    return base64.b64encode(raw[:len(raw) - 4 * int(np.prod(shape))]).decode()


def pool_max(a, max_n):
    """attnd's max=N: blocks of ceil(T/bt) x ceil(S/bs), each its largest."""
    t, s = a.shape[-2], a.shape[-1]
    bt = 1 if t <= max_n else math.ceil(t / max_n)
    bs = 1 if s <= max_n else math.ceil(s / max_n)
    lead = a.shape[:-2]
    p = torch.nn.functional.max_pool2d(a.reshape(-1, 1, t, s), (bt, bs),
                                       stride=(bt, bs), ceil_mode=True)
    return p.reshape(*lead, p.shape[-2], p.shape[-1]), [bt, bs]


def main():
    refs = json.load(open(os.path.join(FIX, "refs.json")))
    out = {}
    with torch.no_grad():
        r = refs["sdpa"]
        q = torch.tensor(r["q"]).reshape(r["q_shape"])
        k = torch.tensor(r["k"]).reshape(r["k_shape"])
        v = torch.tensor(r["v"]).reshape(r["v_shape"])
        scores = (q / math.sqrt(q.shape[-1])) @ k.transpose(-1, -2)
        a = torch.softmax(scores, dim=-1)  # [B, H, T, S]
        pooled, block = pool_max(a, 3)
        pooled_mean, _ = pool_max(a.mean(1), 3)
        out["sdpa"] = {
            "attention": flat(a), "shape": list(a.shape),
            "scores": flat(scores), "v": flat(v), "v_shape": list(v.shape),
            # the mean over heads of each item, [B, T, S]
            "mean": flat(a.mean(1)), "mean_shape": list(a.mean(1).shape),
            # max=3 of every plane, [B, H, 2, 3], and of each item's mean
            "pooled3": flat(pooled), "pooled3_shape": list(pooled.shape),
            "pooled3_block": block, "pooled3_mean": flat(pooled_mean),
        }
        c = refs["cross"]
        B, T, _ = c["shape"]
        S = c["context_shape"][1]
        H = refs["n_heads"]
        allow = torch.tensor(c["mask"]).reshape(B, T, S)
        keys = torch.arange(S)[None, :] < torch.tensor(c["context_lengths"])[:, None]
        m = (allow & keys[:, None, :])[:, None].expand(B, H, T, S)
        out["cross"] = {"mask": [int(x) for x in m.reshape(-1).tolist()],
                        "shape": [B, H, T, S]}
    shapes = [[2, 3, 4, 6], [3, 4, 6], [2, 4, 6], [2, 3, 2, 3], [4, 6],
              [2, 3, 6, 7], [2, 2, 3, 5]]
    out["npy_headers"] = {",".join(map(str, s)): npy_header(s) for s in shapes}
    with open(os.path.join(FIX, "maps_whole.json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
