#!/usr/bin/env python3
"""test_tools.py - the standard-library tools the demo model and the
fixtures are made with: tools/embed.py (the shared sample-embedding
generator) and tools/attnd_st.py (safetensors read/write), checked against
published reference values, not against themselves.

Run: python3 -B tests/core/test_tools.py -v   (part of make test)
"""
import math
import os
import struct
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import attnd_st  # noqa: E402
import embed  # noqa: E402


class Embed(unittest.TestCase):
    def test_fnv1a_reference_vectors(self):
        # from the FNV reference test suite (FNV-1a, 32 bits)
        self.assertEqual(embed.fnv1a(b""), 0x811c9dc5)
        self.assertEqual(embed.fnv1a(b"a"), 0xe40c292c)
        self.assertEqual(embed.fnv1a(b"foobar"), 0xbf9cf968)

    def test_content_follows_the_spec(self):
        # an independent xorshift32 (13, 17, 5), checked against Marsaglia's
        # first output from x = 1 (270369), then the spec's content() for
        # "A" (lower-cased to "a", FNV-1a 0xe40c292c from the suite above)
        def xs(x):
            x ^= (x << 13) & 0xffffffff
            x ^= x >> 17
            x ^= (x << 5) & 0xffffffff
            return x
        self.assertEqual(xs(1), 270369)
        x, c = 0xe40c292c, []
        for _ in range(4):
            x = xs(x)
            c.append(x / 2.0 ** 32 * 2 - 1)
        norm = math.sqrt(sum(v * v for v in c))
        got = embed.content("A", 8)
        for g, w in zip(got, c):
            self.assertAlmostEqual(g, w / norm, places=15)
        self.assertNotEqual(embed.content("the", 8), embed.content("cat", 8))

    def test_units_and_position(self):
        c = embed.content("cat", 64)
        self.assertEqual(len(c), 32)
        self.assertAlmostEqual(sum(v * v for v in c), 1.0, places=12)
        p0 = embed.position(0, 64)
        self.assertEqual(p0[0::2], [0.0] * 16)           # sin 0
        self.assertEqual(p0[1::2], [0.25] * 16)          # cos 0 / sqrt(16)
        p3 = embed.position(3, 64)
        self.assertAlmostEqual(p3[0], math.sin(3.0) / 4, places=15)
        self.assertAlmostEqual(p3[3], math.cos(3 * 10000 ** (-2 / 32)) / 4,
                               places=15)
        self.assertAlmostEqual(sum(v * v for v in p3), 1.0, places=12)
        row = embed.embedding("cat", 3, 64)
        self.assertEqual(len(row), 64)
        for v in row:  # float32-rounded
            self.assertEqual(struct.unpack("<f", struct.pack("<f", v))[0], v)
        self.assertEqual(len(embed.embed_text(embed.SAMPLE, 64)), 10)
        with self.assertRaises(ValueError):
            embed.embedding("cat", 0, 62)


class Safetensors(unittest.TestCase):
    def test_round_trip_and_layout(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "t.safetensors")
            attnd_st.write(p, {"a": ("F32", [2, 2], [1.0, -2.0, 0.5, 3.0]),
                               "b": ("F16", [3], [1.0, 65504.0, -0.25]),
                               "c": ("BF16", [2], [1.0, -3.140625])},
                           metadata={"n_heads": 2})
            with open(p, "rb") as fh:
                blob = fh.read()
            (n,) = struct.unpack("<Q", blob[:8])
            self.assertEqual(n % 8, 0)  # padded as the reference writer
            self.assertEqual(len(blob), 8 + n + 16 + 6 + 4)
            t, meta = attnd_st.read(p)
            self.assertEqual(meta, {"n_heads": "2"})
            self.assertEqual(t["a"], ("F32", [2, 2], [1.0, -2.0, 0.5, 3.0]))
            self.assertEqual(t["b"][2], [1.0, 65504.0, -0.25])
            self.assertEqual(t["c"][2], [1.0, -3.140625])

    def test_bf16_rounds_to_nearest_even(self):
        # 1 + 2^-8 is halfway between bf16 1.0 and 1 + 2^-7: ties to even
        self.assertEqual(attnd_st.encode("BF16", [1.0 + 2 ** -8]),
                         struct.pack("<H", 0x3f80))
        self.assertEqual(attnd_st.encode("BF16", [1.0 + 3 * 2 ** -8]),
                         struct.pack("<H", 0x3f82))
        self.assertEqual(attnd_st.encode("BF16", [1.0 + 2 ** -8 + 2 ** -20]),
                         struct.pack("<H", 0x3f81))

    def test_size_checked(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(ValueError):
                attnd_st.write(os.path.join(d, "x"), {"a": ("F32", [3],
                                                           [1.0, 2.0])})


if __name__ == "__main__":
    unittest.main()
