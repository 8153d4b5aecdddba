#!/usr/bin/python3
"""Generate the PyTorch reference vectors for tests/core/test_attn.c.

Run with Debian's python3-torch (PyTorch 1.13):
    /usr/bin/python3 tests/core/gen_vectors.py
Writes tests/core/vectors/vectors.bin (little-endian float32, tensors back to
back) and tests/core/vectors/index.txt:
    case <name> key=value ...          one line per case (sizes, flags)
    tensor <case> <name> <offset> <n>  offset and n in floats
Layouts are the engine's: x (B,T,d_model), context (B,S,d_ctx), weights in
the seeds' orientation (W_q is (d_model, H*d_k)), mask (B,T,S) as 0/1 floats,
y (B,T,d_model), attention (B,H,T,S), q (B,H,T,d_k), k (B,H_kv,S,d_k),
v (B,H_kv,S,d_v). Lengths are in the case line (tv=..,.. sv=..,..).
Raw SDPA cases (raw=1) hold q (H,T,d_k), k (H,S,d_k), v (H,S,d_v), mask
(T,S), y (H,T,d_v), attention and scores (H,T,S); exact=1 asks the test for
the scores bit for bit. Scores are PyTorch's: q scaled first (q * d_k **
-0.5), then q k^T.

nn.MultiheadAttention cases take y and attention from the module itself; the
plain-torch reference (GQA, RoPE, combined masks) is checked against the
module on those cases before anything is written.
"""
import os
import struct

import torch

torch.manual_seed(0)
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "vectors")


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope(x, theta, rot):
    """rotate_half RoPE on the first rot dims of (..., T, d_k), pos = row;
    inv_freq and the angles in float32, as HF's LlamaRotaryEmbedding."""
    t = x.shape[-2]
    inv = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.int64).float()
                           / rot))
    ang = torch.arange(t).float()[:, None] * inv[None, :]
    ang = torch.cat((ang, ang), dim=-1)
    cos, sin = ang.cos(), ang.sin()
    xr, xp = x[..., :rot], x[..., rot:]
    return torch.cat((xr * cos + rotate_half(xr) * sin, xp), dim=-1)


def reference(p, x, c, w, mask_ok):
    """Plain-torch attention with the engine's conventions.

    mask_ok: (B,T,S) bool, True = query i may attend key j (all masks
    combined). Fully masked and padded query rows give zero weights and
    zero y (the engine's rule)."""
    B, T, _ = x.shape
    S = c.shape[1]
    H, Hk, dk, dv = p["n_heads"], p["n_kv_heads"], p["head_dim"], p["v_head_dim"]
    q = x @ w["w_q"] + (w["b_q"] if "b_q" in w else 0)
    k = c @ w["w_k"] + (w["b_k"] if "b_k" in w else 0)
    v = c @ w["w_v"] + (w["b_v"] if "b_v" in w else 0)
    q = q.view(B, T, H, dk).transpose(1, 2)
    k = k.view(B, S, Hk, dk).transpose(1, 2)
    v = v.view(B, S, Hk, dv).transpose(1, 2)
    if p.get("rope_theta", 0):
        rot = p["rope_dims"] or dk
        q = rope(q, p["rope_theta"], rot)
        k = rope(k, p["rope_theta"], rot)
    g = H // Hk
    kk = k.repeat_interleave(g, dim=1)
    vv = v.repeat_interleave(g, dim=1)
    # q scaled first, then the product: PyTorch's order (q / sqrt(E) in
    # nn.MultiheadAttention, q * E ** -0.5 in _scaled_dot_product_attention)
    scores = (q * dk ** -0.5) @ kk.transpose(-1, -2)
    m = mask_ok[:, None, :, :].expand(B, H, T, S)
    a = torch.softmax(scores.masked_fill(~m, float("-inf")), dim=-1)
    a = torch.nan_to_num(a, nan=0.0).masked_fill(~m, 0.0)
    o = (a @ vv).transpose(1, 2).reshape(B, T, H * dv)
    y = o @ w["w_o"] + (w["b_o"] if "b_o" in w else 0)
    live = m[:, 0].any(dim=-1)  # (B, T)
    y = y * live[..., None]
    return dict(y=y, attention=a, scores=scores, q=q, k=k, v=v)


