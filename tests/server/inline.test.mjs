// inline.test.mjs - a lone client's small requests run on the loop thread
// (--inline-conns) with the same answers as on the pool; a second open
// connection, --inline-conns 0, a plan too large for one job or outputs
// over 64 KiB send them to the pool, and those answers are right too.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Agent, request } from 'node:http';
import { connect } from 'node:net';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { REFS, SLOW, fp32, maxDiff, modelsDir, safetensors, start, waitReady } from './helper.mjs';

// Every request of a test goes through one keep-alive socket, so the
// daemon sees exactly one connection (fetch's pool may open more).
function client(port) {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const call = (method, path, body) => new Promise((res, rej) => {
    const data = body === undefined ? null : Buffer.from(JSON.stringify(body));
    const req = request({ host: '127.0.0.1', port, method, path, agent,
      headers: data ? { 'Content-Type': 'application/json', 'Content-Length': data.length } : {} }, (r) => {
      const parts = [];
      r.on('data', (c) => parts.push(c));
      r.on('end', () => {
        const text = Buffer.concat(parts).toString();
        let json = null;
        try { json = JSON.parse(text); } catch { json = text; }
        res({ status: r.statusCode, json, text });
      });
    });
    req.on('error', rej);
    req.end(data);
  });
  return { call, close: () => agent.destroy() };
}

// ready through the client's own connection, the daemon's only one
const ready = (d, c) => waitReady(d, async () => (await c.call('GET', '/v2/health/ready').catch(() => null))?.status === 200);

async function metric(c, re) {
  const m = re.exec((await c.call('GET', '/metrics')).text);
  assert.ok(m, `${re} in /metrics`);
  return Number(m[1]);
}
const inlineCount = (c, model) =>
  metric(c, new RegExp(`^attnd_inference_inline_count_total\\{model="${model}",version="1"\\} (\\d+)$`, 'm'));
const openConns = (c) => metric(c, /^attnd_open_connections (\d+)$/m);

// until: poll get() every 5 ms until it gives want, failing after ms.
async function until(get, want, what, ms = 5000) {
  const end = Date.now() + ms * SLOW;
  while (await get() !== want) {
    assert.ok(Date.now() < end, what);
    await new Promise((res) => setTimeout(res, 5));
  }
}
// opened: a socket connected (a client that never sends a byte).
const opened = (sock) => new Promise((res, rej) => { sock.once('connect', res); sock.once('error', rej); });
// short decimals in [-0.5, 0.5): bodies stay small
const rnd = (i) => (((i * 7919) % 1000) - 500) / 1000;

const sdpaInputs = (e) => [fp32('q', e.q_shape, e.q), fp32('k', e.k_shape, e.k), fp32('v', e.v_shape, e.v)];

// The tiny model's PyTorch clients and both sdpa references, each checked.
async function checkAll(c) {
  for (const [i, cl] of REFS.clients.entries()) {
    const r = await c.call('POST', '/v2/models/tiny/infer', { id: `c${i}`, inputs: [fp32('x', cl.shape, cl.x)] });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.id, `c${i}`);
    assert.ok(maxDiff(r.json.outputs[0].data, cl.y) < 1e-5, `client ${i}`);
  }
  for (const [e, causal] of [[REFS.sdpa, false], [REFS.sdpa_causal, true]]) {
    const r = await c.call('POST', '/v2/models/sdpa/infer', {
      inputs: sdpaInputs(e), parameters: { causal }, outputs: [{ name: 'output' }, { name: 'attention' }],
    });
    assert.equal(r.status, 200, r.text);
    assert.ok(maxDiff(r.json.outputs[0].data, e.output) < 1e-5);
    assert.ok(maxDiff(r.json.outputs[1].data, e.attention) < 1e-5);
  }
  return REFS.clients.length;
}

