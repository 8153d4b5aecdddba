// seq_torch.test.mjs - a sequence stepped through the daemon against
// PyTorch: tests/core/gen_decode_vectors.py's decode_rewind.bin (a GQA +
// RoPE + biases layer; a prompt of 5, one token a step to 140 across the
// 64-token page edges, then steps at sequence_positions below the length:
// onto page edges, across one, a retry, past the old end, far back). The
// reference is torch's past_key_values cut at each position, not attnd's.
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { fp32, infer, modelsDir, safetensors, start } from './helper.mjs';

const BIN = join(dirname(fileURLToPath(import.meta.url)), '..', 'core', 'vectors', 'decode_rewind.bin');

/** decode_rewind.bin: the layer and its ops (pos, t, x, y, attention). */
function load() {
  const b = readFileSync(BIN);
  let off = 0;
  const i32 = () => { const v = b.readInt32LE(off); off += 4; return v; };
  const f32 = (n) => { const a = []; for (let i = 0; i < n; i++, off += 4) a.push(b.readFloatLE(off)); return a; };
  const [dm, H, Hk, dk, dv, rot, nOps] = Array.from({ length: 7 }, i32);
  const theta = f32(1)[0];
  const w = {
    W_q: [[dm, H * dk], f32(dm * H * dk)], W_k: [[dm, Hk * dk], f32(dm * Hk * dk)],
    W_v: [[dm, Hk * dv], f32(dm * Hk * dv)], W_o: [[H * dv, dm], f32(H * dv * dm)],
    b_q: [[H * dk], f32(H * dk)], b_k: [[Hk * dk], f32(Hk * dk)],
    b_v: [[Hk * dv], f32(Hk * dv)], b_o: [[dm], f32(dm)],
  };
  const ops = [];
  for (let o = 0; o < nOps; o++) {
    const pos = i32(), t = i32();
    ops.push({ pos, t, x: f32(t * dm), y: f32(t * dm), attention: f32(H * t * (pos + t)) });
  }
  assert.equal(off, b.length, 'the whole file read');
  return { dm, H, Hk, dk, dv, rot, theta, w, ops };
}

function close(what, got, want, atol, rtol) {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; i++)
    assert.ok(Math.abs(got[i] - want[i]) <= atol + rtol * Math.abs(want[i]),
      `${what}[${i}] = ${got[i]}, torch ${want[i]}`);
}

test('one token a step across pages, with rewinds onto and across page edges, gives torch\'s rows', async () => {
  const L = load();
  assert.equal(L.rot, L.dk); // config.json's RoPE covers the whole head
  const dir = modelsDir();
  mkdirSync(join(dir, 'trw'));
  writeFileSync(join(dir, 'trw', 'model.safetensors'), safetensors(L.w));
  writeFileSync(join(dir, 'trw', 'config.json'), JSON.stringify({
    n_heads: L.H, n_kv_heads: L.Hk, causal: true, rope: { theta: L.theta },
  }));
  const tokenBytes = L.Hk * (L.dk + L.dv) * 4; // FP32 keys and values
  const page = 64 * tokenBytes;
  // exactly the three pages the longest history (140 tokens) fills
  const d = await start({ dir, args: ['--kv-bytes', String(3 * page)] });
  try {
    let len = 0, rewinds = 0;
    for (const [n, op] of L.ops.entries()) {
      const r = await infer(d, 'trw', {
        inputs: [fp32('x', [1, op.t, L.dm], op.x)],
        outputs: [{ name: 'y' }, { name: 'attention' }],
        parameters: { sequence_id: 'torch-rw', sequence_start: n === 0, sequence_position: op.pos },
      });
      const what = `op ${n} (${op.t} at ${op.pos}, held ${len})`;
      assert.equal(r.status, 200, `${what}: ${JSON.stringify(r.json)}`);
      rewinds += op.pos < len;
      len = op.pos + op.t;
      assert.equal(r.json.parameters.sequence_length, len, what);
      const o = Object.fromEntries(r.json.outputs.map((x) => [x.name, x]));
      assert.deepEqual(o.attention.shape, [1, L.H, op.t, len], what);
      close(`${what} y`, o.y.data, op.y, 1e-5, 1e-4);
      close(`${what} attention`, o.attention.data, op.attention, 1e-6, 1e-4);
      const s = await (await fetch(`${d.url}/v2/sequences/torch-rw`)).json();
      assert.equal(s.length, len, what);
      assert.equal(s.bytes, Math.ceil(len / 64) * page, `${what}: pages held`);
    }
    assert.ok(rewinds >= 6, `${rewinds} rewinds`);
  } finally {
    await d.stop();
  }
});
