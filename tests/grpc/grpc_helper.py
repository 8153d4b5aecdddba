"""gRPC door, client 1 of 2: Python's grpcio with stubs that protoc generated
from proto/kserve.proto (make check-grpc generates them into build/).

What tests/grpc/test_grpc*.py share: the stubs on sys.path (GRPC_STUBS),
class Attnd (an attnd on 127.0.0.1 with free ports and its own models
folder; every one not stopped is killed, its folder removed, when the
process ends, on SIGTERM too: installed here, once), REFS (the PyTorch
vectors of tests/server/fixtures) and the request and tensor helpers.

The test files: test_grpc.py (Unary: every RPC, every status code attnd
answers, the seeds' numbers through sdpa, the fixtures' vectors through
the `tiny` weight set, raw and typed contents, FP16/BF16, streams,
sequences), test_grpc_limits.py (Inline, Limits: inline runs, auth,
deadlines, queue full, drain) and test_grpc_failalloc.py (FailAlloc:
calls while attnd's allocations fail). Each test class starts its own
attnd on free ports.

    ATTND=build/default/attnd GRPC_STUBS=build/default/grpc/py \
        /usr/bin/python3 -m unittest -v tests/grpc/test_grpc*.py
"""
import json
import atexit
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ATTND = os.path.abspath(os.environ.get("ATTND", os.path.join(ROOT, "build/default/attnd")))
sys.path.insert(0, os.environ.get("GRPC_STUBS", os.path.join(ROOT, "build/grpc/py")))
import kserve_pb2 as pb  # noqa: E402
import kserve_pb2_grpc as pbg  # noqa: E402

FIX = os.path.join(ROOT, "tests", "server", "fixtures")
with open(os.path.join(FIX, "refs.json")) as f:
    REFS = json.load(f)
SLOW = 5 if re.search(r"address|undefined|thread", ATTND) else 1
C = grpc.StatusCode

# Every daemon started and not stopped: killed, its folder removed, when this
# process ends, however (a failed test, the runner's timeout's SIGTERM).
LIVE = set()


def _kill_live():
    for a in list(LIVE):
        if a.proc.poll() is None:
            a.proc.kill()
        shutil.rmtree(a.dir, ignore_errors=True)
    LIVE.clear()


def _on_signal(sig, _frame):
    # exit now: sys.exit would be a failure of the test running, and the
    # next tests would start daemons that the runner's SIGKILL may orphan
    _kill_live()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(128 + sig)


atexit.register(_kill_live)
signal.signal(signal.SIGTERM, _on_signal)