test('a lone client\'s small requests run inline, with the PyTorch answers and failures as usual', async (t) => {
  const d = await start({ t, ready: false });
  const c = client(d.port);
  try {
    await ready(d, c);
    assert.equal(await openConns(c), 1);
    const n = await checkAll(c);
    assert.equal(await inlineCount(c, 'tiny'), n);
    assert.equal(await inlineCount(c, 'sdpa'), 2);
    // a bad input and a non-finite result answer 400 on this path too
    let r = await c.call('POST', '/v2/models/tiny/infer', { inputs: [fp32('x', [1, 2, 7], new Array(14).fill(0))] });
    assert.equal(r.status, 400);
    assert.match(r.json.error, /inputs\[x\]\.shape/);
    // computed inline but failed on its outputs: counted as neither an
    // inference nor an execution (as on the pool), though it ran inline
    const sdpaCount = (name) => metric(c, new RegExp(`^${name}\\{model="sdpa",version="1"\\} (\\d+)$`, 'm'));
    const counted = [await sdpaCount('attnd_inference_count_total'), await sdpaCount('attnd_inference_exec_count_total')];
    r = await c.call('POST', '/v2/models/sdpa/infer', {
      inputs: [fp32('q', [1, 2], [3e38, 3e38]), fp32('k', [1, 2], [3e38, 3e38]), fp32('v', [1, 2], [1, 1])],
    });
    assert.equal(r.status, 400);
    assert.match(r.json.error, /not finite/);
    assert.equal(await inlineCount(c, 'sdpa'), 3);
    assert.deepEqual([await sdpaCount('attnd_inference_count_total'), await sdpaCount('attnd_inference_exec_count_total')], counted);
    // the log line of an inline request is written like any other
    const log = await d.logged(/POST \/v2\/models\/tiny\/infer 200 id=c11/);
    assert.match(log, /POST \/v2\/models\/tiny\/infer 200 id=c11 model=tiny batch=1/);
    c.close();
    assert.equal((await d.stop()).code, 0);
  } catch (e) { c.close(); await d.stop('SIGKILL'); throw e; }
});

test('with a second connection open, or --inline-conns 0, requests go to the pool', async (t) => {
  // the open connection counts however long it stays idle (inline-idle-ms 0)
  for (const args of [['--inline-idle-ms', '0'], ['--inline-conns', '0']]) {
    const d = await start({ t, ready: false, args });
    const c = client(d.port);
    const idle = connect(d.port, '127.0.0.1');
    try {
      await opened(idle);
      await ready(d, c);
      assert.equal(await openConns(c), 2);
      if (args[0] === '--inline-conns') { // with 0, one connection is not enough either
        idle.destroy();
        await until(() => openConns(c), 1, 'the idle connection did not close');
      }
      await checkAll(c);
      assert.equal(await inlineCount(c, 'tiny'), 0, args.join(' '));
      assert.equal(await inlineCount(c, 'sdpa'), 0);
      idle.destroy();
      c.close();
      assert.equal((await d.stop()).code, 0);
    } catch (e) { idle.destroy(); c.close(); await d.stop('SIGKILL'); throw e; }
  }
});

test('a keep-alive connection idle for --inline-idle-ms does not count against --inline-conns', async (t) => {
  // a scraper's keep-alive (one request answered, then idle) and a socket
  // that never sent a byte: open but idle longer than 300 ms, neither
  // holds the lone client's requests on the pool; with 0 both count
  for (const idleMs of ['300', '0']) {
    const d = await start({ t, ready: false, args: ['--inline-idle-ms', idleMs] });
    const c = client(d.port);
    const scraper = client(d.port);
    const silent = connect(d.port, '127.0.0.1');
    try {
      await opened(silent);
      await ready(d, c);
      assert.equal((await scraper.call('GET', '/metrics')).status, 200);
      assert.equal(await openConns(c), 3);
      await new Promise((res) => setTimeout(res, 700));
      const n = await checkAll(c);
      assert.equal(await openConns(c), 3, 'the idle connections are still open');
      assert.equal(await inlineCount(c, 'tiny'), idleMs === '0' ? 0 : n, `--inline-idle-ms ${idleMs}`);
      silent.destroy();
      scraper.close();
      c.close();
      assert.equal((await d.stop()).code, 0);
    } catch (e) { silent.destroy(); scraper.close(); c.close(); await d.stop('SIGKILL'); throw e; }
  }
});

