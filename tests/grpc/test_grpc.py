#!/usr/bin/python3
"""gRPC door, client 1 of 2: Python's grpcio with stubs that protoc generated
from proto/kserve.proto (make check-grpc generates them into build/).

Every RPC, every status code attnd answers, the seeds' numbers through
sdpa, the PyTorch vectors of tests/server/fixtures through the `tiny`
weight set, raw and typed contents, FP16/BF16, streams, auth, deadlines,
queue full and drain. Each test class starts its own attnd on free ports.

    ATTND=build/default/attnd GRPC_STUBS=build/grpc/py \
        /usr/bin/python3 -m unittest -v tests/grpc/test_grpc.py
"""
import base64
import json
import atexit
import queue
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import http.client
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
    _kill_live()
    sys.exit(128 + sig)


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


class Unary(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = Attnd("--max-body", "400000", "--max-tokens", "4096")
        cls.s = cls.d.stub

    @classmethod
    def tearDownClass(cls):
        assert cls.d.stop() == 0, cls.d.log

    def code(self, fn, req, code, pattern, **kw):
        with self.assertRaises(grpc.RpcError) as e:
            fn(req, timeout=30, **kw)
        self.assertEqual(e.exception.code(), code, e.exception.details())
        self.assertRegex(e.exception.details(), pattern)
        return e.exception

    # -- health and metadata
    def test_live_ready_metadata(self):
        self.assertTrue(self.s.ServerLive(pb.ServerLiveRequest()).live)
        self.assertTrue(self.s.ServerReady(pb.ServerReadyRequest()).ready)
        m = self.s.ServerMetadata(pb.ServerMetadataRequest())
        self.assertEqual(m.name, "attnd")
        self.assertRegex(m.version, r"^\d+\.\d+\.\d+$")
        self.assertIn("model_repository", m.extensions)
        self.assertTrue(self.s.ModelReady(pb.ModelReadyRequest(name="tiny")).ready)
        self.assertTrue(self.s.ModelReady(pb.ModelReadyRequest(name="sdpa", version="1")).ready)
        self.code(self.s.ModelReady, pb.ModelReadyRequest(name="nope"), C.NOT_FOUND, r"model 'nope': not found")
        self.code(self.s.ModelReady, pb.ModelReadyRequest(name="tiny", version="2"), C.NOT_FOUND,
                  r"version '2' not found: only version 1 exists")

    def test_model_metadata_matches_rest(self):
        m = self.s.ModelMetadata(pb.ModelMetadataRequest(name="tiny"))
        st, rest = self.d.rest("/v2/models/tiny")
        self.assertEqual(st, 200)
        self.assertEqual(m.name, "tiny")
        self.assertEqual(list(m.versions), ["1"])
        self.assertEqual(m.platform, rest["platform"])
        self.assertEqual([(t.name, t.datatype, list(t.shape)) for t in m.inputs],
                         [(t["name"], t["datatype"], t["shape"]) for t in rest["inputs"]])
        self.assertEqual([(t.name, t.datatype, list(t.shape)) for t in m.outputs],
                         [(t["name"], t["datatype"], t["shape"]) for t in rest["outputs"]])
        self.assertEqual(list(m.inputs[0].shape), [-1, -1, 8])
        self.code(self.s.ModelMetadata, pb.ModelMetadataRequest(name="nope"), C.NOT_FOUND, r"not found")

    # -- numbers
    def test_seed_example_typed_and_raw(self):
        e2 = 2.718281828459045 ** 2
        a, b = e2 / (e2 + 1), 1 / (e2 + 1)
        for form in (typed, raw):
            r = self.s.ModelInfer(want(seed1(form), "attention", "output", "scores"))
            self.assertEqual(r.model_name, "sdpa")
            self.assertEqual(r.model_version, "1")
            self.assertEqual(r.id, "seed1")
            self.assertEqual([o.name for o in r.outputs], ["attention", "output", "scores"])
            self.assertEqual(bool(r.raw_output_contents), form is raw, "answers in the form it was asked")
            shape, att = out(r, "attention")
            self.assertEqual(shape, [2, 2])
            self.assertLess(max_diff(att, [a, b, b, a]), 1e-6)
            self.assertEqual([round(v, 4) for v in out(r, "output")[1]], [1.2384, 1.7616, 2.7616, 0.2384])
            self.assertEqual(out(r, "scores")[1], [2, 0, 0, 2])

    def test_second_seed_example(self):
        Q = [1, 0, 0, 1, 1, 1]
        req = pb.ModelInferRequest(model_name="sdpa")
        typed(req, "q", "FP32", [3, 2], Q)
        typed(req, "k", "FP32", [3, 2], Q)
        typed(req, "v", "FP32", [3, 2], [1, 0, 0, 2, 3, 1])
        r = self.s.ModelInfer(want(req, "output", "attention"))
        self.assertEqual([round(v, 3) for v in out(r, "attention")[1]],
                         [0.401, 0.198, 0.401, 0.198, 0.401, 0.401, 0.248, 0.248, 0.503])
        self.assertEqual([round(v, 3) for v in out(r, "output")[1]], [1.604, 0.797, 1.401, 1.203, 1.759, 1.0])

    def test_sdpa_matches_pytorch(self):
        c = REFS["sdpa"]
        for raw_form in (False, True):
            r = self.s.ModelInfer(want(sdpa_req(c, raw_form), "output", "attention", "scores"))
            self.assertEqual(out(r, "output")[0], [2, 3, 4, 7])
            self.assertLess(max_diff(out(r, "output")[1], c["output"]), 1e-5)
            self.assertLess(max_diff(out(r, "attention")[1], c["attention"]), 1e-6)
            self.assertLess(max_diff(out(r, "scores")[1], c["scores"]), 1e-5)
        k = REFS["sdpa_causal"]
        req = want(sdpa_req(k), "output", "attention")
        req.parameters["causal"].bool_param = True
        r = self.s.ModelInfer(req)
        self.assertLess(max_diff(out(r, "output")[1], k["output"]), 1e-5)
        self.assertEqual(out(r, "attention")[1][1], 0)

    def test_weight_set_matches_pytorch(self):
        c = REFS["self"]
        for raw_form in (False, True):
            r = self.s.ModelInfer(want(tiny_x(c, raw_form), "y", "attention"))
            self.assertEqual(out(r, "y")[0], [2, 5, 8])
            self.assertEqual(out(r, "attention")[0], [2, 2, 5, 5])
            self.assertLess(max_diff(out(r, "y")[1], c["y"]), 1e-5)
            self.assertLess(max_diff(out(r, "attention")[1], c["attention"]), 1e-6)
        c = REFS["causal"]
        req = want(tiny_x(c), "y")
        req.parameters["causal"].bool_param = True
        self.assertLess(max_diff(out(self.s.ModelInfer(req), "y")[1], c["y"]), 1e-5)
        # no outputs list: y alone
        r = self.s.ModelInfer(tiny_x(REFS["self"]))
        self.assertEqual([o.name for o in r.outputs], ["y"])

    def test_int32_lengths_bool_mask_cross(self):
        l = REFS["lengths"]
        req = tiny_x(l)
        typed(req, "lengths", "INT32", [2], l["lengths"])
        r = self.s.ModelInfer(want(req, "y", "attention"))
        self.assertLess(max_diff(out(r, "y")[1], l["y"]), 1e-5)
        c = REFS["cross"]
        req = tiny_x(c)
        typed(req, "context", "FP32", c["context_shape"], c["context"])
        typed(req, "context_lengths", "INT32", [2], c["context_lengths"])
        typed(req, "mask", "BOOL", [2, 3, 5], [bool(v) for v in c["mask"]])
        r = self.s.ModelInfer(want(req, "y", "attention"))
        self.assertLess(max_diff(out(r, "y")[1], c["y"]), 1e-5)
        self.assertLess(max_diff(out(r, "attention")[1], c["attention"]), 1e-6)
        # the same in raw form: INT32 and BOOL bytes
        req = pb.ModelInferRequest(model_name="tiny")
        raw(req, "x", "FP32", c["shape"], f32(c["x"]))
        raw(req, "context", "FP32", c["context_shape"], f32(c["context"]))
        raw(req, "context_lengths", "INT32", [2], struct.pack("<2i", *c["context_lengths"]))
        raw(req, "mask", "BOOL", [2, 3, 5], bytes(int(bool(v)) for v in c["mask"]))
        r = self.s.ModelInfer(want(req, "y"))
        self.assertLess(max_diff(out(r, "y")[1], c["y"]), 1e-5)

    def test_fp16_bf16_raw(self):
        for dt in ("fp16", "bf16"):
            c = REFS[dt]
            req = pb.ModelInferRequest(model_name="tiny")
            raw(req, "x", dt.upper(), c["shape"], base64.b64decode(c["x_b64"]))
            y = out(self.s.ModelInfer(req), "y")[1]
            self.assertLess(max_diff(y, c["y"]), 1e-5, dt)
            self.assertGreater(max_diff(y, c["y_fp32"]), 0, "the input really was rounded")

    def test_retain_map_id_and_tokens(self):
        req = seed1()
        req.parameters["retain"].bool_param = True
        req.parameters["tokens"].string_param = json.dumps(["t0", "t1"])
        r = self.s.ModelInfer(req)
        map_id = r.parameters["map_id"].string_param
        self.assertRegex(map_id, r"^m\d+-")
        st, m = self.d.rest(f"/v2/maps/{map_id}")
        self.assertEqual(st, 200)
        self.assertEqual(m["tokens"], ["t0", "t1"])

    # -- errors: REST's messages, gRPC's codes
    def test_invalid_argument_with_rest_messages(self):
        x = REFS["causal"]
        cases = []
        r = pb.ModelInferRequest(model_name="tiny")
        typed(r, "x", "FP32", [2, -3], [])
        cases.append((r, r"inputs\[0\]\.shape: dimension 1 is -3, must be >= 1"))
        r = pb.ModelInferRequest(model_name="tiny")
        typed(r, "x", "FP32", x["shape"], x["x"][:-1])
        cases.append((r, r"inputs\[0\]\.contents: expected 32 values, got 31"))
        r = pb.ModelInferRequest(model_name="tiny")
        raw(r, "x", "FP32", x["shape"], f32(x["x"])[:-4])
        cases.append((r, r"raw_input_contents\[0\]: 124 bytes, expected 128 \(32 FP32 values\)"))
        r = pb.ModelInferRequest(model_name="tiny")
        typed(r, "x", "FP32", x["shape"], x["x"]).contents.fp32_contents[3] = float("nan")
        cases.append((r, r"inputs\[0\]\.contents: element 3 is not finite"))
        r = pb.ModelInferRequest(model_name="tiny")
        r.inputs.add(name="x", datatype="FP16", shape=[1, 1, 8]).contents.fp32_contents.extend([0] * 8)
        cases.append((r, r"FP16 values must be sent as raw_input_contents"))
        r = pb.ModelInferRequest(model_name="tiny")
        r.inputs.add(name="x", datatype="INT8", shape=[1]).contents.int_contents.append(1)
        cases.append((r, r'inputs\[0\]\.datatype: "INT8" is not supported'))
        r = tiny_x(x)
        typed(r, "nope", "FP32", [1], [1])
        cases.append((r, r"inputs\[1\]\.name: model 'tiny' has no input 'nope'"))
        r = tiny_x(x)
        r.parameters["causal"].string_param = "yes"
        cases.append((r, r"parameters\.causal: expected true or false"))
        cases.append((pb.ModelInferRequest(model_name="tiny"), r"^inputs: empty$"))
        r = want(tiny_x(x), "nope")
        cases.append((r, r"outputs\[0\]\.name: model 'tiny' has no output 'nope'"))
        for req, pattern in cases:
            self.code(self.s.ModelInfer, req, C.INVALID_ARGUMENT, pattern)
        # the same request over REST answers 400 with the same message
        st, body = self.d.rest("/v2/models/tiny/infer", {"inputs": [
            {"name": "x", "datatype": "FP32", "shape": [2, -3], "data": [1]}]})
        self.assertEqual(st, 400)
        self.assertEqual(body["error"], "inputs[0].shape: dimension 1 is -3, must be >= 1")

    def test_malformed_messages(self):
        call = self.d.channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        for junk in (b"\xff\xff\xff", b"\x0a\x05ti", b"\x0a\x04tiny\x2a\x03\x0a\x01"):
            with self.assertRaises(grpc.RpcError) as e:
                call(junk, timeout=30)
            self.assertEqual(e.exception.code(), C.INVALID_ARGUMENT)
            self.assertRegex(e.exception.details(), r"not a valid ModelInferRequest")
        # every method that reads its message names it (field 1, a length
        # that runs past the end)
        for method in ("ModelReady", "ModelMetadata", "ModelStatistics", "RepositoryIndex",
                       "RepositoryModelLoad", "RepositoryModelUnload"):
            with self.assertRaises(grpc.RpcError) as e:
                self.d.channel.unary_unary(f"/inference.GRPCInferenceService/{method}")(b"\x0a\xff", timeout=30)
            self.assertEqual(e.exception.code(), C.INVALID_ARGUMENT, method)
            self.assertRegex(e.exception.details(), rf"not a valid {method}Request", method)
        # the ones whose message carries nothing do not read it
        live = self.d.channel.unary_unary("/inference.GRPCInferenceService/ServerLive")(b"\x0a\xff", timeout=30)
        self.assertEqual(pb.ServerLiveResponse.FromString(live).live, True)
        self.assertTrue(self.s.ServerLive(pb.ServerLiveRequest()).live, "still serving")

    def test_not_found_unimplemented_too_large(self):
        self.code(self.s.ModelInfer, seed1().__class__(model_name="nope"), C.NOT_FOUND, r"model 'nope': not found")
        req = seed1()
        req.model_version = "7"
        self.code(self.s.ModelInfer, req, C.NOT_FOUND, r"version '7' not found")
        with self.assertRaises(grpc.RpcError) as e:
            self.d.channel.unary_unary("/inference.GRPCInferenceService/ModelConfig")(b"", timeout=30)
        self.assertEqual(e.exception.code(), C.UNIMPLEMENTED)
        big = pb.ModelInferRequest(model_name="sdpa")
        raw(big, "q", "FP32", [1000, 100], b"\0" * 400000)
        self.code(self.s.ModelInfer, big, C.RESOURCE_EXHAUSTED, r"over the limit of 400000 \(max-body\)")

    # -- stream
    def test_stream_in_order_with_an_error_in_the_middle(self):
        c = REFS["self"]
        bad = pb.ModelInferRequest(model_name="tiny", id="bad")
        typed(bad, "x", "FP32", [2, -3], [])
        reqs = []
        for i in range(12):
            r = want(tiny_x(c, raw_form=i % 2 == 1), "y")
            r.id = f"r{i}"
            reqs.append(bad if i == 5 else r)
        got = list(self.s.ModelStreamInfer(iter(reqs), timeout=60))
        self.assertEqual(len(got), 12)
        for i, g in enumerate(got):
            if i == 5:
                self.assertRegex(g.error_message, r"dimension 1 is -3")
                continue
            self.assertEqual(g.error_message, "")
            self.assertEqual(g.infer_response.id, f"r{i}")
            self.assertLess(max_diff(out(g.infer_response, "y")[1], c["y"]), 1e-5)
        # a model that does not exist is an error of that request only
        got = list(self.s.ModelStreamInfer(iter([pb.ModelInferRequest(model_name="nope"), seed1()])))
        self.assertRegex(got[0].error_message, r"model 'nope': not found")
        self.assertEqual(got[1].infer_response.id, "seed1")
        # an empty stream ends OK with no responses
        self.assertEqual(list(self.s.ModelStreamInfer(iter([]))), [])

    def test_stream_equals_unary(self):
        c = REFS["sdpa"]
        unary = self.s.ModelInfer(want(sdpa_req(c), "output"))
        [streamed] = list(self.s.ModelStreamInfer(iter([want(sdpa_req(c), "output")])))
        self.assertEqual(out(unary, "output"), out(streamed.infer_response, "output"))

    # -- sequences (server-held K/V): one stream equals REST
    def test_sequence_over_a_stream_equals_rest(self):
        rnd = __import__("random").Random(9)
        chunks = [3, 1, 1, 2, 1]
        xs = [[rnd.uniform(-1, 1) for _ in range(t * 64)] for t in chunks]
        rest = []
        for k, x in enumerate(xs):
            st, body = self.d.rest("/v2/models/demo/infer", {
                "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, chunks[k], 64], "data": x}],
                "outputs": [{"name": "y"}, {"name": "attention"}],
                "parameters": {"sequence_id": 70, "sequence_start": k == 0,
                               "sequence_end": k == len(xs) - 1}})
            self.assertEqual(st, 200, body)
            rest.append(body)

        def step(k, x, sid):
            r = want(pb.ModelInferRequest(model_name="demo", id=f"s{k}"), "y", "attention")
            raw(r, "x", "FP32", [1, chunks[k], 64], f32(x))
            if isinstance(sid, int):
                r.parameters["sequence_id"].int64_param = sid
            else:
                r.parameters["sequence_id"].string_param = sid
            r.parameters["sequence_start"].bool_param = k == 0
            r.parameters["sequence_end"].bool_param = k == len(xs) - 1
            return r
        got = list(self.s.ModelStreamInfer(iter([step(k, x, 71) for k, x in enumerate(xs)]), timeout=60))
        self.assertEqual(len(got), len(xs))
        length = 0
        for k, g in enumerate(got):
            self.assertEqual(g.error_message, "", k)
            length += chunks[k]
            r = g.infer_response
            self.assertEqual(r.id, f"s{k}")
            self.assertEqual(r.parameters["sequence_length"].int64_param, length)
            self.assertEqual(rest[k]["parameters"]["sequence_length"], length)
            for name in ("y", "attention"):
                want_out = next(o for o in rest[k]["outputs"] if o["name"] == name)
                shape, vals = out(r, name)
                self.assertEqual(shape, want_out["shape"], name)
                self.assertLess(max_diff(vals, want_out["data"]), 1e-6, f"step {k} {name}")
        # unary calls and a string id work too; an unknown sequence is that
        # request's error and the stream goes on
        r = self.s.ModelInfer(step(0, xs[0], "abc"))
        self.assertEqual(r.parameters["sequence_length"].int64_param, 3)
        lost = step(1, xs[1], "never-started")
        got = list(self.s.ModelStreamInfer(iter([lost, step(4, xs[4], "abc")])))
        self.assertRegex(got[0].error_message, r"never-started")
        self.assertEqual(got[1].infer_response.parameters["sequence_length"].int64_param, 4)
        bad = step(0, xs[0], 0)
        self.code(self.s.ModelInfer, bad, C.INVALID_ARGUMENT, r"parameters\.sequence_id: 0; expected >= 1")

    # -- statistics and repository
    def test_statistics_count_both_doors(self):
        before = self.s.ModelStatistics(pb.ModelStatisticsRequest(name="sdpa")).model_stats[0]
        self.s.ModelInfer(seed1())
        st, _ = self.d.rest("/v2/models/sdpa/infer", {"inputs": [
            {"name": n, "datatype": "FP32", "shape": [1, 2], "data": [1, 2]} for n in "qkv"]})
        self.assertEqual(st, 200)
        after = self.s.ModelStatistics(pb.ModelStatisticsRequest(name="sdpa")).model_stats[0]
        self.assertEqual(after.name, "sdpa")
        self.assertEqual(after.inference_stats.success.count, before.inference_stats.success.count + 2)
        self.assertGreater(after.last_inference, 0)
        self.assertTrue(after.batch_stats)
        names = [m.name for m in self.s.ModelStatistics(pb.ModelStatisticsRequest()).model_stats]
        self.assertIn("tiny", names)
        self.code(self.s.ModelStatistics, pb.ModelStatisticsRequest(name="nope"), C.NOT_FOUND, "not found")
        with urllib.request.urlopen(f"http://127.0.0.1:{self.d.port}/metrics") as r:
            metrics = r.read().decode()
        self.assertRegex(metrics, r'attnd_grpc_calls_total\{code="OK"\} [1-9]')

    def test_repository_index_unload_load(self):
        idx = self.s.RepositoryIndex(pb.RepositoryIndexRequest())
        self.assertIn(("tiny", "1", "READY"), [(m.name, m.version, m.state) for m in idx.models])
        self.s.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="demo"))
        self.assertFalse(self.s.ModelReady(pb.ModelReadyRequest(name="demo")).ready)
        ready = [m.name for m in self.s.RepositoryIndex(pb.RepositoryIndexRequest(ready=True)).models]
        self.assertNotIn("demo", ready)
        req = pb.ModelInferRequest(model_name="demo")
        typed(req, "x", "FP32", [1, 1, 64], [0.0] * 64)
        self.code(self.s.ModelInfer, req, C.NOT_FOUND, r"model 'demo': not loaded")
        self.s.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="demo"))
        self.assertTrue(self.s.ModelReady(pb.ModelReadyRequest(name="demo")).ready)
        self.code(self.s.RepositoryModelLoad, pb.RepositoryModelLoadRequest(model_name="missing"),
                  C.NOT_FOUND, r"model 'missing'")
        self.code(self.s.RepositoryModelUnload, pb.RepositoryModelUnloadRequest(model_name="sdpa"),
                  C.INVALID_ARGUMENT, r"built in")

    def test_upload_through_load_parameters(self):
        with open(os.path.join(FIX, "models", "tiny", "model.safetensors"), "rb") as f:
            st = f.read()
        with open(os.path.join(FIX, "models", "tiny", "config.json")) as f:
            cfg = f.read()
        req = pb.RepositoryModelLoadRequest(model_name="tiny2")
        req.parameters["config"].string_param = cfg
        req.parameters["file:model.safetensors"].bytes_param = st
        self.s.RepositoryModelLoad(req)
        c = REFS["self"]
        r = tiny_x(c)
        r.model_name = "tiny2"
        self.assertLess(max_diff(out(self.s.ModelInfer(r), "y")[1], c["y"]), 1e-5)


    def test_load_parameter_that_cannot_be_carried_is_refused(self):
        """a load parameter whose string is not UTF-8 (protobuf-c does not
        check; jansson refuses it) is refused by name, not dropped: the
        load would otherwise go on without its config"""
        with open(os.path.join(FIX, "models", "tiny", "model.safetensors"), "rb") as f:
            st = f.read()
        req = pb.RepositoryModelLoadRequest(model_name="tiny3")
        req.parameters["config"].string_param = "@@NOT_UTF8@@"
        req.parameters["file:model.safetensors"].bytes_param = st
        msg = req.SerializeToString().replace(b"@@NOT_UTF8@@", b'{"x": "\xff\xfe"} ')
        with self.assertRaises(grpc.RpcError) as e:
            self.d.channel.unary_unary("/inference.GRPCInferenceService/RepositoryModelLoad")(msg, timeout=30)
        self.assertEqual(e.exception.code(), C.INVALID_ARGUMENT, e.exception.details())
        self.assertRegex(e.exception.details(), r"parameters: 'config': .*not valid UTF-8")
        idx = self.s.RepositoryIndex(pb.RepositoryIndexRequest())
        self.assertNotIn(("tiny3", "READY"), [(m.name, m.state) for m in idx.models])

    # -- sequences: Triton's gRPC sequence parameters (int64/string id, bool
    # start/end), steps equal to one causal request over the history
    def test_sequence_steps_equal_one_causal_request(self):
        xs = [((i * 37) % 23) / 23.0 - 0.5 for i in range(5 * 8)]
        st, ref = self.d.rest("/v2/models/tiny/infer", {
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 5, 8], "data": xs}],
            "outputs": [{"name": "y"}], "parameters": {"causal": True}})
        self.assertEqual(st, 200, ref)
        y_ref = ref["outputs"][0]["data"]
        for sid in (4242, "grpc-seq"):
            t0 = 0
            for k, t in enumerate((3, 1, 1)):
                req = pb.ModelInferRequest(model_name="tiny", id=f"s{k}")
                typed(req, "x", "FP32", [1, t, 8], xs[t0 * 8:(t0 + t) * 8])
                if isinstance(sid, int):
                    req.parameters["sequence_id"].int64_param = sid
                else:
                    req.parameters["sequence_id"].string_param = sid
                req.parameters["sequence_start"].bool_param = k == 0
                req.parameters["sequence_end"].bool_param = k == 2
                req.parameters["causal"].bool_param = True
                r = self.s.ModelInfer(want(req, "y"))
                self.assertEqual(r.parameters["sequence_length"].int64_param, t0 + t)
                shape, y = out(r, "y")
                self.assertEqual(shape, [1, t, 8])
                self.assertLess(max_diff(y, y_ref[t0 * 8:(t0 + t) * 8]), 1e-5)
                t0 += t
        req = pb.ModelInferRequest(model_name="tiny")
        typed(req, "x", "FP32", [1, 1, 8], xs[:8])
        req.parameters["sequence_id"].int64_param = 4242
        self.code(self.s.ModelInfer, req, C.INVALID_ARGUMENT, r"unknown sequence '4242'.*sequence_start")

    def test_sequence_position(self):
        """parameters.sequence_position as an int64 or uint64 param: a step
        sent again at its position gives the same rows and leaves the
        sequence as if sent once; past the length, FAILED_PRECONDITION
        and nothing changes."""
        xs = [((i * 29) % 19) / 19.0 - 0.5 for i in range(4 * 8)]
        st, ref = self.d.rest("/v2/models/tiny/infer", {
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4, 8], "data": xs}],
            "outputs": [{"name": "y"}], "parameters": {"causal": True}})
        self.assertEqual(st, 200, ref)
        y_ref = ref["outputs"][0]["data"]

        def step(t0, t, pos, kind="int64_param"):
            req = pb.ModelInferRequest(model_name="tiny")
            typed(req, "x", "FP32", [1, t, 8], xs[t0 * 8:(t0 + t) * 8])
            req.parameters["sequence_id"].string_param = "grpc-pos"
            req.parameters["sequence_start"].bool_param = t0 == 0
            req.parameters["causal"].bool_param = True
            setattr(req.parameters["sequence_position"], kind, pos)
            return want(req, "y")

        for t0, t, kind in ((0, 2, "int64_param"), (2, 1, "uint64_param"), (2, 1, "int64_param"),
                            (2, 1, "uint64_param"), (3, 1, "int64_param")):
            r = self.s.ModelInfer(step(t0, t, t0, kind))
            self.assertEqual(r.parameters["sequence_length"].int64_param, t0 + t)
            self.assertLess(max_diff(out(r, "y")[1], y_ref[t0 * 8:(t0 + t) * 8]), 1e-5, (t0, kind))
        self.code(self.s.ModelInfer, step(3, 1, 6), C.FAILED_PRECONDITION,
                  r"sequence_position: 6 is past the end of sequence 'grpc-pos', which holds 4 tokens")
        self.code(self.s.ModelInfer, step(3, 1, -1), C.INVALID_ARGUMENT, r"sequence_position: expected an int64")
        bad = step(3, 1, 0)
        bad.parameters["sequence_position"].string_param = "3"
        self.code(self.s.ModelInfer, bad, C.INVALID_ARGUMENT, r"sequence_position: expected an int64")
        st, seqs = self.d.rest("/v2/sequences")
        self.assertIn(["grpc-pos", 4], [[q["id"], q["length"]] for q in seqs["sequences"]])
        self.assertEqual(self.d.rest("/v2/sequences/grpc-pos", method="DELETE")[0], 200)


