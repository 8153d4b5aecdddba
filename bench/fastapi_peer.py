#!/usr/bin/python3
"""The Python peer of bench/http_bench.py: the `infer` endpoint as a Python
team would write it with FastAPI, uvicorn and PyTorch.

    /usr/bin/python3 bench/fastapi_peer.py --models DIR [--port 0] [--workers 2]

Serves POST /v2/models/<name>/infer for every canonical weight set in DIR
(<name>/model.safetensors: W_q, W_k, W_v, W_o, optional b_q, b_k, b_v,
b_o; n_heads, n_kv_heads, causal and rope {"theta"} from
<name>/config.json), taking input `x` [B, T, d_model] in the JSON form of
the Open Inference Protocol, or in Triton's binary form
(Inference-Header-Content-Length), and answering output `y` the same way
attnd does. An async handler reads the body, ujson parses it, PyTorch
computes the layer (Q = X W_q + b_q, RoPE (rotate_half), ..., softmax(Q Kᵀ
/ sqrt(d_k) + causal mask) V, concat, W_o) under inference_mode, and
UJSONResponse writes the answer. Triton's sequence parameters
(sequence_id, sequence_start, sequence_end) keep a sequence's keys and
values in the worker (torch.cat per step, as HF's past_key_values), so a
client must keep its connection (a worker owns its connections). `workers` uvicorn processes (uvloop, httptools, no
access log) each accept on their own SO_REUSEPORT socket on the same port
and run torch on one thread. Prints `listening on http://127.0.0.1:PORT`
once every worker is up; SIGTERM stops them.

Debian packages: python3-fastapi python3-uvicorn python3-uvloop
python3-httptools python3-ujson python3-torch (tools/install-deps.sh bench).
"""
import argparse
import json
import os
import signal
import socket
import struct
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import ujson  # noqa: E402
import uvicorn  # noqa: E402
from fastapi import FastAPI, Request  # noqa: E402
from fastapi.responses import Response, UJSONResponse  # noqa: E402


