#!/usr/bin/python3
"""HF Llama's RoPE tables for tests/core/test_kernel.c (rope_table_hf).

Run with Debian's python3-torch (PyTorch 1.13):
    /usr/bin/python3 tests/core/gen_rope_vectors.py
The recipe of transformers' LlamaRotaryEmbedding (vLLM's and Meta's
reference code compute the same), in float32 as it is there:
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    freqs = inv_freq[None, :, None] @ position_ids[:, None, :].float()
    cos, sin = cat(freqs, freqs).cos(), .sin()
Writes tests/core/vectors/rope_hf.bin, little-endian: int32 n_cases, then
per case int32 rot, n_pos; float32 theta; int32 positions (n_pos); float32
(n_pos, rot) rows in the engine's layout: rot/2 cos, then rot/2 sin.
"""
import os
import struct

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vectors",
                   "rope_hf.bin")
POS = [0, 1, 7, 1000, 4097, 8191, 32768, 65535, 131071, 131072, 500000,
       1048575, 16777217]


def hf_table(rot, theta, pos):
    inv = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.int64).float()
                           / rot))
    ids = torch.tensor(pos, dtype=torch.int64)[None, :]
    freqs = (inv[None, :, None].float() @ ids[:, None, :].float())
    freqs = freqs.transpose(1, 2)[0]  # (n_pos, rot/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    h = rot // 2
    return torch.cat((cos[:, :h], sin[:, :h]), dim=-1)


cases = [(128, 10000.0), (128, 500000.0), (64, 10000.0), (8, 500.0)]
out = [struct.pack("<i", len(cases))]
for rot, theta in cases:
    out.append(struct.pack("<iif", rot, len(POS), theta))
    out.append(struct.pack(f"<{len(POS)}i", *POS))
    out.append(hf_table(rot, theta, POS).contiguous().numpy().tobytes())
with open(OUT, "wb") as f:
    f.write(b"".join(out))
print(f"{len(cases)} cases, {len(POS)} positions")
