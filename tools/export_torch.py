#!/usr/bin/python3
"""export_torch.py - write an attnd model folder (model.safetensors +
config.json) from a PyTorch attention layer: an nn.MultiheadAttention, a
decoder attention written as Hugging Face's Llama one is (q_proj, k_proj,
v_proj, o_proj Linear layers, fewer key/value heads for GQA), or a saved
state dict holding one, so you can serve your own trained layer.

Command line (use Debian's /usr/bin/python3, which has torch):
    /usr/bin/python3 tools/export_torch.py SRC.pt models/NAME [options]
SRC.pt is torch.save(module.state_dict()) (give --n-heads), or
torch.save(module) of an nn.MultiheadAttention (heads read from it). A
state dict of a bigger model works too: --prefix selects the layer (e.g.
"attn." or "model.layers.3.self_attn."); without it, a state dict with one
attention layer is exported from wherever it sits. torch.save of a whole
module of your own class needs that class importable here: save its
state_dict() instead.
Options:
    --n-heads H         query heads (read from the module when SRC is an
                        nn.MultiheadAttention: another H is refused);
                        key/value heads (GQA) are read from k_proj's shape
    --prefix P          names in SRC start with P (state dicts only)
    --layout L          canonical (default: W_q..., seeds' orientation),
                        mha (in_proj_weight..., as PyTorch stores them) or
                        qproj (q_proj.weight..., (out, in))
    --out-prefix P      prefix the written names with P (mha/qproj layouts;
                        config.json gets "prefix": P)
    --dtype D           F32 (default), F16 or BF16
    --causal            requests default to causal (a decoder layer)
    --rope-theta T      RoPE base (Llama: 10000, rope_theta of its config);
                        rotate_half pairing, as Hugging Face's Llama
    --rope-dims N       rotate the first N dims of each head (default all;
                        even, at most the head dim; needs --rope-theta)
    --description TEXT  shown in the model's metadata

From Python:
    import export_torch
    export_torch.export_module(mha, "models/mine", layout="canonical")
    export_torch.export_state_dict(llama_attn.state_dict(), "models/dec",
                                   n_heads=32, causal=True, rope_theta=1e4)
Only kdim == vdim is supported (attnd takes one context tensor for keys and
values); add_bias_kv and add_zero_attn are refused.
"""
import argparse
import errno
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attnd_st  # noqa: E402

DTYPE_NAMES = ("F32", "F16", "BF16")
# what marks an attention layer in a state dict, and how its names read
_MHA_OUT, _QP_OUT = "out_proj.weight", ("o_proj.weight", "out_proj.weight")


class ExportError(SystemExit):
    """A mistake in the source or the options: its text says what to do."""


def _torch():
    try:
        import torch
    except ImportError as e:
        raise ExportError("export_torch.py needs PyTorch (import torch: %s): "
                          "run it with Debian's /usr/bin/python3 "
                          "(apt-get install python3-torch)" % e)
    return torch


def check_rope(rope_theta, rope_dims, head_dim=None):
    """Refuse, before anything is written, RoPE options that config.json
    cannot hold (dims without theta) or that attnd refuses at load (dims
    odd, not positive or past the head dim; all of an odd head dim).
    head_dim None: not known yet (the command line, before SRC is read)."""
    if rope_dims is not None:
        if not rope_theta:
            raise ExportError("--rope-dims needs --rope-theta (the RoPE base; "
                              "Llama's is 10000)")
        if rope_dims < 1 or rope_dims % 2:
            raise ExportError("--rope-dims %d: RoPE rotates pairs of dims: "
                              "give a positive even number (at most the "
                              "head dim), or leave it out to rotate them all"
                              % rope_dims)
        if head_dim is not None and rope_dims > head_dim:
            raise ExportError("--rope-dims %d is more than the head dim %d: "
                              "give at most %d, or leave it out to rotate "
                              "them all" % (rope_dims, head_dim, head_dim))
    elif rope_theta and head_dim is not None and head_dim % 2:
        raise ExportError("the head dim %d is odd and RoPE rotates pairs of "
                          "dims: give --rope-dims, an even number below it"
                          % head_dim)