def ok_mask(B, T, S, tv, sv, causal, explicit=None):
    i = torch.arange(T)[:, None]
    j = torch.arange(S)[None, :]
    m = torch.ones(B, T, S, dtype=torch.bool)
    for b in range(B):
        m[b] &= (i < tv[b]) & (j < sv[b])
    if causal:
        m &= (j <= i)[None]
    if explicit is not None:
        m &= explicit
    return m


cases = []


def add(name, p, tensors):
    cases.append((name, p, {k: v.detach().contiguous().float()
                            for k, v in tensors.items()}))


def mha_case(name, B, T, S, E, H, bias=True, kdim=None, kpm_len=None,
             causal=False):
    cross = kdim is not None or S != T
    kd = kdim or E
    mha = torch.nn.MultiheadAttention(E, H, bias=bias, batch_first=True,
                                      kdim=kd, vdim=kd).eval()
    with torch.no_grad():
        for prm in mha.parameters():  # non-zero biases too
            prm.uniform_(-0.5, 0.5)
    x = torch.randn(B, T, E)
    c = torch.randn(B, S, kd) if cross else x
    sv = kpm_len or [S] * B
    kpm = None
    if kpm_len:
        kpm = torch.arange(S)[None, :] >= torch.tensor(kpm_len)[:, None]
    am = torch.triu(torch.ones(T, S, dtype=torch.bool), 1) if causal else None
    with torch.inference_mode():
        y, a = mha(x, c, c, key_padding_mask=kpm, attn_mask=am,
                   need_weights=True, average_attn_weights=False)
    if mha._qkv_same_embed_dim:
        wq, wk, wv = mha.in_proj_weight.chunk(3)
    else:
        wq, wk, wv = mha.q_proj_weight, mha.k_proj_weight, mha.v_proj_weight
    w = dict(w_q=wq.T, w_k=wk.T, w_v=wv.T, w_o=mha.out_proj.weight.T)
    if bias:
        bq, bk, bv = mha.in_proj_bias.chunk(3)
        w.update(b_q=bq, b_k=bk, b_v=bv, b_o=mha.out_proj.bias)
    p = dict(d_model=E, d_ctx=kd, n_heads=H, n_kv_heads=H, head_dim=E // H,
             v_head_dim=E // H, b=B, t=T, s=S, causal=int(causal),
             cross=int(cross), tv=[T] * B, sv=sv)
    with torch.no_grad():
        ref = reference(p, x, c, {k: v.detach() for k, v in w.items()},
                        ok_mask(B, T, S, p["tv"], sv, causal))
    assert torch.allclose(ref["y"], y, atol=1e-5), name
    assert torch.allclose(ref["attention"], a, atol=1e-6), name
    t = dict(x=x, y=y, attention=a, **w)
    if cross:
        t["context"] = c
    add(name, p, t)


def hand_case(name, B, T, S, dm, H, Hk, dk, dv, bias=True, causal=False,
              tv=None, sv=None, explicit=False, theta=0.0, rot=0, dctx=None,
              maps=True):
    cross = dctx is not None or S != T
    dc = dctx or dm
    x = torch.randn(B, T, dm)
    c = torch.randn(B, S, dc) if cross else x
    w = dict(w_q=torch.randn(dm, H * dk) / dm ** 0.5,
             w_k=torch.randn(dc, Hk * dk) / dc ** 0.5,
             w_v=torch.randn(dc, Hk * dv) / dc ** 0.5,
             w_o=torch.randn(H * dv, dm) / (H * dv) ** 0.5)
    if bias:
        w.update(b_q=torch.randn(H * dk) * 0.1, b_k=torch.randn(Hk * dk) * 0.1,
                 b_v=torch.randn(Hk * dv) * 0.1, b_o=torch.randn(dm) * 0.1)
    tv = tv or [T] * B
    sv = sv or [S] * B
    em = torch.rand(B, T, S) > 0.3 if explicit else None
    if explicit:
        em[0, 1, :] = False  # one fully masked row
    p = dict(d_model=dm, d_ctx=dc, n_heads=H, n_kv_heads=Hk, head_dim=dk,
             v_head_dim=dv, b=B, t=T, s=S, causal=int(causal),
             cross=int(cross), tv=tv, sv=sv, rope_theta=theta, rope_dims=rot)
    ref = reference(p, x, c, w, ok_mask(B, T, S, tv, sv, causal, em))
    if not maps:  # keep the committed vectors small
        del ref["attention"], ref["scores"]
    t = dict(x=x, **w, **ref)
    if cross:
        t["context"] = c
    if explicit:
        t["mask"] = em.float()
    add(name, p, t)