test('an idle connection counts again once it is answered, wherever it stands among the idle ones', async (t) => {
  // the scraper connects first and the silent socket after it; both idle
  // past the window, then the scraper asks again: it counts (the lone
  // client's request goes to the pool) until it has idled once more
  const d = await start({ t, ready: false, args: ['--inline-idle-ms', '1500'] });
  const c = client(d.port);
  const scraper = client(d.port);
  let silent = null;
  const one = async () => {
    const cl = REFS.clients[0];
    const r = await c.call('POST', '/v2/models/tiny/infer', { inputs: [fp32('x', cl.shape, cl.x)] });
    assert.equal(r.status, 200, r.text);
    assert.ok(maxDiff(r.json.outputs[0].data, cl.y) < 1e-5);
  };
  const idle = () => new Promise((res) => setTimeout(res, 1700));
  try {
    await waitReady(d, async () => (await scraper.call('GET', '/v2/health/ready').catch(() => null))?.status === 200);
    silent = connect(d.port, '127.0.0.1');
    await opened(silent);
    await ready(d, c);
    assert.equal(await openConns(c), 3);
    await idle();
    await one();
    assert.equal(await inlineCount(c, 'tiny'), 1, 'both idle: inline');
    await idle();
    assert.equal((await scraper.call('GET', '/metrics')).status, 200);
    await one();
    assert.equal(await inlineCount(c, 'tiny'), 1, 'the scraper just answered: on the pool');
    await idle();
    await one();
    assert.equal(await inlineCount(c, 'tiny'), 2, 'idle again: inline');
    silent.destroy();
    scraper.close();
    c.close();
    assert.equal((await d.stop()).code, 0);
  } catch (e) { silent?.destroy(); scraper.close(); c.close(); await d.stop('SIGKILL'); throw e; }
});

test('a lone request too large for one job, or with large outputs, queues for the pool and is answered', async (t) => {
  // sdpa with T = S = 2000, d_k = 1: a 24 kB body, 16 MFLOP (over one
  // job's 8). q = 0 gives every key the same weight: output = mean of v.
  const T = 2000;
  const v = Array.from({ length: T }, (_, i) => ((i * 37) % 101) / 100);
  const k = Array.from({ length: T }, (_, i) => ((i * 13) % 7) - 3);
  const mean = v.reduce((a, b) => a + b, 0) / T;
  const d = await start({ t, ready: false });
  const c = client(d.port);
  try {
    await ready(d, c);
    for (let round = 0; round < 3; round++) {
      const r = await c.call('POST', '/v2/models/sdpa/infer', {
        inputs: [fp32('q', [T, 1], new Array(T).fill(0)), fp32('k', [T, 1], k), fp32('v', [T, 1], v)],
      });
      assert.equal(r.status, 200, r.text);
      assert.deepEqual(r.json.outputs[0].shape, [T, 1]);
      assert.ok(maxDiff(r.json.outputs[0].data, new Array(T).fill(mean)) < 1e-5);
    }
    // a small plan (0.3 MFLOP) whose outputs are over 64 KiB (attention
    // [256, 256], 256 KiB): encoding them would hold the loop, so it queues
    const S = 256;
    const r2 = await c.call('POST', '/v2/models/sdpa/infer', {
      inputs: [fp32('q', [S, 1], new Array(S).fill(0)), fp32('k', [S, 1], k.slice(0, S)), fp32('v', [S, 1], v.slice(0, S))],
      outputs: [{ name: 'attention' }],
    });
    assert.equal(r2.status, 200, r2.text);
    assert.deepEqual(r2.json.outputs[0].shape, [S, S]);
    assert.ok(maxDiff(r2.json.outputs[0].data, new Array(S * S).fill(1 / S)) < 1e-6);
    assert.equal(await inlineCount(c, 'sdpa'), 0);
    // and the next small request is inline again
    const e = REFS.sdpa;
    const r = await c.call('POST', '/v2/models/sdpa/infer', { inputs: sdpaInputs(e) });
    assert.equal(r.status, 200);
    assert.ok(maxDiff(r.json.outputs[0].data, e.output) < 1e-5);
    assert.equal(await inlineCount(c, 'sdpa'), 1);
    c.close();
    assert.equal((await d.stop()).code, 0);
  } catch (e) { c.close(); await d.stop('SIGKILL'); throw e; }
});

