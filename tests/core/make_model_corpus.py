#!/usr/bin/env python3
"""make_model_corpus.py - writes tests/core/model_corpus/, a model
repository in which good weight sets sit beside broken ones (one per rule
of core/model.c). tests/core/test_model.c holds the exact error each broken
folder must give and checks that the good ones still load.

Usage: python3 tests/core/make_model_corpus.py [OUTDIR]
Standard library only; the output is deterministic."""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import attnd_st  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE,
                                                         "model_corpus")
D, H = 8, 2


def mat(r, c, seed=1):
    return ("F32", [r, c], [((i * 7 + seed) % 11 - 5) / 8.0
                            for i in range(r * c)])


def vec(n):
    return ("F32", [n], [0.125 * (i % 5) for i in range(n)])


def canon(**over):
    t = {"W_q": mat(D, D), "W_k": mat(D, D, 2), "W_v": mat(D, D, 3),
         "W_o": mat(D, D, 4), "b_q": vec(D)}
    for k, v in over.items():
        if v is None:
            t.pop(k, None)
        else:
            t[k] = v
    return t


def folder(name, tensors=None, config=None, metadata=None, raw=None):
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    if tensors is not None:
        attnd_st.write(os.path.join(d, "model.safetensors"), tensors,
                       metadata)
    if raw is not None:
        with open(os.path.join(d, "model.safetensors"), "wb") as fh:
            fh.write(raw)
    if config is not None:
        with open(os.path.join(d, "config.json"), "w") as fh:
            fh.write(config if isinstance(config, str)
                     else json.dumps(config) + "\n")


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    cfg = {"n_heads": H}
    # --- good ------------------------------------------------------------
    folder("good", canon(), cfg)
    folder("good_metadata", canon(), None, metadata={
        "format": "pt", "n_heads": "2", "causal": "true",
        "rope": '{"theta": 500000, "dims": 2}', "description": "from meta"})
    folder("good_gqa", canon(W_k=mat(D, 4, 2), W_v=mat(D, 4, 3)),
           {"n_heads": 2, "scale": 0.25, "description": "1 kv head, inferred"})
    # --- broken ----------------------------------------------------------
    folder("bad@name", canon(), cfg)
    folder("no_file", None, cfg)
    folder("bad_file", raw=b"\x02\x00\x00\x00\x00\x00\x00\x00{}xx",
           config=cfg)
    folder("no_n_heads", canon())
    folder("config_not_json", canon(), '{"n_heads": 2,')
    folder("config_duplicate", canon(), '{"n_heads": 2, "n_heads": 4}')
    folder("config_unknown_key", canon(), {"n_heads": 2, "num_heads": 2})
    folder("config_bad_type", canon(), {"n_heads": "two"})
    folder("config_bad_scale", canon(), {"n_heads": 2, "scale": 0})
    folder("config_bad_causal", canon(), {"n_heads": 2, "causal": "yes"})
    folder("config_bad_rope", canon(), {"n_heads": 2, "rope": {"theta": 1e4,
                                                              "base": 2}})
    folder("config_vs_metadata", canon(), {"n_heads": 2},
           metadata={"n_heads": "4"})
    folder("heads_not_dividing", canon(), {"n_heads": 3})
    folder("head_dim_conflict", canon(), {"n_heads": 2, "head_dim": 2})
    folder("kv_heads_conflict", canon(), {"n_heads": 2, "n_kv_heads": 1})
    folder("kv_not_dividing", canon(W_k=mat(D, 12, 2), W_v=mat(D, 12, 3)),
           {"n_heads": 2})
    folder("context_mismatch", canon(W_v=mat(6, D, 3)), cfg)
    folder("missing_w_v", canon(W_v=None), cfg)
    folder("w_o_shape", canon(W_o=mat(D, 6, 4)), cfg)
    # a GQA layer's k_proj.weight saved (in, out), as Q = X W_q reads it
    folder("qproj_transposed", {"q_proj.weight": mat(D, D),
                                "k_proj.weight": mat(D, 4, 2),
                                "v_proj.weight": mat(4, D, 3),
                                "o_proj.weight": mat(D, D, 4)}, cfg)
    folder("bias_length", canon(b_q=vec(6)), cfg)
    folder("rank", canon(W_q=("F32", [2, 4, D], mat(D, D)[2])), cfg)
    folder("dtype", canon(W_q=("F64", [D, D], mat(D, D)[2])), cfg)
    folder("nan", canon(b_q=("F32", [D], [0.0] * 5 + [float("nan")] * 3)),
           cfg)
    folder("mixed_layouts", dict(canon(), **{"q_proj.weight": mat(D, D)}),
           cfg)
    folder("stray_tensor", dict(canon(), W_z=mat(D, D)), cfg)
    folder("layers_ambiguous", {
        "l.0.q_proj.weight": mat(D, D), "l.0.k_proj.weight": mat(D, D),
        "l.0.v_proj.weight": mat(D, D), "l.0.o_proj.weight": mat(D, D),
        "l.1.q_proj.weight": mat(D, D), "l.1.k_proj.weight": mat(D, D),
        "l.1.v_proj.weight": mat(D, D), "l.1.o_proj.weight": mat(D, D)},
        cfg)
    folder("nested_mixed", {"enc.W_q": mat(D, D),
                            "enc.q_proj.weight": mat(D, D)}, cfg)
    folder("prefix_wrong", canon(), {"n_heads": 2, "prefix": "layers.9."})
    folder("in_proj_shape", {"in_proj_weight": mat(D, D),
                             "out_proj.weight": mat(D, D)}, cfg)
    folder("add_bias_kv", {"in_proj_weight": mat(3 * D, D),
                           "out_proj.weight": mat(D, D),
                           "bias_k": mat(1, D), "bias_v": mat(1, D)}, cfg)
    folder("rope_dims", canon(), {"n_heads": 2, "rope": {"theta": 10000,
                                                         "dims": 6}})
    with open(os.path.join(OUT, "README.txt"), "w") as fh:
        fh.write("Test repository written by tests/core/make_model_corpus.py"
                 "; stray files like this one are not models.\n")
    print("wrote %d folders to %s" % (len(os.listdir(OUT)) - 1, OUT))


if __name__ == "__main__":
    main()
