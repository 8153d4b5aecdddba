// batching.test.mjs - many clients at once, each gets its own answer, and
// the scheduler really ran them in shared batches.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { REFS, fp32, infer, maxDiff, start } from './helper.mjs';

const statsOf = async (d, m) => (await (await fetch(`${d.url}/v2/models/${m}/stats`)).json()).model_stats[0];

test('concurrent clients of different T share batches and get their own answers', async (t) => {
  // a long batch delay so that the requests meet in the queue
  const d = await start({ t, args: ['--max-batch', '8', '--batch-delay-us', '200000', '--instances', '1'] });
  try {
    const clients = REFS.clients;
    const rs = await Promise.all(clients.map((c, i) =>
      infer(d, 'tiny', { id: `c${i}`, inputs: [fp32('x', c.shape, c.x)] })));
    rs.forEach((r, i) => {
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.equal(r.json.id, `c${i}`);
      assert.deepEqual(r.json.outputs[0].shape, clients[i].shape);
      assert.ok(maxDiff(r.json.outputs[0].data, clients[i].y) < 1e-5, `client ${i}`);
    });
    const s = await statsOf(d, 'tiny');
    assert.equal(s.inference_count, clients.length);
    // Triton's batch_stats: per batch size, adding up to the batches run
    assert.equal(s.batch_stats.reduce((n, b) => n + b.compute_infer.count, 0), s.execution_count);
    assert.equal(s.batch_stats.reduce((n, b) => n + b.batch_size * b.compute_infer.count, 0), clients.length);
    assert.ok(s.batch_stats.some((b) => b.batch_size > 1));
    assert.ok(s.execution_count < clients.length, `${s.execution_count} batches for ${clients.length} requests`);
    const m = await (await fetch(`${d.url}/metrics`)).text();
    const big = /attnd_inference_batch_size_bucket\{model="tiny",version="1",le="1"\} (\d+)/.exec(m);
    assert.ok(Number(big[1]) < clients.length, 'some batches hold more than one sequence');
    assert.equal((await d.stop()).code, 0);
  } catch (e) { await d.stop('SIGKILL'); throw e; }
});

test('sdpa requests of the same head size batch too; mixed sizes stay apart', async (t) => {
  const d = await start({ t, args: ['--max-batch', '16', '--batch-delay-us', '100000'] });
  try {
    const c = REFS.sdpa, k = REFS.sdpa_causal;
    const reqs = [];
    for (let i = 0; i < 6; i++) {
      const e = i % 2 ? k : c;
      reqs.push(infer(d, 'sdpa', {
        inputs: [fp32('q', e.q_shape, e.q), fp32('k', e.k_shape, e.k), fp32('v', e.v_shape, e.v)],
        parameters: { causal: !!(i % 2) }, outputs: [{ name: 'output' }],
      }).then((r) => [r, e]));
    }
    for (const [r, e] of await Promise.all(reqs)) {
      assert.equal(r.status, 200);
      assert.ok(maxDiff(r.json.outputs[0].data, e.output) < 1e-5);
    }
    const s = await statsOf(d, 'sdpa');
    assert.ok(s.execution_count < 6, `${s.execution_count} batches`);
    assert.equal((await d.stop()).code, 0);
  } catch (e) { await d.stop('SIGKILL'); throw e; }
});