// A step of a sequence, as tritonclient.http sends it.
const step = (id, x, t, start, end) => ({
  inputs: [fp32('x', [1, t, x.length / t], x)],
  parameters: { sequence_id: id, sequence_start: start, sequence_end: end },
});

test('a lone client\'s sequence steps run inline too, each row PyTorch\'s causal one; with a second connection they go to the pool', async (t) => {
  // REFS.causal: nn.MultiheadAttention(8, 2) over 4 tokens with a causal
  // mask; stepping through them one at a time must give its rows. Two
  // sequences take turns: each step's other sequence is expected, and
  // being the client's own it must not hold the step back.
  const ref = REFS.causal, D = ref.shape[2], T = ref.shape[1];
  for (const second of [false, true]) {
    // the second connection counts however long it stays idle
    const d = await start({ t, ready: false, args: second ? ['--inline-idle-ms', '0'] : [] });
    const c = client(d.port);
    const idle = second ? connect(d.port, '127.0.0.1') : null;
    try {
      if (idle) await opened(idle);
      await ready(d, c);
      assert.equal(await openConns(c), second ? 2 : 1);
      for (let i = 0; i < T; i++) {
        for (const id of ['lone', 'lone2']) {
          const r = await c.call('POST', '/v2/models/tiny/infer',
            step(id, ref.x.slice(i * D, (i + 1) * D), 1, i === 0, i === T - 1));
          assert.equal(r.status, 200, r.text);
          assert.equal(r.json.parameters.sequence_length, i + 1);
          const diff = maxDiff(r.json.outputs[0].data, ref.y.slice(i * D, (i + 1) * D));
          assert.ok(diff < 1e-5, `${id} step ${i}: max |diff| ${diff}`);
        }
      }
      assert.equal(await inlineCount(c, 'tiny'), second ? 0 : 2 * T);
      if (idle) idle.destroy();
      c.close();
      assert.equal((await d.stop()).code, 0);
    } catch (e) { if (idle) idle.destroy(); c.close(); await d.stop('SIGKILL'); throw e; }
  }
});

test('a page parked in a long poll on a map does not take a lone client\'s steps off the loop', async (t) => {
  const ref = REFS.causal, D = ref.shape[2], T = ref.shape[1];
  const d = await start({ t, ready: false });
  const c = client(d.port);
  let waiter = null;
  try {
    await ready(d, c);
    // a map that does not change (sdpa, 3 query rows), and a page
    // following it from its own connection: parked until the daemon stops
    const e = REFS.sdpa;
    const kept = await c.call('POST', '/v2/models/sdpa/infer', { inputs: sdpaInputs(e), parameters: { retain: true } });
    assert.equal(kept.status, 200, kept.text);
    const rows = kept.json.outputs[0].shape.at(-2);
    waiter = fetch(`${d.url}/v2/maps/${kept.json.parameters.map_id}?wait=${rows}&timeout_ms=${60000 * SLOW}`)
      .then(async (r) => ({ status: r.status, json: await r.json() }), (err) => ({ err }));
    await until(() => metric(c, /^attnd_maps_waiters (\d+)$/m), 1, 'the long poll did not park');
    assert.equal(await openConns(c), 2);
    // a retained sequence stepped token by token: every step inline, its
    // rows PyTorch's, and the map grown to every token
    let id = null;
    for (let i = 0; i < T; i++) {
      const body = step('watched', ref.x.slice(i * D, (i + 1) * D), 1, i === 0, false);
      if (i === 0) body.parameters.retain = true;
      const r = await c.call('POST', '/v2/models/tiny/infer', body);
      assert.equal(r.status, 200, r.text);
      id = id || r.json.parameters.map_id;
      assert.equal(r.json.parameters.map_id, id);
      const diff = maxDiff(r.json.outputs[0].data, ref.y.slice(i * D, (i + 1) * D));
      assert.ok(diff < 1e-5, `step ${i}: max |diff| ${diff}`);
    }
    assert.equal(await inlineCount(c, 'tiny'), T);
    assert.equal(await metric(c, /^attnd_maps_waiters (\d+)$/m), 1);
    const m = await c.call('GET', `/v2/maps/${id}`);
    assert.equal(m.status, 200, m.text);
    assert.deepEqual(m.json.shape, [1, REFS.n_heads, T, T]);
    c.close();
    assert.equal((await d.stop()).code, 0);
    assert.equal((await waiter).status, 200); // answered as the daemon stopped
  } catch (err) { c.close(); await d.stop('SIGKILL'); await waiter; throw err; }
});

