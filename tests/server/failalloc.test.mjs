// failalloc.test.mjs - attnd's own allocations fail (tests/server/failalloc.c,
// preloaded: 1 in FAILALLOC_EVERY of the mallocs, callocs and reallocs of
// attnd's code return NULL while armed) under a mix of requests from several
// clients: stateless JSON and binary requests, retained maps read back,
// sequences started, stepped and ended, the listings and /metrics. Each
// request is answered, with its numbers right or with an error in JSON,
// never a dropped connection; the daemon stays up; once the failures stop it
// answers right again with no request, pool job, memory-budget byte or
// sequence left held, and SIGTERM stops it cleanly. Then the same with
// libmicrohttpd's allocations failing too (FAILALLOC_MHD=1): a connection
// it has no memory for is closed (by libmicrohttpd: there is nothing to
// answer with), a request carried out whose answer it cannot hold gets the
// fixed 500 that says so, but every answer that does come is whole, its
// headers included. Last, attnd started with its allocations failing from the
// first one: it serves, or exits with a message naming the memory, never
// crashes or hangs. The default build only: a sanitizer's runtime replaces
// malloc itself.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Agent, request } from 'node:http';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { spawn } from 'node:child_process';
import { ATTND, REFS, ROOT, SLOW, binaryRequest, f32bytes, fp32, maxDiff, parseBinary, requestsUsed, start, track } from './helper.mjs';

const SHIM = join(dirname(ATTND), 'tests', 'server', 'failalloc.so');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const PERIODS = process.env.FAILALLOC_EVERY || '2,5,11,29,97';

// the page's origin, allowed (--cors-origins): every answer must let it
// read the answer, the 503 made at start included
const ORIGIN = 'http://page.test';

// call: one request on a shared keep-alive pool, from ORIGIN; a dropped
// connection resolves to {status: 0, error} so the test can count it.
function caller(port) {
  const agent = new Agent({ keepAlive: true, maxSockets: 8 });
  const call = (method, path, body, headers = {}) => new Promise((res) => {
    const data = body === undefined ? null : Buffer.isBuffer(body) ? body : Buffer.from(JSON.stringify(body));
    const req = request({ host: '127.0.0.1', port, method, path, agent,
      headers: { Origin: ORIGIN, ...(data ? { 'Content-Type': 'application/json', 'Content-Length': data.length } : {}), ...headers } }, (r) => {
      const parts = [];
      r.on('data', (c) => parts.push(c));
      r.on('end', () => {
        const buf = Buffer.concat(parts);
        let json = null;
        try { json = JSON.parse(buf.toString()); } catch { /* binary or text */ }
        res({ status: r.statusCode, headers: r.headers, buf, json, text: buf.toString().slice(0, 300) });
      });
      r.on('error', (error) => res({ status: 0, error }));
    });
    req.on('error', (error) => res({ status: 0, error }));
    req.end(data);
  });
  return { call, close: () => agent.destroy() };
}

// a step says where it goes (sequence_position): one sent again after its
// answer was lost replaces what it did, it is not applied twice
const tinyStep = (id, x, d, pos, end) => ({
  inputs: [fp32('x', [1, x.length / d, d], x)],
  parameters: { sequence_id: id, sequence_start: pos === 0, sequence_end: end, sequence_position: pos },
});

const MODES = [
  { what: 'attnd\'s own allocations failing: every request answered, the daemon serving, nothing held after', env: {}, drops: false },
  { what: 'libmicrohttpd\'s allocations failing too: connections it cannot hold closed, every answer whole, nothing held after', env: { FAILALLOC_MHD: '1' }, drops: true },
];

