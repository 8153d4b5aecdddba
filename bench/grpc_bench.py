#!/usr/bin/env python3
"""gRPC benchmark of attnd: the REST bench's points over both doors of one
attnd, in the same run.

    python3 bench/grpc_bench.py --attnd build/default/attnd --client build/default/bench/bench_grpc

1. The small request of bench/http_bench.py (`demo`, x [1, 16, 64], the same
   seeded values) at 1, 16 and 64 connections, four ways: REST JSON and REST
   binary (Triton's binary extension) through wrk, gRPC unary ModelInfer
   (raw_input_contents) and gRPC ModelStreamInfer (one stream per
   connection, one request in flight on it) through bench/bench_grpc.c (an
   nghttp2 client, one thread per connection, closed loop like wrk). Prints
   req/s and p50/p99 per point and gRPC's ratio to REST binary (aim: >= 1 on
   every point).
2. Decode steps from one client: one token (x [1, 1, 64]) per request, REST
   JSON request after request against the same on one gRPC stream, first
   stateless, then as sequence steps (sequence_id; the server keeps the
   K/V, a new sequence every RESTART steps): tokens/s (aim: the stream
   >= 1.2x REST), ROUNDS turns each, alternating. Both sides go through bench_grpc (its rest mode is an
   HTTP/1.1 keep-alive loop), so the client costs the same on each (wrk's
   scripted requests, needed for a sequence's changing bodies, stall).
Speed is printed, never asserted. Every request's answer is checked to be a
200 / grpc-status 0 (a failed one is counted and shown).
"""
import argparse
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from http_bench import wait_ready, wrk  # noqa: E402


def varint(v):
    out = bytearray()
    while True:
        b, v = v & 0x7F, v >> 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def ld(field, data):
    return varint(field << 3 | 2) + varint(len(data)) + data


def values(t):
    rnd = random.Random(1)
    return [round(rnd.uniform(-1, 1), 6) for _ in range(t * 64)]


RESTART = 128  # sequence steps before the bench starts a new sequence
ROUNDS = 3     # one-client comparisons: REST and gRPC in turns, this many each


def grpc_msg(t, seq=None, start=False):
    """ModelInferRequest: demo, x [1, t, 64] FP32 as raw_input_contents;
    with seq, Triton's sequence_id (int64_param) and sequence_start."""
    v = values(t)
    tensor = ld(1, b"x") + ld(2, b"FP32") + ld(3, b"".join(varint(d) for d in (1, t, 64)))
    params = b""
    if seq is not None:  # map<string, InferParameter> entries, field 4
        params = (ld(4, ld(1, b"sequence_id") + ld(2, varint(2 << 3) + varint(seq)))
                  + ld(4, ld(1, b"sequence_start") + ld(2, varint(1 << 3) + varint(int(start)))))
    return ld(1, b"demo") + params + ld(5, tensor) + ld(7, struct.pack(f"<{len(v)}f", *v))