class Inline(unittest.TestCase):
    def test_lone_grpc_client_runs_inline(self):
        """With the gRPC channel the only connection, small requests run on
        the loop thread (--inline-conns 1) and answer synchronously through
        the door's on_answer: same numbers, every call counted."""
        d = Attnd()
        try:
            c, k = REFS["sdpa"], REFS["self"]
            for raw_form in (False, True):
                r = d.stub.ModelInfer(want(sdpa_req(c, raw_form), "output"))
                self.assertLess(max_diff(out(r, "output")[1], c["output"]), 1e-5)
                r = d.stub.ModelInfer(want(tiny_x(k, raw_form), "y"))
                self.assertLess(max_diff(out(r, "y")[1], k["y"]), 1e-5)
            with urllib.request.urlopen(f"http://127.0.0.1:{d.port}/metrics") as r:
                metrics = r.read().decode()
            for m in ("sdpa", "tiny"):
                self.assertRegex(metrics, r'attnd_inference_inline_count_total\{model="%s",version="1"\} 2\n' % m)
        finally:
            self.assertEqual(d.stop(), 0, d.log)


    def test_idle_channel_does_not_count(self):
        """A gRPC channel with no call in flight for --inline-idle-ms does
        not keep a lone REST client's requests off the loop thread: they
        run inline beside it, with the right numbers. With 0 the channel
        counts, as every open connection does, and they go to the pool."""
        k = REFS["self"]
        body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32",
                                       "shape": k["shape"], "data": k["x"]}]})
        for idle_ms, want in (("300", 3), ("0", 0)):
            d = Attnd("--inline-idle-ms", idle_ms)
            try:
                # one keep-alive REST connection beside the channel, whose
                # last call (ServerReady) is then 0.6 s old
                c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=30)
                time.sleep(0.6)
                for _ in range(3):
                    c.request("POST", "/v2/models/tiny/infer", body,
                              {"Content-Type": "application/json"})
                    r = c.getresponse()
                    self.assertEqual(r.status, 200)
                    y = json.loads(r.read())["outputs"][0]["data"]
                    self.assertLess(max_diff(y, k["y"]), 1e-5)
                c.request("GET", "/metrics")
                metrics = c.getresponse().read().decode()
                c.close()
                def value(name):
                    return int(re.search(r"^%s (\d+)$" % name, metrics, re.M).group(1))
                self.assertEqual(value("attnd_open_connections"), 2)
                self.assertEqual(value(r'attnd_inference_inline_count_total\{model="tiny",version="1"\}'), want,
                                 f"--inline-idle-ms {idle_ms}")
            finally:
                self.assertEqual(d.stop(), 0, d.log)


