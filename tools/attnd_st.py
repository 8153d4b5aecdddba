"""attnd_st.py - write and read safetensors files with the standard
library only (no numpy, torch or safetensors package needed).

    from attnd_st import write, read
    write("model.safetensors",
          {"W_q": ("F32", [64, 64], flat_list_or_bytes), ...},
          metadata={"n_heads": "4"})
    tensors, metadata = read("model.safetensors")
    # tensors[name] = (dtype, shape, flat list of floats)

Tensors are written in the given order, header padded with spaces to a
multiple of 8 bytes, as the reference writer does."""
import json
import math
import struct

_SIZE = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I32": 4, "I64": 8,
         "U8": 1, "I8": 1, "BOOL": 1}


def f32_round(x):
    """x rounded to the nearest float32, as a Python float."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even (as torch does)."""
    (b,) = struct.unpack("<I", struct.pack("<f", x))
    if (b & 0x7f800000) == 0x7f800000 and (b & 0x7fffff):
        return (b >> 16) | 0x40  # quiet NaN
    return ((b + 0x7fff + ((b >> 16) & 1)) >> 16) & 0xffff


def encode(dtype, values):
    """Little-endian bytes of a flat list of numbers in dtype."""
    if isinstance(values, (bytes, bytearray)):
        return bytes(values)
    n = len(values)
    if dtype == "F32":
        return struct.pack("<%df" % n, *values)
    if dtype == "F16":
        return struct.pack("<%de" % n, *values)
    if dtype == "BF16":
        return struct.pack("<%dH" % n, *[_bf16_bits(v) for v in values])
    if dtype == "F64":
        return struct.pack("<%dd" % n, *values)
    if dtype == "I32":
        return struct.pack("<%di" % n, *values)
    raise ValueError("unsupported dtype " + dtype)


def decode(dtype, data):
    if dtype == "F32":
        return list(struct.unpack("<%df" % (len(data) // 4), data))
    if dtype == "F16":
        return list(struct.unpack("<%de" % (len(data) // 2), data))
    if dtype == "BF16":
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0]
                for h in struct.unpack("<%dH" % (len(data) // 2), data)]
    if dtype == "F64":
        return list(struct.unpack("<%dd" % (len(data) // 8), data))
    raise ValueError("unsupported dtype " + dtype)


def write(path, tensors, metadata=None):
    """tensors: dict name -> (dtype, shape, flat values or raw bytes)."""
    header, blobs, at = {}, [], 0
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    for name, (dtype, shape, values) in tensors.items():
        blob = encode(dtype, values)
        want = _SIZE[dtype] * math.prod(shape)
        if len(blob) != want:
            raise ValueError("%s: %d bytes for shape %s %s" %
                             (name, len(blob), shape, dtype))
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)))
        fh.write(h)
        for b in blobs:
            fh.write(b)


def read(path):
    """(tensors, metadata): tensors[name] = (dtype, shape, flat floats)."""
    with open(path, "rb") as fh:
        blob = fh.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        out[name] = (e["dtype"], e["shape"],
                     decode(e["dtype"], blob[base + b:base + end]))
    return out, meta