test('a lone client\'s step whose retained map is over 1 MiB runs on the pool, right', async (t) => {
  // tiny (2 heads): a map of 371 x 371 rows is 1.1 MB, copied whole to
  // grow it every step: too long for the loop. The 370-token start goes
  // to the pool for its outputs (its attention rows), the next step for
  // the map; both give the rows of one stateless causal request.
  const D = REFS.d_model, T = 371;
  const x = Array.from({ length: T * D }, (_, i) => rnd(i));
  const d = await start({ t, ready: false });
  const c = client(d.port);
  try {
    await ready(d, c);
    const full = await c.call('POST', '/v2/models/tiny/infer', { inputs: [fp32('x', [1, T, D], x)], parameters: { causal: true } });
    assert.equal(full.status, 200, full.text);
    const base = await inlineCount(c, 'tiny'); // the stateless request's
    const first = step('big', x.slice(0, (T - 1) * D), T - 1, true, false);
    first.parameters.retain = true;
    first.parameters.causal = true; // tiny is not causal by default
    let r = await c.call('POST', '/v2/models/tiny/infer', first);
    assert.equal(r.status, 200, r.text);
    assert.ok(r.json.parameters.map_id, r.text);
    const d0 = maxDiff(r.json.outputs[0].data, full.json.outputs[0].data.slice(0, (T - 1) * D));
    assert.ok(d0 < 1e-5, `the start: max |diff| ${d0}`);
    r = await c.call('POST', '/v2/models/tiny/infer', step('big', x.slice((T - 1) * D), 1, false, true));
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.parameters.sequence_length, T);
    assert.ok(maxDiff(r.json.outputs[0].data, full.json.outputs[0].data.slice((T - 1) * D)) < 1e-5);
    assert.equal(await inlineCount(c, 'tiny'), base);
    c.close();
    assert.equal((await d.stop()).code, 0);
  } catch (e) { c.close(); await d.stop('SIGKILL'); throw e; }
});

// A model of eight heads of one dimension ("h1"): its attention is all
// softmax, slow for its flops. 440 tokens are 7.7 MFLOP, one job's worth,
// and take 1.7-4 ms here: past --deadline-ms 1 when they are done.
const H1_T = 440, H1_D = 8;
function h1Dir() {
  const D = H1_D, dir = modelsDir();
  const w = () => [[D, D], Array.from({ length: D * D }, (_, i) => (((i * 37) % 17) - 8) / 16)];
  mkdirSync(join(dir, 'h1'));
  writeFileSync(join(dir, 'h1', 'model.safetensors'), safetensors({ W_q: w(), W_k: w(), W_v: w(), W_o: w() }));
  writeFileSync(join(dir, 'h1', 'config.json'), JSON.stringify({ n_heads: D, causal: true }));
  return dir;
}
const h1X = (T) => Array.from({ length: T * H1_D }, (_, i) => rnd(i));
// a small request under --deadline-ms 1: a busy machine can hold even
// a 3-token one past 1 ms now and then, so a 504 is tried again
async function small(c, body) {
  let r;
  for (let i = 0; i < 20; i++) {
    r = await c.call('POST', '/v2/models/h1/infer', body);
    if (r.status !== 504) break;
  }
  assert.equal(r.status, 200, r.text);
  return r;
}

// lateCalls: five calls of body(i) on h1 under --deadline-ms 1, each
// answered 200 or 504 (late(r) checks a 504 further); one at least 504.
async function lateCalls(c, body, late = async () => {}) {
  const statuses = [];
  for (let i = 0; i < 5; i++) {
    const r = await c.call('POST', '/v2/models/h1/infer', body(i));
    statuses.push(r.status);
    if (r.status === 504) {
      assert.match(r.json.error, /deadline: no answer within 1 ms \(deadline-ms\)/);
      await late(r);
    } else {
      assert.equal(r.status, 200, r.text);
    }
  }
  assert.ok(statuses.includes(504), `statuses ${statuses}`);
  return statuses;
}

