// memtrim.test.mjs - memory freed by ended sequences goes back to the
// kernel after the burst (server/memtrim.c): attnd_memory_trims_total
// counts it. How much RSS falls is bench/mem_burst.py's to measure; here
// the behaviour: no trim while sequences only grow, one after they are
// deleted, and the K/V accounting unchanged by it.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SLOW, binaryRequest, f32bytes, start } from './helper.mjs';

const DM = 64; // models/demo's d_model

async function metricOf(d, re) {
  const text = await (await fetch(`${d.url}/metrics`)).text();
  const m = re.exec(text);
  assert.ok(m, `${re} in /metrics`);
  return Number(m[1]);
}
const trims = (d) => metricOf(d, /^attnd_memory_trims_total (\d+)$/m);
const kvBytes = (d) => metricOf(d, /^attnd_kv_bytes\{model="demo",version="1"\} (\d+)$/m);

async function step(d, id, t, start) {
  const x = new Float32Array(t * DM).fill(0.01);
  const params = { sequence_id: id, binary_data_output: true, ...(start ? { sequence_start: true } : {}) };
  const { body, headerLen } = binaryRequest({
    parameters: params,
    inputs: [{ name: 'x', datatype: 'FP32', shape: [1, t, DM], parameters: { binary_data_size: x.length * 4 } }],
    outputs: [{ name: 'y', parameters: { binary_data: true } }],
  }, [f32bytes(x)]);
  const r = await fetch(`${d.url}/v2/models/demo/infer`, {
    method: 'POST', body, headers: { 'Inference-Header-Content-Length': String(headerLen) },
  });
  await r.arrayBuffer();
  assert.equal(r.status, 200);
}

test('sequences deleted: their memory is trimmed, attnd_kv_bytes follows, and a sequence starts after', async (t) => {
  const d = await start({ t, args: ['--kv-bytes', String(64 << 20), '--threads', '2'] });
  // 48 sequences of 960 tokens (15 pages of 32 KiB each): 22.5 MiB
  for (let i = 0; i < 48; i++) await step(d, `m${i}`, 960, true);
  assert.equal(await kvBytes(d), 48 * 15 * 32768);
  assert.equal(await trims(d), 0); // held only grew: nothing to give back
  for (let i = 0; i < 48; i++) {
    const r = await fetch(`${d.url}/v2/sequences/m${i}`, { method: 'DELETE' });
    await r.arrayBuffer();
    assert.equal(r.status, 200);
  }
  assert.equal(await kvBytes(d), 0);
  // the tick (1 s) sees the drop and trims; bounded for a hang only
  const until = Date.now() + 30000 * SLOW;
  while (await trims(d) < 1) {
    assert.ok(Date.now() < until, 'no attnd_memory_trims_total after the deletes');
    await new Promise((res) => setTimeout(res, 100));
  }
  // a sequence after it starts from the pages kept (or new ones) as before
  await step(d, 'again', 960, true);
  assert.equal(await kvBytes(d), 15 * 32768);
  await d.stop();
});
