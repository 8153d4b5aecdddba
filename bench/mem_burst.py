#!/usr/bin/env python3
"""attnd's resident memory through a burst of sequences, and what the
memory's return costs the steps, against a peer build in the same run.

    python3 bench/mem_burst.py ATTND [--peer OTHER_ATTND] [--rounds 2]
                               [--seqs 256] [--tokens 960] [--kv-mib 128]
                               [--steps 60] [--churn 1600]

Each binary in turn (ATTND, then the peer; the peer first in even
rounds) is started on
127.0.0.1 with the models/ folder (the demo: 512 bytes of K/V a token),
2 threads, --kv-bytes KV_MIB and deploy/k8s's budget and maps settings.
Then, over 4 keep-alive connections with binary tensors:

  fill     SEQS sequences of TOKENS tokens (fills a KV_MIB cache at the
           defaults): resident size (VmRSS) after it;
  steps    32 of them, STEPS one-token steps each: steps a second;
  churn    a quarter of the sequences deleted, then sequences of 64 tokens
           started and ended (sequence_end), CHURN: sequences a second
           (their pages reused);
  delete   every sequence DELETEd (attnd_kv_bytes 0): VmRSS at once, then
           1, 2, 5 and 12 s later, and the peak (VmHWM);
  refill   a quarter of SEQS sequences of TOKENS tokens started again:
           sequences a second (after a trim their pages fault in anew,
           without one malloc's freed memory is reused), then 32 of them
           STEPS one-token steps each: steps a second.

Prints one line per binary and round; bounded (timeouts, the daemon is
killed at the end). Memory is this script's to measure: tests assert the
behaviour (pages reused, attnd_kv_bytes) only.
"""
import argparse
import http.client
import os
import re
import struct
import subprocess
import threading
import time

import decode_http

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DM = 64  # the demo model's d_model


def status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0  # MiB
    return 0.0


def body(seq, t, start=False, end=False):
    x = struct.pack(f"<{t * DM}f", *([0.01] * (t * DM)))
    return decode_http.body(x, t, seq, start, DM, end)


def post(c, seq, t, start=False, end=False):
    b, n = body(seq, t, start, end)
    c.request("POST", "/v2/models/demo/infer", b,
              {"Inference-Header-Content-Length": str(n),
               "Content-Type": "application/octet-stream"})
    r = c.getresponse()
    r.read()
    if r.status != 200:
        raise RuntimeError(f"step of {seq}: {r.status}")


def metric(port, name):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    m = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def run_threads(port, n, fn):
    """fn(conn, i) on n threads, each its own connection; the seconds."""
    errs = []

    def go(i):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        try:
            fn(c, i)
        except Exception as e:  # noqa: BLE001 - reported below
            errs.append(e)
        c.close()
    ts = [threading.Thread(target=go, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise errs[0]
    return time.perf_counter() - t0


def one(attnd, a):
    p = subprocess.Popen(
        [attnd, "--port", "0", "--grpc-port", "0", "--models",
         os.path.join(ROOT, "models"), "--threads", "2",
         "--kv-bytes", str(a.kv_mib << 20), "--memory-budget", str(1 << 30),
         "--maps-bytes", str(256 << 20), "--busy-poll-us", "0",
         "--log-format", "text"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        port = decode_http.listening_port(p, "mem_burst")
        for _ in range(600):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/v2/models/demo/ready")
            ok = c.getresponse().status == 200
            c.close()
            if ok:
                break
            time.sleep(0.1)
        out = {"idle": status(p.pid, "VmRSS")}
        per = a.seqs // 4

        def fill(c, i):
            for k in range(per):
                post(c, f"f{i}-{k}", a.tokens, start=True)
        run_threads(port, 4, fill)
        out["fill"] = status(p.pid, "VmRSS")
        out["kv"] = metric(port, "attnd_kv_bytes") / 2**20

        def steps(c, i):
            for _ in range(a.steps):
                for k in range(8):
                    post(c, f"f{i}-{k}", 1)
        out["steps_s"] = 32 * a.steps / run_threads(port, 4, steps)

        def delete(c, i):
            for k in range(per):
                c.request("DELETE", f"/v2/sequences/f{i}-{k}")
                c.getresponse().read()

        def churn(c, i):
            for k in range(a.churn // 4):
                post(c, f"c{i}-{k}", 64, start=True)
                post(c, f"c{i}-{k}", 1, end=True)
        # churn beside a quarter of the cache freed: pages to reuse
        run_threads(port, 1, lambda c, i: [
            (c.request("DELETE", f"/v2/sequences/f{j}-{k}"), c.getresponse().read())
            for j in range(4) for k in range(per // 4)])
        out["churn_s"] = a.churn // 4 * 4 / run_threads(port, 4, churn)
        t0 = time.perf_counter()
        run_threads(port, 4, delete)
        out["kv_after"] = metric(port, "attnd_kv_bytes")
        out["del0"] = status(p.pid, "VmRSS")
        for at in (1, 2, 5, 12):
            time.sleep(max(0, t0 + at - time.perf_counter()))
            out[f"del{at}"] = status(p.pid, "VmRSS")
        out["hwm"] = status(p.pid, "VmHWM")
        out["trims"] = metric(port, "attnd_memory_trims_total")
        out["trim_s"] = metric(port, "attnd_memory_trim_seconds_total")

        def refill(c, i):
            for k in range(per // 4):
                post(c, f"r{i}-{k}", a.tokens, start=True)
        out["refill_s"] = per // 4 * 4 / run_threads(port, 4, refill)

        def steps2(c, i):
            for _ in range(a.steps):
                for k in range(8):
                    post(c, f"r{i}-{k}", 1)
        out["steps2_s"] = 32 * a.steps / run_threads(port, 4, steps2)
        return out
    finally:
        p.kill()
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("attnd")
    ap.add_argument("--peer", help="another attnd build, run alternately")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seqs", type=int, default=256, help="a multiple of 16")
    ap.add_argument("--tokens", type=int, default=960)
    ap.add_argument("--kv-mib", type=int, default=128)
    ap.add_argument("--steps", type=int, default=60,
                    help="one-token steps of each of 32 sequences (<= 64)")
    ap.add_argument("--churn", type=int, default=1600)
    a = ap.parse_args()
    bins = [("attnd", a.attnd)] + ([("peer", a.peer)] if a.peer else [])
    for r in range(a.rounds):
        for name, b in (bins if r % 2 == 0 else bins[::-1]):
            o = one(b, a)
            trims = "" if o["trims"] is None else \
                f" trims={o['trims']:.0f} ({o['trim_s'] * 1e3:.1f} ms)"
            print(f"{name} round {r + 1}: idle {o['idle']:.1f} MiB, filled "
                  f"{o['fill']:.1f} (kv {o['kv']:.0f} MiB), steps "
                  f"{o['steps_s']:.0f}/s, churn {o['churn_s']:.0f} seq/s; "
                  f"deleted (kv {o['kv_after']:.0f}): {o['del0']:.1f} at once, "
                  f"{o['del1']:.1f} 1 s, {o['del2']:.1f} 2 s, {o['del5']:.1f} "
                  f"5 s, {o['del12']:.1f} 12 s; peak {o['hwm']:.1f} MiB{trims}; "
                  f"refill {o['refill_s']:.0f} seq/s, steps {o['steps2_s']:.0f}/s",
                  flush=True)


if __name__ == "__main__":
    main()
