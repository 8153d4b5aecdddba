// batching.test.mjs - many clients at once, each gets its own answer, and
// the scheduler really ran them in shared batches.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, request as httpRequest } from 'node:http';
import { availableParallelism } from 'node:os';
import { dirname, join } from 'node:path';
import { ATTND, REFS, SLOW, binaryRequest, f32bytes, fp32, infer, maxDiff, modelsDir, parseBinary, requestsUsed, start } from './helper.mjs';
import { D, gqaModels, tokens } from './seq_helper.mjs';

const SHIM = join(dirname(ATTND), 'tests', 'server', 'failalloc.so');

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
    // Triton's inference_stats count successful requests, compute_infer
    // too: each request adds its batch's time (perf_analyzer divides by
    // the successes); it counted batches, once each
    const ci = s.inference_stats.compute_infer;
    assert.equal(ci.count, s.inference_stats.success.count, JSON.stringify(s.inference_stats));
    assert.equal(ci.count, clients.length);
    const once = s.batch_stats.reduce((n, b) => n + b.compute_infer.ns, 0);
    const each = s.batch_stats.reduce((n, b) => n + b.batch_size * b.compute_infer.ns, 0);
    assert.ok(ci.ns > once && ci.ns <= each, `${ci.ns} not in (${once}, ${each}]`);
    for (const b of s.batch_stats) // Triton's three durations, input and output not per batch
      assert.deepEqual([b.compute_input, b.compute_output], [{ count: 0, ns: 0 }, { count: 0, ns: 0 }], JSON.stringify(b));
    assert.ok(s.execution_count < clients.length, `${s.execution_count} batches for ${clients.length} requests`);
    const m = await (await fetch(`${d.url}/metrics`)).text();
    const big = /attnd_inference_batch_size_bucket\{model="tiny",version="1",le="1"\} (\d+)/.exec(m);
    assert.ok(Number(big[1]) < clients.length, 'some batches hold more than one sequence');
    assert.equal((await d.stop()).code, 0);
  } catch (e) { await d.stop('SIGKILL'); throw e; }
});

