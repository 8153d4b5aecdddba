// maps_api.test.mjs - retained maps through the real daemon's HTTP API:
// the retained map equals the one returned inline, bit for bit; pooled
// and f32 forms; eviction by bytes answers 404; bad parameters name
// themselves. No browser.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startAttnd } from './harness.mjs';

let daemon;
// Room for two [1, 2, 10, 10] maps with their labels and value norms
// (1356 bytes each), not three.
const MAPS_BYTES = 3000;
before(async () => { daemon = await startAttnd(['--maps-bytes', String(MAPS_BYTES)]); });
after(async () => { if (daemon) await daemon.stop(); });

const words = 'the cat sat on the mat because it was tired'.split(' ');

async function post(path, body) {
  const r = await fetch(daemon.url + path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const j = await r.json();
  assert.equal(r.status, 200, JSON.stringify(j));
  return j;
}

// A retained toy-model run on words with x = a fixed pseudo-random matrix.
async function retainRun(seed) {
  const T = words.length, D = 16;
  let s = seed;
  const x = Array.from({ length: T * D }, () => { s = (s * 1103515245 + 12345) % 2147483648; return s / 2147483648 - 0.5; });
  const resp = await post('/v2/models/toy/infer', {
    inputs: [{ name: 'x', datatype: 'FP32', shape: [1, T, D], data: x }],
    outputs: [{ name: 'attention' }],
    parameters: { retain: true, tokens: words },
  });
  const att = resp.outputs.find((o) => o.name === 'attention');
  assert.deepEqual(att.shape, [1, 2, T, T]);
  return { id: resp.parameters.map_id, att: Float32Array.from(att.data), x: x.map(Math.fround) };
}

// toyAttention: the toy model's attention worked out here (W = I: head h is
// softmax(x_h x_h^T / sqrt(8)) over columns 8h..8h+7 of x), in double.
function toyAttention(x, T, h) {
  const out = [];
  for (let i = 0; i < T; i++) {
    const s = Array.from({ length: T }, (_, j) => {
      let d = 0;
      for (let k = 8 * h; k < 8 * h + 8; k++) d += x[i * 16 + k] * x[j * 16 + k];
      return d / Math.sqrt(8);
    });
    const m = Math.max(...s), e = s.map((v) => Math.exp(v - m)), z = e.reduce((a, b) => a + b, 0);
    out.push(...e.map((v) => v / z));
  }
  return out;
}
const maxDiff = (a, b) => a.reduce((m, v, i) => Math.max(m, Math.abs(v - b[i])), 0);

async function f32(path) {
  const r = await fetch(daemon.url + path);
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('content-type'), 'application/octet-stream');
  return { shape: r.headers.get('map-shape'), data: new Float32Array(await r.arrayBuffer()) };
}

test('a retained map equals the attention returned inline, exactly, and the toy\'s softmax worked out here', async () => {
  const { id, att, x } = await retainRun(1);
  for (let h = 0; h < 2; h++)
    assert.ok(maxDiff(Array.from(att.subarray(h * 100, (h + 1) * 100)), toyAttention(x, 10, h)) < 1e-6, `head ${h} vs the closed form`);
  assert.match(id, /^m\d+-[0-9a-f]{6}$/);
  const meta = await (await fetch(`${daemon.url}/v2/maps/${id}`)).json();
  assert.deepEqual(meta.shape, [1, 2, 10, 10]);
  assert.equal(meta.model, 'toy');
  assert.deepEqual(meta.tokens, words);
  for (let h = 0; h < 2; h++) {
    const got = await f32(`/v2/maps/${id}/attention?b=0&h=${h}&format=f32`);
    assert.equal(got.shape, '10,10');
    assert.deepEqual(Array.from(got.data), Array.from(att.subarray(h * 100, (h + 1) * 100)));
    const js = await (await fetch(`${daemon.url}/v2/maps/${id}/attention?h=${h}`)).json();
    assert.deepEqual(js.shape, [10, 10]);
    assert.deepEqual(js.data.map(Math.fround), Array.from(att.subarray(h * 100, (h + 1) * 100)));
  }
  // max=4 pools 3 x 3 blocks (ceil(10/4) = 3): 4 x 4 cells, each the max
  // of its block of the inline map.
  const pooled = await f32(`/v2/maps/${id}/attention?h=1&max=4&format=f32`);
  assert.equal(pooled.shape, '4,4');
  for (let r = 0; r < 4; r++)
    for (let c = 0; c < 4; c++) {
      let m = -1;
      for (let i = 3 * r; i < Math.min(10, 3 * r + 3); i++)
        for (let j = 3 * c; j < Math.min(10, 3 * c + 3); j++) m = Math.max(m, att[100 + i * 10 + j]);
      assert.equal(pooled.data[r * 4 + c], m, `pooled cell (${r},${c})`);
    }
});

test('the oldest map is evicted by bytes and then answers 404', async () => {
  const a = await retainRun(2), b = await retainRun(3), c = await retainRun(4);
  const list = await (await fetch(`${daemon.url}/v2/maps`)).json();
  const ids = list.maps.map((m) => m.id);
  assert.deepEqual(ids.slice(0, 2), [c.id, b.id], 'newest first');
  assert.ok(!ids.includes(a.id));
  assert.ok(list.bytes_used <= MAPS_BYTES);
  const metrics = await (await fetch(`${daemon.url}/metrics`)).text();
  assert.match(metrics, /^attnd_maps_evicted_total [1-9]\d*$/m);
  assert.match(metrics, new RegExp(`^attnd_maps_bytes ${list.bytes_used}$`, 'm'));
  assert.match(metrics, new RegExp(`^attnd_maps_bytes_limit ${MAPS_BYTES}$`, 'm'));
  for (const p of [`/v2/maps/${a.id}`, `/v2/maps/${a.id}/attention`]) {
    const r = await fetch(daemon.url + p);
    assert.equal(r.status, 404);
    assert.match((await r.json()).error, /not retained/);
  }
});

test('bad parameters answer 400 naming the parameter', async () => {
  const { id } = await retainRun(5);
  for (const [q, field] of [['h=9', 'h:'], ['b=1', 'b:'], ['max=0', 'max:'], ['format=png', 'format:']]) {
    const r = await fetch(`${daemon.url}/v2/maps/${id}/attention?${q}`);
    assert.equal(r.status, 400, q);
    assert.ok((await r.json()).error.startsWith(field), q);
  }
});

test('the page and its files are served with ETags; If-None-Match gives 304', async () => {
  const r = await fetch(`${daemon.url}/`);
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/html/);
  assert.match(r.headers.get('content-security-policy'), /default-src 'self'/);
  const etag = r.headers.get('etag');
  assert.match(etag, /^"[0-9a-f]{16}"$/);
  assert.match(await r.text(), /<script type="module" src="web\/app.js">/); // relative: any prefix
  const moved = await fetch(`${daemon.url}/web/index.html`, { redirect: 'manual' });
  assert.equal(moved.status, 301);
  assert.equal(moved.headers.get('location'), '../');
  const again = await fetch(`${daemon.url}/`, { headers: { 'If-None-Match': etag } });
  assert.equal(again.status, 304);
  const js = await fetch(`${daemon.url}/web/app.js`);
  assert.match(js.headers.get('content-type'), /^text\/javascript/);
  assert.equal((await fetch(`${daemon.url}/web/nope.js`)).status, 404);
});