# tests/server/failalloc.c, built beside the attnd under test (make check-server)
FAILALLOC = os.path.join(os.path.dirname(ATTND), "tests", "server", "failalloc.so")


@unittest.skipIf(SLOW > 1, "a sanitizer's runtime replaces malloc itself")
class FailAlloc(unittest.TestCase):
    def test_calls_answered_while_allocations_fail(self):
        """attnd's own allocations fail (tests/server/failalloc.c: 1 in 5,
        then 1 in 11, 29 and 97 while armed) under unary infer and
        metadata calls and streams from four threads: each call ends OK
        with REFS' numbers (a stream with all six responses, metadata
        naming the model) or UNAVAILABLE naming the memory,
        each stream response likewise, or UNAVAILABLE at most as often as
        attnd logged closing a connection whose frames it could not
        buffer or refusing a stream; the daemon stays up, and once the
        failures stop the calls are right again, no memory-budget byte is
        held and SIGTERM stops the daemon cleanly."""
        self.assertTrue(os.path.exists(FAILALLOC), f"{FAILALLOC}: make check-server builds it")
        d = Attnd(env={"LD_PRELOAD": FAILALLOC, "FAILALLOC_EVERY": "5,11,29,97",
                       "OPENBLAS_NUM_THREADS": "1"})
        k = REFS["self"]
        lock = threading.Lock()
        seen = {"ok": 0, "errors": 0, "closed": 0, "wrong": [], "loads": {},
                "loaded": [], "not loaded": []}

        def note(what, fine):
            with lock:
                if fine is True or fine is None or fine == "closed":
                    seen[{True: "ok", None: "errors", "closed": "closed"}[fine]] += 1
                else:
                    seen["wrong"].append(f"{what}: {fine}")
            return fine

        def error(code, details):
            """None for an answered error, "closed" for a closed
            connection or refused stream (each logged, counted below),
            else what is wrong with it"""
            if code == C.UNAVAILABLE and "out of memory" in details:
                return None
            if code == C.UNAVAILABLE and not re.search(TRANSPORT, details):
                return f"{code} {details}"  # attnd's, but not memory's
            if code == C.UNAVAILABLE:
                with lock:
                    seen.setdefault("why", {})
                    seen["why"][details[:70]] = seen["why"].get(details[:70], 0) + 1
                return "closed"
            return f"{code} {details}"

        # grpcio's words for a connection that failed or was closed, and
        # for a refused stream (RST_STREAM REFUSED_STREAM, 7)
        TRANSPORT = (r"^failed to connect|Socket closed|Connection reset|Broken pipe|"
                     r"RST_STREAM with error code 7")

        def right(resp):
            return True if max_diff(out(resp, "y")[1], k["y"]) < 1e-5 else "numbers"

        cz = REFS["causal"]
        T, D = cz["shape"][1], cz["shape"][2]

        held = {}  # thread -> (id, step) of a sequence whose connection closed

        def sequence(stub, i):
            """a sequence token by token (unary calls), each answer's row
            PyTorch's causal one and its sequence_length one more. Every
            step carries its sequence_position: a step answered out of
            memory changed nothing and one done whose connection closed
            before its answer came is replaced, so sent again either way
            it joins the sequence once (a step applied twice would show
            as a length one too far). A closed connection ends the call;
            the thread's next sequence call, on a new one, sends that
            step again (an end step's sequence may be gone: it starts
            again)"""
            me = threading.get_ident()
            sid, t = held.pop(me, (f"g{me}-{time.monotonic_ns()}", 0))
            for _ in range(40):
                if t == T:
                    return True
                req = pb.ModelInferRequest(model_name="tiny")
                typed(req, "x", "FP32", [1, 1, D], cz["x"][t * D:(t + 1) * D])
                req.parameters["sequence_id"].string_param = sid
                req.parameters["sequence_start"].bool_param = t == 0
                req.parameters["sequence_end"].bool_param = t == T - 1
                req.parameters["sequence_position"].int64_param = t
                try:
                    r = stub.ModelInfer(want(req, "y"), timeout=30)
                except grpc.RpcError as e:
                    fine = note("sequence step", error(e.code(), e.details()))
                    if fine == "closed":
                        held[me] = (sid, 0 if t == T - 1 else t)
                    if fine is None:
                        continue
                    return fine
                n = r.parameters["sequence_length"].int64_param
                if note("sequence step", f"step {t}: sequence_length {n}" if n != t + 1 else
                        right_row(r, cz["y"][t * D:(t + 1) * D], t)) is not True:
                    return "wrong"
                t += 1
            return True

        with open(os.path.join(FIX, "models", "tiny", "model.safetensors"), "rb") as f:
            tiny_st = f.read()

        def load(stub, i):
            """an upload under a name of its own: the name's answer is
            checked once the failures stop (a load done and then answered
            UNAVAILABLE would be sent again, and a reload drops the
            model's sequences)"""
            name = f"up{threading.get_ident() % 100000}-{time.monotonic_ns()}"
            req = pb.RepositoryModelLoadRequest(model_name=name)
            req.parameters["config"].string_param = json.dumps({"n_heads": 2})
            req.parameters["file:model.safetensors"].bytes_param = tiny_st
            try:
                stub.RepositoryModelLoad(req, timeout=30)
            except grpc.RpcError as e:
                fine = error(e.code(), e.details())
                with lock:
                    seen["loads"][str(fine)] = seen["loads"].get(str(fine), 0) + 1
                    if fine is None:
                        seen["not loaded"].append(name)
                return note("load", fine)
            with lock:
                seen["loads"]["ok"] = seen["loads"].get("ok", 0) + 1
                seen["loaded"].append(name)
            return note("load", True)

        def right_row(resp, row, t):
            return True if max_diff(out(resp, "y")[1], row) < 1e-5 else f"step {t} numbers"

        # a channel per thread with a connection of its own (channels
        # share their connections by default), a new one after its
        # connection is closed (a closed channel waits out its reconnect
        # backoff)
        chans = {}

        def call(w, fn):
            if w not in chans:
                chans[w] = grpc.insecure_channel(f"127.0.0.1:{d.grpc_port}",
                                                 options=[("grpc.use_local_subchannel_pool", 1)])
            if fn(pbg.GRPCInferenceServiceStub(chans[w])) == "closed":
                chans.pop(w).close()

        def unary(stub, i):
            try:
                return note("unary", right(stub.ModelInfer(want(tiny_x(k, raw_form=i % 2 == 1), "y"),
                                                           timeout=30)))
            except grpc.RpcError as e:
                return note("unary", error(e.code(), e.details()))

        def metadata(stub, i):
            try:
                m = stub.ModelMetadata(pb.ModelMetadataRequest(name="tiny"), timeout=30)
                return note("metadata", True if m.name == "tiny" and m.inputs else f"metadata {m}")
            except grpc.RpcError as e:
                return note("metadata", error(e.code(), e.details()))

        def stream(stub, i):
            n = 0
            try:
                for g in stub.ModelStreamInfer(iter([want(tiny_x(k, raw_form=j % 2 == 1), "y")
                                                     for j in range(6)]), timeout=30):
                    n += 1
                    note("stream response", right(g.infer_response) if not g.error_message
                         else None if "out of memory" in g.error_message else g.error_message)
            except grpc.RpcError as e:
                return note("stream", error(e.code(), e.details()))
            # ended OK: every request answered, each in its place
            return note("stream", True if n == 6 else f"{n} responses to 6 requests")

        try:
            for rnd in range(1, 5):
                d.proc.send_signal(signal.SIGUSR1)
                end = time.time() + 0.7

                def work(w):
                    i = 0
                    while time.time() < end:
                        call(w, lambda stub: (stream, metadata, unary, sequence, load)[(i + w) % 5](stub, i))
                        i += 1
                threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                d.proc.send_signal(signal.SIGUSR2)
                lines = re.findall(r"failalloc: (\d+) of \d+ allocations failed",
                                   d.logged(r"failalloc: \d+ of", count=rnd))
                self.assertGreater(int(lines[rnd - 1]), 0, f"round {rnd}: the failures happened ({seen})")
                self.assertIsNone(d.proc.poll(), "attnd is still running")
                self.assertEqual(seen["wrong"], [])
            self.assertGreater(seen["ok"], 20, seen)
            self.assertGreater(seen["errors"], 20, seen)
            # a call ends closed only by a connection or stream attnd
            # closed or refused for want of memory, each logged
            time.sleep(0.3 * SLOW)  # daemon messages reach stderr through the log writer
            said = len(re.findall(r"grpc: a (connection closed|stream refused): out of memory", d.log))
            self.assertLessEqual(seen["closed"], said, seen)
            self.assertGreater(seen["loads"].get("ok", 0), 0, seen["loads"])
            self.assertGreater(seen["loads"].get("None", 0), 0, seen["loads"])
            # the failures stopped: right again, nothing held
            closed = seen["closed"]
            for w in list(chans):
                chans.pop(w).close()
            call(0, lambda stub: unary(stub, 0))
            call(0, lambda stub: stream(stub, 0))
            self.assertEqual(seen["wrong"], [])
            self.assertEqual(seen["closed"], closed)
            with urllib.request.urlopen(f"http://127.0.0.1:{d.port}/metrics") as r:
                metrics = r.read().decode()
            # every load answered OK serves its model; none answered out
            # of memory does
            for names, expect in ((seen["loaded"], 200), (seen["not loaded"], 404)):
                for name in names:
                    st, body = d.rest(f"/v2/models/{name}")
                    self.assertEqual(st, expect, f"{name}: {st} {body}")
            self.assertRegex(metrics, r"(?m)^attnd_memory_budget_used_bytes 0$")
            self.assertRegex(metrics, r"(?m)^attnd_pool_jobs 0$")
        finally:
            for ch in chans.values():
                ch.close()
            self.assertEqual(d.stop(), 0, d.log[-3000:])