// One request's batch may hold any number of sequences: a batch past 64
// was reported as batch_size 64, so that batch_stats no longer added up
// to inference_count.
test('batch_stats give each batch its own size, past 64 too', async (t) => {
  const d = await start({ t });
  const x = (B) => fp32('x', [B, 2, 8], Array.from({ length: B * 16 }, (_, i) => (i % 7) / 7));
  for (const B of [100, 65, 100, 3])
    assert.equal((await infer(d, 'tiny', { inputs: [x(B)] })).status, 200, `B=${B}`);
  const s = await statsOf(d, 'tiny');
  assert.deepEqual(s.batch_stats.map((b) => [b.batch_size, b.compute_infer.count]), [[3, 1], [65, 1], [100, 2]]);
  assert.equal(s.batch_stats.reduce((n, b) => n + b.batch_size * b.compute_infer.count, 0), s.inference_count);
  assert.equal((await d.stop()).code, 0);
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

// A d_model 1024 layer whose answer is known without computing it: W_q =
// W_k = 0 (every key weighs 1/T), W_v = g I, W_o = I / g, so every row of y
// is the mean of x's rows (and V = g x overflows float32 first when g > 1).
function meanLayer(dir, dm, g = 1, name = 'mean') {
  const names = ['W_q', 'W_k', 'W_v', 'W_o'];
  const n = 4 * dm * dm;
  const header = {};
  names.forEach((k, i) => { header[k] = { dtype: 'F32', shape: [dm, dm], data_offsets: [i * n, (i + 1) * n] }; });
  let h = JSON.stringify(header);
  h += ' '.repeat((8 - (h.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(h.length));
  const data = Buffer.alloc(4 * n);
  for (let i = 0; i < dm; i++) {
    data.writeFloatLE(g, 2 * n + 4 * (i * dm + i));
    data.writeFloatLE(1 / g, 3 * n + 4 * (i * dm + i));
  }
  mkdirSync(join(dir, name));
  writeFileSync(join(dir, name, 'model.safetensors'), Buffer.concat([len, Buffer.from(h), data]));
  writeFileSync(join(dir, name, 'config.json'), JSON.stringify({ n_heads: 8 }));
}

test('no batch delay: a lone request runs at once, and one too large for a single pool job still answers', async (t) => {
  const dir = modelsDir();
  meanLayer(dir, 1024);
  const d = await start({ t, dir, args: ['--instances', '1'] });
  try {
    // small: tiny's reference answer, its B sequences as one batch
    const c = REFS.self;
    const r = await infer(d, 'tiny', { inputs: [fp32('x', c.shape, c.x)] });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.ok(maxDiff(r.json.outputs[0].data, c.y) < 1e-5);
    const s = await statsOf(d, 'tiny');
    assert.equal(s.execution_count, 1);
    assert.equal(s.batch_stats[0].batch_size, c.shape[0]);
    // a 20 kB body whose layer is ~17 MFLOP: decoded alone, then queued
    // and run over the pool; then a second one right behind it
    const x = Array.from({ length: 2 * 1024 }, (_, i) => ((i * 37) % 101) / 101 - 0.5);
    const want = Array.from({ length: 1024 }, (_, j) => (x[j] + x[1024 + j]) / 2);
    const rs = await Promise.all([0, 1].map(() => infer(d, 'mean', { inputs: [fp32('x', [1, 2, 1024], x)] })));
    for (const m of rs) {
      assert.equal(m.status, 200, JSON.stringify(m.json));
      assert.ok(maxDiff(m.json.outputs[0].data, [...want, ...want]) < 1e-5);
    }
    assert.equal((await statsOf(d, 'mean')).inference_count, 2);
    // every pool job of them came back, and was counted back once
    const metrics = await (await fetch(`${d.url}/metrics`)).text();
    assert.match(metrics, /^attnd_pool_jobs 0$/m);
    assert.equal((await d.stop()).code, 0);
  } catch (e) { await d.stop('SIGKILL'); throw e; } finally { rmSync(dir, { recursive: true, force: true }); }
});

// 48 requests at once, each checked against its reference; the model's stats after.
async function burst(d, model, c, tag) {
  const rs = await Promise.all(Array.from({ length: 48 }, (_, i) =>
    infer(d, model, { id: `${tag}${i}`, inputs: [fp32('x', c.shape, c.x)] })));
  rs.forEach((r, i) => {
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.equal(r.json.id, `${tag}${i}`);
    assert.ok(maxDiff(r.json.outputs[0].data, c.y) < 1e-5, `request ${i}`);
  });
  return statsOf(d, model);
}

test('--solo-max-weights: a model that small runs each request as one pool job while its instance is busy; with the limit a byte under its weights they queue for batches', async (t) => {
  const c = REFS.self;
  const d = await start({ t, args: ['--instances', '1'] });
  let bytes;
  try {
    const loaded = /model 'tiny' loaded \((\d+) weight bytes\)/;
    bytes = Number(loaded.exec(await d.logged(loaded))[1]);
    assert.ok(bytes > 0 && bytes <= 256 * 1024, `tiny: ${bytes} weight bytes`);
    let s;
    for (let round = 0; round < 3; round++) s = await burst(d, 'tiny', c, `s${round}-`);
    // every request its own batch: none waited in the queue for company
    assert.equal(s.inference_count, 144 * c.shape[0]); // sequences
    assert.equal(s.execution_count, 144);
    assert.deepEqual(s.batch_stats.map((b) => b.batch_size), [c.shape[0]]);
    assert.match(await (await fetch(`${d.url}/metrics`)).text(), /^attnd_pool_jobs 0$/m);
    assert.equal((await d.stop()).code, 0);
  } catch (e) { await d.stop('SIGKILL'); throw e; }
  // the same bursts with the limit one byte under tiny's weights: requests
  // that find the instance busy queue, and some leave together
  const b = await start({ t, args: ['--instances', '1', '--solo-max-weights', String(bytes - 1)] });
  try {
    let s;
    for (let round = 0; round < 10; round++) {
      s = await burst(b, 'tiny', c, `b${round}-`);
      if (s.execution_count * c.shape[0] < s.inference_count) break;
    }
    assert.ok(s.execution_count * c.shape[0] < s.inference_count,
      `${s.execution_count} batches for ${s.inference_count / c.shape[0]} requests: none shared`);
    assert.ok(s.batch_stats.some((x) => x.batch_size > c.shape[0]), JSON.stringify(s.batch_stats));
    assert.equal((await b.stop()).code, 0);
  } catch (e) { await b.stop('SIGKILL'); throw e; }
});

// softmax(q k^T / sqrt(dk)) v for one head, in float64 (row-major arrays).
function sdpaRef(q, k, v, T, S, dk, dv) {
  const y = new Array(T * dv).fill(0);
  for (let i = 0; i < T; i++) {
    const w = [];
    for (let j = 0; j < S; j++) {
      let d = 0;
      for (let c = 0; c < dk; c++) d += q[i * dk + c] * k[j * dk + c];
      w.push(d / Math.sqrt(dk));
    }
    const m = Math.max(...w), e = w.map((x) => Math.exp(x - m)), z = e.reduce((a, b) => a + b, 0);
    for (let j = 0; j < S; j++)
      for (let c = 0; c < dv; c++) y[i * dv + c] += (e[j] / z) * v[j * dv + c];
  }
  return y;
}

test('--solo-max-weights: a request beyond the busy instances whose outputs pass 64 KiB goes back to the queue (counted against memory-budget) and batches', async (t) => {
  // sdpa (no weights): 512 query rows against 8 keys, outputs 512 x 128
  // floats (256 KiB) from ~2.6 MFLOP and a 47 kB body: small enough for a
  // solo job, too large an output for one beyond the instances
  const T = 512, S = 8, dk = 16, dv = 128;
  const val = (i, m) => [0.25, -0.5, 0.75, -1, 0.5][(i * m) % 5];
  const q = Array.from({ length: T * dk }, (_, i) => val(i, 7));
  const k = Array.from({ length: S * dk }, (_, i) => val(i, 3));
  const v = Array.from({ length: S * dv }, (_, i) => val(i, 11));
  const want = sdpaRef(q, k, v, T, S, dk, dv);
  const body = {
    inputs: [fp32('q', [1, 1, T, dk], q), fp32('k', [1, 1, S, dk], k), fp32('v', [1, 1, S, dv], v)],
    outputs: [{ name: 'output' }],
  };
  const d = await start({ t, args: ['--instances', '1'] });
  try {
    let s;
    for (let round = 0; round < 10; round++) {
      const rs = await Promise.all(Array.from({ length: 24 }, () => infer(d, 'sdpa', body)));
      for (const r of rs) {
        assert.equal(r.status, 200, JSON.stringify(r.json));
        assert.ok(maxDiff(r.json.outputs[0].data, want) < 1e-5);
      }
      s = await statsOf(d, 'sdpa');
      if (s.execution_count < s.inference_count) break;
    }
    // as solo jobs each would be a batch of its own
    assert.ok(s.execution_count < s.inference_count,
      `${s.execution_count} batches for ${s.inference_count} requests: none queued and shared`);
    const m = await (await fetch(`${d.url}/metrics`)).text();
    assert.equal(requestsUsed(m), 0);
    assert.match(m, /^attnd_pool_jobs 0$/m);
    assert.equal((await d.stop()).code, 0);
  } catch (e) { await d.stop('SIGKILL'); throw e; }
});

// --pool-spin-us 0: every stage after the first is joined through the loop;
// the default: pool jobs that ran out of tiles wait for the next stage
for (const spin of ['0', '500'])
test(`a batch run over the pool (--pool-spin-us ${spin}): each request is checked and encoded on its own; one that overflows gets 400, the others their answers`, async (t) => {
  const dir = modelsDir();
  meanLayer(dir, 1024, 2, 'mean2');
  // a long delay so the three meet; ~200 MFLOP, so the batch runs stage by stage
  const d = await start({ t, dir, args: ['--max-batch', '16', '--batch-delay-us', '300000', '--instances', '1', '--pool-spin-us', spin] });
  try {
    const row = (k) => Array.from({ length: 1024 }, (_, i) => (((i + 7 * k) * 37) % 101) / 101 - 0.5);
    const mean = (a, b) => a.map((v, i) => (v + b[i]) / 2);
    // request 1's second sequence: 2e38 x 2 (W_v) is past float32's range
    const huge = Array(1024).fill(2e38);
    const bodies = [[row(0), row(1), row(2), row(3)], [row(4), row(5), huge, huge], [row(6), row(7)]];
    const rs = await Promise.all(bodies.map((rows, i) => infer(d, 'mean2', {
      id: `r${i}`, inputs: [fp32('x', [rows.length / 2, 2, 1024], rows.flat())] })));
    assert.equal(rs[1].status, 400, JSON.stringify(rs[1].json));
    assert.match(rs[1].json.error, /^inputs: a projection, score or output of sequence 1 is not finite/);
    for (const i of [0, 2]) {
      const r = rs[i], rows = bodies[i];
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.equal(r.json.id, `r${i}`);
      const want = [];
      for (let b = 0; b < rows.length; b += 2) {
        const m = mean(rows[b], rows[b + 1]);
        want.push(...m, ...m);
      }
      assert.ok(maxDiff(r.json.outputs[0].data, want) < 1e-5, `request ${i}`);
    }
    const s = await statsOf(d, 'mean2');
    assert.equal(s.execution_count, 1, 'the three requests ran as one batch');
    assert.equal((await d.stop()).code, 0);
  } catch (e) { await d.stop('SIGKILL'); throw e; } finally { rmSync(dir, { recursive: true, force: true }); }
});

// A /proc stat file's fields after the command name: [0] is field 3
// (state), [11] and [12] utime and stime (ticks of 10 ms), [38] field 41,
// the scheduling policy (0 SCHED_OTHER, 3 SCHED_BATCH).
const statFields = (path) => {
  const st = readFileSync(path, 'utf8');
  return st.slice(st.lastIndexOf(')') + 2).split(' ');
};
const ticksMs = (f) => (Number(f[11]) + Number(f[12])) * 10;
// The daemon's CPU time (all threads), and one thread's fields.
const cpuMs = (pid) => ticksMs(statFields(`/proc/${pid}/stat`));
const threadIds = (pid) => readdirSync(`/proc/${pid}/task`);
const threadStat = (pid, tid) => statFields(`/proc/${pid}/task/${tid}/stat`);
// One request on a connection of its own that closes (no keep-alive
// connection closing later, which is network activity too).
const inferOnce = (d, body) => new Promise((res, rej) => {
  const q = httpRequest(`${d.url}/v2/models/tiny/infer`, { method: 'POST', agent: false,
    headers: { 'Content-Type': 'application/json' } }, (r) => {
    let s = '';
    r.on('data', (c) => { s += c; });
    r.on('end', () => res({ status: r.statusCode, json: JSON.parse(s) }));
  });
  q.on('error', rej);
  q.end(JSON.stringify(body));
});
const pause = (ms) => new Promise((r) => setTimeout(r, ms));

test('--busy-poll-us: after a request the loop polls and idle pool threads spin (take CPU) for that long, then sleep: an idle server takes none; 0 never polls', async (t) => {
  const X = REFS.causal;
  const body = { inputs: [fp32('x', X.shape, X.x)], parameters: { causal: true } };
  for (const [us, polls] of [['100000', true], ['0', false]]) {
    const d = await start({ t, args: ['--busy-poll-us', us] });
    try {
      await pause(300); // start-up activity over
      // the poll yields its core to any other runnable thread, so another
      // process busy on both cores can take all of its 100 ms: up to
      // three tries to see it
      let c0, c1;
      for (let i = 0; i < (polls ? 3 : 1); i++) {
        const r = await inferOnce(d, body);
        assert.equal(r.status, 200);
        assert.ok(maxDiff(r.json.outputs[0].data, X.y) < 1e-5);
        c0 = cpuMs(d.proc.pid);
        await pause(1000); // the poll's 100 ms are in here
        c1 = cpuMs(d.proc.pid);
        if (c1 - c0 >= 10) break;
      }
      await pause(1000); // nothing happens
      const c2 = cpuMs(d.proc.pid);
      if (polls) assert.ok(c1 - c0 >= 10, `--busy-poll-us ${us}: ${c1 - c0} ms of CPU after the request`);
      else assert.ok(c1 - c0 <= 20, `--busy-poll-us ${us}: ${c1 - c0} ms of CPU after the request`);
      assert.ok(c2 - c1 <= 20, `--busy-poll-us ${us}: idle, yet ${c2 - c1} ms of CPU in a second`);
      assert.equal((await d.stop()).code, 0);
    } catch (e) { await d.stop('SIGKILL'); throw e; }
  }
});

const policies = (pid) => Object.fromEntries(threadIds(pid).map((tid) => [tid, Number(threadStat(pid, tid)[38])]));

test('pool threads that ran request work are SCHED_BATCH (--pool-batch 0: none is); the loop thread keeps the default policy', async (t) => {
  const X = REFS.causal;
  const body = { inputs: [fp32('x', X.shape, X.x)], parameters: { causal: true } };
  for (const batch of ['1', '0']) {
    const d = await start({ t, args: ['--threads', '2', '--busy-poll-us', '0', '--pool-batch', batch] });
    try {
      const before = policies(d.proc.pid);
      assert.ok(!Object.values(before).includes(3), `before any request: ${JSON.stringify(before)}`);
      const rs = await Promise.all([1, 2, 3, 4].map(() => inferOnce(d, body)));
      for (const r of rs) assert.equal(r.status, 200);
      const after = policies(d.proc.pid);
      assert.equal(after[String(d.proc.pid)], 0, `loop thread: ${JSON.stringify(after)}`);
      const n = Object.keys(after).filter((tid) => after[tid] === 3).length;
      if (batch === '1') assert.ok(n >= 1 && n <= 2, `SCHED_BATCH threads: ${JSON.stringify(after)}`);
      else assert.equal(n, 0, `--pool-batch 0, SCHED_BATCH threads: ${JSON.stringify(after)}`);
      assert.equal((await d.stop()).code, 0);
    } catch (e) { await d.stop('SIGKILL'); throw e; }
  }
});

test('--busy-poll-us: warm jobs spin on one core fewer than the machine has (the loop polls on one)', async (t) => {
  const X = REFS.causal;
  const body = { inputs: [fp32('x', X.shape, X.x)], parameters: { causal: true } };
  const cores = availableParallelism();
  const d = await start({ t, args: ['--threads', String(cores + 1), '--busy-poll-us', '100000'] });
  try {
    await pause(500); // start-up activity over
    const tids = () => threadIds(d.proc.pid).filter((tid) => tid !== String(d.proc.pid));
    const cpu = (tid) => ticksMs(threadStat(d.proc.pid, tid));
    const c0 = Object.fromEntries(tids().map((tid) => [tid, cpu(tid)]));
    assert.equal((await inferOnce(d, body)).status, 200);
    await pause(400); // the 100 ms window and then some
    const spun = tids().filter((tid) => cpu(tid) - (c0[tid] || 0) >= 20);
    assert.ok(spun.length <= Math.max(cores - 1, 0), `${spun.length} threads besides the loop took >= 20 ms of CPU on ${cores} cores`);
    assert.equal((await d.stop()).code, 0);
  } catch (e) { await d.stop('SIGKILL'); throw e; }
});

/** A causal request of x [1, n, D] (binary in and out) to gqa with the
 * given parameters: {status, y} (200) or {status, error}. */
async function binInfer(d, xs, parameters) {
  const n = xs.length / D;
  const { body, headerLen } = binaryRequest({
    inputs: [{ name: 'x', datatype: 'FP32', shape: [1, n, D], parameters: { binary_data_size: xs.length * 4 } }],
    outputs: [{ name: 'y', parameters: { binary_data: true } }], parameters,
  }, [f32bytes(xs)]);
  const r = await fetch(`${d.url}/v2/models/gqa/infer`, {
    method: 'POST', body, headers: { 'Inference-Header-Content-Length': String(headerLen) },
  });
  const buf = Buffer.from(await r.arrayBuffer());
  if (r.status !== 200) return { status: r.status, error: JSON.parse(buf.toString()).error };
  return { status: 200, y: parseBinary(buf, Number(r.headers.get('inference-header-content-length'))).raw.y };
}

test('a batch whose plan has no memory runs as smaller batches: only a request that cannot get it alone fails', { skip: SLOW > 1 && 'a sanitizer replaces malloc' }, async () => {
  // failalloc's FAILALLOC_OVER stands in for a memory limit once armed: an
  // allocation of attnd's over 800 kB fails. One request of 2000 tokens has a plan of
  // about 450 kB (Q, K, V, O and positions: ~56 floats a token); two
  // together gather their rows too (1.4 MB), and 6000 tokens alone need
  // about 1.3 MB. The three meet in one batch (a long batch delay).
  const T = 2000;
  const d = await start({ dir: gqaModels(), env: { LD_PRELOAD: SHIM, FAILALLOC_OVER: '800000' },
    args: ['--max-batch', '8', '--batch-delay-us', '1500000', '--instances', '1'] });
  try {
    d.proc.kill('SIGUSR1'); // the limit from now on (started and loaded)
    await new Promise((r) => setTimeout(r, 100));
    const xs = tokens(3 + T, 5), ys = tokens(T, 6), big = tokens(3 * T, 7);
    // references, each alone: the sequence's rows as one request, ys
    const refX = await binInfer(d, xs, { causal: true });
    const refY = await binInfer(d, ys, { causal: true });
    assert.equal(refX.status, 200, refX.error);
    assert.equal(refY.status, 200, refY.error);
    const s0 = await binInfer(d, xs.slice(0, 3 * D), { sequence_id: 'b', sequence_start: true });
    assert.equal(s0.status, 200, s0.error);
    // queued in this order (100 ms apart, within the batch delay): the
    // step is bound (its pages taken) in the first batch and goes back to
    // the queue with them, then runs in the next
    const later = (ms, f) => new Promise((r) => setTimeout(r, ms)).then(f);
    const [b, step, c] = await Promise.all([
      binInfer(d, ys, { causal: true }),
      later(100, () => binInfer(d, xs.slice(3 * D), { sequence_id: 'b' })),
      later(200, () => binInfer(d, big, { causal: true })),
    ]);
    assert.equal(step.status, 200, step.error); // (503 before, all three)
    assert.ok(maxDiff(step.y, refX.y.slice(3 * D)) < 1e-5, 'the step\'s rows');
    assert.equal(b.status, 200, b.error);
    assert.ok(maxDiff(b.y, refY.y) < 1e-5, 'the stateless request');
    assert.equal(c.status, 503);
    assert.match(c.error, /^engine: out of memory allocating \d+ bytes of scratch/);
    // written by the log writer's thread, read from a pipe node reads
    // apart from the answers' sockets: waited for, not assumed
    const plan = /no memory for the plan of a batch of 3 requests \(out of memory allocating \d+ bytes of scratch\); it runs as smaller batches \(1 now\)/;
    assert.match(await d.logged(plan), plan);
    const g = await (await fetch(`${d.url}/v2/sequences/b`)).json();
    assert.equal(g.length, 3 + T);
    assert.equal(g.bytes, Math.ceil((3 + T) / 64) * 64 * 2 * 2 * 4 * 4); // pages of 64 tokens, 2 kv heads of 4, K and V
    const stats = await statsOf(d, 'gqa');
    assert.equal(stats.inference_count, 5); // the two references, the start, step and b
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('a thousand queued requests whose plans find no memory are each answered 503 from one pump, not a stack frame each', { skip: SLOW > 1 && 'a sanitizer replaces malloc' }, async () => {
  // one batch of all of them (max-batch 4096, a 2 s batch delay), every
  // plan over FAILALLOC_OVER (2000 tokens: ~450 kB), even alone: each
  // fails alone in turn. A batch that ended inside its launch pumped the
  // queue again from there, one level of launch's frame per request: with
  // a 400 KiB stack, a SIGSEGV
  const N = 1000, T = 2000;
  const d = await start({ dir: gqaModels(), wrap: ['sh', '-c', 'ulimit -s 400 && exec "$0" "$@"'],
    env: { LD_PRELOAD: SHIM, FAILALLOC_OVER: '300000' },
    args: ['--max-batch', '4096', '--batch-delay-us', '2000000', '--queue-size', String(N + 10),
      '--max-connections', String(N + 50), '--max-connections-per-ip', '0'] });
  try {
    d.proc.kill('SIGUSR1');
    await new Promise((r) => setTimeout(r, 100));
    const xs = tokens(T, 3);
    const { body, headerLen } = binaryRequest({
      inputs: [{ name: 'x', datatype: 'FP32', shape: [1, T, D], parameters: { binary_data_size: xs.length * 4 } }],
      outputs: [{ name: 'y', parameters: { binary_data: true } }] }, [f32bytes(xs)]);
    const agent = new Agent({ keepAlive: false, maxSockets: N });
    const one = () => new Promise((res) => {
      const r = httpRequest({ host: '127.0.0.1', port: d.port, method: 'POST', path: '/v2/models/gqa/infer', agent,
        headers: { 'Inference-Header-Content-Length': String(headerLen), 'Content-Length': body.length } }, (resp) => {
        let text = '';
        resp.on('data', (c) => { text += c; });
        resp.on('end', () => res({ status: resp.statusCode, text }));
      });
      r.on('error', (e) => res({ status: 0, text: e.code }));
      r.end(body);
    });
    const rs = await Promise.all(Array.from({ length: N }, one));
    const bad = rs.filter((r) => r.status !== 503 || !/engine: out of memory allocating/.test(r.text));
    assert.equal(bad.length, 0, JSON.stringify(bad.slice(0, 3)));
    assert.equal((await fetch(`${d.url}/v2/health/live`)).status, 200);
  } finally { assert.equal((await d.stop()).code, 0); }
});