class Attnd:
    """attnd on 127.0.0.1 with free HTTP and gRPC ports and its own models
    folder (the fixtures plus models/demo)."""

    def __init__(self, *args, env=None):
        self.dir = tempfile.mkdtemp(prefix="attnd-grpc-")
        shutil.copytree(os.path.join(FIX, "models"), self.dir, dirs_exist_ok=True)
        demo = os.path.join(ROOT, "models", "demo")
        if os.path.exists(os.path.join(demo, "model.safetensors")):
            shutil.copytree(demo, os.path.join(self.dir, "demo"))
        self.proc = subprocess.Popen(
            [ATTND, "--host", "127.0.0.1", "--port", "0", "--grpc-port", "-1",
             "--models", self.dir, *args],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, **(env or {})})
        LIVE.add(self)
        self.log = ""
        self._lines = []
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.time() + 20 * SLOW
        self.port = self.grpc_port = 0
        while not (self.port and self.grpc_port):
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log)
            g = re.search(r"listening on grpc://127\.0\.0\.1:(\d+)", self.log)
            if m and g:
                self.port, self.grpc_port = int(m.group(1)), int(g.group(1))
            elif self.proc.poll() is not None or time.time() > deadline:
                self.proc.kill()
                raise RuntimeError("attnd did not start:\n" + self.log)
            else:
                time.sleep(0.02)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}")
        self.stub = pbg.GRPCInferenceServiceStub(self.channel)
        while True:  # models loaded
            try:
                if self.stub.ServerReady(pb.ServerReadyRequest(), timeout=5).ready:
                    break
            except grpc.RpcError:
                pass
            if time.time() > deadline:
                raise RuntimeError("attnd not ready:\n" + self.log)
            time.sleep(0.02)

    def _read(self):
        for line in iter(self.proc.stderr.readline, b""):
            self.log += line.decode(errors="replace")

    def logged(self, pattern, count=1, timeout=5):
        """The log once pattern occurs count times in it, waiting up to
        timeout s: request lines reach stderr up to --log-flush-ms after
        the request ends (a writer thread)."""
        deadline = time.time() + timeout * SLOW
        while len(re.findall(pattern, self.log)) < count and time.time() < deadline:
            time.sleep(0.02)
        return self.log

    def rest(self, path, body=None, method=None):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}",
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json"}, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def stop(self, sig=signal.SIGTERM):
        LIVE.discard(self)
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(30 * SLOW)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
        time.sleep(0.05)
        self.proc.stderr.close()
        if re.search(r"(ERROR|WARNING): (Address|Leak|Thread|UndefinedBehavior)Sanitizer|runtime error: ",
                     self.log):
            raise AssertionError("sanitizer report:\n" + self.log)
        return code


# ---- tensors --------------------------------------------------------------------

def f32(values):
    return struct.pack(f"<{len(values)}f", *values)


def unf32(raw):
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def typed(req, name, dtype, shape, values):
    t = req.inputs.add(name=name, datatype=dtype, shape=shape)
    field = {"FP32": "fp32_contents", "INT32": "int_contents", "INT64": "int64_contents",
             "BOOL": "bool_contents"}[dtype]
    getattr(t.contents, field).extend(values)
    return t


def raw(req, name, dtype, shape, data):
    req.inputs.add(name=name, datatype=dtype, shape=shape)
    req.raw_input_contents.append(data)


def want(req, *names):
    for n in names:
        req.outputs.add(name=n)
    return req


def out(resp, name):
    """(shape, values) of output name, raw or typed."""
    for i, o in enumerate(resp.outputs):
        if o.name == name:
            if resp.raw_output_contents:
                return list(o.shape), unf32(resp.raw_output_contents[i])
            return list(o.shape), list(o.contents.fp32_contents)
    raise KeyError(name)


def max_diff(a, b):
    assert len(a) == len(b), f"length {len(a)} != {len(b)}"
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


def seed1(req_fn=typed):
    req = pb.ModelInferRequest(model_name="sdpa", id="seed1")
    req_fn(req, "q", "FP32", [2, 4], [2, 0, 2, 0, 0, 4, 0, 2] if req_fn is typed else f32([2, 0, 2, 0, 0, 4, 0, 2]))
    req_fn(req, "k", "FP32", [2, 4], [1, 0, 1, 0, 0, 1, 0, 0] if req_fn is typed else f32([1, 0, 1, 0, 0, 1, 0, 0]))
    req_fn(req, "v", "FP32", [2, 2], [1, 2, 3, 0] if req_fn is typed else f32([1, 2, 3, 0]))
    return req


def sdpa_req(c, raw_form=False):
    req = pb.ModelInferRequest(model_name="sdpa")
    for n in "qkv":
        if raw_form:
            raw(req, n, "FP32", c[n + "_shape"], f32(c[n]))
        else:
            typed(req, n, "FP32", c[n + "_shape"], c[n])
    return req


def tiny_x(c, raw_form=False):
    req = pb.ModelInferRequest(model_name="tiny")
    if raw_form:
        raw(req, "x", "FP32", c["shape"], f32(c["x"]))
    else:
        typed(req, "x", "FP32", c["shape"], c["x"])
    return req
