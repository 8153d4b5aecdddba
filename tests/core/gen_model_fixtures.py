#!/usr/bin/python3
"""gen_model_fixtures.py - model folders in each naming layout and dtype,
with PyTorch's outputs for them, for tests/core/test_model.c.

Run with Debian's python3-torch (PyTorch 1.13):
    /usr/bin/python3 tests/core/gen_model_fixtures.py
Writes tests/core/model_fixtures/<case>/ = model.safetensors + config.json
(written by tools/export_torch.py) + expected.safetensors holding
    x (T, d_model), context (S, d_ctx) for cross-attention,
    W_q W_k W_v W_o b_q b_k b_v b_o   the weights in the seeds' orientation,
                                      as the loader must produce them (for
                                      F16/BF16: rounded to that precision),
    y (T, d_model), attention (H, T, S)         PyTorch, not causal
    y_causal, attention_causal                   PyTorch, causal mask
    y_f32 (F16/BF16 cases)   y with the unrounded F32 weights.
nn.MultiheadAttention cases take y and the maps from the module itself; the
GQA + RoPE case uses a plain-torch reference (rotate_half RoPE, the
engine's convention), checked against the module on an MHA case first.
"""
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import attnd_st  # noqa: E402
import export_torch  # noqa: E402

OUT = os.path.join(HERE, "model_fixtures")
torch.manual_seed(1234)
TORCH_DTYPES = {"F16": torch.float16, "BF16": torch.bfloat16}


def f32(t):
    return ("F32", list(t.shape), t.detach().float().contiguous().numpy()
            .tobytes())


def new_mha(E, H, kdim=None):
    m = torch.nn.MultiheadAttention(E, H, bias=True, batch_first=True,
                                    kdim=kdim, vdim=kdim)
    with torch.no_grad():
        m.in_proj_bias.uniform_(-0.5, 0.5)
        m.out_proj.bias.uniform_(-0.5, 0.5)
    return m.eval()


def rounded(m, dtype):
    """A copy of m with every parameter rounded to dtype and back."""
    r = new_mha(m.embed_dim, m.num_heads,
                None if m._qkv_same_embed_dim else m.kdim)
    r.load_state_dict({k: v.to(TORCH_DTYPES[dtype]).float()
                       for k, v in m.state_dict().items()})
    return r.eval()


def canonical(parts):
    q, k, v, o, qb, kb, vb, ob = parts
    return {"W_q": q.t(), "W_k": k.t(), "W_v": v.t(), "W_o": o.t(),
            "b_q": qb, "b_k": kb, "b_v": vb, "b_o": ob}


def run_mha(m, x, c):
    T, S = x.shape[0], c.shape[0]
    causal = torch.triu(torch.ones(T, S, dtype=torch.bool), 1)
    with torch.no_grad():
        y, a = m(x[None], c[None], c[None], need_weights=True,
                 average_attn_weights=False)
        yc, ac = m(x[None], c[None], c[None], need_weights=True,
                   average_attn_weights=False, attn_mask=causal)
    return {"y": y[0], "attention": a[0], "y_causal": yc[0],
            "attention_causal": ac[0]}


def save_expected(case, tensors):
    attnd_st.write(os.path.join(OUT, case, "expected.safetensors"),
                   {k: f32(v) for k, v in tensors.items() if v is not None})


def mha_case(case, m, x, c=None, dtype="F32", **kw):
    ref = m if dtype == "F32" else rounded(m, dtype)
    export_torch.export_module(m, os.path.join(OUT, case), dtype=dtype, **kw)
    parts = export_torch.parts_from_state_dict(ref.state_dict(), m.num_heads)
    exp = dict(canonical(parts), x=x,
               **run_mha(ref, x, x if c is None else c))
    if c is not None:
        exp["context"] = c
    if dtype != "F32":
        exp["y_f32"] = run_mha(m, x, x if c is None else c)["y"]
    save_expected(case, exp)


def rotate_half(t):
    h = t.shape[-1] // 2
    return torch.cat((-t[..., h:], t[..., :h]), dim=-1)


