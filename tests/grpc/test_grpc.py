#!/usr/bin/python3
"""gRPC door, client 1 of 2 (grpcio; tests/grpc/grpc_helper.py starts the
daemons): Unary, one attnd for the class. Every RPC, every status code
attnd answers, the seeds' numbers through sdpa, the PyTorch vectors of
tests/server/fixtures through the `tiny` weight set, raw and typed
contents, FP16/BF16, streams, sequences. test_grpc_limits.py and
test_grpc_failalloc.py hold the classes with servers of their own settings.

    ATTND=build/default/attnd GRPC_STUBS=build/default/grpc/py \
        /usr/bin/python3 -m unittest -v tests/grpc/test_grpc*.py
"""
import base64
import json
import os
import shutil
import struct
import sys
import unittest
import urllib.request

import grpc

if os.path.dirname(os.path.abspath(__file__)) not in sys.path:  # grpc_helper, beside this file
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grpc_helper import (  # noqa: E402
    FIX, REFS, C, pb, Attnd, f32, typed, raw, want, out, max_diff, seed1, sdpa_req, tiny_x)


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

    def test_model_config_matches_rest(self):
        for name in ("tiny", "sdpa"):
            c = self.s.ModelConfig(pb.ModelConfigRequest(name=name)).config
            st, rest = self.d.rest(f"/v2/models/{name}/config")
            self.assertEqual(st, 200)
            self.assertEqual((c.name, c.platform, c.backend, c.max_batch_size),
                             (rest["name"], rest["platform"], rest["backend"], 0))
            self.assertEqual(c.version_policy.latest.num_versions, 1)
            for got, want in ((c.input, rest["input"]), (c.output, rest["output"])):
                self.assertEqual([(t.name, pb.DataType.Name(t.data_type), list(t.dims)) for t in got],
                                 [(t["name"], t["data_type"], t["dims"]) for t in want])
            self.assertEqual({k: v.string_value for k, v in c.parameters.items()},
                             {k: v["string_value"] for k, v in rest["parameters"].items()})
        self.assertEqual(list(self.s.ModelConfig(pb.ModelConfigRequest(name="tiny", version="1")).config.input[0].dims),
                         [-1, -1, 8])
        self.code(self.s.ModelConfig, pb.ModelConfigRequest(name="nope"), C.NOT_FOUND, r"not found")

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

    def test_sdpa_scale(self):
        """parameters.scale (attnd's, sdpa's: PyTorch 2's SDPA scale=) as a
        double_param or an int64_param: softmax((q * scale) k^T), computed
        in float64 by tests/server/gen_sdpa_scale.py."""
        with open(os.path.join(FIX, "sdpa_scale.json")) as f:
            want_of = {w["scale"]: w for w in json.load(f)["sdpa"]}
        c = REFS["sdpa"]
        for scale, kind in ((0.2, "double_param"), (1.0, "double_param"), (3, "int64_param")):
            req = want(sdpa_req(c), "output", "attention")
            setattr(req.parameters["scale"], kind, scale)
            r = self.s.ModelInfer(req)
            w = want_of[float(scale)]
            self.assertLess(max_diff(out(r, "output")[1], w["output"]), 2e-6, (scale, kind))
            self.assertLess(max_diff(out(r, "attention")[1], w["attention"]), 1e-6, (scale, kind))
        msg = r"^parameters\.scale: expected a positive number that a float holds"
        for kind, v in (("double_param", 0.0), ("double_param", 1e39), ("string_param", "0.5"),
                        ("int64_param", -1), ("bool_param", True)):
            req = sdpa_req(c)
            setattr(req.parameters["scale"], kind, v)
            self.code(self.s.ModelInfer, req, C.INVALID_ARGUMENT, msg)
        req = tiny_x(REFS["self"])
        req.parameters["scale"].double_param = 0.5
        self.code(self.s.ModelInfer, req, C.INVALID_ARGUMENT,
                  r"^parameters\.scale: model 'tiny' is a weight set")

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
        self.assertNotIn("item_tokens", m)

    def test_retain_tokens_one_list_per_item(self):
        # the string parameter's JSON may hold one list per batch item (B 2)
        req = tiny_x(REFS["self"])
        req.parameters["retain"].bool_param = True
        lists = [[f"a{i}" for i in range(5)], [f"b{i}" for i in range(5)]]
        req.parameters["tokens"].string_param = json.dumps(lists)
        r = self.s.ModelInfer(req)
        st, m = self.d.rest(f"/v2/maps/{r.parameters['map_id'].string_param}")
        self.assertEqual(st, 200)
        self.assertEqual(m["tokens"], lists[0])
        self.assertEqual(m["item_tokens"], lists)
        req.parameters["tokens"].string_param = json.dumps(lists + [lists[0]])
        self.code(self.s.ModelInfer, req, C.INVALID_ARGUMENT,
                  r"^parameters\.tokens: 3 lists, expected 2 \(one per batch item\)")
        req.parameters["tokens"].string_param = json.dumps([lists[0], lists[1][:4]])
        self.code(self.s.ModelInfer, req, C.INVALID_ARGUMENT,
                  r"^parameters\.tokens\[1\]: 4 labels, tokens\[0\] has 5")

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
        # one value too many is as wrong as one too few (shape x 4 bytes)
        r = pb.ModelInferRequest(model_name="tiny")
        raw(r, "x", "FP32", x["shape"], f32(x["x"] + [0.5]))
        cases.append((r, r"raw_input_contents\[0\]: 132 bytes, expected 128 \(32 FP32 values\)"))
        r = pb.ModelInferRequest(model_name="tiny")
        typed(r, "x", "FP32", x["shape"], x["x"] + [0.5])
        cases.append((r, r"inputs\[0\]\.contents: expected 32 values, got 33"))
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

    def test_shared_memory_parameters_are_refused(self):
        # the messages tritonclient.grpc builds after set_shared_memory:
        # region and byte size (offset only when not 0), no contents and
        # no raw_input_contents entry for a tensor in a region (a map: its
        # keys come in any order). An output's
        # was ignored (its tensor came in the message, the client read its
        # region's stale bytes); an input's was refused by the count of
        # raw_input_contents, naming no region
        x = REFS["causal"]
        r = want(tiny_x(x, raw_form=True), "y")
        r.outputs[0].parameters["shared_memory_region"].string_param = "out0"
        r.outputs[0].parameters["shared_memory_byte_size"].int64_param = 128
        self.code(self.s.ModelInfer, r, C.INVALID_ARGUMENT,
                  r"^outputs\[0\]\.parameters\.shared_memory_(region|byte_size): attnd does not serve "
                  r"Triton's shared-memory extension .*: it comes in the answer$")
        r = seed1(raw)
        del r.inputs[1]
        del r.raw_input_contents[1]
        t = r.inputs.add(name="k", datatype="FP32", shape=[2, 4])
        t.parameters["shared_memory_region"].string_param = "in_k"
        t.parameters["shared_memory_byte_size"].int64_param = 32
        t.parameters["shared_memory_offset"].int64_param = 64
        self.code(self.s.ModelInfer, r, C.INVALID_ARGUMENT,
                  r"^inputs\[2\]\.parameters\.shared_memory_(region|byte_size|offset): "
                  r"attnd does not serve Triton's shared-memory extension")

    def test_misspelt_parameters_are_refused(self):
        # casual was ignored (the model's default answered); Triton's own
        # priority and timeout, as tritonclient.grpc sends them, pass
        x = REFS["causal"]
        r = tiny_x(x)
        r.parameters["casual"].bool_param = True
        self.code(self.s.ModelInfer, r, C.INVALID_ARGUMENT,
                  r"^parameters\.casual: not a parameter attnd reads; did you mean 'causal'\?")
        r = want(tiny_x(x), "y")
        r.outputs[0].parameters["binary-data"].bool_param = True
        self.code(self.s.ModelInfer, r, C.INVALID_ARGUMENT,
                  r"^outputs\[0\]\.parameters\.binary-data: not a parameter attnd reads; "
                  r"did you mean 'binary_data'\?")
        r = tiny_x(x)
        r.parameters["causal"].bool_param = True
        r.parameters["priority"].uint64_param = 1
        r.parameters["timeout"].int64_param = 100000
        self.assertEqual(self.s.ModelInfer(r, timeout=30).model_name, "tiny")

    def test_malformed_messages(self):
        call = self.d.channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        for junk in (b"\xff\xff\xff", b"\x0a\x05ti", b"\x0a\x04tiny\x2a\x03\x0a\x01"):
            with self.assertRaises(grpc.RpcError) as e:
                call(junk, timeout=30)
            self.assertEqual(e.exception.code(), C.INVALID_ARGUMENT)
            self.assertRegex(e.exception.details(), r"not a valid ModelInferRequest")
        # a string field must be UTF-8 (protobuf's rule; REST's JSON's too):
        # an id that is not is refused, not echoed into an answer that
        # clients then cannot parse
        for bad in (b"\xc3\x28", b"ok\xff", b"\xed\xa0\x80"):
            with self.assertRaises(grpc.RpcError) as e:
                call(seed1().SerializeToString() + b"\x1a" + bytes([len(bad)]) + bad, timeout=30)
            self.assertEqual(e.exception.code(), C.INVALID_ARGUMENT, bad)
            self.assertRegex(e.exception.details(), r"^id: not valid UTF-8", bad)
        good = pb.ModelInferResponse.FromString(call(seed1().SerializeToString() + b"\x1a\x03\xc3\xa9!", timeout=30))
        self.assertEqual(good.id, "\u00e9!")
        # every method that reads its message names it (field 1, a length
        # that runs past the end)
        for method in ("ModelReady", "ModelMetadata", "ModelConfig", "ModelStatistics",
                       "RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload"):
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
            self.d.channel.unary_unary("/inference.GRPCInferenceService/SystemSharedMemoryStatus")(b"", timeout=30)
        self.assertEqual(e.exception.code(), C.UNIMPLEMENTED)
        # it said only "not served by attnd (see proto/kserve.proto)"
        self.assertRegex(e.exception.details(), r"SystemSharedMemoryStatus: attnd does not serve "
                         r"Triton's shared-memory extension \(system or CUDA; /v2 does not list it\)")
        with self.assertRaises(grpc.RpcError) as e:
            self.d.channel.unary_unary("/inference.GRPCInferenceService/CudaSharedMemoryRegister")(b"", timeout=30)
        self.assertEqual(e.exception.code(), C.UNIMPLEMENTED)
        self.assertRegex(e.exception.details(), r"attnd does not serve Triton's shared-memory extension")
        with self.assertRaises(grpc.RpcError) as e:
            self.d.channel.unary_unary("/inference.GRPCInferenceService/ModelStreamInferX")(b"", timeout=30)
        self.assertRegex(e.exception.details(), r"not served by attnd \(see proto/kserve.proto\)")
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
        # an error that quotes the client's bytes is still UTF-8 (cut
        # inside a character at 64 bytes here), or grpcio could not parse
        # the stream's response at all
        odd = seed1()
        odd.model_version = "x" + "\u00e9" * 40
        got = list(self.s.ModelStreamInfer(iter([odd, seed1()]), timeout=30))
        self.assertRegex(got[0].error_message, r"^version 'x(\u00e9)+\?' not found")
        self.assertEqual(got[1].infer_response.id, "seed1")
        # an empty stream ends OK with no responses
        self.assertEqual(list(self.s.ModelStreamInfer(iter([]))), [])

    def test_stream_error_answers_name_their_request(self):
        """A failed request's answer on a stream carries, beside its
        error_message, its id, model_name and model_version in
        infer_response, as Triton's server fills them "so that client
        knows which request failed" (a client matching answers to
        requests by id): whether it failed before its message was decoded
        (a bad version, an id holding a NUL byte), at the decode (a bad
        shape) or once routed (an unknown model); good ones between go on."""
        def named(rid, model="sdpa", version=""):
            r = seed1()
            r.id, r.model_name, r.model_version = rid, model, version
            return r
        shape = named("bad-shape", version="1")
        shape.inputs[0].shape[1] = -3
        nul = named("x\0y")
        long_id = named("L" * 300)  # over 255 bytes: refused, echoed whole
        longer_id = named("M" * 100000, "nope" * 40, "v" * 1000)  # names too
        reqs = [named("ok-0"), shape, named("no-model", "nope", "1"), named("ok-1"),
                named("bad-version", "sdpa", "7"), nul, long_id, named("\u00e9t\u00e9", "tiny"),
                longer_id, named("ok-2")]
        got = list(self.s.ModelStreamInfer(iter(reqs), timeout=60))
        self.assertEqual(len(got), len(reqs))
        errors = {"bad-shape": r"^inputs\[0\]\.shape: dimension 1 is -3",
                  "no-model": r"model 'nope': not found", "bad-version": r"^version '7' not found",
                  "x\0y": r"^id: contains a NUL byte", "L" * 300: r"^id: longer than 255 bytes",
                  "\u00e9t\u00e9": r".", "M" * 100000: r"^model_name: longer than 128 bytes"}
        for req, g in zip(reqs, got):
            if req.id.startswith("ok-"):
                self.assertEqual((g.error_message, g.infer_response.id), ("", req.id))
                continue
            self.assertRegex(g.error_message, errors[req.id])
            self.assertTrue(g.HasField("infer_response"), req.id)
            self.assertEqual((g.infer_response.id, g.infer_response.model_name,
                              g.infer_response.model_version),
                             (req.id, req.model_name, req.model_version), req.id[:20])
            self.assertEqual(len(g.infer_response.outputs), 0)

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
        # an unload of a model not loaded is NOT_FOUND, as REST's 404
        # (README: where Triton answers success), never-known names too
        for name in ("demo", "never-here"):
            self.code(self.s.RepositoryModelUnload, pb.RepositoryModelUnloadRequest(model_name=name),
                      C.NOT_FOUND, r"^model '%s': not loaded$" % name)
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

    def test_names_up_to_128_bytes_any_version_length(self):
        name = "m" * 128  # the longest model name
        shutil.copytree(os.path.join(self.d.dir, "tiny"), os.path.join(self.d.dir, name))
        self.s.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name=name))
        self.assertTrue(self.s.ModelReady(pb.ModelReadyRequest(name=name)).ready)
        c = REFS["self"]
        req = want(tiny_x(c, raw_form=True), "y")
        req.model_name = name
        self.assertLess(max_diff(out(self.s.ModelInfer(req), "y")[1], c["y"]), 1e-5)
        self.assertEqual(self.s.ModelConfig(pb.ModelConfigRequest(name=name)).config.name, name)
        req.model_version = "1" * 200  # no such version (REST: 404), however long
        self.code(self.s.ModelInfer, req, C.NOT_FOUND, r"version '1{64}' not found")
        self.code(self.s.ModelReady, pb.ModelReadyRequest(name=name, version="2" * 200), C.NOT_FOUND,
                  r"not found: only version 1 exists")
        req.model_version = ""
        req.model_name = name + "m"
        self.code(self.s.ModelInfer, req, C.INVALID_ARGUMENT, r"^model_name: longer than 128 bytes$")
        self.code(self.s.ModelReady, pb.ModelReadyRequest(name=name + "m"), C.INVALID_ARGUMENT,
                  r"^name: must be 1 to 128 bytes$")
        self.code(self.s.ModelReady, pb.ModelReadyRequest(name=""), C.INVALID_ARGUMENT,
                  r"^name: must be 1 to 128 bytes$")
        self.s.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name=name))

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


    def test_load_parameters_of_other_types_are_carried(self):
        """bool and int64 load parameters reach the load as JSON true and
        numbers, as REST's body would carry them: config or the weights
        given as one is refused naming it (INVALID_ARGUMENT, REST's 400
        message), nothing loaded; an unknown key of either type is
        ignored, as REST ignores it"""
        with open(os.path.join(FIX, "models", "tiny", "model.safetensors"), "rb") as f:
            st = f.read()
        with open(os.path.join(FIX, "models", "tiny", "config.json")) as f:
            cfg = f.read()
        for key, kind, want in (
                ("config", "bool_param", r"^parameters\.config: must be a JSON string$"),
                ("file:model.safetensors", "int64_param",
                 r'^parameters\["file:model\.safetensors"\]: must be a base64 string$')):
            req = pb.RepositoryModelLoadRequest(model_name="tiny5")
            req.parameters["config"].string_param = cfg
            req.parameters["file:model.safetensors"].bytes_param = st
            setattr(req.parameters[key], kind, 7 if kind == "int64_param" else True)
            self.code(self.s.RepositoryModelLoad, req, C.INVALID_ARGUMENT, want)
            idx = self.s.RepositoryIndex(pb.RepositoryIndexRequest())
            self.assertNotIn("tiny5", [m.name for m in idx.models])
        req = pb.RepositoryModelLoadRequest(model_name="tiny5")
        req.parameters["config"].string_param = cfg
        req.parameters["file:model.safetensors"].bytes_param = st
        req.parameters["flag"].bool_param = True
        req.parameters["count"].int64_param = 3
        self.s.RepositoryModelLoad(req)
        c = REFS["self"]
        r = tiny_x(c)
        r.model_name = "tiny5"
        self.assertLess(max_diff(out(self.s.ModelInfer(r), "y")[1], c["y"]), 1e-5)
        self.s.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="tiny5"))

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

    def test_nul_byte_in_a_string_is_refused(self):
        """attnd's names, ids and keys are C strings: a NUL inside a
        protobuf string would cut it there ("demo\\0x" naming demo), where
        REST's JSON refuses \\u0000 (400) and Triton compares the whole
        string; every RPC refuses it, naming the field"""
        cases = []
        r = seed1()
        r.model_name = "sdpa\0nope"
        cases.append((r, r"^model_name: contains a NUL byte"))
        r = seed1()
        r.parameters["causal\0x"].bool_param = True
        cases.append((r, r"^parameters\.key: contains a NUL byte"))
        r = seed1()
        r.inputs[0].name = "q\0junk"
        cases.append((r, r"^inputs\.name: contains a NUL byte"))
        r = seed1()
        r.id = "a\0b"
        cases.append((r, r"^id: contains a NUL byte"))
        r = seed1()
        r.parameters["tokens"].string_param = '["a", "b"]\0junk'
        cases.append((r, r"^parameters\.value\.string_param: contains a NUL byte"))
        for req, pattern in cases:
            self.code(self.s.ModelInfer, req, C.INVALID_ARGUMENT, pattern)
        got = list(self.s.ModelStreamInfer(iter([cases[0][0], seed1()]), timeout=30))
        self.assertRegex(got[0].error_message, r"^model_name: contains a NUL byte")
        self.assertEqual(got[1].infer_response.id, "seed1")
        st, body = self.d.rest("/v2/models/sdpa/infer", {"parameters": {"causal\0x": True}, "inputs": []})
        self.assertEqual(st, 400, body)
        self.code(self.s.ModelReady, pb.ModelReadyRequest(name="tiny\0x"), C.INVALID_ARGUMENT,
                  r"^name: contains a NUL byte")
        self.code(self.s.ModelMetadata, pb.ModelMetadataRequest(name="tiny\0x"), C.INVALID_ARGUMENT,
                  r"^name: contains a NUL byte")
        self.code(self.s.ModelStatistics, pb.ModelStatisticsRequest(name="tiny\0x"), C.INVALID_ARGUMENT,
                  r"^name: contains a NUL byte")
        try:  # not demo's unload
            self.code(self.s.RepositoryModelUnload, pb.RepositoryModelUnloadRequest(model_name="demo\0x"),
                      C.INVALID_ARGUMENT, r"^model_name: contains a NUL byte")
            self.assertTrue(self.s.ModelReady(pb.ModelReadyRequest(name="demo")).ready)
        finally:
            self.s.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="demo"))
        req = pb.RepositoryModelLoadRequest(model_name="tiny4")
        req.parameters["config"].string_param = "{}\0"
        self.code(self.s.RepositoryModelLoad, req, C.INVALID_ARGUMENT,
                  r"^parameters\.value\.string_param: contains a NUL byte")

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
        self.code(self.s.ModelInfer, req, C.INVALID_ARGUMENT, r"unknown sequence '4242' \(ended .*sequence_start: true with the whole history to begin it again$")
        # one never seen here, sent without the metadata a proxy routes on
        req.parameters["sequence_id"].int64_param = 4243
        self.code(self.s.ModelInfer, req, C.INVALID_ARGUMENT, r"unknown sequence '4243' \(never started.*sequence_start.*; behind a proxy, send the id in the attnd-sequence-id metadata too \(this step came without it\)")

    def test_sequence_position(self):
        """parameters.sequence_position as an int64 or uint64 param: a step
        sent again at its position gives the same rows and leaves the
        sequence as if sent once; past the length, FAILED_PRECONDITION
        and nothing changes; the last step of an ended sequence sent again,
        FAILED_PRECONDITION too (it was carried out)."""
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
        # past INT32_MAX, as REST refuses 2 ** 31: not cut to an int (2 ** 32 + 3
        # would be a step at 3)
        for pos, kind in ((2 ** 31, "int64_param"), (2 ** 32 + 3, "int64_param"), (2 ** 32 + 3, "uint64_param")):
            self.code(self.s.ModelInfer, step(3, 1, pos, kind), C.INVALID_ARGUMENT,
                      r"sequence_position: expected an int64 or uint64 param 0 \.\. 2147483647")
        bad = step(3, 1, 0)
        bad.parameters["sequence_position"].string_param = "3"
        self.code(self.s.ModelInfer, bad, C.INVALID_ARGUMENT, r"sequence_position: expected an int64")
        st, seqs = self.d.rest("/v2/sequences")
        self.assertIn(["grpc-pos", 4], [[q["id"], q["length"]] for q in seqs["sequences"]])
        self.assertEqual(self.d.rest("/v2/sequences/grpc-pos")[1]["length"], 4)
        last = step(3, 1, 3)
        last.parameters["sequence_end"].bool_param = True
        self.assertEqual(self.s.ModelInfer(last).parameters["sequence_length"].int64_param, 4)
        self.code(self.s.ModelInfer, last, C.FAILED_PRECONDITION,
                  r"sequence 'grpc-pos' ended \d+\.\d s ago at 4 tokens: a step with sequence_end was "
                  r"answered; position 3 was in it \(its steps were carried out\)")
        st, gone = self.d.rest("/v2/sequences/grpc-pos")
        self.assertEqual(st, 404)
        self.assertRegex(gone["error"], r"^sequence 'grpc-pos' ended .* at 4 tokens")


if __name__ == "__main__":
    unittest.main(verbosity=2)