def _matrix(name, t):
    """t, a weight: two dimensions, neither empty."""
    if t is not None and (len(t.shape) != 2 or not all(t.shape)):
        raise ExportError("%s has shape %s: a weight has two dimensions, "
                          "neither empty; save the layer's whole state_dict()"
                          % (name, tuple(t.shape)))
    return t


def _bytes(t, dtype):
    torch = _torch()
    dt = {"F32": torch.float32, "F16": torch.float16,
          "BF16": torch.bfloat16}[dtype]
    t = t.detach().to(dt).contiguous().cpu()
    if dtype == "F32":
        return t.numpy().tobytes()
    return t.view(torch.int16).numpy().tobytes()


def layer_prefixes(names):
    """The prefixes under which names hold an attention layer (an
    nn.MultiheadAttention's out_proj.weight, or q_proj.weight beside
    o_proj.weight or out_proj.weight), sorted."""
    names = set(names)
    found = set()
    for n in names:
        for tail in ("in_proj_weight", "q_proj_weight", "q_proj.weight"):
            if n.endswith(tail):
                p = n[:-len(tail)]
                if any(p + o in names for o in _QP_OUT):
                    found.add(p)
    return sorted(found)


def find_prefix(names, prefix=None):
    """The prefix of the one attention layer in names: prefix when given
    and it holds one, the only one there is when not given; else an
    ExportError saying which prefixes there are."""
    have = layer_prefixes(names)
    if prefix is not None and prefix in have:
        return prefix
    listed = ", ".join("'%s'" % p for p in have[:8]) + \
        (" ..." if len(have) > 8 else "")
    if prefix is None or prefix == "":
        if len(have) == 1:
            return have[0]
        if not have:
            raise ExportError(
                "no attention layer found: expected an nn.MultiheadAttention "
                "state dict (in_proj_weight, out_proj.weight, ...) or q_proj, "
                "k_proj, v_proj and o_proj weights (a Llama-style layer); "
                "names seen: %s" % ", ".join(sorted(names)[:6]))
        raise ExportError("%d attention layers found (%s); choose one with "
                          "--prefix" % (len(have), listed))
    hint = ""
    if prefix + "." in have:
        hint = " (did you mean --prefix %s. ? prefixes end with a dot)" \
            % prefix
    raise ExportError("no attention layer under --prefix '%s'%s; %s" % (
        prefix, hint, "layers found under: " + listed if have
        else "the file holds none"))