# nn.MultiheadAttention itself.
mha_case("mha_bias", B=2, T=5, S=5, E=16, H=4)
mha_case("mha_nobias", B=1, T=6, S=6, E=12, H=3, bias=False)
mha_case("mha_kpm", B=2, T=6, S=6, E=16, H=4, kpm_len=[6, 3])
mha_case("mha_causal", B=2, T=7, S=7, E=16, H=2, causal=True)
mha_case("mha_cross", B=2, T=4, S=9, E=16, H=4, kdim=12)
# Plain torch: GQA, MQA, d_v != d_k, RoPE, all masks combined.
hand_case("gqa", B=2, T=6, S=6, dm=16, H=4, Hk=2, dk=8, dv=6, causal=True)
hand_case("mqa_cross", B=1, T=5, S=8, dm=12, H=3, Hk=1, dk=4, dv=5, dctx=10)
hand_case("rope_full", B=1, T=9, S=9, dm=16, H=2, Hk=2, dk=8, dv=8,
          causal=True, theta=10000.0, rot=0)
hand_case("rope_partial_gqa", B=2, T=7, S=7, dm=16, H=4, Hk=2, dk=8, dv=4,
          theta=500.0, rot=4)
hand_case("masks", B=2, T=6, S=6, dm=8, H=2, Hk=2, dk=4, dv=4, causal=True,
          tv=[6, 4], sv=[5, 3], explicit=True)
hand_case("long_fused", B=1, T=150, S=150, dm=16, H=2, Hk=1, dk=8, dv=8,
          causal=True, theta=10000.0, bias=False, maps=False)

hand_case("cross_causal_pad", B=2, T=5, S=8, dm=12, H=2, Hk=2, dk=4, dv=6,
          causal=True, tv=[5, 3], sv=[8, 6], dctx=10, explicit=True)


def raw_case(name, H, T, S, dk, dv, causal=False, masked=False):
    """Raw SDPA (the daemon's sdpa model): heads share t, s and the mask."""
    q = torch.randn(H, T, dk)
    k = torch.randn(H, S, dk)
    v = torch.randn(H, S, dv)
    em = torch.ones(T, S, dtype=torch.bool)  # the explicit mask alone
    if masked:
        em = torch.rand(T, S) > 0.3
        em[T - 1, :] = False  # one fully masked row
    ok = em.clone()
    if causal:
        ok &= torch.ones(T, S, dtype=torch.bool).tril()
    scores = (q * dk ** -0.5) @ k.transpose(-1, -2)
    a = torch.softmax(scores.masked_fill(~ok, float("-inf")), dim=-1)
    a = torch.nan_to_num(a, nan=0.0).masked_fill(~ok, 0.0)
    p = dict(raw=1, n_heads=H, head_dim=dk, v_head_dim=dv, t=T, s=S,
             causal=int(causal))
    t = dict(q=q, k=k, v=v, y=a @ v, attention=a, scores=scores)
    if masked:
        t["mask"] = em.float()
    add(name, p, t)


raw_case("sdpa_plain", H=3, T=7, S=7, dk=8, dv=5)
raw_case("sdpa_cross_causal_mask", H=2, T=6, S=9, dk=4, dv=4, causal=True,
         masked=True)


