#!/usr/bin/env python3
"""Reference vectors for the sample-embedding generator (README, "The
sample embeddings"), written from the specification independently of the
page's JavaScript, which embed.test.mjs holds to these numbers.

    python3 tests/web/gen_embed_vectors.py > tests/web/embed_vectors.json
"""
import json
import math
import struct


def fnv1a32(word):
    h = 2166136261
    for b in word.lower().encode("utf-8"):
        h = ((h ^ b) * 16777619) % 2**32
    return h


def content(word, half):
    x = fnv1a32(word) or 1
    c = []
    for _ in range(half):
        x ^= (x << 13) % 2**32
        x ^= x >> 17
        x ^= (x << 5) % 2**32
        c.append(x / 2**32 * 2 - 1)
    n = math.sqrt(sum(v * v for v in c))
    return [v / n for v in c]


def position(i, half):
    quarter = half // 2
    p = [0.0] * half
    for k in range(quarter):
        w = 10000 ** (-2 * k / half)
        p[2 * k] = math.sin(i * w)
        p[2 * k + 1] = math.cos(i * w)
    s = 1 / math.sqrt(quarter)
    return [v * s for v in p]


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def embedding(words, d):
    half = d // 2
    return [[f32(v) for v in content(w, half) + position(i, half)]
            for i, w in enumerate(words)]


def main():
    cases = []
    sentence = "the cat sat on the mat because it was tired".split()
    for d in (8, 64):
        cases.append({"words": sentence, "d": d, "x": embedding(sentence, d)})
    odd = ["The", "CAT", "", "naïve", "日本"]
    odd = [w for w in odd if w]
    cases.append({"words": odd, "d": 16, "x": embedding(odd, 16)})
    # the toy model's width in the page tests (d_model 16)
    cases.append({"words": sentence, "d": 16, "x": embedding(sentence, 16)})
    fnv = {w: fnv1a32(w) for w in ["", "a", "the", "The", "naïve"]}
    json.dump({"fnv1a32": fnv, "cases": cases}, __import__("sys").stdout,
              ensure_ascii=False)


if __name__ == "__main__":
    main()