class Limits(unittest.TestCase):
    """Auth, queue full, deadlines: servers with their own settings."""

    def test_cancelled_rewinding_step_changes_nothing(self):
        """A retained sequence of 3 tokens on demo; a 1200-token step at
        sequence_position 1 whose call is cancelled while it runs: the
        step is answered to no one, so the sequence keeps its 3 tokens and
        its map its 3 rows (its encoding grows no map once the call is
        gone; it did, and the failed branch then ended the map)."""
        d = Attnd("--max-body", "4000000")
        try:
            def metric(name):
                with urllib.request.urlopen(f"http://127.0.0.1:{d.port}/metrics") as r:
                    return int(re.search(r"(?m)^%s (\d+)$" % re.escape(name), r.read().decode()).group(1))

            def step(sid, t, pos):
                req = pb.ModelInferRequest(model_name="demo")
                typed(req, "x", "FP32", [1, t, 64], [((i * 13) % 29) / 29.0 - 0.5 for i in range(t * 64)])
                req.parameters["sequence_id"].string_param = sid
                req.parameters["sequence_start"].bool_param = pos == 0
                req.parameters["sequence_position"].int64_param = pos
                req.parameters["retain"].bool_param = pos == 0
                return want(req, "y")

            ran = 0
            for i in range(8):
                sid = f"cx{i}"
                first = d.stub.ModelInfer(step(sid, 2, 0))
                map_id = first.parameters["map_id"].string_param
                d.stub.ModelInfer(step(sid, 1, 2))
                count = metric('attnd_inference_count_total{model="demo",version="1"}')
                call = d.stub.ModelInfer.future(step(sid, 1200, 1))
                time.sleep(0.002 * SLOW)
                if not call.cancel():
                    continue  # answered first: nothing to see
                deadline = time.time() + 10 * SLOW
                while metric("attnd_pool_jobs") and time.time() < deadline:
                    time.sleep(0.005)
                if metric('attnd_inference_count_total{model="demo",version="1"}') == count:
                    continue  # cancelled before it ran
                ran += 1
                st, seqs = d.rest("/v2/sequences")
                got = [[q["length"], q.get("map_id")] for q in seqs["sequences"] if q["id"] == sid]
                self.assertEqual(got, [[3, map_id]], "the cancelled step changed its sequence")
                st, meta = d.rest(f"/v2/maps/{map_id}")
                self.assertEqual(meta["shape"], [1, 4, 3, 3])
            # under a sanitizer the cancel may come before every step ran
            self.assertTrue(ran > 0 or SLOW > 1, "no cancelled step ran")
        finally:
            self.assertEqual(d.stop(), 0, d.log[-3000:])

    def test_unauthenticated(self):
        d = Attnd("--api-key", "s3cret")
        try:
            s = d.stub
            self.assertTrue(s.ServerLive(pb.ServerLiveRequest()).live, "health needs no key")
            for md in (None, [("authorization", "Bearer wrong")], [("authorization", "s3cret")]):
                with self.assertRaises(grpc.RpcError) as e:
                    s.ModelInfer(seed1(), metadata=md)
                self.assertEqual(e.exception.code(), C.UNAUTHENTICATED)
                self.assertRegex(e.exception.details(), r"authorization: missing or wrong API key")
            with self.assertRaises(grpc.RpcError) as e:
                list(s.ModelStreamInfer(iter([seed1()])))
            self.assertEqual(e.exception.code(), C.UNAUTHENTICATED)
            with self.assertRaises(grpc.RpcError) as e:
                s.RepositoryIndex(pb.RepositoryIndexRequest())
            self.assertEqual(e.exception.code(), C.UNAUTHENTICATED)
            ok = [("authorization", "Bearer s3cret")]
            self.assertEqual(s.ModelInfer(seed1(), metadata=ok).id, "seed1")
            self.assertEqual(len(list(s.ModelStreamInfer(iter([seed1()]), metadata=ok))), 1)
        finally:
            self.assertEqual(d.stop(), 0, d.log)

    def test_queue_full_is_unavailable(self):
        # the first call waits out the batch delay in the queue (longer
        # than the pause below, even on a sanitized build)
        d = Attnd("--queue-size", "1", "--batch-delay-us", str(int(2e6 * SLOW)))
        try:
            first = d.stub.ModelInfer.future(seed1())
            time.sleep(0.3 * SLOW)
            with self.assertRaises(grpc.RpcError) as e:
                d.stub.ModelInfer(seed1())
            self.assertEqual(e.exception.code(), C.UNAVAILABLE)
            self.assertRegex(e.exception.details(), r"queue: model 'sdpa' has 1 requests waiting \(queue-size\)")
            self.assertEqual(first.result().id, "seed1", "the queued one still answers")
        finally:
            self.assertEqual(d.stop(), 0, d.log)

    def test_memory_budget(self):
        """A message counts against --memory-budget while it is buffered and
        decoded, as a REST body does: past it UNAVAILABLE; the budget comes
        back when calls end (no leak in the accounting)."""
        d = Attnd("--memory-budget", "4000000", "--max-body", "2000000", "--max-json-body", "100000",
                  "--request-memory", "4000000", "--batch-delay-us", str(int(1e6 * SLOW)))
        try:
            n = 25000  # one query over 25000 keys: 1.6 MB of k and v, little compute
            big = pb.ModelInferRequest(model_name="sdpa", id="big")
            raw(big, "q", "FP32", [1, 8], f32([0.1] * 8))
            raw(big, "k", "FP32", [n, 8], b"\0" * (32 * n))
            raw(big, "v", "FP32", [n, 8], b"\0" * (32 * n))
            # two held by the batch delay take 3.2 MB; a third does not fit
            first = [d.stub.ModelInfer.future(big) for _ in range(2)]
            time.sleep(0.3 * SLOW)
            with self.assertRaises(grpc.RpcError) as e:
                d.stub.ModelInfer(big)
            self.assertEqual(e.exception.code(), C.UNAVAILABLE, e.exception.details())
            self.assertRegex(e.exception.details(), r"memory-budget")
            self.assertEqual([f.result().id for f in first], ["big", "big"])
            for _ in range(3):  # each returns what it took
                self.assertEqual(d.stub.ModelInfer(big).id, "big")
            # on a stream, the request that does not fit is that request's
            # error (its bytes dropped unread) and the stream goes on
            got = list(d.stub.ModelStreamInfer(iter([big] * 3 + [seed1()])))
            self.assertEqual(len(got), 4)
            self.assertRegex(got[2].error_message, r"memory-budget")
            self.assertEqual([g.infer_response.id for g in got if not g.error_message][-1], "seed1")
            self.assertEqual(got[0].infer_response.id, "big")
        finally:
            self.assertEqual(d.stop(), 0, d.log)

    def test_sequence_steps_batch_across_doors(self):
        """A sequence stepped on a gRPC stream and one stepped over REST, in
        lock step: each pair of steps runs as one batch of 2 (one
        scheduler), and both sequences' answers stay their own."""
        d = Attnd("--batch-delay-us", str(int(300000 * SLOW)), "--max-batch", "2")
        try:
            rnd = __import__("random").Random(5)
            xs = [[rnd.uniform(-1, 1) for _ in range(64)] for _ in range(4)]
            q = queue.Queue()
            stream = d.stub.ModelStreamInfer(iter(q.get, None))
            lengths = []
            for k, x in enumerate(xs):
                r = pb.ModelInferRequest(model_name="demo", id=f"g{k}")
                raw(r, "x", "FP32", [1, 1, 64], f32(x))
                r.parameters["sequence_id"].string_param = "by-grpc"
                r.parameters["sequence_start"].bool_param = k == 0
                r.parameters["sequence_end"].bool_param = k == len(xs) - 1
                q.put(r)
                st, body = d.rest("/v2/models/demo/infer", {
                    "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1, 64], "data": x}],
                    "parameters": {"sequence_id": "by-rest", "sequence_start": k == 0,
                                   "sequence_end": k == len(xs) - 1}})
                g = next(stream)
                self.assertEqual(st, 200, body)
                self.assertEqual(g.error_message, "")
                lengths.append((g.infer_response.parameters["sequence_length"].int64_param,
                                body["parameters"]["sequence_length"]))
                # the same rows in the same positions: the same y
                self.assertLess(max_diff(out(g.infer_response, "y")[1], body["outputs"][0]["data"]), 1e-6)
            q.put(None)
            self.assertEqual(list(stream), [])
            self.assertEqual(lengths, [(1, 1), (2, 2), (3, 3), (4, 4)])
            st = d.stub.ModelStatistics(pb.ModelStatisticsRequest(name="demo")).model_stats[0]
            self.assertEqual({(b.batch_size, b.compute_infer.count) for b in st.batch_stats}, {(2, 4)})
            line = r"ModelStreamInfer 200 .*batch=2"
            self.assertEqual(len(re.findall(line, d.logged(line, 4))), 4)
        finally:
            self.assertEqual(d.stop(), 0, d.log)

    def test_deadlines(self):
        d = Attnd("--deadline-ms", "300", "--batch-delay-us", "10000000", "--max-batch", "2")
        try:
            t0 = time.time()
            with self.assertRaises(grpc.RpcError) as e:
                d.stub.ModelInfer(seed1())
            self.assertEqual(e.exception.code(), C.DEADLINE_EXCEEDED)
            self.assertRegex(e.exception.details(), r"deadline: no answer within 300 ms \(deadline-ms\)")
            self.assertLess(time.time() - t0, 5 * SLOW)
            # the client's shorter grpc-timeout wins
            t0 = time.time()
            with self.assertRaises(grpc.RpcError) as e:
                d.stub.ModelInfer(seed1(), timeout=0.1)
            self.assertEqual(e.exception.code(), C.DEADLINE_EXCEEDED)
            self.assertLess(time.time() - t0, 0.29)
            # in a stream, a late request is that request's error
            got = list(d.stub.ModelStreamInfer(iter([seed1()])))
            self.assertRegex(got[0].error_message, r"deadline: no answer within 300 ms")
            self.assertTrue(d.stub.ServerLive(pb.ServerLiveRequest()).live)
        finally:
            self.assertEqual(d.stop(), 0, d.log)

    def test_drain(self):
        """SIGTERM: calls in flight finish (a stream's too), ready turns
        false, new work is UNAVAILABLE, and attnd exits 0 once the last
        client is gone (a REST client stuck in its body holds the drain
        open here, as in tests/server/lifecycle.test.mjs)."""
        d = Attnd("--batch-delay-us", "10000000")
        try:
            inflight = d.stub.ModelInfer.future(seed1())
            q = queue.Queue()
            stream = d.stub.ModelStreamInfer(iter(q.get, None))
            q.put(seed1())
            time.sleep(0.2 * SLOW)
            sock = socket.create_connection(("127.0.0.1", d.port))
            sock.sendall(b"POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Length: 100\r\n\r\n{\"inp")
            time.sleep(0.1 * SLOW)
            t0 = time.time()
            d.proc.send_signal(signal.SIGTERM)
            self.assertEqual(inflight.result(timeout=10 * SLOW).id, "seed1", "in flight finishes")
            self.assertEqual(next(stream).infer_response.id, "seed1", "so does the stream's")
            self.assertLess(time.time() - t0, 5 * SLOW, "without the batch delay")
            # the idle stream is ended: the server is going away
            with self.assertRaises(grpc.RpcError) as e:
                next(stream)
            self.assertEqual(e.exception.code(), C.UNAVAILABLE)
            q.put(None)
            ch = grpc.insecure_channel(f"127.0.0.1:{d.grpc_port}")
            s = pbg.GRPCInferenceServiceStub(ch)
            self.assertFalse(s.ServerReady(pb.ServerReadyRequest(), timeout=10).ready)
            self.assertTrue(s.ServerLive(pb.ServerLiveRequest(), timeout=10).live)
            with self.assertRaises(grpc.RpcError) as e:
                s.ModelInfer(seed1(), timeout=10)
            self.assertEqual(e.exception.code(), C.UNAVAILABLE)
            self.assertRegex(e.exception.details(), r"draining")
            ch.close()
            sock.close()
            self.assertEqual(d.proc.wait(10 * SLOW), 0, "leaves by itself")
        finally:
            self.assertEqual(d.stop(), 0, d.log)


if __name__ == "__main__":
    unittest.main(verbosity=2)