test('an inline request that outlasts its deadline answers 504, as on the pool', async (t) => {
  // a 440-token request on h1: one job's worth, past --deadline-ms 1 when
  // it is done (sdpa T = 700, d_k = 4, took under 1 ms on a faster machine)
  const T = H1_T, D = H1_D, dir = h1Dir(), x = h1X(T);
  const d = await start({ t, dir, ready: false, args: ['--deadline-ms', '1'] });
  const c = client(d.port);
  try {
    await ready(d, c);
    await lateCalls(c, () => ({ inputs: [fp32('x', [1, T, D], x)] }));
    assert.equal(await inlineCount(c, 'h1'), 5);
    // the server goes on serving, within the deadline
    const e = REFS.sdpa;
    const r = await c.call('POST', '/v2/models/sdpa/infer', { inputs: sdpaInputs(e) });
    assert.ok(r.status === 200 || r.status === 504, r.text);
    c.close();
    assert.equal((await d.stop()).code, 0);
  } catch (e) { c.close(); await d.stop('SIGKILL'); throw e; }
});

test('a deadline counts from the body whole, inline as on the pool: a body slow to come is not 504 for it', async (t) => {
  // inline, the deadline was counted from the request's head: a body that
  // took longer than --deadline-ms to arrive answered 504, on the pool 200
  const e = REFS.sdpa, body = Buffer.from(JSON.stringify({ inputs: sdpaInputs(e) }));
  for (const args of [[], ['--inline-conns', '0']]) {
    // the start's ready probe's keep-alive is idle past --inline-idle-ms
    // once the request comes: it is the lone connection
    const d = await start({ t, args: ['--deadline-ms', '300', '--inline-idle-ms', '50', ...args] });
    await new Promise((r) => setTimeout(r, 200));
    const sock = connect(d.port, '127.0.0.1');
    t.after(() => sock.destroy());
    let text = '';
    sock.on('data', (b) => { text += b; });
    sock.write(`POST /v2/models/sdpa/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`);
    sock.write(body.subarray(0, 10));
    await new Promise((r) => setTimeout(r, 600));
    sock.write(body.subarray(10));
    await new Promise((r) => sock.on('close', r));
    assert.match(text, /^HTTP\/1\.1 200/, `${args.join(' ') || 'inline'}: ${text.slice(0, 300)}`);
    const m = /^attnd_inference_inline_count_total\{model="sdpa",version="1"\} (\d+)$/m.exec(await (await fetch(`${d.url}/metrics`)).text());
    assert.equal(Number(m?.[1] ?? 0), args.length ? 0 : 1, 'inline, or on the pool');
    assert.equal((await d.stop()).code, 0);
  }
});

test('an inline sequence step that outlasts its deadline answers 504, and the sequence did not start', async (t) => {
  // a 440-token prompt on h1 runs on the loop
  const T = H1_T, D = H1_D, dir = h1Dir(), x = h1X(T);
  const d = await start({ t, dir, ready: false, args: ['--deadline-ms', '1'] });
  const c = client(d.port);
  try {
    await ready(d, c);
    // start and end in one step: an answered one leaves nothing expected
    const statuses = await lateCalls(c, (i) => step(`late${i}`, x, T, true, true), async () => {
      // its start was not kept: the sequence does not exist (listed, not
      // stepped: under a sanitizer a step may pass 1 ms itself)
      const list = await c.call('GET', '/v2/sequences');
      assert.equal(list.status, 200, list.text);
      assert.equal(list.json.count, 0, list.text);
    });
    // only the starts answered 200 began a sequence
    assert.equal(await metric(c, /^attnd_sequences_started_total\{model="h1",version="1"\} (\d+)$/m),
      statuses.filter((st) => st === 200).length);
    // each step answered 200 ran inline; at least one more ran inline and
    // was answered 504 after it (under a sanitizer the decode alone may
    // pass 1 ms, and such a step is answered before its batch runs)
    const n = await inlineCount(c, 'h1'), ok = statuses.filter((st) => st === 200).length;
    assert.ok(n <= 5 && n >= ok + (SLOW > 1 ? 0 : 1), `${n} of 5 ran inline, ${ok} answered 200`);
    c.close();
    assert.equal((await d.stop()).code, 0);
  } catch (e) { c.close(); await d.stop('SIGKILL'); throw e; }
});

