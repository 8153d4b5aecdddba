#!/usr/bin/env python3
"""make_st_corpus.py - writes tests/core/st_corpus/: one malformed
safetensors file per validation rule (plus a few valid edge cases).
tests/core/test_st.c holds the exact error each file must give.

Usage: python3 tests/core/make_st_corpus.py [OUTDIR]
Standard library only; the output is deterministic."""
import json
import os
import struct
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "st_corpus")


def raw(header_bytes, data=b"", length=None):
    """8-byte little-endian header length, header, data."""
    n = len(header_bytes) if length is None else length
    return struct.pack("<Q", n) + header_bytes + data


def hdr(obj, pad=True):
    """JSON header text, padded with spaces to a multiple of 8 as writers
    do (the padding is legal)."""
    b = json.dumps(obj, separators=(",", ":")).encode()
    if pad:
        b += b" " * (-len(b) % 8)
    return b


def f32(*vals):
    return struct.pack("<%df" % len(vals), *vals)


def ent(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


OK2 = {"a": ent("F32", [2], 0, 8), "b": ent("F32", [1], 8, 12)}

FILES = {
    # --- valid files ---------------------------------------------------
    "ok_basic.safetensors": raw(hdr(dict(
        OK2, __metadata__={"format": "pt", "n_heads": "2"})),
        f32(1.0, 2.0, 3.0)),
    # JSON order need not be offset order; a scalar has shape []; a
    # zero-size tensor has begin == end.
    "ok_unordered.safetensors": raw(hdr({
        "late": ent("F32", [], 8, 12),
        "empty": ent("F16", [0, 3], 8, 8),
        "early": ent("BF16", [2, 2], 0, 8)}),
        struct.pack("<4H", 0x3f80, 0x4000, 0xbf80, 0x0000) + f32(5.0)),
    "ok_empty.safetensors": raw(b'{"__metadata__":null}'),
    # --- one file per rule -----------------------------------------------
    "too_short.safetensors": b"\x10\x00\x00",
    "header_too_large.safetensors": raw(b"{}", length=100000001),
    "header_past_eof.safetensors": raw(b'{"a":1}', length=64),
    # the length one byte more than the bytes that follow it
    "header_one_past_eof.safetensors": raw(b'{"a":1}', length=8),
    "header_not_object_start.safetensors": raw(b' {}'),
    "header_bad_json.safetensors": raw(b'{"a": {"dtype": "F32",'),
    "header_bad_utf8.safetensors": raw(b'{"\xff\xfe": 1}'),
    "header_trailing_garbage.safetensors": raw(b"{}{}"),
    "duplicate_key.safetensors": raw(
        b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
        b'"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
        f32(1.0, 2.0)),
    "metadata_not_string.safetensors": raw(hdr(
        {"__metadata__": {"n_heads": 4}, "a": ent("F32", [1], 0, 4)}),
        f32(1.0)),
    "entry_not_object.safetensors": raw(hdr({"a": [1, 2]})),
    "dtype_missing.safetensors": raw(hdr(
        {"a": {"shape": [1], "data_offsets": [0, 4]}}), f32(1.0)),
    "dtype_unknown.safetensors": raw(hdr({"a": ent("F24", [1], 0, 3)}),
                                     b"\0\0\0"),
    "shape_negative.safetensors": raw(hdr({"a": ent("F32", [2, -1], 0, 4)}),
                                      f32(1.0)),
    "offsets_bad.safetensors": raw(hdr(
        {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}}),
        f32(1.0)),
    "offsets_reversed.safetensors": raw(hdr({"a": ent("F32", [1], 4, 0)}),
                                        f32(1.0)),
    "shape_overflow.safetensors": raw(hdr(
        {"a": ent("F32", [4294967296, 4294967296], 0, 4)}), f32(1.0)),
    "bytes_overflow.safetensors": raw(hdr(
        {"a": ent("F64", [2305843009213693952, 2], 0, 8)}), f32(1.0, 2.0)),
    "size_mismatch.safetensors": raw(hdr({"a": ent("F32", [2, 3], 0, 20)}),
                                     f32(*[0.0] * 5)),
    "offsets_not_zero.safetensors": raw(hdr({"a": ent("F32", [1], 4, 8)}),
                                        f32(0.0, 1.0)),
    "offsets_gap.safetensors": raw(hdr({
        "a": ent("F32", [1], 0, 4), "b": ent("F32", [1], 8, 12)}),
        f32(1.0, 0.0, 2.0)),
    "offsets_overlap.safetensors": raw(hdr({
        "a": ent("F32", [2], 0, 8), "b": ent("F32", [2], 4, 12)}),
        f32(1.0, 2.0, 3.0)),
    "data_past_eof.safetensors": raw(hdr({
        "a": ent("F32", [1], 0, 4), "b": ent("F32", [2], 4, 12)}),
        f32(1.0, 2.0)),
    "trailing_bytes.safetensors": raw(hdr({"a": ent("F32", [1], 0, 4)}),
                                      f32(1.0) + b"junk"),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, blob in sorted(FILES.items()):
        with open(os.path.join(OUT, name), "wb") as fh:
            fh.write(blob)
    print("wrote %d files to %s" % (len(FILES), OUT))


if __name__ == "__main__":
    main()