for (const mode of MODES) test(mode.what, { skip: SLOW > 1 && 'a sanitizer replaces malloc' }, async (t) => {
  assert.ok(existsSync(SHIM), `${SHIM} (make ${SHIM.slice(SHIM.indexOf('build/'))})`);
  const d = await start({ t, args: ['--cors-origins', `http://other.test, ${ORIGIN}`], env: { LD_PRELOAD: SHIM, FAILALLOC_EVERY: PERIODS, OPENBLAS_NUM_THREADS: '1', ...mode.env } });
  const c = caller(d.port);
  const seen = { ok: 0, errors: {}, dropped: [], wrong: [] };
  // done, but libmicrohttpd had no memory for the answer: a 500 that says
  // so (no Retry-After: not to be sent again as it was)
  const lost = (r) => r.status === 500 && !r.headers['retry-after'] && r.json &&
    /carried out, but there was no memory for its answer/.test(r.json.error);
  // fine: 200 with the right numbers (check), or 503 with {"error": "..."}
  // and Retry-After (out of memory is no bug: 500 is for those), each with
  // its Content-Type and CORS headers; anything else is recorded against
  // the daemon
  const judge = (what, r, check) => {
    if (r.status && r.headers['access-control-allow-origin'] !== ORIGIN) {
      seen.wrong.push(`${what}: ${r.status} without Access-Control-Allow-Origin: ${ORIGIN}`);
    } else if (r.status && !r.headers['content-type']) {
      seen.wrong.push(`${what}: ${r.status} without Content-Type`);
    } else if (r.status === 200) {
      const bad = check ? check(r) : null;
      if (bad) seen.wrong.push(`${what}: ${bad}`);
      else seen.ok++;
    } else if (r.status === 0) {
      seen.dropped.push(`${what}: ${r.error.message}`);
    } else if (r.status === 503 && r.json && typeof r.json.error === 'string' && r.headers['retry-after']) {
      seen.errors[r.status] = (seen.errors[r.status] || 0) + 1;
    } else if (mode.drops && what === 'sequence step' && lost(r)) {
      seen.errors[r.status] = (seen.errors[r.status] || 0) + 1;
    } else {
      seen.wrong.push(`${what}: ${r.status} ${r.text}`);
    }
    return r.status === 200;
  };
  const e = REFS.sdpa;
  const sdpaBody = { inputs: [fp32('q', e.q_shape, e.q), fp32('k', e.k_shape, e.k), fp32('v', e.v_shape, e.v)],
    outputs: [{ name: 'output' }, { name: 'attention' }], parameters: { retain: true } };
  const ref = REFS.causal, D = ref.shape[2], T = ref.shape[1];
  const seqIds = new Set();
  const tasks = [
    async (k) => { // stateless JSON, PyTorch's numbers
      const cl = REFS.clients[k % REFS.clients.length];
      const r = await c.call('POST', '/v2/models/tiny/infer', { id: `j${k}`, inputs: [fp32('x', cl.shape, cl.x)] });
      judge('tiny JSON', r, () => r.json.id !== `j${k}` ? `id ${r.json.id}`
        : maxDiff(r.json.outputs[0].data, cl.y) < 1e-5 ? null : 'numbers');
    },
    async (k) => { // binary in and out
      const cl = REFS.clients[k % REFS.clients.length];
      const { body, headerLen } = binaryRequest({ inputs: [{ name: 'x', datatype: 'FP32', shape: cl.shape,
        parameters: { binary_data_size: cl.x.length * 4 } }], parameters: { binary_data_output: true } }, [f32bytes(cl.x)]);
      const r = await c.call('POST', '/v2/models/tiny/infer', body,
        { 'Inference-Header-Content-Length': String(headerLen), 'Content-Type': 'application/octet-stream' });
      judge('tiny binary', r, () => {
        const p = parseBinary(r.buf, Number(r.headers['inference-header-content-length']));
        return maxDiff(p.raw[p.head.outputs[0].name], cl.y) < 1e-5 ? null : 'numbers';
      });
    },
    async () => { // a retained map, read back
      const r = await c.call('POST', '/v2/models/sdpa/infer', sdpaBody);
      if (judge('sdpa retain', r, () => maxDiff(r.json.outputs[1].data, e.attention) < 1e-5 ? null : 'numbers')) {
        const id = r.json.parameters.map_id;
        judge('map read', await c.call('GET', `/v2/maps/${id}/attention?b=0&h=0`), null);
      }
    },
    async (k) => { // a sequence, token by token, each row PyTorch's causal one
      const id = `s${k}`;
      seqIds.add(id);
      for (let i = 0, tries = 0; i < T && tries < 40; tries++) {
        const r = await c.call('POST', '/v2/models/tiny/infer', tinyStep(id, ref.x.slice(i * D, (i + 1) * D), D, i, i === T - 1));
        // a failed step leaves the sequence as it was, and one done whose
        // answer was lost (500, or a closed connection) is replaced by
        // the same step sent again at the same position: the sequence
        // holds each token once, so the next answer is right (but a lost
        // end may have freed the sequence: it starts again)
        if (judge('sequence step', r, () => r.json.parameters.sequence_length !== i + 1
          ? `step ${i}: sequence_length ${r.json.parameters.sequence_length}`
          : maxDiff(r.json.outputs[0].data, ref.y.slice(i * D, (i + 1) * D)) < 1e-5 ? null : `step ${i} numbers`)) i++;
        else if ((r.status === 0 || lost(r)) && mode.drops) i = i === T - 1 ? 0 : i;
        else if (r.status !== 503) break;
      }
    },
    async () => {
      // the page's CORS preflight: 204 letting the request through, even
      // when no memory can be found for it (the request then gets its own
      // answer; a 503 here would be a network error to the page)
      const p = await c.call('OPTIONS', '/v2/models/tiny/infer', undefined,
        { 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'content-type' });
      if (p.status === 0) seen.dropped.push(`preflight: ${p.error.message}`);
      else if (p.status === 204 && p.headers['access-control-allow-origin'] === ORIGIN &&
        /POST/.test(p.headers['access-control-allow-methods'] || '') &&
        /content-type/i.test(p.headers['access-control-allow-headers'] || '')) seen.ok++;
      else seen.wrong.push(`preflight: ${p.status} ${JSON.stringify(p.headers)}`);
      judge('metrics', await c.call('GET', '/metrics'), null);
      judge('sequences', await c.call('GET', '/v2/sequences'), (r) => (r.json && typeof r.json.count === 'number' ? null : r.text));
      judge('model', await c.call('GET', '/v2/models/tiny'), null);
    },
  ];
  try {
    // one round per rate: 1 in 2 of attnd's allocations failing, then 1 in
    // 5, 11 and 29 (the rarer, the further a request gets before one fails)
    const rounds = PERIODS.split(',').length;
    for (let round = 1; round <= rounds; round++) {
      const before = { ok: seen.ok, errors: { ...seen.errors }, dropped: seen.dropped.length };
      d.proc.kill('SIGUSR1');
      const end = Date.now() + 700;
      let k = 0;
      await Promise.all(Array.from({ length: 6 }, async (_, w) => {
        while (Date.now() < end) {
          const n = k++;
          await tasks[(n + w) % tasks.length](n);
        }
      }));
      d.proc.kill('SIGUSR2');
      const re = /failalloc: (\d+) of (\d+) allocations failed \(1 in (\d+)\)/g;
      let lines = [];
      const until = Date.now() + 5000;
      while ((lines = [...d.log().matchAll(re)]).length < round && Date.now() < until) await sleep(20);
      const m = lines[round - 1];
      assert.ok(m && Number(m[1]) > 20, `round ${round}: the failures happened: ${m && m[0]}`);
      t.diagnostic(`${m[0]}: ${seen.ok - before.ok} answered 200, ` +
        `${(seen.errors[503] || 0) - (before.errors[503] || 0)} 503, ` +
        `${(seen.errors[500] || 0) - (before.errors[500] || 0)} 500 done but its answer lost, ` +
        `${seen.dropped.length - before.dropped} closed`);
      assert.equal(d.proc.exitCode, null, 'attnd is still running');
      assert.deepEqual(seen.wrong, [], 'every 200 right, every other answer an error in JSON');
      if (!mode.drops) assert.deepEqual(seen.dropped, [], 'no connection dropped');
    }
    assert.ok(seen.ok > 50 && (seen.errors[503] || 0) > 50, JSON.stringify({ ok: seen.ok, errors: seen.errors }));

    // the failures stopped: right answers again, nothing held
    seen.dropped = [];
    for (const k of [0, 1, 2, 3]) await tasks[k](1000 + k);
    assert.deepEqual(seen.wrong, []);
    assert.deepEqual(seen.dropped, []);
    for (const id of seqIds) {
      const r = await c.call('DELETE', `/v2/sequences/${id}`);
      assert.ok([200, 404].includes(r.status), `${id}: ${r.status} ${r.text}`);
    }
    const list = await c.call('GET', '/v2/sequences');
    assert.equal(list.json.count, 0, list.text);
    const metrics = (await c.call('GET', '/metrics')).buf.toString();
    const gauge = (name) => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(metrics)[1]);
    assert.equal(requestsUsed(metrics), 0);
    assert.equal(gauge('attnd_pool_jobs'), 0);
    assert.equal(gauge('attnd_open_requests'), 1); // this one
    c.close();
    assert.equal((await d.stop()).code, 0);
  } catch (err) {
    c.close();
    await d.stop('SIGKILL');
    throw err;
  }
});

