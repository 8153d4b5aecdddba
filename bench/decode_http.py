#!/usr/bin/env python3
"""End-to-end decoder steps through attnd, for bench/bench_decode.c and
bench/http_bench.py.

    python3 bench/decode_http.py [--client STEP_CLIENT] ATTND N [--prompt 1024]
                                 [--steps 64] [--port P] [--d-model 2048]
                                 [--max-batch B]

Writes the benchmark's Llama-like layer (d_model 2048, 32 heads, 8 kv heads
of 64, RoPE theta 10000, random F32 weights; --d-model D: D/64 heads, a
quarter of them kv heads) to a temporary repository, starts ATTND on
127.0.0.1 (port 0, --max-batch B, by default N and at least 8), then runs
bench/step_client (C: N keep-alive connections driven by one thread with
epoll, each driving one sequence: a start with the prompt, then
one-token steps, binary tensors and Triton's sequence parameters) and
prints its `tps=<tokens/s> p50_ms=... p99_ms=... client_cpu_ms=...` (all
clients together, prefill not timed). Bounded: every request has a
timeout, the daemon is killed at the end. With --port, the clients drive a
server already listening there (bench/fastapi_peer.py serving write_layer's
folder) and ATTND is not started.
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time

DM, H, HKV, DK = 2048, 32, 8, 64


def write_layer(folder, dm=DM, h=H, hkv=HKV, dk=DK):
    """The layer (by default the benchmark's) in folder: GQA, RoPE, causal,
    random F32 weights."""
    os.makedirs(folder)
    rnd = random.Random(7)
    shapes = {"W_q": (dm, h * dk), "W_k": (dm, hkv * dk),
              "W_v": (dm, hkv * dk), "W_o": (h * dk, dm)}
    header, off = {}, 0
    for n, (r, c) in shapes.items():
        header[n] = {"dtype": "F32", "shape": [r, c],
                     "data_offsets": [off, off + 4 * r * c]}
        off += 4 * r * c
    hd = json.dumps(header).encode()
    hd += b" " * ((8 - len(hd) % 8) % 8)
    scale = dm ** -0.5
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hd)) + hd)
        for r, c in shapes.values():
            # one random row repeated: fast to write, same bytes to read
            row = struct.pack(f"<{c}f", *[rnd.uniform(-scale, scale)
                                          for _ in range(c)])
            f.write(row * r)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"n_heads": h, "n_kv_heads": hkv, "head_dim": dk,
                   "v_head_dim": dk, "causal": True,
                   "rope": {"theta": 10000.0}}, f)


def body(x, t, seq, start, dm=DM, end=False):
    """A binary infer request: x (1, t, dm) and the sequence parameters;
    the body and its JSON header's length (also mem_burst.py's)."""
    params = {"sequence_id": seq, "binary_data_output": True}
    if start:
        params["sequence_start"] = True
    if end:
        params["sequence_end"] = True
    hdr = json.dumps({
        "parameters": params,
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, t, dm],
                    "parameters": {"binary_data_size": len(x)}}],
        "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
    }).encode()
    return hdr + x, len(hdr)


def listening_port(p, who):
    """The port attnd (p: its stderr piped, as text) says it listens on,
    within 60 s, else exit naming who; its stderr then read on and dropped
    (also mem_burst.py's)."""
    port = None
    deadline = time.time() + 60
    while time.time() < deadline and port is None:
        line = p.stderr.readline()
        if not line:
            break
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        port = int(m.group(1)) if m else None
    if port is None:
        sys.exit(f"{who}: attnd did not start")
    threading.Thread(target=lambda: [None for _ in p.stderr],
                     daemon=True).start()
    return port


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("attnd")
    ap.add_argument("n", type=int)
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--port", type=int, default=0, help="drive this server instead")
    ap.add_argument("--d-model", type=int, default=DM, help="a multiple of 64")
    ap.add_argument("--max-batch", type=int, default=0, help="0: N, at least 8")
    ap.add_argument("--client", default=os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        "build/default/bench/step_client"), help="bench/step_client.c, built")
    a = ap.parse_args()
    if a.d_model < DK or a.d_model % DK:
        sys.exit(f"decode_http: --d-model {a.d_model} is not a positive multiple of {DK}")
    tmp = tempfile.mkdtemp(prefix="attnd-decode-")
    p = None
    try:
        repo = os.path.join(tmp, "models")
        os.makedirs(repo)
        if not a.port:
            h = a.d_model // DK
            write_layer(os.path.join(repo, "llama"), a.d_model, h, max(1, h // 4))
        p = None if a.port else subprocess.Popen(
            [a.attnd, "--port", "0", "--grpc-port", "0", "--models", repo,
             "--max-batch", str(a.max_batch or max(a.n, 8)),
             "--max-body", str(64 << 20),
             # N prompts of 1024 tokens may form one batch of N x 1024 rows:
             # far past the default deadline on two cores (not timed here)
             "--deadline-ms", "1800000",
             # and their bodies and decoded inputs at once (N x 8 MiB each)
             "--memory-budget", str(16 << 30),
             "--request-memory", str(1 << 30)],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        port = a.port or listening_port(p, "decode_http")
        for _ in range(0 if a.port else 600):
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/v2/models/llama/ready")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        r = subprocess.run([a.client, "--port", str(port), "--n", str(a.n),
                            "--prompt", str(a.prompt), "--steps", str(a.steps),
                            "--d-model", str(a.d_model)],
                           capture_output=True, text=True, timeout=1800)
        if r.returncode or "tps=" not in r.stdout:
            sys.exit(f"decode_http: the clients failed: {r.stderr.strip()[-500:]}")
        print(r.stdout.strip())
    finally:
        if p:
            p.kill()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
