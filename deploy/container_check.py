#!/usr/bin/env python3
"""container_check.py - what deploy/container-test.sh checks in a running
attnd, against the worked example in seed 000 (T=2, d_k=4, d_v=2; the
expected numbers are the seed's, not the daemon's). Standard library only.

  container_check.py --write-model DIR   write DIR/seed000/model.safetensors
  container_check.py URL [MODEL]         check a running daemon; exits 1 on
                                         any failure, one line per check

The checks: GET /v2; the built-in `sdpa` model on the seed's Q, K, V; a
retained map (parameters.retain) fetched back as raw FP32; and, when MODEL
is given, an inference on that weight set from the mounted repository.

The `seed000` weight set (canonical layout, one head, d_model 4) is chosen
so that x = the seed's Q gives the seed's K and V: W_q = I, W_k =
diag(.5, .25, .5, 0), W_v maps x rows to [1, 2] and [3, 0], and W_o puts
the head's 2 values in y's first 2 columns. So y = [seed output | 0 0]."""
import json
import os
import struct
import sys
import urllib.error
import urllib.request

URL = ""
TOL = 1e-5
Q = [2.0, 0.0, 2.0, 0.0, 0.0, 4.0, 0.0, 2.0]
K = [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
V = [1.0, 2.0, 3.0, 0.0]
# Seed 000, steps 4 and 5.
WANT_ATTENTION = [0.880797, 0.119203, 0.119203, 0.880797]
WANT_OUTPUT = [1.238404, 1.761594, 2.761594, 0.238405]
failures = 0


def check(ok, what):
    global failures
    print(("  ok   " if ok else "  FAIL ") + what)
    if not ok:
        failures += 1


def http(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(URL + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, OSError) as e:
        return 0, str(e).encode()


def parse(raw):
    try:
        return json.loads(raw)
    except ValueError:
        return {}


def close(got, want):
    return len(got) == len(want) and all(
        abs(float(g) - w) <= TOL for g, w in zip(got, want))


def flat(x):
    if isinstance(x, list):
        return [v for e in x for v in flat(e)]
    return [x]


def infer(parameters):
    body = {
        "inputs": [
            {"name": "q", "datatype": "FP32", "shape": [2, 4], "data": Q},
            {"name": "k", "datatype": "FP32", "shape": [2, 4], "data": K},
            {"name": "v", "datatype": "FP32", "shape": [2, 2], "data": V},
        ],
        "outputs": [{"name": "output"}, {"name": "attention"}],
    }
    if parameters:
        body["parameters"] = parameters
    status, raw = http("POST", "/v2/models/sdpa/infer", body)
    check(status == 200, f"POST /v2/models/sdpa/infer -> {status}")
    if status != 200:
        print("       " + raw[:300].decode("utf-8", "replace"))
        return None
    resp = parse(raw)
    outs = {o["name"]: o for o in resp.get("outputs", [])}
    for name, want in (("output", WANT_OUTPUT), ("attention", WANT_ATTENTION)):
        got = flat(outs.get(name, {}).get("data", []))
        check(close(got, want), f"{name} = {got} (seed: {want})")
    return resp


SEED_MODEL = {
    "W_q": ([4, 4], [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]),
    "W_k": ([4, 4], [.5, 0, 0, 0, 0, .25, 0, 0, 0, 0, .5, 0, 0, 0, 0, 0]),
    "W_v": ([4, 2], [.5, 1, .75, 0, 0, 0, 0, 0]),
    "W_o": ([2, 4], [1, 0, 0, 0, 0, 1, 0, 0]),
}


def write_model(folder):
    """A safetensors file by its published layout: u64 LE header length,
    JSON header (dtype, shape, data_offsets), then the raw tensors."""
    os.makedirs(os.path.join(folder, "seed000"), exist_ok=True)
    header, data = {}, b""
    for name, (shape, values) in SEED_MODEL.items():
        raw = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(folder, "seed000", "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)
    with open(os.path.join(folder, "seed000", "config.json"), "w") as f:
        json.dump({"n_heads": 1}, f)


def check_model(name):
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2, 4],
                        "data": Q}],
            "outputs": [{"name": "y"}, {"name": "attention"}]}
    status, raw = http("POST", f"/v2/models/{name}/infer", body)
    check(status == 200, f"POST /v2/models/{name}/infer -> {status}")
    if status != 200:
        print("       " + raw[:300].decode("utf-8", "replace"))
        return
    outs = {o["name"]: o for o in parse(raw).get("outputs", [])}
    want_y = WANT_OUTPUT[0:2] + [0, 0] + WANT_OUTPUT[2:4] + [0, 0]
    got = flat(outs.get("y", {}).get("data", []))
    check(close(got, want_y), f"{name}: y = {got} (seed: {want_y})")
    got = flat(outs.get("attention", {}).get("data", []))
    check(close(got, WANT_ATTENTION), f"{name}: attention = {got}")


if sys.argv[1:2] == ["--write-model"]:
    write_model(sys.argv[2])
    sys.exit(0)
URL = sys.argv[1].rstrip("/")
status, raw = http("GET", "/v2")
check(status == 200 and parse(raw).get("name") == "attnd",
      f"GET /v2 -> {status} {raw[:120]!r}")
infer(None)
resp = infer({"retain": True, "tokens": ["t0", "t1"]})
map_id = (resp or {}).get("parameters", {}).get("map_id")
check(map_id is not None, f"response parameters.map_id = {map_id!r}")
if map_id is not None:
    status, raw = http("GET", f"/v2/maps/{map_id}")
    check(status == 200, f"GET /v2/maps/{map_id} -> {status}")
    status, raw = http("GET", f"/v2/maps/{map_id}/attention?b=0&h=0&format=f32")
    got = list(struct.unpack("<4f", raw)) if len(raw) == 16 else []
    check(status == 200 and close(got, WANT_ATTENTION),
          f"GET /v2/maps/{map_id}/attention?format=f32 -> {status} {got}")
    status, raw = http("GET", "/v2/maps/does-not-exist")
    check(status == 404, f"GET /v2/maps/does-not-exist -> {status}")
if len(sys.argv) > 2:
    check_model(sys.argv[2])
sys.exit(1 if failures else 0)
