#!/usr/bin/python3
"""PyTorch 1.13 peer of bench/bench_attn.c: one case per process.

usage: torch_peer.py B T S d_model H H_kv causal maps reps threads
Prints `ms=<median>` (milliseconds per forward). nn.MultiheadAttention
(eval, inference_mode, batch_first=True) when H_kv == H; GQA written out by
hand otherwise (F.linear projections, repeat_interleave, softmax). maps=1
asks for per-head weights (need_weights=True, average_attn_weights=False).
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def main():
    B, T, S, dm, H, Hk, causal, maps, reps, threads = map(int, sys.argv[1:11])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    x = torch.randn(B, T, dm)
    am = torch.triu(torch.ones(T, S, dtype=torch.bool), 1) if causal else None
    dk = dm // H
    if Hk == H:
        mha = torch.nn.MultiheadAttention(dm, H, batch_first=True).eval()

        def fwd():
            return mha(x, x, x, attn_mask=am, need_weights=bool(maps),
                       average_attn_weights=False)
    else:
        wq = torch.randn(H * dk, dm) / dm ** 0.5
        wk = torch.randn(Hk * dk, dm) / dm ** 0.5
        wv = torch.randn(Hk * dk, dm) / dm ** 0.5
        wo = torch.randn(dm, H * dk) / dm ** 0.5
        bq, bk, bv, bo = (torch.zeros(n) for n in (H * dk, Hk * dk, Hk * dk, dm))
        g = H // Hk

        def fwd():
            q = F.linear(x, wq, bq).view(B, T, H, dk).transpose(1, 2)
            k = F.linear(x, wk, bk).view(B, S, Hk, dk).transpose(1, 2)
            v = F.linear(x, wv, bv).view(B, S, Hk, dk).transpose(1, 2)
            k = k.repeat_interleave(g, dim=1)
            v = v.repeat_interleave(g, dim=1)
            s = (q @ k.transpose(-1, -2)) * dk ** -0.5
            if am is not None:
                s = s.masked_fill(am, float("-inf"))
            a = torch.softmax(s, dim=-1)
            o = (a @ v).transpose(1, 2).reshape(B, T, H * dk)
            return F.linear(o, wo, bo), (a if maps else None)
    times = []
    with torch.inference_mode():
        fwd()  # warm-up
        for _ in range(reps):
            t0 = time.perf_counter()
            fwd()
            times.append((time.perf_counter() - t0) * 1e3)
    print(f"ms={statistics.median(times):.3f}")


if __name__ == "__main__":
    main()
