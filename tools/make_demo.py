#!/usr/bin/env python3
"""make_demo.py - builds the `demo` weight set (models/demo/) by
construction, not training: d_model 64, 4 heads of 16, canonical names.
On the visualiser's sample sentence its heads attend

  head 0  to the token itself        (position . position peaks at i = j)
  head 1  to the previous token      (queries are positions rotated back
                                      by one step; token 0 attends to itself)
  head 2  to the first token         (a constant query, b_q, that matches
                                      position 0)
  head 3  to tokens with the same    (content . content, minus a small
          content                     penalty on the token's own position:
                                      the two "the"s find each other, a
                                      word that occurs once attends to itself)

Embeddings are tools/embed.py's: x = [content (32) | position (32)].
Values: head h reads content dims 16*(h % 2) .. +16 of the attended token;
W_o is the identity, so y[16h : 16h + 16] is head h's result.

Usage: python3 tools/make_demo.py [OUTDIR]   (default models/demo)
Prints each head's argmax on the sample and fails if a pattern is wrong.
Standard library only; the output is deterministic."""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attnd_st  # noqa: E402
import embed  # noqa: E402

D, H, DK = 64, 4, 16
HALF, QUARTER = D // 2, D // 4
N_FREQ = 8   # position frequency pairs used by heads 0-2 (the fastest)
G_POS = 18.0   # gain on queries and keys of heads 0-2
G_CONTENT = 7.0  # gain on the content part of head 3
G_SELF = 3.5     # gain on head 3's own-position penalty
LONG = ("the quick brown fox jumps over the lazy dog and the cat sat on the "
        "mat because it was tired of the dog that barked at the fox all day "
        "long while the sun went down over the hills")


def zeros(r, c):
    return [[0.0] * c for _ in range(r)]


def pos_row(k, cos_part):
    """Row of x holding the sin (or cos) of frequency pair k."""
    return HALF + 2 * k + (1 if cos_part else 0)


def build():
    wq, wk, wv, wo = zeros(D, D), zeros(D, D), zeros(D, D), zeros(D, D)
    bq = [0.0] * D
    for m in range(N_FREQ):
        w = 10000.0 ** (-2.0 * m / HALF)
        s, c = pos_row(m, False), pos_row(m, True)
        for h in (0, 1, 2):  # keys of heads 0-2: the position pairs
            wk[s][16 * h + 2 * m] = G_POS
            wk[c][16 * h + 2 * m + 1] = G_POS
        # head 0: query = own position
        wq[s][2 * m] = G_POS
        wq[c][2 * m + 1] = G_POS
        # head 1: query = position rotated back one step = position(i - 1)
        wq[s][16 + 2 * m] = G_POS * math.cos(w)
        wq[c][16 + 2 * m] = -G_POS * math.sin(w)
        wq[s][16 + 2 * m + 1] = G_POS * math.sin(w)
        wq[c][16 + 2 * m + 1] = G_POS * math.cos(w)
        # head 2: constant query = position(0) (sin 0 = 0, cos 0 = 1)
        bq[32 + 2 * m + 1] = G_POS / math.sqrt(QUARTER)
    # head 3: content dims 0..13, and frequency pair 0 as a self-penalty
    for j in range(14):
        wq[j][48 + j] = G_CONTENT
        wk[j][48 + j] = G_CONTENT
    for j, row in enumerate((pos_row(0, False), pos_row(0, True))):
        wq[row][62 + j] = G_SELF
        wk[row][62 + j] = -G_SELF
    for h in range(H):
        for j in range(16):
            wv[16 * (h % 2) + j][16 * h + j] = 1.0
    for j in range(D):
        wo[j][j] = 1.0
    return wq, wk, wv, wo, bq


def matmul(x, w, b=None):
    return [[sum(r[i] * w[i][j] for i in range(len(r))) +
             (b[j] if b else 0.0) for j in range(len(w[0]))] for r in x]


def attention(x, wq, wk, bq):
    """Per head, the softmax weights (T, T) in double precision."""
    q, k = matmul(x, wq, bq), matmul(x, wk)
    maps = []
    for h in range(H):
        rows = []
        for i in range(len(x)):
            sc = [sum(q[i][16 * h + d] * k[j][16 * h + d] for d in range(DK))
                  / math.sqrt(DK) for j in range(len(x))]
            mx = max(sc)
            e = [math.exp(v - mx) for v in sc]
            rows.append([v / sum(e) for v in e])
        maps.append(rows)
    return maps


def expected(words):
    """Per head and token, the set of tokens the head is designed to pick,
    from the words alone."""
    where = {}
    for i, w in enumerate(words):
        where.setdefault(w.lower(), []).append(i)
    same = []
    for i, w in enumerate(words):
        others = [j for j in where[w.lower()] if j != i]
        same.append(others or [i])
    n = len(words)
    return [[[i] for i in range(n)], [[max(i - 1, 0)] for i in range(n)],
            [[0]] * n, same]


def check(wq, wk, bq, text, verbose=True):
    words = text.split()
    x = embed.embed_text(text, D)
    maps = attention(x, wq, wk, bq)
    want = expected(words)
    names = ["self", "previous token", "first token", "same content"]
    ok = True
    for h in range(H):
        got = [max(range(len(r)), key=r.__getitem__) for r in maps[h]]
        good = all(g in w for g, w in zip(got, want[h]))
        mass = min(sum(maps[h][i][j] for j in want[h][i])
                   for i in range(len(words)))
        if verbose or not good:
            print("head %d (%s): argmax %s, least weight on the target "
                  "%.2f%s" % (h, names[h], got, mass,
                              "" if good else "  WRONG, want %s" % want[h]))
        ok &= good
    return ok


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "models", "demo")
    wq, wk, wv, wo, bq = build()
    print("sample: %r" % embed.SAMPLE)
    if not check(wq, wk, bq, embed.SAMPLE):
        sys.exit("make_demo: a head does not show its pattern")
    if not check(wq, wk, bq, LONG, verbose=False):
        sys.exit("make_demo: a head fails on a %d-token text" %
                 len(LONG.split()))
    print("patterns hold on a %d-token text too" % len(LONG.split()))
    os.makedirs(out, exist_ok=True)
    flat = lambda m: [v for r in m for v in r]  # noqa: E731
    attnd_st.write(os.path.join(out, "model.safetensors"), {
        "W_q": ("F32", [D, D], flat(wq)),
        "W_k": ("F32", [D, D], flat(wk)),
        "W_v": ("F32", [D, D], flat(wv)),
        "W_o": ("F32", [D, D], flat(wo)),
        "b_q": ("F32", [D], bq),
    })
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump({"n_heads": H, "description":
                   "demo: head 0 attends to the token itself, head 1 to the "
                   "previous token, head 2 to the first token, head 3 to "
                   "tokens with the same content (made by "
                   "tools/make_demo.py)"}, fh, indent=2)
        fh.write("\n")
    print("wrote %s" % os.path.normpath(out))


if __name__ == "__main__":
    main()
