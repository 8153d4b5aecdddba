#!/usr/bin/python3
"""export_torch.py - write an attnd model folder (model.safetensors +
config.json) from a PyTorch nn.MultiheadAttention or its saved state dict,
so you can serve your own trained layer.

Command line (use Debian's /usr/bin/python3, which has torch):
    /usr/bin/python3 tools/export_torch.py SRC.pt models/NAME [options]
SRC.pt is torch.save(module) of an nn.MultiheadAttention, or
torch.save(module.state_dict()) (then --n-heads is required). A state dict
of a bigger model works too: --prefix selects the layer (e.g. "attn.").
Options:
    --n-heads H         heads (read from the module when SRC is a module)
    --prefix P          names in SRC start with P (state dicts only)
    --layout L          canonical (default: W_q..., seeds' orientation),
                        mha (in_proj_weight..., as PyTorch stores them) or
                        qproj (q_proj.weight..., (out, in))
    --out-prefix P      prefix the written names with P (mha/qproj layouts;
                        config.json gets "prefix": P)
    --dtype D           F32 (default), F16 or BF16
    --causal            requests default to causal
    --description TEXT  shown in the model's metadata

From Python:
    import export_torch
    export_torch.export_module(mha, "models/mine", layout="canonical")
Only kdim == vdim is supported (attnd takes one context tensor for keys and
values); add_bias_kv and add_zero_attn are refused.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attnd_st  # noqa: E402

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def _bytes(t, dtype):
    t = t.detach().to(DTYPES[dtype]).contiguous().cpu()
    if dtype == "F32":
        return t.numpy().tobytes()
    return t.view(torch.int16).numpy().tobytes()


def parts_from_state_dict(sd, n_heads, prefix=""):
    """(q_w, k_w, v_w, o_w, q_b, k_b, v_b, o_b) in PyTorch's (out, in)
    orientation from an nn.MultiheadAttention state dict."""
    g = lambda n: sd.get(prefix + n)  # noqa: E731
    if g("bias_k") is not None or g("bias_v") is not None:
        raise SystemExit("add_bias_kv=True is not supported by attnd")
    if g("out_proj.weight") is None:
        raise SystemExit("no %sout_proj.weight: not an nn.MultiheadAttention "
                         "state dict (or wrong --prefix)" % prefix)
    E = g("out_proj.weight").shape[0]
    if E % n_heads:
        raise SystemExit("embed_dim %d is not divisible by n_heads %d"
                         % (E, n_heads))
    if g("in_proj_weight") is not None:
        q, k, v = g("in_proj_weight").split(E, dim=0)
    else:
        q, k, v = g("q_proj_weight"), g("k_proj_weight"), g("v_proj_weight")
        if k.shape[1] != v.shape[1]:
            raise SystemExit("kdim %d != vdim %d: attnd takes one context "
                             "tensor for keys and values" %
                             (k.shape[1], v.shape[1]))
    b = g("in_proj_bias")
    qb, kb, vb = b.split(E) if b is not None else (None, None, None)
    return q, k, v, g("out_proj.weight"), qb, kb, vb, g("out_proj.bias")


def write_folder(outdir, parts, n_heads, layout="canonical", dtype="F32",
                 out_prefix="", causal=False, description=None, extra=None):
    """Write parts (see parts_from_state_dict) as a model folder. extra:
    more tensors {name: tensor} to store (e.g. other layers)."""
    q, k, v, o, qb, kb, vb, ob = parts
    tensors = {}

    def put(name, t):
        if t is not None:
            tensors[out_prefix + name] = (dtype, list(t.shape),
                                          _bytes(t, dtype))

    if layout == "canonical":
        if out_prefix:
            raise SystemExit("--out-prefix needs the mha or qproj layout")
        for n, t in (("W_q", q.t()), ("W_k", k.t()), ("W_v", v.t()),
                     ("W_o", o.t()), ("b_q", qb), ("b_k", kb), ("b_v", vb),
                     ("b_o", ob)):
            put(n, t)
    elif layout == "mha":
        if q.shape[1] == k.shape[1] and q.shape == k.shape == v.shape:
            put("in_proj_weight", torch.cat((q, k, v)))
        else:
            put("q_proj_weight", q)
            put("k_proj_weight", k)
            put("v_proj_weight", v)
        if qb is not None:
            put("in_proj_bias", torch.cat((qb, kb, vb)))
        put("out_proj.weight", o)
        put("out_proj.bias", ob)
    elif layout == "qproj":
        for n, t in (("q_proj.weight", q), ("k_proj.weight", k),
                     ("v_proj.weight", v), ("o_proj.weight", o),
                     ("q_proj.bias", qb), ("k_proj.bias", kb),
                     ("v_proj.bias", vb), ("o_proj.bias", ob)):
            put(n, t)
    else:
        raise SystemExit("unknown layout %r" % layout)
    for n, t in (extra or {}).items():
        tensors[n] = (dtype, list(t.shape), _bytes(t, dtype))
    os.makedirs(outdir, exist_ok=True)
    attnd_st.write(os.path.join(outdir, "model.safetensors"), tensors)
    cfg = {"n_heads": n_heads}
    if causal:
        cfg["causal"] = True
    if out_prefix:
        cfg["prefix"] = out_prefix
    if description:
        cfg["description"] = description
    with open(os.path.join(outdir, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=2)
        fh.write("\n")


def export_module(mha, outdir, **kw):
    """Write an nn.MultiheadAttention as a model folder (kw: see
    write_folder)."""
    if not isinstance(mha, torch.nn.MultiheadAttention):
        raise SystemExit("not an nn.MultiheadAttention: %s" % type(mha))
    if mha.add_zero_attn:
        raise SystemExit("add_zero_attn=True is not supported by attnd")
    parts = parts_from_state_dict(mha.state_dict(), mha.num_heads)
    write_folder(outdir, parts, mha.num_heads, **kw)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src")
    ap.add_argument("outdir")
    ap.add_argument("--n-heads", type=int)
    ap.add_argument("--prefix", default="")
    ap.add_argument("--layout", default="canonical",
                    choices=["canonical", "mha", "qproj"])
    ap.add_argument("--out-prefix", default="")
    ap.add_argument("--dtype", default="F32", choices=list(DTYPES))
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--description")
    a = ap.parse_args()
    obj = torch.load(a.src, map_location="cpu")
    kw = dict(layout=a.layout, dtype=a.dtype, out_prefix=a.out_prefix,
              causal=a.causal, description=a.description)
    if isinstance(obj, torch.nn.MultiheadAttention):
        export_module(obj, a.outdir, **kw)
        n = obj.num_heads
    elif isinstance(obj, dict):
        if not a.n_heads:
            raise SystemExit("a state dict does not say how many heads: "
                             "give --n-heads")
        write_folder(a.outdir, parts_from_state_dict(obj, a.n_heads,
                                                     a.prefix),
                     a.n_heads, **kw)
        n = a.n_heads
    else:
        raise SystemExit("%s holds a %s, not an nn.MultiheadAttention or a "
                         "state dict" % (a.src, type(obj).__name__))
    print("wrote %s (%d heads, %s, %s)" % (a.outdir, n, a.layout, a.dtype))


if __name__ == "__main__":
    main()