test('a retained step answered 504 after it ran takes its rows out of the map', async (t) => {
  // a 1-token start keeps a map; a 440-token step on h1 (its map is over
  // 1 MiB: the pool's) outlasts --deadline-ms 1 and answers 504 while it
  // runs, and its encoding would grow the map. Once it has ended the map
  // has its start's row alone, and the next step grows it from there:
  // the map of one stateless causal request over the tokens kept.
  const T = H1_T, D = H1_D, dir = h1Dir(), x = h1X(T + 2);
  const d = await start({ t, dir, ready: false, args: ['--deadline-ms', '1'] });
  const c = client(d.port);
  const count = () => metric(c, /^attnd_inference_count_total\{model="h1",version="1"\} (\d+)$/m);
  const shape = async (id) => (await c.call('GET', `/v2/maps/${id}`)).json.shape;
  const poolIdle = () => until(() => metric(c, /^attnd_pool_jobs (\d+)$/m), 0, 'the late step never ended', 10000);
  const maps = async () => (await c.call('GET', '/v2/maps')).json.count;
  try {
    await ready(d, c);
    // a retained 440-token start late the same way leaves no map behind
    let gone = 0;
    for (let i = 0; i < 8 && gone < 1; i++) {
      const before = await maps(), n0 = await count(), body = step(`gone${i}`, x.slice(0, T * D), T, true, false);
      body.parameters.retain = true;
      const r = await c.call('POST', '/v2/models/h1/infer', body);
      if (r.status === 200) continue;
      assert.equal(r.status, 504, r.text);
      await poolIdle();
      if (await count() === n0) continue; // late in its decode: never ran
      gone++;
      assert.equal(await maps(), before, 'the late start left a map');
    }
    let cut = 0;
    for (let i = 0; i < 8 && cut < 2; i++) {
      const id = `cut${i}`, first = step(id, x.slice(0, D), 1, true, false);
      first.parameters.retain = true;
      const began = await c.call('POST', '/v2/models/h1/infer', first);
      if (began.status !== 200) continue; // under a sanitizer even this may be late
      const map = began.json.parameters.map_id;
      assert.deepEqual(await shape(map), [1, D, 1, 1]);
      const before = await count();
      const big = await c.call('POST', '/v2/models/h1/infer', step(id, x.slice(D, (T + 1) * D), T, false, false));
      if (big.status === 200) continue; // a machine fast enough for 1 ms
      assert.equal(big.status, 504, big.text);
      await poolIdle();
      if (await count() === before) continue; // late in its decode: never ran
      cut++;
      assert.deepEqual(await shape(map), [1, D, 1, 1], 'the late step\'s rows stayed in the map');
      // the sequence goes on from its first token: row 1 of a stateless
      // causal request over tokens 0 and 441
      const x2 = [...x.slice(0, D), ...x.slice((T + 1) * D, (T + 2) * D)];
      const next = await c.call('POST', '/v2/models/h1/infer', step(id, x2.slice(D), 1, false, true));
      if (next.status !== 200) continue;
      assert.deepEqual(await shape(map), [1, D, 2, 2]);
      const ref = await small(c, { inputs: [fp32('x', [1, 2, D], x2)], outputs: [{ name: 'attention' }] });
      assert.deepEqual(ref.json.outputs[0].shape, [1, D, 2, 2]);
      for (let h = 0; h < D; h++) {
        const got = await c.call('GET', `/v2/maps/${map}/attention?b=0&h=${h}`);
        assert.equal(got.status, 200, got.text);
        assert.ok(maxDiff(got.json.data, ref.json.outputs[0].data.slice(h * 4, h * 4 + 4)) < 1e-6, `head ${h}`);
      }
    }
    // under a sanitizer the start or the step's decode alone may pass
    // 1 ms every time; then nothing ran late, and nothing is required
    assert.ok((cut > 0 && gone > 0) || SLOW > 1, `late ones that ran: ${gone} starts, ${cut} steps`);
    c.close();
    assert.equal((await d.stop()).code, 0);
  } catch (e) { c.close(); await d.stop('SIGKILL'); throw e; }
});