def rope(t, theta, rot):
    """inv_freq and the angles in float32, as HF's LlamaRotaryEmbedding."""
    T = t.shape[-2]
    inv = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.int64).float()
                           / rot))
    ang = torch.arange(T).float()[:, None] * inv[None, :]
    ang = torch.cat((ang, ang), dim=-1)
    cos, sin = ang.cos(), ang.sin()
    tr, tp = t[..., :rot], t[..., rot:]
    return torch.cat((tr * cos + rotate_half(tr) * sin, tp), dim=-1)


def reference(w, x, H, Hkv, causal, theta=0.0, rot=0):
    """Plain-torch attention in the seeds' orientation."""
    T, dk = x.shape[0], w["W_q"].shape[1] // H
    dv = w["W_v"].shape[1] // Hkv
    q = (x @ w["W_q"] + w["b_q"]).view(T, H, dk).transpose(0, 1)
    k = (x @ w["W_k"] + w["b_k"]).view(T, Hkv, dk).transpose(0, 1)
    v = (x @ w["W_v"] + w["b_v"]).view(T, Hkv, dv).transpose(0, 1)
    if theta:
        q, k = rope(q, theta, rot), rope(k, theta, rot)
    k = k.repeat_interleave(H // Hkv, dim=0)
    v = v.repeat_interleave(H // Hkv, dim=0)
    s = (q * dk ** -0.5) @ k.transpose(1, 2)  # PyTorch's order
    if causal:
        s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1),
                          float("-inf"))
    a = s.softmax(-1)
    y = (a @ v).transpose(0, 1).reshape(T, H * dv) @ w["W_o"] + w["b_o"]
    return y, a


def check_reference(m, x):
    """The plain reference agrees with nn.MultiheadAttention."""
    w = canonical(export_torch.parts_from_state_dict(m.state_dict(),
                                                     m.num_heads))
    got = reference(w, x, m.num_heads, m.num_heads, True)
    want = run_mha(m, x, x)
    assert torch.allclose(got[0], want["y_causal"], atol=1e-5), "y"
    assert torch.allclose(got[1], want["attention_causal"], atol=1e-6), "a"


def gqa_rope_case(case, x):
    """q_proj layout, 4 query heads sharing 2 key/value heads, RoPE on 6 of
    8 dims, causal by default."""
    D, H, Hkv, dk, theta, rot = x.shape[1], 4, 2, 8, 10000.0, 6
    g = lambda *s: torch.randn(*s) * 0.3  # noqa: E731
    parts = (g(H * dk, D), g(Hkv * dk, D), g(Hkv * dk, D), g(D, H * dk),
             g(H * dk), g(Hkv * dk), g(Hkv * dk), g(D))
    d = os.path.join(OUT, case)
    export_torch.write_folder(d, parts, H, layout="qproj", causal=True)
    with open(os.path.join(d, "config.json")) as fh:
        cfg = json.load(fh)
    cfg["rope"] = {"theta": theta, "dims": rot}
    with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=2)
        fh.write("\n")
    w = canonical(parts)
    y, a = reference(w, x, H, Hkv, False, theta, rot)
    yc, ac = reference(w, x, H, Hkv, True, theta, rot)
    save_expected(case, dict(w, x=x, y=y, attention=a, y_causal=yc,
                             attention_causal=ac))