def big_case(name, T, S, dv, big, k0, causal=False, masked=False):
    """Raw SDPA with scores around +-big (1e3, 1e4), where a softmax without
    max-subtraction overflows (exp(1e3) = inf) or underflows to 0/0.
    d_k = 4 (scale exactly 1/2) and integer q, k, so q.k / 2 is exact in
    float32 for PyTorch and the engine alike: head h has q[..., 0] =
    2 big sign_h and key j has k[j, 0] = k0[h][j], so its scores are
    sign_h k0[h][j] big plus a small integer / 2 - rows of nearly equal
    huge scores (non-trivial weights) next to keys far below them."""
    H = len(k0)
    dk = 4
    q = torch.randint(-2, 3, (H, T, dk)).float()
    k = torch.randint(-2, 3, (H, S, dk)).float()
    v = torch.randn(H, S, dv)
    for h, (sign, col) in enumerate(k0):
        q[h, :, 0] = 2 * big * sign
        k[h, :, 0] = torch.tensor(col, dtype=torch.float32)
    em = torch.ones(T, S, dtype=torch.bool)
    if masked:
        em = torch.rand(T, S) > 0.3
        em[T - 1, :] = False  # one fully masked row
    ok = em.clone()
    if causal:
        ok &= torch.ones(T, S, dtype=torch.bool).tril()
    scores = (q * dk ** -0.5) @ k.transpose(-1, -2)
    assert scores.abs().max() >= big - 10, name
    assert torch.equal(scores, (q.double() @ k.double().transpose(-1, -2) / 2).float()), name
    a = torch.softmax(scores.masked_fill(~ok, float("-inf")), dim=-1)
    a = torch.nan_to_num(a, nan=0.0).masked_fill(~ok, 0.0)
    assert torch.isfinite(a).all() and torch.isfinite(a @ v).all(), name
    p = dict(raw=1, n_heads=H, head_dim=dk, v_head_dim=dv, t=T, s=S,
             causal=int(causal))
    t = dict(q=q, k=k, v=v, y=a @ v, attention=a, scores=scores)
    if masked:
        t["mask"] = em.float()
    add(name, p, t)


# Large scores (issue 13): each case's heads are (sign, k[:, 0] per key):
# mixed +big / 0 / -big keys, every score near -big, every score near +big.
big_case("sdpa_big_1e3", T=5, S=7, dv=4, big=1e3,
         k0=[(1, [1, 1, 0, -1, 1, 1, -1]), (-1, [1] * 7), (1, [1] * 7)])
big_case("sdpa_big_1e4_masked", T=6, S=9, dv=3, big=1e4, causal=True,
         masked=True,
         k0=[(1, [1, -1, 1, 0, 1, 1, -1, 1, 1]), (-1, [1] * 9), (1, [1] * 9)])
# S = 300 > the fused kernel's 256-key block: the row's maximum is in the
# second block for head 0 (the first block's weights rescale to 0) and in the
# first block for head 1.
big_case("sdpa_big_1e4_blocks", T=3, S=300, dv=2, big=1e4,
         k0=[(1, [-1] * 256 + [1] * 44), (1, [1] * 256 + [-1] * 44)])


def sdpa_case(name, q, k, v, exact=False):
    """Raw SDPA against PyTorch's own: torch._C._nn._scaled_dot_product_
    attention (1.13; y and weights; it multiplies q by 1 / sqrt(E), E
    ** -0.5 rounded to float, before q k^T) and its scores, q * E ** -0.5
    then the product. exact=1: the test wants the scores bit for bit (k
    crafted so that no summation order can change them)."""
    H, T, dk = q.shape
    S, dv = k.shape[1], v.shape[2]
    y, a = torch._C._nn._scaled_dot_product_attention(q, k, v, None, 0.0,
                                                      True, False)
    scores = (q * dk ** -0.5) @ k.transpose(-1, -2)
    assert torch.isfinite(y).all() and torch.isfinite(scores).all(), name
    assert torch.allclose(torch.softmax(scores, -1), a, atol=1e-7), name
    p = dict(raw=1, n_heads=H, head_dim=dk, v_head_dim=dv, t=T, s=S,
             causal=0, exact=int(exact))
    add(name, p, dict(q=q, k=k, v=v, y=y, attention=a, scores=scores))