test('a step at a sequence_position answered 504 after it ran leaves the sequence as it was', async (t) => {
  // a retained 2-token sequence on h1; a 440-token step at position 1
  // (it replaces token 1) outlasts --deadline-ms 1: its pass overwrote
  // token 1's keys and values, which must be put back (the listing says
  // 2 tokens; the next step's row is a stateless request's over tokens
  // 0, 1 and the new one). The map keeps its 2 rows as they were, even
  // when the step's encoding had grown it over the replaced row (found
  // late only when its work was done): a grown map is put in place only
  // once its step is answered.
  const T = H1_T, D = H1_D, dir = h1Dir(), x = h1X(T + 3);
  const d = await start({ t, dir, ready: false, args: ['--deadline-ms', '1'] });
  const c = client(d.port);
  const count = () => metric(c, /^attnd_inference_count_total\{model="h1",version="1"\} (\d+)$/m);
  const poolIdle = () => until(() => metric(c, /^attnd_pool_jobs (\d+)$/m), 0, 'the late step never ended', 10000);
  const at = (id, xs, t, pos) => {
    const b = step(id, xs, t, pos === 0, false);
    b.parameters.sequence_position = pos;
    if (pos === 0) b.parameters.retain = true;
    return b;
  };
  try {
    await ready(d, c);
    let late = 0;
    for (let i = 0; i < 8 && late < 2; i++) {
      const id = `rw${i}`;
      const s0 = await c.call('POST', '/v2/models/h1/infer', at(id, x.slice(0, D), 1, 0));
      const s1 = s0.status === 200 && await c.call('POST', '/v2/models/h1/infer', at(id, x.slice(D, 2 * D), 1, 1));
      if (!s1 || s1.status !== 200) continue; // under a sanitizer even these may be late
      const map = s0.json.parameters.map_id;
      const rows = async () => {
        const all = [];
        for (let h = 0; h < D; h++) all.push((await c.call('GET', `/v2/maps/${map}/attention?b=0&h=${h}`)).json.data);
        return all;
      };
      const had = await rows();
      const before = await count();
      const big = await c.call('POST', '/v2/models/h1/infer', at(id, x.slice(2 * D, (T + 2) * D), T, 1));
      if (big.status === 200) continue; // a machine fast enough for 1 ms
      assert.equal(big.status, 504, big.text);
      await poolIdle();
      if (await count() === before) continue; // late in its decode: never ran
      late++;
      const listed = (await c.call('GET', '/v2/sequences')).json.sequences.find((q) => q.id === id);
      assert.equal(listed.length, 2, 'the late step changed the sequence\'s length');
      assert.equal(listed.map_id, map, 'the late step ended the map');
      const m = await c.call('GET', `/v2/maps/${map}`);
      assert.deepEqual(m.json.shape, [1, D, 2, 2], 'the late step changed the map');
      assert.deepEqual(await rows(), had, 'the late step changed the map\'s rows');
      const x3 = [...x.slice(0, 2 * D), ...x.slice((T + 2) * D, (T + 3) * D)];
      const next = await c.call('POST', '/v2/models/h1/infer', at(id, x3.slice(2 * D), 1, 2));
      if (next.status !== 200) continue;
      assert.equal(next.json.parameters.sequence_length, 3);
      const ref = await small(c, { inputs: [fp32('x', [1, 3, D], x3)] });
      assert.ok(maxDiff(next.json.outputs[0].data, ref.json.outputs[0].data.slice(2 * D)) < 1e-5,
        'the next step saw keys and values the late step wrote');
    }
    assert.ok(late > 0 || SLOW > 1, 'no late step ran');
    c.close();
    assert.equal((await d.stop()).code, 0);
  } catch (e) { c.close(); await d.stop('SIGKILL'); throw e; }
});
