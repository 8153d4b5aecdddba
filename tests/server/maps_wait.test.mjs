// maps_wait.test.mjs - the long poll behind the page's follow mode:
// GET /v2/maps/{id}?wait=N answers once the map's query rows differ from
// N, once it is gone, or after its timeout; bounded by maps-waiters (503
// past it) and maps-wait-ms; waiting blocks neither the loop nor inference;
// SIGTERM answers every waiter at once. (A sequence's growing map wakes a
// waiter: tests/web/sequence.test.mjs, once sequences exist.)
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SLOW, fp32, infer, start } from './helper.mjs';

const T = 3;
const sdpa = (scale = 1) => ({
  inputs: [
    fp32('q', [T, 2], [1, 0, 0, 1, 1, 1].map((x) => x * scale)),
    fp32('k', [T, 2], [1, 0, 0, 1, 1, 1]),
    fp32('v', [T, 1], [1, 2, 3]),
  ],
  parameters: { retain: true },
});

async function retain(d, scale) {
  const r = await infer(d, 'sdpa', sdpa(scale));
  assert.equal(r.status, 200, JSON.stringify(r.json));
  return r.json.parameters.map_id;
}

async function timed(url) {
  const t0 = Date.now();
  const r = await fetch(url);
  return { status: r.status, headers: r.headers, json: await r.json(), ms: Date.now() - t0 };
}

test('wait=: at once when the rows differ, after timeout_ms when not; bad values named', async () => {
  const d = await start({ args: ['--maps-wait-ms', '400'] });
  try {
    const id = await retain(d, 1);
    // The page already has 0 rows: the map (3 rows) differs, answer now.
    let r = await timed(`${d.url}/v2/maps/${id}?wait=0&timeout_ms=5000`);
    assert.equal(r.status, 200);
    assert.deepEqual(r.json.shape, [1, 1, T, T]);
    // Same rows: held until the timeout, then the metadata unchanged.
    r = await timed(`${d.url}/v2/maps/${id}?wait=${T}&timeout_ms=300`);
    assert.equal(r.status, 200);
    assert.deepEqual(r.json.shape, [1, 1, T, T]);
    assert.ok(r.ms >= 250, `answered after ${r.ms} ms, before its timeout`);
    // timeout_ms above maps-wait-ms is cut to it (400 ms), not refused.
    r = await timed(`${d.url}/v2/maps/${id}?wait=${T}&timeout_ms=600000`);
    assert.equal(r.status, 200);
    assert.ok(r.ms >= 350 && r.ms < 10000 * SLOW, `answered after ${r.ms} ms`);
    // An unknown map answers 404 at once, whatever wait says.
    r = await timed(`${d.url}/v2/maps/m999-abcdef?wait=${T}`);
    assert.equal(r.status, 404);
    assert.match(r.json.error, /m999-abcdef/);
    for (const [q, field] of [['wait=x', /^wait:/], ['wait=-1', /^wait:/], [`wait=${T}&timeout_ms=soon`, /^timeout_ms:/]]) {
      r = await timed(`${d.url}/v2/maps/${id}?${q}`);
      assert.equal(r.status, 400, q);
      assert.match(r.json.error, field, q);
    }
  } finally {
    assert.equal((await d.stop()).code, 0);
  }
});

test('a map evicted while a client waits on it answers 404', async () => {
  // Room for one 3 x 3 map and its bookkeeping, not two.
  const d = await start({ args: ['--maps-bytes', '700', '--maps-wait-ms', '20000'] });
  try {
    const id = await retain(d, 1);
    const waiting = timed(`${d.url}/v2/maps/${id}?wait=${T}`);
    await new Promise((res) => setTimeout(res, 200));
    const other = await retain(d, 2);
    assert.notEqual(other, id);
    assert.equal((await fetch(`${d.url}/v2/maps/${id}`)).status, 404, 'the first map was not evicted');
    const r = await waiting;
    assert.equal(r.status, 404);
    assert.ok(r.ms < 5000 * SLOW, `404 after ${r.ms} ms`);
  } finally {
    assert.equal((await d.stop()).code, 0);
  }
});

test('at most maps-waiters wait; inference and other requests go on meanwhile; SIGTERM answers the waiters', async () => {
  const d = await start({ args: ['--maps-waiters', '2', '--maps-wait-ms', '60000'] });
  let stopped = false;
  try {
    const id = await retain(d, 1);
    const w = [timed(`${d.url}/v2/maps/${id}?wait=${T}`), timed(`${d.url}/v2/maps/${id}?wait=${T}`)];
    // Both parked (the metrics say so once the loop has taken them).
    for (let k = 0; k < 100; k++) {
      const m = await (await fetch(`${d.url}/metrics`)).text();
      if (/^attnd_maps_waiters 2$/m.test(m)) break;
      assert.ok(k < 99, 'attnd_maps_waiters never reached 2');
      await new Promise((res) => setTimeout(res, 50));
    }
    const third = await timed(`${d.url}/v2/maps/${id}?wait=${T}`);
    assert.equal(third.status, 503);
    assert.match(third.json.error, /maps-waiters/);
    assert.ok(third.headers.get('retry-after'), 'no Retry-After on the 503');
    // The loop still serves: inference, a plain map read, health.
    const r = await infer(d, 'sdpa', sdpa(3));
    assert.equal(r.status, 200);
    assert.equal((await fetch(`${d.url}/v2/maps/${id}`)).status, 200);
    assert.equal((await fetch(`${d.url}/v2/health/live`)).status, 200);
    // SIGTERM: the waiters are answered now (their map, unchanged), and the
    // daemon exits 0 long before their 60 s.
    const t0 = Date.now();
    const exit = d.stop('SIGTERM');
    stopped = true;
    for (const p of w) {
      const a = await p;
      assert.equal(a.status, 200);
      assert.deepEqual(a.json.shape, [1, 1, T, T]);
    }
    assert.equal((await exit).code, 0);
    assert.ok(Date.now() - t0 < 15000 * SLOW, `exit took ${Date.now() - t0} ms`);
  } finally {
    if (!stopped) await d.stop();
  }
});