test('allocations failing from the start: attnd serves or exits saying so, never crashes', { skip: SLOW > 1 && 'a sanitizer replaces malloc' }, async (t) => {
  assert.ok(existsSync(SHIM), `${SHIM} (make ${SHIM.slice(SHIM.indexOf('build/'))})`);
  const models = join(ROOT, 'tests', 'server', 'fixtures', 'models');
  const seen = { served: 0, exited: {} };
  for (const k of [3, 11, 97, 997]) {
    for (let seed = 1; seed <= 6; seed++) {
      const args = ['--host', '127.0.0.1', '--port', '0', '--grpc-port', '-1', '--models', models];
      const proc = spawn(ATTND, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env,
        LD_PRELOAD: SHIM, FAILALLOC_AT_START: '1', FAILALLOC_EVERY: String(k), FAILALLOC_SEED: String(seed),
        FAILALLOC_MHD: '1', OPENBLAS_NUM_THREADS: '1' } });
      let log = '';
      proc.stdout.on('data', (c) => { log += c; });
      proc.stderr.on('data', (c) => { log += c; });
      track(proc, { args, log: () => log });
      const exited = new Promise((res) => proc.on('exit', (code, signal) => res({ code, signal })));
      const until = Date.now() + 10000;
      while (proc.exitCode === null && proc.signalCode === null && !/listening on http/.test(log) && Date.now() < until) await sleep(20);
      const listening = /listening on http/.test(log);
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      const stop = setTimeout(() => proc.kill('SIGKILL'), 30000);
      const { code, signal } = await exited;
      clearTimeout(stop);
      const what = `1 in ${k}, seed ${seed}`;
      assert.equal(signal, null, `${what}: killed by ${signal} (listening: ${listening}); its log ends:\n${log.slice(-1500)}`);
      assert.ok([0, 1, 2].includes(code), `${what}: exit ${code}; its log ends:\n${log.slice(-1500)}`);
      if (code !== 0) {
        assert.match(log, /out of memory|Cannot allocate memory/, `${what}: exit ${code} without naming the memory:\n${log.slice(-1500)}`);
        seen.exited[code] = (seen.exited[code] || 0) + 1;
      } else {
        assert.ok(listening, `${what}: exit 0 without ever listening:\n${log.slice(-1500)}`);
        seen.served++;
      }
    }
  }
  t.diagnostic(`24 starts: ${seen.served} served, then stopped cleanly; exits ${JSON.stringify(seen.exited)}`);
  assert.ok(seen.served > 0 && Object.keys(seen.exited).length > 0, JSON.stringify(seen));
});