def parts_from_state_dict(sd, n_heads, prefix=""):
    """(q_w, k_w, v_w, o_w, q_b, k_b, v_b, o_b) in PyTorch's (out, in)
    orientation from an nn.MultiheadAttention state dict, or a q_proj /
    k_proj / v_proj / o_proj one (Llama-style; fewer key/value heads for
    GQA). prefix None: the state dict's one attention layer."""
    if n_heads is None or n_heads < 1:
        raise ExportError("--n-heads must be a positive number of query "
                          "heads (got %s)" % n_heads)
    prefix = find_prefix(list(sd), prefix)
    g = lambda n: sd.get(prefix + n)  # noqa: E731
    if g("bias_k") is not None or g("bias_v") is not None:
        raise ExportError("add_bias_kv=True is not supported by attnd")
    if g("q_proj.weight") is not None:
        q, k, v = g("q_proj.weight"), g("k_proj.weight"), g("v_proj.weight")
        o = g("o_proj.weight")
        o = o if o is not None else g("out_proj.weight")
        for n, t in (("k_proj.weight", k), ("v_proj.weight", v)):
            if t is None:
                raise ExportError(
                    "'%s%s' is missing beside '%sq_proj.weight': a layer of "
                    "these names needs q_proj.weight, k_proj.weight, "
                    "v_proj.weight and o_proj.weight (or out_proj.weight); "
                    "save the layer's whole state_dict(), or choose another "
                    "layer with --prefix" % (prefix, n, prefix))
        ob = g("o_proj.bias")
        ob = ob if ob is not None else g("out_proj.bias")
        parts = (q, k, v, o, g("q_proj.bias"), g("k_proj.bias"),
                 g("v_proj.bias"), ob)
    else:
        inw = "in_proj_weight" if g("in_proj_weight") is not None \
            else "q_proj_weight"
        o = _matrix(prefix + _MHA_OUT, g(_MHA_OUT))
        if o is None:  # found beside o_proj.weight
            raise ExportError(
                "'%s%s' without '%s%s': an nn.MultiheadAttention's output "
                "weight is out_proj.weight (o_proj.weight goes with "
                "q_proj.weight, k_proj.weight and v_proj.weight); save its "
                "whole state_dict()" % (prefix, inw, prefix, _MHA_OUT))
        E = o.shape[0]
        if (g("in_proj_bias") is None) != (g("out_proj.bias") is None):
            raise ExportError(
                "'%s%s' without '%s%s': an nn.MultiheadAttention has both "
                "biases (bias=True) or neither; save its whole state_dict(), "
                "or, for a layer with some biases only, use the "
                "q_proj.weight... names" % (
                    prefix, *(("in_proj_bias", prefix, "out_proj.bias")
                              if g("out_proj.bias") is None
                              else ("out_proj.bias", prefix,
                                    "in_proj_bias"))))
        for n in ("in_proj_weight", "in_proj_bias"):
            t = g(n)
            want = (3 * E, E) if n == "in_proj_weight" else (3 * E,)
            if t is not None and tuple(t.shape) != want:
                raise ExportError(
                    "'%s%s' has shape %s: an nn.MultiheadAttention's holds "
                    "q, k and v's, %s (embed_dim %d, out_proj.weight's rows);"
                    " save its whole state_dict()" % (
                        prefix, n, tuple(t.shape), want, E))
        if g("in_proj_weight") is not None:
            q, k, v = g("in_proj_weight").split(E, dim=0)
        else:
            q, k, v = (g("q_proj_weight"), g("k_proj_weight"),
                       g("v_proj_weight"))
            if k is None or v is None:
                raise ExportError("'%sq_proj_weight' needs k_proj_weight and "
                                  "v_proj_weight beside it; save the "
                                  "layer's whole state_dict()" % prefix)
            k = _matrix(prefix + "k_proj_weight", k)
            v = _matrix(prefix + "v_proj_weight", v)
            if k.shape[1] != v.shape[1]:
                raise ExportError("kdim %d != vdim %d: attnd takes one "
                                  "context tensor for keys and values" %
                                  (k.shape[1], v.shape[1]))
        b = g("in_proj_bias")
        qb, kb, vb = b.split(E) if b is not None else (None, None, None)
        parts = (q, k, v, o, qb, kb, vb, g("out_proj.bias"))
    for n, t in zip(("the query", "the key", "the value", "the output"),
                    parts[:4]):
        _matrix(n + " projection's weight", t)
    q = parts[0]
    if q.shape[0] % n_heads:
        raise ExportError("the query projection has %s outputs, not "
                          "divisible by --n-heads %d" % (q.shape[0], n_heads))
    dk = q.shape[0] // n_heads
    kv = parts[1].shape[0]
    if kv % dk or n_heads % (kv // dk or 1) or not kv:
        raise ExportError("the key projection has %d outputs: not a number "
                          "of heads of %d (query's %d / --n-heads %d) that "
                          "divides %d; is --n-heads right?"
                          % (kv, dk, q.shape[0], n_heads, n_heads))
    return parts


def write_folder(outdir, parts, n_heads, layout="canonical", dtype="F32",
                 out_prefix="", causal=False, description=None, extra=None,
                 rope_theta=None, rope_dims=None):
    """Write parts (see parts_from_state_dict) as a model folder. extra:
    more tensors {name: tensor} to store (e.g. other layers)."""
    q, k, v, o, qb, kb, vb, ob = parts
    if n_heads is None or n_heads < 1:
        raise ExportError("--n-heads must be a positive number of query "
                          "heads (got %s)" % n_heads)
    check_rope(rope_theta, rope_dims, q.shape[0] // n_heads)
    tensors = {}

    def put(name, t):
        if t is not None:
            tensors[out_prefix + name] = (dtype, list(t.shape),
                                          _bytes(t, dtype))

    if dtype not in DTYPE_NAMES:
        raise ExportError("--dtype %s: attnd loads %s" %
                          (dtype, ", ".join(DTYPE_NAMES)))
    if layout == "canonical":
        if out_prefix:
            raise ExportError("--out-prefix needs the mha or qproj layout")
        for n, t in (("W_q", q.t()), ("W_k", k.t()), ("W_v", v.t()),
                     ("W_o", o.t()), ("b_q", qb), ("b_k", kb), ("b_v", vb),
                     ("b_o", ob)):
            put(n, t)
    elif layout == "mha":
        if q.shape[1] == k.shape[1] and q.shape == k.shape == v.shape:
            put("in_proj_weight", _torch().cat((q, k, v)))
        else:
            put("q_proj_weight", q)
            put("k_proj_weight", k)
            put("v_proj_weight", v)
        if (qb is None) != (kb is None) or (qb is None) != (vb is None):
            raise ExportError("the mha layout's in_proj_bias holds all of "
                              "q, k and v's biases, and this layer has some "
                              "only: use --layout qproj or canonical")
        if qb is not None:
            put("in_proj_bias", _torch().cat((qb, kb, vb)))
        put("out_proj.weight", o)
        put("out_proj.bias", ob)
    elif layout == "qproj":
        for n, t in (("q_proj.weight", q), ("k_proj.weight", k),
                     ("v_proj.weight", v), ("o_proj.weight", o),
                     ("q_proj.bias", qb), ("k_proj.bias", kb),
                     ("v_proj.bias", vb), ("o_proj.bias", ob)):
            put(n, t)
    else:
        raise ExportError("unknown layout %r" % layout)
    for n, t in (extra or {}).items():
        tensors[n] = (dtype, list(t.shape), _bytes(t, dtype))
    cfg = {"n_heads": n_heads}
    if causal:
        cfg["causal"] = True
    if rope_theta:
        cfg["rope"] = {"theta": rope_theta}
        if rope_dims:
            cfg["rope"]["dims"] = rope_dims
    if out_prefix:
        cfg["prefix"] = out_prefix
    if description:
        cfg["description"] = description
    # both files or neither: each written under a temporary name, then
    # both renamed (a folder with weights and no config.json, or the
    # other's, is no model); a name taken by a folder is refused first, as
    # a rename onto it would fail after the other's; should the second
    # rename fail all the same, the new weights go (an older config.json
    # stays, with no weights beside it: a folder attnd refuses, not another
    # model's config on these weights)
    st_path = os.path.join(outdir, "model.safetensors")
    cfg_path = os.path.join(outdir, "config.json")
    tmps = [p + ".export-tmp" for p in (st_path, cfg_path)]
    try:
        os.makedirs(outdir, exist_ok=True)
        for p in (st_path, cfg_path):
            if os.path.isdir(p):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR),
                                        p)
        attnd_st.write(tmps[0], tensors)
        with open(tmps[1], "w") as fh:
            json.dump(cfg, fh, indent=2)
            fh.write("\n")
        os.replace(tmps[0], st_path)
        try:
            os.replace(tmps[1], cfg_path)
        except OSError:
            os.unlink(st_path)
            raise
    except OSError as e:
        raise ExportError("%s: cannot write the model folder: %s" %
                          (outdir, e.strerror or e))
    finally:  # (whatever failed: no temporary file left)
        for p in tmps:
            try:
                os.unlink(p)
            except OSError:
                pass


