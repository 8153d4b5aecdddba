// maps.test.mjs - the infer side of retained maps: parameters.retain keeps
// the attention maps, the response carries parameters.map_id, and the
// /v2/maps routes serve them (the store itself is tested in test_maps.c).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { REFS, fp32, infer, maxDiff, start } from './helper.mjs';

test('retain: map_id in the response, the same maps from /v2/maps', async (t) => {
  const d = await start({ t });
  try {
    const c = REFS.self;
    const r = await infer(d, 'tiny', {
      inputs: [fp32('x', c.shape, c.x)], outputs: [{ name: 'attention' }],
      parameters: { retain: true, tokens: ['a', 'b', 'c', 'd', 'e'] },
    });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const id = r.json.parameters && r.json.parameters.map_id;
    assert.equal(typeof id, 'string');
    const list = await (await fetch(`${d.url}/v2/maps`)).json();
    assert.ok(JSON.stringify(list).includes(id));
    const meta = await fetch(`${d.url}/v2/maps/${id}`);
    assert.equal(meta.status, 200);
    assert.match(await meta.text(), /"a"/);
    const att = r.json.outputs[0].data; // [2, 2, 5, 5]
    const m = await (await fetch(`${d.url}/v2/maps/${id}/attention?b=1&h=0`)).json();
    assert.deepEqual(m.shape, [5, 5]);
    assert.ok(maxDiff(m.data, att.slice(50, 75)) < 1e-6);
    const raw = await fetch(`${d.url}/v2/maps/${id}/attention?b=0&h=1&format=f32`);
    assert.equal(raw.status, 200);
    assert.equal(raw.headers.get('map-shape'), '5,5');
    const f = new Float32Array(await raw.arrayBuffer());
    assert.deepEqual(Array.from(f), att.slice(25, 50).map(Math.fround));
    assert.equal((await fetch(`${d.url}/v2/maps/nope`)).status, 404);
    // retain without asking for the attention output still keeps it
    const r2 = await infer(d, 'tiny', { inputs: [fp32('x', c.shape, c.x)], parameters: { retain: true } });
    assert.equal(r2.status, 200);
    assert.deepEqual(r2.json.outputs.map((o) => o.name), ['y']);
    assert.equal((await fetch(`${d.url}/v2/maps/${r2.json.parameters.map_id}`)).status, 200);
    // bad labels are refused naming the parameter
    const r3 = await infer(d, 'tiny', { inputs: [fp32('x', c.shape, c.x)], parameters: { retain: true, tokens: ['only-one'] } });
    assert.equal(r3.status, 400);
    assert.match(r3.json.error, /^parameters\.tokens: 1 label, expected 5 \(one per query token\)$/);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('retain on cross-attention: T + S labels name the queries and the keys apart; other counts are 400', async (t) => {
  const d = await start({ t });
  try {
    const c = REFS.cross; // x [2, 3, 8], context [2, 5, 8]
    const body = (tokens) => ({ inputs: [fp32('x', c.shape, c.x), fp32('context', c.context_shape, c.context)],
      parameters: { retain: true, tokens } });
    const q = ['q0', 'q1', 'q2'], k = ['k0', 'k1', 'k2', 'k3', 'k4'];
    const r = await infer(d, 'tiny', body([...q, ...k]));
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const meta = await (await fetch(`${d.url}/v2/maps/${r.json.parameters.map_id}`)).json();
    assert.deepEqual(meta.tokens, q);
    assert.deepEqual(meta.key_tokens, k);
    // T labels: the keys (from another sequence) get none
    const r2 = await infer(d, 'tiny', body(q));
    assert.equal(r2.status, 200, JSON.stringify(r2.json));
    const meta2 = await (await fetch(`${d.url}/v2/maps/${r2.json.parameters.map_id}`)).json();
    assert.deepEqual([meta2.tokens, meta2.key_tokens], [q, []]);
    const r3 = await infer(d, 'tiny', body([...q, 'k0']));
    assert.equal(r3.status, 400);
    assert.match(r3.json.error, /parameters\.tokens: 4 labels, expected 3 \(one per query token\) or T \+ S$/);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('retain is refused when the store is off (--maps-bytes 0)', async (t) => {
  const d = await start({ t, args: ['--maps-bytes', '0'] });
  try {
    const c = REFS.causal;
    const r = await infer(d, 'tiny', { inputs: [fp32('x', c.shape, c.x)], parameters: { retain: true } });
    assert.equal(r.status, 400);
    assert.match(r.json.error, /parameters\.retain/);
    assert.equal((await fetch(`${d.url}/v2/maps`)).status, 404);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('large maps are sliced and printed on the pool, one at a time: a request sent meanwhile is answered first', async (t) => {
  const d = await start({ t });
  try {
    // 4 heads of 2048 x 2048 (64 MiB); h=mean&max=1024 averages them, pools
    // the mean and prints 1M cells: tens of milliseconds
    const T = 2048, H = 4;
    const col = Array.from({ length: H * T }, (_, i) => Math.sin(i));
    const r = await infer(d, 'sdpa', {
      inputs: [fp32('q', [1, H, T, 1], col), fp32('k', [1, H, T, 1], col), fp32('v', [1, H, T, 1], col)],
      parameters: { retain: true },
    });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const id = r.json.parameters.map_id;
    const order = []; // whose response head arrived first
    const map = (tag) => fetch(`${d.url}/v2/maps/${id}/attention?h=mean&max=1024`)
      .then((x) => { order.push(tag); return x.json(); });
    const first = map('map');
    const second = map('map2'); // waits for the first's turn
    await new Promise((res) => setTimeout(res, 2));
    const live = fetch(`${d.url}/v2/health/live`).then((x) => { order.push('live'); return x.status; });
    const [m, m2, st] = await Promise.all([first, second, live]);
    for (const x of [m, m2]) {
      assert.deepEqual(x.shape, [1024, 1024]);
      assert.equal(x.data.length, 1024 * 1024);
    }
    assert.deepEqual(m2.data.slice(0, 64), m.data.slice(0, 64));
    assert.equal(st, 200);
    // on the loop, the maps held the health check until they were printed
    assert.equal(order[0], 'live', order.join());
    // unpooled, 4M cells would be ~40 MB of JSON: refused, saying what to ask
    const whole = await fetch(`${d.url}/v2/maps/${id}/attention?h=0`);
    assert.equal(whole.status, 400);
    assert.equal((await whole.json()).error, 'max: a 2048 x 2048 map is too large for JSON; ask for max=1024 or format=f32');
    assert.equal((await fetch(`${d.url}/v2/maps/${id}/attention?h=0&max=4096`)).status, 400);
    const f32 = await fetch(`${d.url}/v2/maps/${id}/attention?h=0&format=f32`);
    assert.equal(f32.status, 200);
    assert.equal(f32.headers.get('map-shape'), '2048,2048');
    assert.equal((await f32.arrayBuffer()).byteLength, T * T * 4);
    assert.equal((await fetch(`${d.url}/v2/health/live`)).status, 200);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('the extension routes read their query strictly: an unknown parameter, one given twice or without a value is a 400 naming it', async (t) => {
  const d = await start({ t });
  try {
    const c = REFS.self;
    const r = await infer(d, 'tiny', { inputs: [fp32('x', c.shape, c.x)], parameters: { retain: true } });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const id = r.json.parameters.map_id;
    const get = async (p, method = 'GET') => {
      const res = await fetch(d.url + p, { method });
      return { status: res.status, error: (await res.json().catch(() => ({}))).error };
    };
    // a mistyped head (the parameter is h) was head 0, answered 200
    let g = await get(`/v2/maps/${id}/attention?head=1`);
    assert.equal(g.status, 400);
    assert.equal(g.error, `query: unknown parameter 'head'; /v2/maps/${id}/attention takes b, h, max, format, what`);
    // the first of two was taken
    g = await get(`/v2/maps/${id}/attention?h=0&h=1`);
    assert.equal(g.status, 400);
    assert.equal(g.error, "query: 'h' given twice; give each parameter once");
    // "?h" (no '=') was no h at all
    g = await get(`/v2/maps/${id}/attention?b=0&h`);
    assert.equal(g.status, 400);
    assert.equal(g.error, "query: 'h' has no value (h=...)");
    g = await get(`/v2/maps/${id}?wait=0&wait=1`);
    assert.equal(g.status, 400);
    assert.match(g.error, /^query: 'wait' given twice/);
    g = await get(`/v2/maps/${id}?wiat=0`);
    assert.equal(g.status, 400);
    assert.match(g.error, /^query: unknown parameter 'wiat'; .* takes wait, version, timeout_ms$/);
    // version= and timeout_ms= belong to the long poll
    for (const q of ['version=0', 'timeout_ms=10']) {
      g = await get(`/v2/maps/${id}?${q}`);
      assert.equal(g.status, 400, q);
      assert.match(g.error, new RegExp(`^${q.split('=')[0]}: only with wait=`), q);
    }
    for (const [p, method] of [['/v2/maps?limit=5', 'GET'], ['/v2/sequences?model=tiny', 'GET'],
      ['/v2/sequences/s1?x=1', 'GET'], ['/v2/sequences/s1?x=1', 'DELETE']]) {
      g = await get(p, method);
      assert.equal(g.status, 400, `${method} ${p}`);
      assert.match(g.error, /^query: unknown parameter '(limit|model|x)'; \/v2\/\S+ takes no parameters$/, `${method} ${p}`);
    }
    // what the page and README send is still answered
    for (const p of [`/v2/maps/${id}/attention?b=0&h=1&what=attention&format=f32&max=2`, `/v2/maps/${id}?wait=0&version=0&timeout_ms=10`,
      `/v2/maps/${id}`, '/v2/maps', '/v2/sequences']) assert.equal((await fetch(d.url + p)).status, 200, p);
    // the KServe routes' queries are not ours to check
    assert.equal((await fetch(`${d.url}/v2/models/tiny?x=1&x=2`)).status, 200);
  } finally { assert.equal((await d.stop()).code, 0); }
});