# Scores bit for bit at d_k = 96 (sqrt not a power of 2): each key has two
# entries +-2^e (the rest 0), so q.k is round(q_a 2^e + q_b 2^f) whatever
# the summation order, and only where the scale goes and how 1/sqrt(96)
# is rounded can differ: (q . k) / sqrt(96) is another float for about
# half the scores, and 1.0f / sqrtf(96) is 1 ulp below 96 ** -0.5.
kk = torch.zeros(2, 6, 96)
for h in range(2):
    for j in range(6):
        a_, b_ = torch.randperm(96)[:2]
        kk[h, j, a_] = 2.0 ** torch.randint(-1, 3, ()).item()
        kk[h, j, b_] = -(2.0 ** torch.randint(-1, 3, ()).item())
sdpa_case("sdpa_prescale_d96", torch.randn(2, 5, 96) * 3, kk,
          torch.randn(2, 6, 4), exact=True)

# q.k past FLT_MAX (3.4e38) where q / sqrt(8) . k is not: PyTorch answers
# (weights one-hot: the scores are ~1e38 apart), an engine that scales the
# product after it would see infinity. Key j is sign_j 1e19 (1 + noise),
# query rows +-1e19 (1 + noise): |q.k| ~ 8e38, scaled ~ 2.8e38.
sg = torch.tensor([1.0, -1.0, 1.0, -1.0])[:, None]
qo = 1e19 * (1 + 0.05 * torch.randn(1, 3, 8))
qo[0, 1] *= -1
ko = (1e19 * sg * (1 + 0.05 * torch.randn(4, 8)))[None]
assert not torch.isfinite(qo @ ko.transpose(-1, -2)).all()
sdpa_case("sdpa_overflow_unscaled", qo, ko, torch.randn(1, 4, 3))


def mha_big_case(name):
    """nn.MultiheadAttention(16, 2) (d_k = 8), projections the identity,
    on x rows of +-1e19: q.k overflows float32, q / sqrt(8) . k does not,
    and the module answers."""
    E, H = 16, 2
    mha = torch.nn.MultiheadAttention(E, H, batch_first=True).eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.eye(E).repeat(3, 1))
        mha.in_proj_bias.zero_()
        mha.out_proj.weight.copy_(torch.eye(E))
        mha.out_proj.bias.zero_()
    x = 1e19 * (1 + 0.05 * torch.randn(1, 4, E))
    x[0, 1] *= -1
    x[0, 3] *= -1
    with torch.inference_mode():
        y, a = mha(x, x, x, need_weights=True, average_attn_weights=False)
    xq = x.view(1, 4, H, E // H).transpose(1, 2)
    assert not torch.isfinite(xq @ xq.transpose(-1, -2)).all(), name
    assert torch.isfinite(y).all(), name
    wq, wk, wv = mha.in_proj_weight.chunk(3)
    w = dict(w_q=wq.T, w_k=wk.T, w_v=wv.T, w_o=mha.out_proj.weight.T)
    p = dict(d_model=E, d_ctx=E, n_heads=H, n_kv_heads=H, head_dim=E // H,
             v_head_dim=E // H, b=1, t=4, s=4, causal=0, cross=0, tv=[4],
             sv=[4])
    add(name, p, dict(x=x, y=y, attention=a, **w))


mha_big_case("mha_overflow_unscaled")

os.makedirs(OUT, exist_ok=True)
off = 0
lines = []
with open(os.path.join(OUT, "vectors.bin"), "wb") as f:
    for name, p, ts in cases:
        kv = " ".join(
            f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}"
            for k, v in p.items())
        lines.append(f"case {name} {kv}")
        for tn, tv_ in ts.items():
            flat = tv_.reshape(-1).tolist()
            f.write(struct.pack(f"<{len(flat)}f", *flat))
            lines.append(f"tensor {name} {tn} {off} {len(flat)}")
            off += len(flat)
with open(os.path.join(OUT, "index.txt"), "w") as f:
    f.write("# generated by tests/core/gen_vectors.py (PyTorch "
            f"{torch.__version__}); do not edit\n")
    f.write("\n".join(lines) + "\n")
print(f"{len(cases)} cases, {off * 4} bytes")