def export_state_dict(sd, outdir, n_heads, prefix=None, **kw):
    """Write the attention layer of a state dict as a model folder (kw: see
    write_folder)."""
    write_folder(outdir, parts_from_state_dict(sd, n_heads, prefix),
                 n_heads, **kw)


def export_module(mha, outdir, **kw):
    """Write an nn.MultiheadAttention as a model folder (kw: see
    write_folder)."""
    torch = _torch()
    if not isinstance(mha, torch.nn.MultiheadAttention):
        raise ExportError("not an nn.MultiheadAttention: %s" % type(mha))
    if mha.add_zero_attn:
        raise ExportError("add_zero_attn=True is not supported by attnd")
    parts = parts_from_state_dict(mha.state_dict(), mha.num_heads, "")
    write_folder(outdir, parts, mha.num_heads, **kw)


def load_source(path):
    """torch.load(path), its failures as ExportErrors saying what to do."""
    torch = _torch()
    try:
        return torch.load(path, map_location="cpu")
    except OSError as e:
        raise ExportError("%s: cannot read: %s" % (path, e.strerror or e))
    except (AttributeError, ModuleNotFoundError) as e:
        raise ExportError(
            "%s holds a whole module whose class cannot be imported here "
            "(%s); save its weights instead: torch.save(module.state_dict(), "
            "'%s'), then give --n-heads (and --prefix for one layer of a "
            "bigger model)" % (path, e, path))
    except Exception as e:  # pickle's and zipfile's many errors
        raise ExportError("%s is not a file torch.save wrote (%s: %s); a "
                          "safetensors file is served as it is: copy it to "
                          "models/NAME/model.safetensors and write "
                          "config.json" % (path, type(e).__name__, e))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src")
    ap.add_argument("outdir")
    ap.add_argument("--n-heads", type=int)
    ap.add_argument("--prefix")
    ap.add_argument("--layout", default="canonical",
                    choices=["canonical", "mha", "qproj"])
    ap.add_argument("--out-prefix", default="")
    ap.add_argument("--dtype", default="F32", choices=list(DTYPE_NAMES))
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--rope-theta", type=float)
    ap.add_argument("--rope-dims", type=int)
    ap.add_argument("--description")
    a = ap.parse_args()
    if a.n_heads is not None and a.n_heads < 1:
        raise ExportError("--n-heads must be a positive number of query "
                          "heads (got %d)" % a.n_heads)
    if a.rope_theta is not None and not a.rope_theta > 0:
        raise ExportError("--rope-theta must be positive (Llama's is 10000)")
    check_rope(a.rope_theta, a.rope_dims)
    torch = _torch()
    obj = load_source(a.src)
    kw = dict(layout=a.layout, dtype=a.dtype, out_prefix=a.out_prefix,
              causal=a.causal, description=a.description,
              rope_theta=a.rope_theta, rope_dims=a.rope_dims)
    if isinstance(obj, torch.nn.MultiheadAttention):
        if a.n_heads is not None and a.n_heads != obj.num_heads:
            raise ExportError(
                "--n-heads %d: %s holds an nn.MultiheadAttention of "
                "num_heads %d, which its weights were trained with; drop "
                "--n-heads (a whole module's own is used)"
                % (a.n_heads, a.src, obj.num_heads))
        export_module(obj, a.outdir, **kw)
        n = obj.num_heads
    elif isinstance(obj, torch.nn.Module):
        raise ExportError(
            "%s holds a whole %s, not an nn.MultiheadAttention; save its "
            "weights instead: torch.save(module.state_dict(), '%s'), then "
            "give --n-heads (and --prefix for one layer of a bigger model)"
            % (a.src, type(obj).__name__, a.src))
    elif isinstance(obj, dict):
        tensors = {k: v for k, v in obj.items() if torch.is_tensor(v)}
        if not tensors:
            inner = [k for k, v in obj.items() if isinstance(v, dict)]
            raise ExportError(
                "%s holds a dict without tensors%s; export the state dict "
                "itself" % (a.src, " (a checkpoint? its dicts: %s: save "
                            "e.g. ckpt['%s'])" % (", ".join(map(str, inner)),
                                                   inner[0]) if inner else ""))
        if not a.n_heads:
            raise ExportError("a state dict does not say how many heads: "
                              "give --n-heads (query heads; key/value heads "
                              "are read from the shapes)")
        export_state_dict(tensors, a.outdir, a.n_heads, a.prefix, **kw)
        n = a.n_heads
    else:
        raise ExportError("%s holds a %s, not an nn.MultiheadAttention or a "
                          "state dict" % (a.src, type(obj).__name__))
    print("wrote %s (%d heads, %s, %s)" % (a.outdir, n, a.layout, a.dtype))


if __name__ == "__main__":
    main()
