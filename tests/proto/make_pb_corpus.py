#!/usr/bin/env python3
"""Write the seed corpus of make fuzz-pb: valid ModelInferRequest messages
(proto/kserve.proto), protobuf written by hand so that no generated code is
needed. Usage: python3 tests/proto/make_pb_corpus.py tests/proto/fuzz_pb_corpus
"""
import os
import struct
import sys


def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def ld(field, data):
    return varint(field << 3 | 2) + varint(len(data)) + data


def s(field, text):
    return ld(field, text.encode())


def tensor(name, dtype, shape, contents=b""):
    return ld(5, s(1, name) + s(2, dtype) + ld(3, b"".join(varint(d) for d in shape))
              + (ld(5, contents) if contents else b""))


def param(key, value):  # map<string, InferParameter> entry, field 4
    return ld(4, s(1, key) + ld(2, value))


def f32(vals):
    return struct.pack(f"<{len(vals)}f", *vals)


Q, K, V = [2, 0, 2, 0, 0, 4, 0, 2], [1, 0, 1, 0, 0, 1, 0, 0], [1, 2, 3, 0]
corpus = {
    "seed_raw": s(1, "sdpa") + s(3, "r1") + tensor("q", "FP32", [2, 4]) + tensor("k", "FP32", [2, 4])
    + tensor("v", "FP32", [2, 2]) + ld(7, f32(Q)) + ld(7, f32(K)) + ld(7, f32(V)),
    "seed_typed": s(1, "sdpa") + s(2, "1") + tensor("q", "FP32", [2, 4], ld(6, f32(Q)))
    + tensor("k", "FP32", [2, 4], ld(6, f32(K))) + tensor("v", "FP32", [2, 2], ld(6, f32(V)))
    + param("causal", varint(1 << 3 | 0) + varint(1)) + ld(6, s(1, "output") + ld(2, s(1, "binary_data") + ld(2, varint(8) + varint(1)))),
    "ints_bools": s(1, "tiny") + tensor("x", "FP16", [1, 1, 2]) + tensor("lengths", "INT32", [1])
    + tensor("mask", "BOOL", [1, 1]) + ld(7, b"\x00\x3c\x00\xc0") + ld(7, struct.pack("<i", 1)) + ld(7, b"\x01")
    + param("tokens", ld(3, b'["a","b"]')),
    # a sequence step (oip_pb_peek_seq_id): ids as int64, uint64 and
    # string, an entry's value given twice (merged), the last entry counts
    "seq_step": s(1, "gqa") + param("sequence_id", varint(2 << 3 | 0) + varint(7))
    + param("sequence_id", varint(5 << 3 | 0) + varint((1 << 64) - 1))
    + ld(4, s(1, "sequence_id") + ld(2, varint(1 << 3 | 0) + varint(1)) + ld(2, s(3, "chat-7")))
    + param("sequence_start", varint(1 << 3 | 0) + varint(1))
    + tensor("x", "FP32", [1, 1, 2], ld(6, f32([0.5, -1]))),
}
os.makedirs(sys.argv[1], exist_ok=True)
for name, data in corpus.items():
    with open(os.path.join(sys.argv[1], name), "wb") as f:
        f.write(data)
