#!/usr/bin/env python3
"""test_tools.py - the standard-library tools the demo model and the
fixtures are made with: tools/embed.py (the shared sample-embedding
generator) and tools/attnd_st.py (safetensors read/write), checked against
published reference values, not against themselves; and how
tools/export_torch.py picks the attention layer of a state dict and refuses
what does not fit, before it writes anything (on shapes alone: no PyTorch
needed).

Run: python3 -B tests/core/test_tools.py -v   (part of make test)
"""
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import attnd_st  # noqa: E402
import embed  # noqa: E402
import export_torch  # noqa: E402  (its torch is imported when it is used)


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


class FakeT:
    """What export_torch reads of a state dict's tensor before writing it:
    its shape (no torch needed)."""

    def __init__(self, *shape):
        self.shape = shape


def llama_layer(prefix, D=64, H=8, Hkv=2, bias=False):
    hd = D // H
    sd = {prefix + "q_proj.weight": FakeT(H * hd, D),
          prefix + "k_proj.weight": FakeT(Hkv * hd, D),
          prefix + "v_proj.weight": FakeT(Hkv * hd, D),
          prefix + "o_proj.weight": FakeT(D, H * hd),
          prefix + "rotary_emb.inv_freq": FakeT(hd // 2)}
    if bias:
        for n in ("q_proj", "k_proj", "v_proj"):
            sd[prefix + n + ".bias"] = FakeT(sd[prefix + n + ".weight"]
                                             .shape[0])
    return sd


class ExportTorch(unittest.TestCase):
    """tools/export_torch.py's choice of the layer and its checks, on state
    dicts of shapes alone (the numbers are tests/core/model_fixtures/llama,
    made through it by gen_model_fixtures.py)."""

    def test_llama_style_state_dict_is_exported(self):
        # a Hugging Face Llama attention's state dict (GQA, inv_freq), one
        # layer of a bigger model's: found without --prefix
        sd = llama_layer("model.layers.0.self_attn.", bias=True)
        sd["model.layers.0.mlp.up_proj.weight"] = FakeT(128, 64)
        sd["model.norm.weight"] = FakeT(64)
        p = "model.layers.0.self_attn."
        got = export_torch.parts_from_state_dict(sd, 8, None)
        want = [sd.get(p + n) for n in (
            "q_proj.weight", "k_proj.weight", "v_proj.weight",
            "o_proj.weight", "q_proj.bias", "k_proj.bias", "v_proj.bias",
            "o_proj.bias")]
        self.assertEqual(list(got), want)
        self.assertIsNone(got[7])
        self.assertEqual(export_torch.parts_from_state_dict(sd, 8, p)[0],
                         sd[p + "q_proj.weight"])
        # out_proj.weight in place of o_proj.weight
        sd2 = llama_layer("")
        sd2["out_proj.weight"] = sd2.pop("o_proj.weight")
        self.assertIs(export_torch.parts_from_state_dict(sd2, 8)[3],
                      sd2["out_proj.weight"])

    def test_prefix_mistakes_say_what_to_give(self):
        sd = llama_layer("layers.0.attn.")
        sd.update(llama_layer("layers.1.attn."))
        with self.assertRaisesRegex(SystemExit, "2 attention layers found "
                                    r"\('layers.0.attn.', 'layers.1.attn.'"
                                    r"\); choose one with --prefix"):
            export_torch.parts_from_state_dict(sd, 8, None)
        with self.assertRaisesRegex(SystemExit, "did you mean --prefix "
                                    "layers.1.attn. "):
            export_torch.parts_from_state_dict(sd, 8, "layers.1.attn")
        with self.assertRaisesRegex(SystemExit, "no attention layer under "
                                    "--prefix 'attn.'; layers found under: "
                                    "'layers.0.attn.', 'layers.1.attn.'"):
            export_torch.parts_from_state_dict(sd, 8, "attn.")
        with self.assertRaisesRegex(SystemExit, "no attention layer found.*"
                                    "names seen: fc.weight"):
            export_torch.parts_from_state_dict({"fc.weight": FakeT(4, 4)},
                                               8)

    def test_heads_that_do_not_fit_are_refused(self):
        sd = llama_layer("")
        for h in (0, -8, None):
            with self.assertRaisesRegex(SystemExit, "--n-heads must be a "
                                        "positive number"):
                export_torch.parts_from_state_dict(sd, h)
        with self.assertRaisesRegex(SystemExit, "64 outputs, not divisible "
                                    "by --n-heads 6"):
            export_torch.parts_from_state_dict(sd, 6)
        # 32 heads of 2: k_proj's 16 outputs are 8 heads, which divide 32;
        # 16 heads of 4: 4 key/value heads. 64 heads of 1: 16, fine too;
        # but 3 key/value heads of 16 (48 outputs) divide no 4 heads
        sd["k_proj.weight"] = FakeT(48, 64)
        with self.assertRaisesRegex(SystemExit, "key projection has 48 "
                                    "outputs.*is --n-heads right"):
            export_torch.parts_from_state_dict(sd, 4)
        # an nn.MultiheadAttention's state dict that lost one of its biases
        mha = {"attn.in_proj_weight": FakeT(24, 8),
               "attn.in_proj_bias": FakeT(24),
               "attn.out_proj.weight": FakeT(8, 8)}
        # attnd's words for it (core/model_layout.c), with what to do
        with self.assertRaisesRegex(
                SystemExit, r"^'attn.in_proj_bias' without 'attn.out_proj."
                r"bias': an nn.MultiheadAttention has both biases \(bias="
                r"True\) or neither; save its whole state_dict\(\), or, for "
                r"a layer with some biases only, use the q_proj.weight\.\.\. "
                r"names$"):
            export_torch.parts_from_state_dict(mha, 2)
        del sd["k_proj.weight"]
        with self.assertRaisesRegex(SystemExit, "'k_proj.weight' is missing "
                                    "beside 'q_proj.weight': a layer of these "
                                    "names needs q_proj.weight, k_proj.weight,"
                                    " v_proj.weight and o_proj.weight .*save "
                                    r"the layer's whole state_dict\(\)"):
            export_torch.parts_from_state_dict(sd, 8)
        with self.assertRaisesRegex(SystemExit, "'attn.q_proj_weight' needs "
                                    "k_proj_weight and v_proj_weight beside "
                                    r"it; save the layer's whole state_dict"):
            export_torch.parts_from_state_dict(
                {"attn.q_proj_weight": FakeT(8, 8),
                 "attn.v_proj_weight": FakeT(8, 6),
                 "attn.out_proj.weight": FakeT(8, 8)}, 2)

    def test_odd_state_dicts_are_messages_not_tracebacks(self):
        llama0 = llama_layer("")
        llama0["q_proj.weight"] = FakeT(0, 64)
        for sd, msg in (
                # in_proj_weight / q_proj_weight beside o_proj.weight
                ({"attn.in_proj_weight": FakeT(24, 8),
                  "attn.o_proj.weight": FakeT(8, 8)},
                 "'attn.in_proj_weight' without 'attn.out_proj.weight': an "
                 "nn.MultiheadAttention's output weight is out_proj.weight"),
                ({"attn.q_proj_weight": FakeT(8, 8),
                  "attn.k_proj_weight": FakeT(8, 6),
                  "attn.v_proj_weight": FakeT(8, 6),
                  "attn.o_proj.weight": FakeT(8, 8)},
                 "'attn.q_proj_weight' without 'attn.out_proj.weight'"),
                # in_proj_weight / in_proj_bias not of 3 x embed_dim rows
                ({"in_proj_weight": FakeT(20, 8),
                  "out_proj.weight": FakeT(8, 8)},
                 r"'in_proj_weight' has shape \(20, 8\): an "
                 r"nn.MultiheadAttention's holds q, k and v's, \(24, 8\) "
                 r"\(embed_dim 8, out_proj.weight's rows\)"),
                ({"in_proj_weight": FakeT(24, 8), "in_proj_bias": FakeT(20),
                  "out_proj.weight": FakeT(8, 8), "out_proj.bias": FakeT(8)},
                 r"'in_proj_bias' has shape \(20,\):.* \(24,\)"),
                # a query projection of no rows (divisible by any heads)
                (llama0, r"the query projection's weight has shape \(0, 64\)"
                 ": a weight has two dimensions, neither empty")):
            with self.subTest(msg=msg[:30]):
                with self.assertRaisesRegex(SystemExit, msg):
                    export_torch.parts_from_state_dict(sd, 2)


def fake_bytes(t, dtype):
    """export_torch._bytes for a FakeT: zeros of its size in F32."""
    return bytes(4 * math.prod(t.shape))


class ExportTorchWrites(unittest.TestCase):
    """What tools/export_torch.py writes, and what it refuses before writing
    anything (its tensors' bytes stood in for: no PyTorch needed)."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = os.path.join(self.tmp.name, "models", "dec")
        os.makedirs(os.path.dirname(self.out))
        self.parts = export_torch.parts_from_state_dict(llama_layer(""), 8)

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, **kw):
        with mock.patch.object(export_torch, "_bytes", fake_bytes):
            export_torch.write_folder(self.out, self.parts, 8, layout="qproj",
                                      **kw)

    def main(self, *args):
        with mock.patch.object(sys, "argv", ["export_torch.py"] + list(args)):
            export_torch.main()

    def test_folder_written(self):
        self.write(causal=True, rope_theta=1e4, rope_dims=4)
        self.assertEqual(sorted(os.listdir(self.out)),
                         ["config.json", "model.safetensors"])
        with open(os.path.join(self.out, "config.json")) as fh:
            self.assertEqual(json.load(fh), {"n_heads": 8, "causal": True,
                                             "rope": {"theta": 1e4,
                                                      "dims": 4}})

    def test_heads_refused_before_the_folder_is_written(self):
        for h in (0, -2, None):
            with self.assertRaisesRegex(SystemExit, "--n-heads must be a "
                                        r"positive number.*\(got %s\)" % h):
                with mock.patch.object(export_torch, "_bytes", fake_bytes):
                    export_torch.write_folder(self.out, self.parts, h,
                                              layout="qproj")
            self.assertFalse(os.path.exists(self.out))

    def test_rope_options_refused_before_the_source_is_read(self):
        for args, msg in (
                (["--rope-dims", "4"], "--rope-dims needs --rope-theta"),
                (["--rope-theta", "1e4", "--rope-dims", "3"],
                 "--rope-dims 3: RoPE rotates pairs of dims: give a positive "
                 "even number"),
                (["--rope-theta", "1e4", "--rope-dims", "0"],
                 "--rope-dims 0: .*positive even")):
            with self.assertRaisesRegex(SystemExit, msg):
                self.main(os.path.join(self.tmp.name, "missing.pt"),
                          self.out, "--n-heads", "8", *args)

    def test_rope_refused_before_the_folder_is_written(self):
        # write_folder (export_state_dict's, export_module's): head dim 8
        for kw, msg in (({"rope_dims": 4}, "--rope-dims needs --rope-theta"),
                        ({"rope_theta": 1e4, "rope_dims": 10},
                         "--rope-dims 10 is more than the head dim 8: give "
                         "at most 8")):
            with self.assertRaisesRegex(SystemExit, msg):
                self.write(**kw)
            self.assertFalse(os.path.exists(self.out))
        self.parts = export_torch.parts_from_state_dict(
            llama_layer("", D=72, H=8, Hkv=2), 8)  # heads of 9
        with self.assertRaisesRegex(SystemExit, "the head dim 9 is odd.*"
                                    "give --rope-dims"):
            self.write(rope_theta=1e4)
        self.assertFalse(os.path.exists(self.out))

    def test_config_that_cannot_be_written_is_a_message(self):
        # and the weights are not left without it (they were written
        # first): both files or neither, no temporary file left
        os.makedirs(os.path.join(self.out, "config.json"))  # a folder
        with self.assertRaisesRegex(SystemExit, "dec: cannot write the model "
                                    "folder: Is a directory"):
            self.write()
        self.assertEqual(os.listdir(self.out), ["config.json"])
        # config.json's own write failing (a full disk, say)
        os.rmdir(os.path.join(self.out, "config.json"))
        with mock.patch.object(export_torch.json, "dump",
                               side_effect=OSError(28, "No space left on "
                                                   "device")):
            with self.assertRaisesRegex(SystemExit, "dec: cannot write the "
                                        "model folder: No space left"):
                self.write()
        self.assertEqual(os.listdir(self.out), [])
        # the second rename failing after the first: the weights go too
        real, renamed = os.replace, []

        def second_fails(a, b):
            renamed.append(b)
            if len(renamed) == 2:
                raise OSError(5, "Input/output error")
            return real(a, b)
        with mock.patch.object(export_torch.os, "replace",
                               side_effect=second_fails):
            with self.assertRaisesRegex(SystemExit, "dec: cannot write the "
                                        "model folder: Input/output error"):
                self.write()
        self.assertEqual(os.listdir(self.out), [])
        # an error other than the OS's (a bug): no temporary file left
        with mock.patch.object(export_torch.json, "dump",
                               side_effect=TypeError("not serializable")):
            with self.assertRaises(TypeError):
                self.write()
        self.assertEqual(os.listdir(self.out), [])
        self.write()
        self.assertEqual(sorted(os.listdir(self.out)),
                         ["config.json", "model.safetensors"])

    def test_module_heads_other_than_given_are_refused(self):
        # a whole nn.MultiheadAttention knows its heads: --n-heads was
        # ignored (8 written for --n-heads 4); the same H is taken
        class MHA:
            num_heads = 8
            add_zero_attn = False

            def state_dict(self):  # (export_module takes any layer's)
                return llama_layer("")

        fake = mock.Mock()
        fake.nn.MultiheadAttention = MHA
        fake.nn.Module = MHA
        with mock.patch.object(export_torch, "_torch", lambda: fake), \
                mock.patch.object(export_torch, "load_source",
                                  lambda p: MHA()), \
                mock.patch.object(export_torch, "_bytes", fake_bytes):
            with self.assertRaisesRegex(SystemExit, "--n-heads 4: x.pt holds "
                                        "an nn.MultiheadAttention of "
                                        "num_heads 8, .*drop --n-heads"):
                self.main("x.pt", self.out, "--n-heads", "4",
                          "--layout", "qproj")
            self.assertFalse(os.path.exists(self.out))
            self.main("x.pt", self.out, "--n-heads", "8", "--layout", "qproj")
        with open(os.path.join(self.out, "config.json")) as fh:
            self.assertEqual(json.load(fh), {"n_heads": 8})

    def test_without_pytorch_it_says_what_to_run(self):
        with mock.patch.dict(sys.modules, {"torch": None}):
            with self.assertRaisesRegex(SystemExit, "needs PyTorch .*run it "
                                        "with Debian's /usr/bin/python3 "
                                        r"\(apt-get install python3-torch\)"):
                self.main(os.path.join(self.tmp.name, "x.pt"), self.out)
        # run as a command: exit status 1 and one line, as its other errors
        tool = os.path.join(HERE, "..", "..", "tools", "export_torch.py")
        for pre, msg in (("sys.modules['torch'] = None", "needs PyTorch"),
                         ("pass", "--n-heads must be a positive")):
            r = subprocess.run(
                [sys.executable, "-B", "-c", "import runpy, sys; %s; "
                 "sys.argv = [%r, 'x.pt', %r, '--n-heads', %r]; "
                 "runpy.run_path(%r, run_name='__main__')"
                 % (pre, tool, self.out, "0" if pre == "pass" else "8", tool)],
                capture_output=True, text=True)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertRegex(r.stderr, "^[^\n]*%s[^\n]*\n$" % msg)
            self.assertNotIn("Traceback", r.stderr)


if __name__ == "__main__":
    unittest.main()
