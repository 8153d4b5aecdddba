#!/usr/bin/python3
"""gRPC door, client 1 of 2 (grpcio; tests/grpc/grpc_helper.py starts the
daemons): FailAlloc, unary calls, streams, metadata calls, uploads and
sequence steps while attnd's own allocations fail (tests/server/failalloc.c
preloaded); skipped under a sanitizer.

    ATTND=build/default/attnd GRPC_STUBS=build/default/grpc/py \
        /usr/bin/python3 -m unittest -v tests/grpc/test_grpc_failalloc.py
"""
import json
import os
import re
import signal
import sys
import threading
import time
import unittest
import urllib.request

import grpc

if os.path.dirname(os.path.abspath(__file__)) not in sys.path:  # grpc_helper, beside this file
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grpc_helper import (  # noqa: E402
    ATTND, SLOW, FIX, REFS, C, pb, pbg, Attnd, typed, want, out, max_diff, tiny_x)


# tests/server/failalloc.c, built beside the attnd under test (make check-server)
FAILALLOC = os.path.join(os.path.dirname(ATTND), "tests", "server", "failalloc.so")


@unittest.skipIf(SLOW > 1, "a sanitizer's runtime replaces malloc itself")
class FailAlloc(unittest.TestCase):
    def test_calls_answered_while_allocations_fail(self):
        """attnd's own allocations fail (tests/server/failalloc.c: 1 in 5,
        then 1 in 11, 29 and 97 while armed) under unary infer,
        metadata and configuration calls and streams from four threads: each call ends OK
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

        def metadata(stub, i):  # ModelMetadata and ModelConfig in turn
            try:
                if i % 2:
                    m = stub.ModelConfig(pb.ModelConfigRequest(name="tiny"), timeout=30).config
                    return note("metadata", True if m.name == "tiny" and len(m.input) == 5
                                and m.parameters["n_heads"].string_value == "2" else f"config {m}")
                m = stub.ModelMetadata(pb.ModelMetadataRequest(name="tiny"), timeout=30)
                return note("metadata", True if m.name == "tiny" and m.inputs else f"metadata {m}")
            except grpc.RpcError as e:
                return note("metadata", error(e.code(), e.details()))

        def stream(stub, i):
            n = 0
            reqs = [want(tiny_x(k, raw_form=j % 2 == 1), "y") for j in range(6)]
            for j, r in enumerate(reqs):
                r.id = f"s{j}"
            try:
                for g in stub.ModelStreamInfer(iter(reqs), timeout=30):
                    n += 1
                    if not g.error_message:
                        fine = right(g.infer_response)
                    elif g.infer_response.id != f"s{n - 1}":  # an error names its request too
                        fine = f"{g.error_message}: named {g.infer_response.id!r}"
                    else:
                        fine = None if "out of memory" in g.error_message else g.error_message
                    note("stream response", fine)
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
            # daemon messages reach stderr through the log writer's thread:
            # waited for (5 s times SLOW, a hang's bound), not slept on
            oom = r"grpc: a (connection closed|stream refused): out of memory"
            said = len(re.findall(oom, d.logged(oom, count=seen["closed"])))
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
            # nothing held but the open connections' own state (gRPC 80
            # KiB each, REST 36 KiB: this one, at least). The last call's
            # trailers count until attnd's write of them completes, a loop
            # turn after the client read them (grpc_conn.c's on_written),
            # and a pool job's end reaches the loop after the answer it
            # made, so both are waited for (5 s times SLOW, a hang's bound)
            def gauge(name):
                return int(re.search(rf"(?m)^{name} (\d+)$", metrics)[1])

            def conns_only():
                return gauge("attnd_pool_jobs") == 0 and gauge("attnd_memory_budget_used_bytes") == (
                    81920 * gauge("attnd_grpc_open_connections") + 36864 * gauge("attnd_http_open_connections"))
            deadline = time.time() + 5 * SLOW
            while True:
                with urllib.request.urlopen(f"http://127.0.0.1:{d.port}/metrics") as r:
                    metrics = r.read().decode()
                if conns_only() or time.time() > deadline:
                    break
                time.sleep(0.02)
            # every load answered OK serves its model; none answered out
            # of memory does
            for names, expect in ((seen["loaded"], 200), (seen["not loaded"], 404)):
                for name in names:
                    st, body = d.rest(f"/v2/models/{name}")
                    self.assertEqual(st, expect, f"{name}: {st} {body}")
            used = gauge("attnd_memory_budget_used_bytes")
            n_grpc, n_rest = gauge("attnd_grpc_open_connections"), gauge("attnd_http_open_connections")
            self.assertEqual(gauge("attnd_open_connections"), n_grpc + n_rest, metrics[-2000:])
            self.assertEqual(used, 81920 * n_grpc + 36864 * n_rest, metrics[-2000:])
            self.assertRegex(metrics, r"(?m)^attnd_pool_jobs 0$")
        finally:
            for ch in chans.values():
                ch.close()
            self.assertEqual(d.stop(), 0, d.log[-3000:])


if __name__ == "__main__":
    unittest.main(verbosity=2)
