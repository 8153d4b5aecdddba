"""embed.py - the visualiser's deterministic sample-embedding generator
(shared contract with the web page's JS and the demo model; see README,
"Weight sets"). Standard library only.

For a model of width D (divisible by 4), half = D/2, quarter = D/4:
  content(word): FNV-1a 32-bit hash of the lower-cased UTF-8 word seeds a
    xorshift32 (13, 17, 5); c_k = x / 2^32 * 2 - 1 for k < half; unit L2.
  position(i): p[2k] = sin(i w_k), p[2k+1] = cos(i w_k),
    w_k = 10000^(-2k/half), k < quarter; all times 1/sqrt(quarter).
  embedding(word, i) = concat(content(word), position(i)), computed in
    double, rounded to float32.

    python3 tools/embed.py 64 the cat sat    # prints one row per word
    python3 tools/embed.py --write x.safetensors 64 [words...]
        # writes tensor "x" (T, D) F32 (the sample sentence by default)
"""
import math
import os
import struct
import sys

SAMPLE = "the cat sat on the mat because it was tired"
M32 = 0xffffffff


def fnv1a(data):
    h = 2166136261
    for b in data:
        h ^= b
        h = (h * 16777619) & M32
    return h


def content(word, d):
    half = d // 2
    x = fnv1a(word.lower().encode("utf-8")) or 1
    c = []
    for _ in range(half):
        x ^= (x << 13) & M32
        x ^= x >> 17
        x ^= (x << 5) & M32
        c.append(x / 2.0 ** 32 * 2.0 - 1.0)
    norm = math.sqrt(sum(v * v for v in c))
    return [v / norm for v in c]


def position(i, d):
    half, quarter = d // 2, d // 4
    p = [0.0] * half
    for k in range(quarter):
        w = 10000.0 ** (-2.0 * k / half)
        p[2 * k] = math.sin(i * w)
        p[2 * k + 1] = math.cos(i * w)
    s = 1.0 / math.sqrt(quarter)
    return [v * s for v in p]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def embedding(word, i, d):
    if d % 4:
        raise ValueError("width %d is not divisible by 4" % d)
    return [f32(v) for v in content(word, d) + position(i, d)]


def embed_text(text, d):
    """Rows for the whitespace-separated words of text."""
    return [embedding(w, i, d) for i, w in enumerate(text.split())]


def main(argv):
    out = None
    if argv[:1] == ["--write"]:
        out, argv = argv[1], argv[2:]
    d = int(argv[0]) if argv else 64
    words = argv[1:] or SAMPLE.split()
    rows = [embedding(w, i, d) for i, w in enumerate(words)]
    if out:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import attnd_st
        attnd_st.write(out, {"x": ("F32", [len(rows), d],
                                   [v for r in rows for v in r])},
                       metadata={"text": " ".join(words)})
        return
    for w, r in zip(words, rows):
        print(w, " ".join("%.9g" % v for v in r))


if __name__ == "__main__":
    main(sys.argv[1:])