def lua(path, body, headers):
    """A wrk script posting body (bytes, escaped for Lua) with headers."""
    esc = "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\' else f"\\{b:03d}" for b in body)
    hs = "".join(f'wrk.headers["{k}"] = "{v}"\n' for k, v in headers.items())
    with open(path, "w") as f:
        f.write(f'wrk.method = "POST"\n{hs}wrk.body = "{esc}"\n')
    return path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", default=os.path.join(ROOT, "build/default/attnd"))
    ap.add_argument("--client", default=os.path.join(ROOT, "build/default/bench/bench_grpc"))
    ap.add_argument("--seconds", type=int, default=5, help="duration per point")
    ap.add_argument("--conns", default="1,16,64")
    a = ap.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is missing: tools/install-deps.sh bench")
    tmp = tempfile.mkdtemp(prefix="attnd-grpc-bench-")
    proc = None
    try:
        repo = os.path.join(tmp, "models")
        shutil.copytree(os.path.join(ROOT, "models"), repo)
        proc, port, gport = start_both([a.attnd, "--port", "0", "--grpc-port", "-1",
                                        "--models", repo])
        wait_ready(port)
        scripts, msgs = {}, {}
        for t in (16,):
            js = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, t, 64],
                                         "data": values(t)}]}).encode()
            scripts[("json", t)] = lua(os.path.join(tmp, f"json{t}.lua"), js,
                                       {"Content-Type": "application/json"})
            v = values(t)
            head = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, t, 64],
                                           "parameters": {"binary_data_size": 4 * len(v)}}]}).encode()
            scripts[("bin", t)] = lua(os.path.join(tmp, f"bin{t}.lua"),
                                      head + struct.pack(f"<{len(v)}f", *v),
                                      {"Inference-Header-Content-Length": str(len(head))})
            msgs[t] = os.path.join(tmp, f"msg{t}.pb")
            with open(msgs[t], "wb") as f:
                f.write(grpc_msg(t))
        msgs[1] = os.path.join(tmp, "msg1.pb")
        with open(msgs[1], "wb") as f:
            f.write(grpc_msg(1))
        for name, seq, start in (("seq_first", 2, True), ("seq_step", 2, False)):
            msgs[name] = os.path.join(tmp, f"{name}.pb")
            with open(msgs[name], "wb") as f:
                f.write(grpc_msg(1, seq, start))
        for name, params in (("json1", None), ("rest_first", {"sequence_id": 1, "sequence_start": True}),
                             ("rest_step", {"sequence_id": 1, "sequence_start": False})):
            body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1, 64], "data": values(1)}]}
            if params:
                body["parameters"] = params
            msgs[name] = os.path.join(tmp, f"{name}.json")
            with open(msgs[name], "w") as f:
                json.dump(body, f)
        url = f"http://127.0.0.1:{port}/v2/models/demo/infer"

        def g(mode, conns, t, extra=()):
            out = subprocess.run([a.client, "--port", str(port if mode == "rest" else gport),
                                  "--msg", msgs[t], "--conns", str(conns),
                                  "--seconds", str(a.seconds), "--mode", mode, *extra],
                                 capture_output=True, text=True, timeout=a.seconds + 60)
            r = json.loads(out.stdout)
            return r["rps"], r["p50_ms"], r["p99_ms"], r["errors"]

        print(f"attnd REST and gRPC, demo T=16 d_model 64, {a.seconds}s per point "
              f"(req/s, p50/p99 ms; failed answers in brackets when any)")
        print(f"{'conns':>5}  {'REST JSON':>24}  {'REST binary':>24}  {'gRPC unary':>24}  "
              f"{'gRPC stream':>24}  unary/bin  stream/bin")
        worst = None
        for c in [int(x) for x in a.conns.split(",")]:
            rj = wrk(url, c, a.seconds, scripts[("json", 16)])
            rb = wrk(url, c, a.seconds, scripts[("bin", 16)])
            gu = g("unary", c, 16)
            gs = g("stream", c, 16)
            cell = lambda r: f"{r[0]:8.0f} {r[1]:6.3f}/{r[2]:6.3f}" + (f" [{r[3]}]" if r[3] else "")
            print(f"{c:>5}  {cell(rj):>24}  {cell(rb):>24}  {cell(gu):>24}  {cell(gs):>24}  "
                  f"{gu[0] / rb[0]:9.2f}  {gs[0] / rb[0]:10.2f}")
            ratio = min(gu[0], gs[0]) / rb[0]
            worst = ratio if worst is None else min(worst, ratio)
        def alternate(a_run, b_run, rounds=ROUNDS):
            """a and b in turns (ABAB...), so a drift in what else the
            machine runs hits both: summed req/s, median p50, failures."""
            ra, rb = [], []
            for _ in range(rounds):
                ra.append(a_run())
                rb.append(b_run())
            agg = lambda rs: (sum(r[0] for r in rs) / len(rs), sorted(r[1] for r in rs)[len(rs) // 2],
                              max(r[2] for r in rs), sum(r[3] for r in rs))
            return agg(ra), agg(rb)

        rs, gs = alternate(lambda: g("rest", 1, "json1"), lambda: g("stream", 1, 1))
        print(f"decode steps (x [1, 1, 64], one client): REST JSON {rs[0]:.0f} tokens/s "
              f"(p50 {rs[1]:.3f} ms), gRPC stream {gs[0]:.0f} tokens/s (p50 {gs[1]:.3f} ms): "
              f"{gs[0] / rs[0]:.2f}x")
        rq, gq = alternate(
            lambda: g("rest", 1, "rest_step", ("--first", msgs["rest_first"], "--restart", str(RESTART))),
            lambda: g("stream", 1, "seq_step", ("--first", msgs["seq_first"], "--restart", str(RESTART))))
        print(f"sequence steps (one token each over the server's K/V, a new sequence every {RESTART}, "
              f"one client): REST JSON {rq[0]:.0f} tokens/s (p50 {rq[1]:.3f} ms)"
              + (f" [{rq[3]} failed]" if rq[3] else "")
              + f", gRPC stream {gq[0]:.0f} tokens/s (p50 {gq[1]:.3f} ms)"
              + (f" [{gq[3]} failed]" if gq[3] else "") + f": {gq[0] / rq[0]:.2f}x")
        print(f"aims: gRPC >= REST binary at every point: worst ratio {worst:.2f} "
              f"({'met' if worst >= 1 else 'not met'}); stream steps >= 1.2x REST: "
              f"{gq[0] / rq[0]:.2f} ({'met' if gq[0] / rq[0] >= 1.2 else 'not met'})")
    finally:  # the daemon goes whatever happened (a failed point too)
        if proc:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def start_both(cmd):
    """attnd with its HTTP and gRPC ports read from its log; the rest of the
    log is drained so the daemon never blocks on a full pipe."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ports = {}
    for line in p.stderr:
        m = re.search(r"listening on (http|grpc)://127\.0\.0\.1:(\d+)", line)
        if m:
            ports[m.group(1)] = int(m.group(2))
        if len(ports) == 2:
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, ports["http"], ports["grpc"]
    sys.exit(f"could not start {cmd[0]}")


if __name__ == "__main__":
    main()
