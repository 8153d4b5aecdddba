#!/usr/bin/python3
"""PyTorch 1.13 peer of bench/bench_decode.c: decoder steps over a K/V cache,
written as a PyTorch user writes them.

usage: torch_decode_peer.py N prompt steps d_model H H_kv head_dim threads
Prints `tps=<tokens/s>` of the steps (prefill not timed).

A preallocated cache (N, H_kv, prompt + steps, head_dim) for keys and for
values, one batched step for all N sequences: projections with F.linear,
rotate_half RoPE at the step's position, the new K/V written into the
cache, attention of each query head over its kv head's cache rows up to the
batch's longest sequence (GQA by repeat_interleave), a causal and padding
mask (sequences shorter than the longest are padded, as a batch of unequal
sequences would be), softmax, W_o.
"""
import sys
import time

import torch
import torch.nn.functional as F


def rope_tables(n_pos, dk, theta=10000.0):
    inv = 1.0 / (theta ** (torch.arange(0, dk, 2, dtype=torch.float64) / dk))
    ang = torch.arange(n_pos, dtype=torch.float64)[:, None] * inv[None, :]
    ang = torch.cat((ang, ang), dim=-1)
    return ang.cos().float(), ang.sin().float()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def main():
    N, prompt, steps, dm, H, Hk, dk, threads = map(int, sys.argv[1:9])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    g = H // Hk
    s = dm ** -0.5
    wq, wk = torch.randn(H * dk, dm) * s, torch.randn(Hk * dk, dm) * s
    wv, wo = torch.randn(Hk * dk, dm) * s, torch.randn(dm, H * dk) * s
    L = prompt + steps
    cos, sin = rope_tables(L, dk)
    kc = torch.zeros(N, Hk, L, dk)
    vc = torch.zeros(N, Hk, L, dk)
    lens = torch.zeros(N, dtype=torch.long)

    def step(x, pos):
        """x (N, T, dm) at positions pos .. pos + T - 1 of every sequence."""
        T = x.shape[1]
        q = F.linear(x, wq).view(N, T, H, dk).transpose(1, 2)
        k = F.linear(x, wk).view(N, T, Hk, dk).transpose(1, 2)
        v = F.linear(x, wv).view(N, T, Hk, dk).transpose(1, 2)
        c, sn = cos[pos:pos + T], sin[pos:pos + T]
        q = q * c + rotate_half(q) * sn
        k = k * c + rotate_half(k) * sn
        kc[:, :, pos:pos + T] = k
        vc[:, :, pos:pos + T] = v
        lens.fill_(pos + T)
        end = int(lens.max())  # the batch's longest sequence
        kk = kc[:, :, :end].repeat_interleave(g, dim=1)
        vv = vc[:, :, :end].repeat_interleave(g, dim=1)
        sc = (q @ kk.transpose(-1, -2)) * dk ** -0.5
        j = torch.arange(end)
        i = pos + torch.arange(T)
        hide = (j[None, :] > i[:, None])[None, None] | \
            (j[None, None, None, :] >= lens[:, None, None, None])
        a = torch.softmax(sc.masked_fill(hide, float("-inf")), dim=-1)
        o = (a @ vv).transpose(1, 2).reshape(N, T, H * dk)
        return F.linear(o, wo)

    with torch.inference_mode():
        step(torch.randn(N, prompt, dm), 0)
        xs = torch.randn(steps, N, 1, dm)
        t0 = time.perf_counter()
        for i in range(steps):
            step(xs[i], prompt + i)
        dt = time.perf_counter() - t0
    print(f"tps={N * steps / dt:.2f}")


if __name__ == "__main__":
    main()
