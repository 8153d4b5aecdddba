#!/usr/bin/env python3
"""One client stepping a sequence whose map is retained, against the same
steps without a map: the cost of growing the map (a copy of it, allocated
anew, every step).

    python3 bench/map_steps.py [--attnd build/default/attnd] [--steps 20]
                               [--tokens 370,700] [-- ATTND_ARGS...]

Starts ATTND on 127.0.0.1 (port 0) with tests/server/fixtures/models
(`tiny`: d_model 8, 2 heads) and the extra arguments (e.g. --inline-conns 0
puts every step on the pool), then for each prompt length S: a causal
start of S tokens (retain: true, then again without), and --steps
one-token steps on one keep-alive connection, timed one by one. Prints the
median and fastest step, the map's size, and the daemon's peak RSS
(VmHWM). Bounded: every request has a timeout; the daemon is stopped at
the end.
"""
import argparse
import http.client
import json
import os
import re
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from http_bench import start  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attnd", default=os.path.join(ROOT, "build/default/attnd"))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--tokens", default="370,700")
    ap.add_argument("extra", nargs="*", help="more attnd arguments (after --)")
    a = ap.parse_args()
    p, port = start([a.attnd, "--port", "0", "--grpc-port", "0", "--models",
                     os.path.join(ROOT, "tests/server/fixtures/models")] + a.extra,
                    r"listening on http://127\.0\.0\.1:(\d+)", "err")
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

        def post(body):
            c.request("POST", "/v2/models/tiny/infer", json.dumps(body), {"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            if r.status != 200:
                sys.exit(f"map_steps: HTTP {r.status}: {data[:300]!r}")

        d = 8
        print(f"tiny (d_model {d}, 2 heads), one client, {a.steps} one-token steps after a causal start; "
              f"attnd {' '.join(a.extra) or '(defaults)'}")
        for s in (int(v) for v in a.tokens.split(",")):
            x = [(((i * 7919) % 1000) - 500) / 1000 for i in range((s + a.steps) * d)]
            for retain in (True, False):
                sid = f"s{s}{'r' if retain else 'p'}"
                post({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, s, d], "data": x[:s * d]}],
                      "parameters": {"sequence_id": sid, "sequence_start": True, "retain": retain, "causal": True}})
                ts = []
                for i in range(s, s + a.steps):
                    t0 = time.perf_counter()
                    post({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1, d],
                                      "data": x[i * d:(i + 1) * d]}],
                          "parameters": {"sequence_id": sid, "sequence_end": i == s + a.steps - 1}})
                    ts.append((time.perf_counter() - t0) * 1e3)
                mib = 2 * (s + a.steps) ** 2 * 4 / 2 ** 20
                print(f"  {s} tokens, {'map ' + format(mib, '.2f') + ' MiB' if retain else 'no map':>13}: "
                      f"median {statistics.median(ts):.3f} ms, fastest {min(ts):.3f} ms a step")
        with open(f"/proc/{p.pid}/status") as f:
            hwm = re.search(r"VmHWM:\s+(\d+) kB", f.read())
        print(f"attnd peak RSS {int(hwm.group(1)) / 1024:.1f} MiB")
    finally:
        p.terminate()
        p.wait(timeout=30)


if __name__ == "__main__":
    main()