class LlamaStyleAttention(torch.nn.Module):
    """A decoder attention written as Hugging Face's LlamaAttention is:
    separate bias-free q/k/v/o Linear layers, n_kv_heads < n_heads (GQA,
    repeat_kv), rotate_half RoPE over the whole head from an inv_freq
    buffer, scores / sqrt(head_dim), softmax in float32."""

    def __init__(self, hidden, H, Hkv, theta):
        super().__init__()
        self.H, self.Hkv, self.hd = H, Hkv, hidden // H
        self.q_proj = torch.nn.Linear(hidden, H * self.hd, bias=False)
        self.k_proj = torch.nn.Linear(hidden, Hkv * self.hd, bias=False)
        self.v_proj = torch.nn.Linear(hidden, Hkv * self.hd, bias=False)
        self.o_proj = torch.nn.Linear(H * self.hd, hidden, bias=False)
        self.register_buffer("inv_freq", 1.0 / (theta ** (
            torch.arange(0, self.hd, 2, dtype=torch.int64).float()
            / self.hd)))

    def forward(self, x, causal):
        T = x.shape[0]
        q = self.q_proj(x).view(T, self.H, self.hd).transpose(0, 1)
        k = self.k_proj(x).view(T, self.Hkv, self.hd).transpose(0, 1)
        v = self.v_proj(x).view(T, self.Hkv, self.hd).transpose(0, 1)
        freqs = torch.arange(T).float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(self.H // self.Hkv, dim=0)
        v = v.repeat_interleave(self.H // self.Hkv, dim=0)
        s = q @ k.transpose(1, 2) / self.hd ** 0.5
        if causal:
            s = s + torch.triu(torch.full((T, T), float("-inf")), 1)
        a = torch.softmax(s.float(), dim=-1)
        return self.o_proj((a @ v).transpose(0, 1).reshape(T, -1)), a


def llama_case(case, x):
    """A Llama-style layer's state dict, one layer of a bigger model's
    (model.layers.0.self_attn., beside an MLP's and a norm's weights),
    exported as the README says: the prefix found alone, GQA read from
    k_proj's shape, --causal, --rope-theta 10000."""
    D, H, Hkv = x.shape[1], 8, 2
    m = LlamaStyleAttention(D, H, Hkv, 10000.0)
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(3.0)  # sharper maps than Linear's default init gives
    sd = {"model.layers.0.self_attn." + k: v for k, v in
          m.state_dict().items()}
    sd["model.layers.0.mlp.up_proj.weight"] = torch.randn(2 * D, D)
    sd["model.layers.0.input_layernorm.weight"] = torch.ones(D)
    export_torch.export_state_dict(sd, os.path.join(OUT, case), H,
                                   causal=True, rope_theta=10000.0)
    w = canonical(export_torch.parts_from_state_dict(sd, H, None))
    with torch.no_grad():
        y, a = m(x, False)
        yc, ac = m(x, True)
    save_expected(case, dict(w, x=x, y=y, attention=a, y_causal=yc,
                             attention_causal=ac))


def main():
    E, H, T = 32, 4, 7
    m = new_mha(E, H)
    x = torch.randn(T, E)
    check_reference(m, x)
    mha_case("canonical", m, x)
    mha_case("mha", m, x, layout="mha")
    # one layer of a bigger checkpoint, chosen by "prefix" in config.json
    other = new_mha(E, H)
    extra = {"model.embed_tokens.weight": torch.randn(10, E),
             "model.layers.1.self_attn.rotary_emb.inv_freq":
                 torch.randn(E // H // 2)}
    for layer in (0, 2):
        op = export_torch.parts_from_state_dict(other.state_dict(), H)
        for n, t in zip(("q_proj.weight", "k_proj.weight", "v_proj.weight",
                         "o_proj.weight"), op):
            extra["model.layers.%d.self_attn.%s" % (layer, n)] = t
    mha_case("qproj", m, x, layout="qproj",
             out_prefix="model.layers.1.self_attn.")
    export_torch.write_folder(
        os.path.join(OUT, "qproj"),
        export_torch.parts_from_state_dict(m.state_dict(), H), H,
        layout="qproj", out_prefix="model.layers.1.self_attn.", extra=extra)
    # a module's state dict inside a bigger one: the prefix is found alone
    mha_case("mha_nested", m, x, layout="mha", out_prefix="encoder.attn.")
    cfgp = os.path.join(OUT, "mha_nested", "config.json")
    with open(cfgp, "w") as fh:
        fh.write('{"n_heads": %d}\n' % H)
    mha_case("f16", m, x, dtype="F16")
    mha_case("bf16", m, x, dtype="BF16", layout="qproj")
    # cross-attention: kdim = vdim = 24, context of 9 rows
    mx = new_mha(E, H, kdim=24)
    mha_case("cross", mx, x, torch.randn(9, 24), layout="mha")
    gqa_rope_case("gqa_rope", x)
    llama_case("llama", x)
    print("wrote", ", ".join(sorted(os.listdir(OUT))))


if __name__ == "__main__":
    main()