def load_safetensors(path):
    """{name: float32 tensor} of an F32 safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            raise SystemExit(f"{path}: {name}: only F32 weight sets")
        a, b = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(raw[base + a:base + b]),
                                     dtype=torch.float32).reshape(t["shape"])
    return out


class Layer:
    """One attention layer in the canonical orientation (Q = X W_q)."""

    def __init__(self, folder):
        w = load_safetensors(os.path.join(folder, "model.safetensors"))
        with open(os.path.join(folder, "config.json")) as f:
            cfg = json.load(f)
        self.h = int(cfg["n_heads"])
        self.causal = bool(cfg.get("causal", False))
        self.theta = float((cfg.get("rope") or {}).get("theta", 0.0))
        self.wq, self.wk, self.wv, self.wo = w["W_q"], w["W_k"], w["W_v"], w["W_o"]
        self.bq, self.bk, self.bv, self.bo = (w.get(k) for k in ("b_q", "b_k", "b_v", "b_o"))
        self.d_model = self.wq.shape[0]
        self.dk = self.wq.shape[1] // self.h
        self.hk = self.wk.shape[1] // self.dk
        self.dv = self.wv.shape[1] // self.hk
        self.scale = 1.0 / self.dk ** 0.5

    def rope(self, t, start):
        """rotate_half RoPE over every dim of each head, positions start.."""
        half = self.dk // 2
        freq = self.theta ** (-torch.arange(half, dtype=torch.float64) * 2 / self.dk)
        ang = torch.arange(start, start + t.shape[2], dtype=torch.float64)[:, None] * freq
        cos = torch.cat([ang.cos(), ang.cos()], -1).float()
        sin = torch.cat([ang.sin(), ang.sin()], -1).float()
        rot = torch.cat([-t[..., half:], t[..., :half]], -1)
        return t * cos + rot * sin

    def __call__(self, x, past=None):
        """(y, (K, V)) for x [B, T, d_model]; past: (K, V) of earlier rows
        (B = 1, after RoPE), which the returned pair extends by x's rows."""
        B, T, _ = x.shape
        start = past[0].shape[2] if past is not None else 0

        def proj(w, b):
            y = x @ w
            return y + b if b is not None else y

        q = proj(self.wq, self.bq).view(B, T, self.h, self.dk).transpose(1, 2)
        k = proj(self.wk, self.bk).view(B, T, self.hk, self.dk).transpose(1, 2)
        v = proj(self.wv, self.bv).view(B, T, self.hk, self.dv).transpose(1, 2)
        if self.theta:
            q, k = self.rope(q, start), self.rope(k, start)
        if past is not None:
            k = torch.cat([past[0], k], 2)
            v = torch.cat([past[1], v], 2)
        kv = (k, v)
        if self.hk != self.h:
            k = k.repeat_interleave(self.h // self.hk, dim=1)
            v = v.repeat_interleave(self.h // self.hk, dim=1)
        sc = (q @ k.transpose(-1, -2)) * self.scale
        if self.causal:
            S = k.shape[2]
            hide = torch.arange(S)[None, :] > torch.arange(start, start + T)[:, None]
            sc = sc.masked_fill(hide, float("-inf"))
        a = torch.softmax(sc, dim=-1)
        o = (a @ v).transpose(1, 2).reshape(B, T, self.h * self.dv)
        y = o @ self.wo
        return (y + self.bo if self.bo is not None else y), kv


def make_app(models):
    app = FastAPI()

    def error(status, msg):
        return UJSONResponse({"error": msg}, status_code=status)

    sequences = {}  # (model, sequence_id) -> (K, V)

    @app.post("/v2/models/{name}/infer")
    async def infer(name: str, request: Request):
        layer = models.get(name)
        if layer is None:
            return error(404, f"model '{name}': not found")
        try:
            body = await request.body()
            hl = request.headers.get("inference-header-content-length")
            req = ujson.loads(body[:int(hl)] if hl else body)
            x = next(t for t in req["inputs"] if t["name"] == "x")
            B, T, D = x["shape"]
            if D != layer.d_model or x["datatype"] != "FP32":
                return error(400, f"inputs[x]: expected FP32 [B, T, {layer.d_model}]")
            if hl:
                xt = torch.frombuffer(bytearray(body[int(hl):]), dtype=torch.float32)
            else:
                xt = torch.tensor(x["data"], dtype=torch.float32)
            xt = xt.view(B, T, D)
            params = req.get("parameters") or {}
            seq = params.get("sequence_id")
            binary = bool(params.get("binary_data_output")) or any(
                (o.get("parameters") or {}).get("binary_data") for o in req.get("outputs") or [])
        except (ValueError, KeyError, TypeError, StopIteration, RuntimeError) as e:
            return error(400, f"bad request: {e}")
        past = None
        if seq is not None:
            key = (name, seq)
            if B != 1:
                return error(400, "a sequence step has B = 1")
            if params.get("sequence_start"):
                sequences.pop(key, None)
            elif key not in sequences:
                return error(400, f"sequence {seq}: not started")
            past = sequences.get(key)
        with torch.inference_mode():
            y, kv = layer(xt, past)
        if seq is not None:
            if params.get("sequence_end"):
                sequences.pop(key, None)
            else:
                sequences[key] = kv
        if binary:
            raw = y.contiguous().numpy().tobytes()
            hdr = ujson.dumps({"model_name": name, "model_version": "1",
                               "outputs": [{"name": "y", "datatype": "FP32", "shape": [B, T, D],
                                            "parameters": {"binary_data_size": len(raw)}}]}).encode()
            return Response(hdr + raw, media_type="application/octet-stream",
                            headers={"Inference-Header-Content-Length": str(len(hdr))})
        return UJSONResponse({"model_name": name, "model_version": "1",
                              "outputs": [{"name": "y", "datatype": "FP32",
                                           "shape": [B, T, D],
                                           "data": y.flatten().tolist()}]})

    return app


def listener(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind(("127.0.0.1", port))
    s.listen(1024)
    return s


def worker(sock, models_dir):
    torch.set_num_threads(1)
    models = {}
    for name in sorted(os.listdir(models_dir)):
        folder = os.path.join(models_dir, name)
        if os.path.exists(os.path.join(folder, "model.safetensors")):
            models[name] = Layer(folder)
    config = uvicorn.Config(make_app(models), loop="uvloop", http="httptools",
                            access_log=False, log_level="warning", lifespan="off",
                            timeout_keep_alive=600)
    uvicorn.Server(config).run(sockets=[sock])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    first = listener(a.port)
    port = first.getsockname()[1]
    socks = [first] + [listener(port) for _ in range(a.workers - 1)]
    kids = []
    for s in socks:
        pid = os.fork()
        if pid == 0:
            for o in socks:
                if o is not s:
                    o.close()
            worker(s, a.models)
            os._exit(0)
        kids.append(pid)
    for s in socks:
        s.close()

    def stop(sig, frame):
        for k in kids:
            try:
                os.kill(k, signal.SIGTERM)
            except ProcessLookupError:
                pass
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    time.sleep(0.2)  # the workers import their app; callers still poll
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    for k in kids:
        while True:
            try:
                os.waitpid(k, 0)
                break
            except InterruptedError:
                continue
            except ChildProcessError:
                break


if __name__ == "__main__":
    sys.exit(main())
