// lifecycle.test.mjs - queue bound, deadline, SIGTERM drain, repository
// load/unload/upload with restart, auth and CORS.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { connect } from 'node:net';
import { cpSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { REFS, SLOW, fp32, infer, maxDiff, post, postSdpa, safetensors, sdpaBinary, start } from './helper.mjs';

const X = REFS.causal;
const xreq = (id) => ({ id, inputs: [fp32('x', X.shape, X.x)], parameters: { causal: true } });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function pending(d, m) {
  const t = await (await fetch(`${d.url}/metrics`)).text();
  return Number(new RegExp(`attnd_inference_pending_requests\\{model="${m}",version="1"\\} (\\d+)`).exec(t)[1]);
}
// waitPending: until m's pending requests are n (5 s x SLOW at most). The
// count it stops at is the one it checks: read again, it may have moved on
// (a request that was pending once answered at its batch delay's end).
async function waitPending(d, m, n) {
  let got;
  for (let i = 0; (got = await pending(d, m)) !== n; i++) {
    assert.ok(i < 500 * SLOW, `${m}: ${got} requests pending, not ${n}`);
    await sleep(10);
  }
}

// queuedUs(d, status, id): the queue_us of request id's log line (answered
// status): how long it waited in the queue, by attnd's own clock. Below a
// batch delay, it left the queue before that delay ended (its timer never
// fires early): an order of two of attnd's events, whatever the speed.
async function queuedUs(d, status, id) {
  const re = new RegExp(` ${status} id=${id} .*queue_us=(\\d+) `);
  const m = re.exec(await d.logged(re));
  assert.ok(m, `no ${status} line for ${id}: ${d.log()}`);
  return Number(m[1]);
}

test('queue full: 503 with Retry-After at once; the queued request still answers', async (t) => {
  const d = await start({ t, args: ['--queue-size', '1', '--batch-delay-us', '1500000'] });
  const a = infer(d, 'tiny', xreq('a'));
  await waitPending(d, 'tiny', 1);
  const b = await infer(d, 'tiny', xreq('b'));
  assert.equal(b.status, 503);
  assert.ok(Number(b.headers.get('retry-after')) >= 1);
  assert.match(b.json.error, /^queue: model 'tiny' has 1 request in progress \(queue-size\); retry later$/);
  const ra = await a;
  assert.equal(ra.status, 200);
  assert.ok(maxDiff(ra.json.outputs[0].data, X.y) < 1e-5);
  // the 503 counts as rejected; a waited the batch delay (1.5 s) in the queue
  const m = await (await fetch(`${d.url}/metrics`)).text();
  assert.match(m, /^attnd_inference_request_failure_total\{model="tiny",version="1",reason="rejected"\} 1$/m);
  assert.match(m, /^attnd_inference_request_failure_total\{model="tiny",version="1",reason="other"\} 0$/m);
  const queued = Number(/^attnd_inference_queue_duration_seconds_total\{model="tiny",version="1"\} ([\d.e+-]+)$/m.exec(m)?.[1]);
  assert.ok(queued >= 1.4, `queue duration ${queued} s`);
  assert.equal((await d.stop()).code, 0);
});

test('deadline: 504 naming it, then the server still serves', async (t) => {
  const d = await start({ t, args: ['--deadline-ms', '300', '--batch-delay-us', '10000000', '--max-batch', '2'] });
  const r = await infer(d, 'tiny', xreq('late'));
  assert.equal(r.status, 504);
  assert.match(r.json.error, /deadline: no answer within 300 ms \(deadline-ms\)/);
  const late = await queuedUs(d, 504, 'late');
  assert.ok(late < 10e6, `answered at the deadline, not after the 10 s batch delay: queue_us=${late}`);
  // two requests fill a batch of 2: no delay, answered in time
  const [p, q] = await Promise.all([infer(d, 'tiny', xreq('p')), infer(d, 'tiny', xreq('q'))]);
  assert.equal(p.status, 200);
  assert.equal(q.status, 200);
  assert.ok(maxDiff(q.json.outputs[0].data, X.y) < 1e-5);
  const m = await (await fetch(`${d.url}/metrics`)).text();
  assert.match(m, /attnd_inference_request_failure_total\{model="tiny",version="1",reason="timeout"\} 1/);
  assert.equal(await pending(d, 'tiny'), 0);
  assert.equal((await d.stop()).code, 0);
});

// A solo job (decode, plan and encoding on one pool job) whose deadline
// passes while its pool thread runs it: the loop answers 504 without
// reading the times and batch size that thread writes (a data race that
// ThreadSanitizer reports; stop() fails on the report). --inline-conns 0:
// every request goes to the pool; 16 at once, each `demo` T = 64 (a
// solo job of ~0.3 ms: 3 MFLOP, 4096 numbers each way), queue behind one
// another on the 2 cores, so a 2 ms deadline passes inside many runs.
test('deadline inside a solo job on the pool: 504, the server still serves, no race', async (t) => {
  const d = await start({ t, args: ['--deadline-ms', '2', '--inline-conns', '0'] });
  const x = Array.from({ length: 64 * 64 }, (_, i) => ((i * 7919) % 1000) / 1000 - 0.5);
  const seen = {};
  for (let round = 0; round < 30 && !(seen[504] >= 20 && seen[200]); round++) {
    const rs = await Promise.all(Array.from({ length: 16 }, (_, i) =>
      infer(d, 'demo', { id: `s${round}.${i}`, inputs: [fp32('x', [1, 64, 64], x)] })));
    for (const r of rs) {
      seen[r.status] = (seen[r.status] || 0) + 1;
      if (r.status === 504) assert.match(r.json.error, /deadline: no answer within 2 ms/);
      else assert.equal(r.status, 200, JSON.stringify(r.json));
    }
  }
  assert.ok(seen[504] > 0, JSON.stringify(seen));
  // a job answered 504 ends when its pool thread is done with it, maybe
  // after the answer (a sanitizer's slow pool: 3 still running once)
  await waitPending(d, 'demo', 0);
  assert.equal((await d.stop()).code, 0);
});

// A large sdpa request (T = 65536, max-tokens' default, d 64: ~1.1
// TFLOP, 8-25 s of both cores here) answered 504, or whose client went,
// while its batch ran: no request is left to answer, so its remaining
// tiles are skipped. (A cancelled gRPC call: the same, test_grpc_limits.py.)
function bigSdpa(signal) {
  return postSdpa(this.url, sdpaBinary(65536, 64), signal);
}
/** bigRunning(d, big): once bigSdpa's batch runs on d (decoded: its inputs
 * and output held, 4 x 16 MiB of the memory budget); big, its request's
 * promise, fails the wait at once if it is answered first. */
async function bigRunning(d, big) {
  const held = () => metricOf(d, /^attnd_memory_budget_used_bytes (\d+)$/m);
  let answered = null;
  big.then((r) => { answered = r; }, (e) => { answered = e; });
  for (let i = 0; (await held()) < 4 * 65536 * 64 * 4; i++) {
    assert.ok(!answered, `the large request was answered before its batch was seen running: ${answered?.status ?? answered?.name}`);
    assert.ok(i < 400 * SLOW, "the large request's batch never ran");
    await sleep(10);
  }
}
async function metricOf(d, re) {
  const m = re.exec(await (await fetch(`${d.url}/metrics`)).text());
  assert.ok(m, `no ${re} in /metrics`);
  return Number(m[1]);
}
const abandoned = (d) => metricOf(d, /^attnd_inference_batches_abandoned_total\{model="sdpa",version="1"\} (\d+)$/m);
const poolJobs = (d) => metricOf(d, /^attnd_pool_jobs (\d+)$/m);

/** The batch is abandoned (counted once its pool jobs end) and the pool
 * free within the tiles begun (~10 ms each), not seconds later. */
async function abandonedOne(d) {
  for (let i = 0; (await poolJobs(d)) !== 0 || (await abandoned(d)) !== 1; i++) {
    assert.ok(i < 60 * SLOW, `after 3 s: pool jobs ${await poolJobs(d)}, abandoned batches ${await abandoned(d)} (want 0 and 1)`);
    await sleep(50);
  }
}
/** The server serves the next request, right. */
async function servesRight(d) {
  const ok = await infer(d, 'tiny', xreq('after'));
  assert.equal(ok.status, 200);
  assert.ok(maxDiff(ok.json.outputs[0].data, X.y) < 1e-5);
}

test('a large request answered 504 stops taking the pool: its remaining tiles are skipped', async (t) => {
  // (the deadline falls inside the batch: past the body's decode, ~0.1 s.
  // On a machine so loaded that the batch had not begun by then, its 504's
  // log line says batch=0 and no batch is there to abandon: the deadline
  // is a time, the batch's start an event, so that case is run again with
  // twice the deadline, twice at most)
  for (let ms = 1500 * SLOW, tries = 1; ; ms *= 2, tries++) {
    const d = await start({ t, args: ['--deadline-ms', String(ms)] });
    // 504 at the deadline while its batch runs; the batch is abandoned.
    const r = await bigSdpa.call(d);
    const text = await r.text();
    assert.equal(r.status, 504, text);
    assert.match(text, new RegExp(`deadline: no answer within ${ms} ms`));
    // (its line is written after its answer: wait for it)
    const line = / 504 .* batch=(\d+) /.exec(await d.logged(/sdpa\/infer 504 /));
    assert.ok(line, d.log());
    if (line[1] === '0' && tries < 3) {
      assert.equal((await d.stop()).code, 0);
      continue;
    }
    assert.notEqual(line[1], '0', `answered 504 before its batch ran, ${tries} times (deadline up to ${ms} ms)`);
    await abandonedOne(d);
    await servesRight(d);
    assert.equal((await d.stop()).code, 0);
    return;
  }
});

// --queue-size bounds the requests a model has in progress, those that run
// among them (README's settings table), not only the queued ones: the
// 503 said "1 request waiting" of one that ran.
// (The large request's client goes once the 503 is seen: a deadline that
// ended it, 1.5 s past its body, could fall before its batch began on a
// slow or loaded machine, and the wait for it to run then failed.)
test('queue-size counts a running request: the next one is 503 saying so', async (t) => {
  const d = await start({ t, args: ['--queue-size', '1', '--deadline-ms', '600000'] });
  const ac = new AbortController();
  const big = bigSdpa.call(d, ac.signal).catch((e) => e);
  await bigRunning(d, big);
  const b = await infer(d, 'sdpa', { inputs: ['q', 'k', 'v'].map((n) => fp32(n, [1, 1], [1])) });
  assert.equal(b.status, 503);
  assert.match(b.json.error, /^queue: model 'sdpa' has 1 request in progress \(queue-size\); retry later$/);
  ac.abort();
  assert.equal((await big).name, 'AbortError');
  await abandonedOne(d);
  assert.equal((await d.stop()).code, 0);
});

test('REST clients that close their connections: a queued request leaves the queue, a running one\'s batch is abandoned, both logged 499', async (t) => {
  // Queued: waiting out a 10 s batch delay; its client goes and it leaves
  // the queue within a sweep (250 ms), not at the delay's end.
  const q = await start({ t, args: ['--batch-delay-us', '10000000', '--max-batch', '64'] });
  const acQ = new AbortController();
  const queued = fetch(`${q.url}/v2/models/tiny/infer`, {
    method: 'POST', body: JSON.stringify(xreq('gone')), signal: acQ.signal,
    headers: { 'Content-Type': 'application/json' },
  }).catch((e) => e);
  await waitPending(q, 'tiny', 1);
  acQ.abort();
  assert.equal((await queued).name, 'AbortError');
  for (let i = 0; (await pending(q, 'tiny')) !== 0; i++) {
    assert.ok(i < 60 * SLOW, 'the queued request whose client went is still pending after 3 s');
    await sleep(50);
  }
  assert.match(await q.logged(/tiny\/infer 499 /), /POST \/v2\/models\/tiny\/infer 499 id=gone /);
  const gone = await queuedUs(q, 499, 'gone');
  assert.ok(gone < 10e6, `left the queue only at the batch delay: queue_us=${gone}`);
  assert.equal((await q.stop()).code, 0);
  // Running: a large request's batch holds both pool threads; its client
  // goes and the batch skips its rest.
  const d = await start({ t, args: ['--threads', '2', '--deadline-ms', '600000'] });
  const ac = new AbortController();
  const a = bigSdpa.call(d, ac.signal).catch((e) => e);
  for (let i = 0; (await poolJobs(d)) < 2; i++) {
    assert.ok(i < 400 * SLOW, "the large request's batch never ran");
    await sleep(10);
  }
  ac.abort();
  assert.equal((await a).name, 'AbortError');
  await abandonedOne(d);
  assert.match(await d.logged(/sdpa\/infer 499 /), /POST \/v2\/models\/sdpa\/infer 499 /);
  assert.equal(await metricOf(d, /^attnd_http_responses_total\{code="499"\} (\d+)$/m), 1);
  await servesRight(d);
  assert.equal((await d.stop()).code, 0);
});

test('a request answered while it waits for a pool thread to decode it is not decoded', async (t) => {
  // one pool thread, held by a large request's batch: a second request's
  // decode waits behind it; its client goes (499 within a sweep), then the
  // large one's; the pool drops the second body undecoded
  const d = await start({ t, args: ['--threads', '1', '--deadline-ms', '600000'] });
  const undecoded = () => metricOf(d, /^attnd_inference_requests_undecoded_total\{model="tiny",version="1"\} (\d+)$/m);
  const acA = new AbortController();
  const a = bigSdpa.call(d, acA.signal).catch((e) => e);
  await bigRunning(d, a);
  const acB = new AbortController();
  const b = fetch(`${d.url}/v2/models/tiny/infer`, {
    method: 'POST', body: JSON.stringify(xreq('waits')), signal: acB.signal,
    headers: { 'Content-Type': 'application/json' },
  }).catch((e) => e);
  for (let i = 0; (await poolJobs(d)) < 2; i++) {
    assert.ok(i < 400 * SLOW, "the second request's decode never queued");
    await sleep(10);
  }
  acB.abort();
  assert.equal((await b).name, 'AbortError');
  assert.match(await d.logged(/tiny\/infer 499 /), /POST \/v2\/models\/tiny\/infer 499 /);
  assert.equal(await undecoded(), 0, 'counted before the pool reached it');
  acA.abort();
  assert.equal((await a).name, 'AbortError');
  await abandonedOne(d);
  assert.equal(await undecoded(), 1);
  await servesRight(d);
  assert.equal(await undecoded(), 1);
  assert.equal((await d.stop()).code, 0);
});

test('a request decoded after the drain was cut short answers 503 and starts nothing', async (t) => {
  // one pool thread and one instance, held by a large request's batch: a
  // second request's decode waits behind it (not solo: the instance is
  // busy, --solo-max-weights 0). The drain is cut short (two SIGTERMs);
  // then the large one's client goes and its batch is skipped. The second
  // is decoded after the cut: it answers 503 as a queued one does, and no
  // batch of it runs for the stop to wait for.
  const d = await start({ t, args: ['--threads', '1', '--instances', '1', '--solo-max-weights', '0', '--deadline-ms', '600000'] });
  const acA = new AbortController();
  const a = bigSdpa.call(d, acA.signal).catch((e) => e);
  await bigRunning(d, a);
  const x = Array.from({ length: 8 }, (_, i) => i * 0.1);
  const b = post(`${d.url}/v2/models/sdpa/infer`, JSON.stringify({
    inputs: ['q', 'k', 'v'].map((n) => ({ name: n, datatype: 'FP32', shape: [2, 4], data: x })) }));
  for (let i = 0; (await poolJobs(d)) < 2; i++) {
    assert.ok(i < 400 * SLOW, "the second request's decode never queued");
    await sleep(10);
  }
  d.proc.kill('SIGTERM');
  await d.logged(/draining/);
  d.proc.kill('SIGTERM');
  await d.logged(/drain cut short/);
  acA.abort();
  assert.equal((await a).name, 'AbortError');
  const rb = await b;
  assert.equal(rb.status, 503, JSON.stringify(rb.json));
  assert.match(rb.json.error, /shut down before this request ran/);
  assert.deepEqual(await d.exit, { code: 0, sig: null }, d.log());
  assert.doesNotMatch(d.log(), /sdpa\/infer 200 /, 'no answer computed after the cut');
  await d.stop();
});

test('SIGTERM with requests in flight: all complete, exit code 0', async (t) => {
  // 10 s batch delay: the requests are queued when the signal comes; the
  // drain runs them at once
  const d = await start({ t, args: ['--batch-delay-us', '10000000', '--max-batch', '64'] });
  const reqs = [0, 1, 2, 3, 4].map((i) => infer(d, 'tiny', xreq(`t${i}`)));
  await waitPending(d, 'tiny', 5);
  const exit = d.stop('SIGTERM');
  const rs = await Promise.all(reqs);
  for (const r of rs) {
    assert.equal(r.status, 200);
    assert.ok(maxDiff(r.json.outputs[0].data, X.y) < 1e-5);
  }
  const e = await exit;
  for (let i = 0; i < 5; i++) {
    const us = await queuedUs(d, 200, `t${i}`);
    assert.ok(us < 10e6, `drain does not wait for the 10 s batch delay: t${i} queue_us=${us}`);
  }
  assert.equal(e.code, 0, d.log());
  assert.match(d.log(), /SIGTERM: draining/);
});

test('SIGHUP (a terminal that closed) drains as SIGTERM does; under nohup it changes nothing', async (t) => {
  const d = await start({ t });
  assert.equal((await infer(d, 'tiny', xreq('h'))).status, 200);
  const e = await d.stop('SIGHUP');
  assert.deepEqual(e, { code: 0, sig: null }, d.log());
  assert.match(d.log(), /SIGHUP: draining/);
  const n = await start({ t, wrap: ['nohup'] });
  n.proc.kill('SIGHUP');
  await sleep(300);
  assert.equal((await fetch(`${n.url}/v2/health/ready`)).status, 200, 'still ready after a SIGHUP under nohup');
  assert.doesNotMatch(n.log(), /draining/);
  const e2 = await n.stop('SIGTERM');
  assert.equal(e2.code, 0, n.log());
});

test('while draining: ready is 503, new work 503, and attnd exits 0 when the last client leaves', async (t) => {
  const d = await start({ t });
  // a client in the middle of sending its body keeps the drain waiting
  const sock = connect(d.port, '127.0.0.1');
  await new Promise((r) => sock.on('connect', r));
  sock.write('POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"inp');
  await sleep(100);
  d.proc.kill('SIGTERM');
  await sleep(200);
  const ready = await fetch(`${d.url}/v2/health/ready`);
  assert.equal(ready.status, 503);
  assert.match((await ready.json()).error, /draining/);
  const mready = await fetch(`${d.url}/v2/models/tiny/ready`);
  assert.equal(mready.status, 503);
  assert.match((await mready.json()).error, /draining/);
  assert.equal((await fetch(`${d.url}/v2/health/live`)).status, 200);
  const r = await infer(d, 'tiny', xreq('late'));
  assert.equal(r.status, 503);
  assert.ok(r.headers.get('retry-after'));
  assert.match(r.json.error, /draining/);
  const m = await (await fetch(`${d.url}/metrics`)).text();
  assert.match(m, /^attnd_inference_request_failure_total\{model="tiny",version="1",reason="rejected"\} 1$/m);
  // README: only new work is refused (inference, loads); reads and the
  // calls that start nothing on the pool are answered as usual
  const load = await fetch(`${d.url}/v2/repository/models/tiny/load`, { method: 'POST' });
  assert.equal(load.status, 503);
  assert.match((await load.json()).error, /draining/);
  for (const u of ['/v2', '/v2/models/tiny', '/v2/models/stats', '/v2/maps', '/v2/sequences'])
    assert.equal((await fetch(`${d.url}${u}`)).status, 200, u);
  assert.equal((await fetch(`${d.url}/v2/repository/index`, { method: 'POST' })).status, 200);
  assert.equal((await fetch(`${d.url}/v2/repository/models/tiny/unload`, { method: 'POST' })).status, 200);
  sock.destroy();
  const e = await d.exit; // no second signal: it leaves by itself
  assert.equal(e.code, 0, d.log());
  await d.stop();
});

test('while draining: an infer or load begun after the signal answers 503 from its head, its body unread, and does not hold the exit', async (t) => {
  // review: such a request was refused only once its body was whole, so
  // one whose body came slowly (or an upload) held the exit until
  // drain-ms passed, though nothing of it would run
  const d = await start({ t, args: ['--drain-ms', '20000'] });
  const open = async (head) => {
    const sock = connect(d.port, '127.0.0.1');
    t.after(() => sock.destroy());
    sock.on('error', () => {});
    await new Promise((r) => sock.on('connect', r));
    let text = '';
    sock.on('data', (b) => { text += b; });
    const closed = new Promise((r) => sock.on('close', () => r(text)));
    sock.write(head);
    return { sock, closed };
  };
  // a request begun before the signal, its body still coming, holds the drain
  const before = await open('POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"inp');
  await sleep(100);
  d.proc.kill('SIGTERM');
  assert.match(await d.logged(/draining/), /draining/);
  const inf = await open('POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{"in');
  const up = await open('POST /v2/repository/models/up/load HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{"\r\n');
  const bound = sleep(3000 * SLOW).then(() => 'no answer within 3 s');
  const a = await Promise.race([inf.closed, bound]);
  assert.match(a, /^HTTP\/1\.1 503 /, a);
  assert.match(a, /\r\nRetry-After: 1\r\n/i, a);
  assert.match(a, /"error":"server: draining \(shutting down\); retry on another replica"/, a);
  const b = await Promise.race([up.closed, bound]);
  assert.match(b, /^HTTP\/1\.1 503 /, b);
  assert.match(b, /"error":"server: draining \(shutting down\)"/, b);
  const m = await (await fetch(`${d.url}/metrics`)).text();
  assert.match(m, /^attnd_inference_request_failure_total\{model="tiny",version="1",reason="rejected"\} 1$/m);
  // the one begun before goes: nothing is left, attnd exits at once
  before.sock.destroy();
  const t0 = Date.now();
  const e = await Promise.race([d.exit, sleep(5000 * SLOW).then(() => null)]);
  assert.deepEqual(e, { code: 0, sig: null }, d.log());
  assert.ok(Date.now() - t0 < 2000 * SLOW, `exit ${Date.now() - t0} ms after the last request went`);
  assert.doesNotMatch(d.log(), /drain timeout/);
  await d.stop();
});

test('drain timeout: what is still queued gets 503, exit 0', async (t) => {
  const d = await start({ t, args: ['--drain-ms', '200'] });
  const sock = connect(d.port, '127.0.0.1');
  await new Promise((r) => sock.on('connect', r));
  sock.write('POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"inp');
  await sleep(100);
  const t0 = Date.now();
  const e = await d.stop('SIGTERM');
  sock.destroy();
  assert.equal(e.code, 0, d.log());
  // the drain timeout (logged) ended it; the bound only tells that from a
  // drain that waited for the half-sent request (a hang), so it scales
  // with the build (SLOW: a sanitized attnd on a loaded machine)
  assert.ok(Date.now() - t0 < 5000 * SLOW, `exit ${Date.now() - t0} ms after SIGTERM`);
  // the lines say what happened: a request in flight (its body still
  // coming; they counted computations, none here: "0 requests"), the
  // timeout (not a signal) cutting the drain, what that does (they said
  // "failing 0 unfinished requests", though the half-sent one got its
  // 503 and a running one is not failed), a stop after a cut drain
  assert.match(d.log(), /SIGTERM: draining \(1 request in flight, up to 200 ms\)\n/);
  assert.match(d.log(), /drain timeout: drain-ms \(200 ms\) passed with 1 request in flight: what still waits is answered 503 \(gRPC: UNAVAILABLE\) now, what runs ends and answers, nothing new starts\n/);
  assert.match(d.log(), /stopping \(the drain was cut short\)\n/);
  assert.doesNotMatch(d.log(), /drained/);
});

test('SIGTERM, then a burst of SIGTERMs through drain and exit: attnd exit code 0 every time', async (t) => {
  // libuv puts back SIG_DFL when its last signal handle closes: a signal
  // landing then used to kill attnd (exit code null) instead of its exit 0.
  // Two processes send signals as fast as they can until attnd is gone (on
  // the old binary about one round in 20 was killed).
  const killer = (pid) => spawn('perl', ['-e', '$p = shift; 1 while kill("TERM", $p);', String(pid)], { stdio: 'ignore' });
  for (let round = 0; round < Number(process.env.ATTND_SIGNAL_ROUNDS || 20); round++) {
    // a client in the middle of its body keeps the drain waiting
    const d = await start({ t });
    const sock = connect(d.port, '127.0.0.1');
    await new Promise((r) => sock.on('connect', r));
    sock.on('error', () => {});
    sock.write('POST /v2/models/tiny/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"inp');
    await sleep(50);
    d.proc.kill('SIGTERM');
    await sleep(round * 20); // the burst starts at a different point of the drain each round
    const ks = [killer(d.proc.pid), killer(d.proc.pid)];
    const e = await d.exit;
    await Promise.all(ks.map((k) => new Promise((r) => (k.exitCode !== null ? r() : k.on('exit', r)))));
    sock.destroy();
    assert.deepEqual(e, { code: 0, sig: null }, `round ${round}: ${d.log().slice(-1500)}`);
    await d.stop();
  }
});

const tinyDir = join(import.meta.dirname || new URL('.', import.meta.url).pathname, 'fixtures', 'models', 'tiny');
const upload = () => ({
  parameters: {
    config: readFileSync(join(tinyDir, 'config.json'), 'utf8'),
    'file:model.safetensors': readFileSync(join(tinyDir, 'model.safetensors')).toString('base64'),
  },
});

test('upload a model, restart the daemon, the model is still there', async (t) => {
  const d = await start({ t });
  const r = await post(`${d.url}/v2/repository/models/up1/load`, upload());
  assert.equal(r.status, 200, JSON.stringify(r.json));
  let y = await infer(d, 'up1', xreq('u'));
  assert.equal(y.status, 200);
  assert.ok(maxDiff(y.json.outputs[0].data, X.y) < 1e-5);
  const idx = await post(`${d.url}/v2/repository/index`, '{}');
  assert.deepEqual(idx.json.find((m) => m.name === 'up1'), { name: 'up1', version: '1', state: 'READY', reason: '' });
  // written atomically: the final files only, no temp or staging leftovers
  assert.deepEqual(readdirSync(join(d.dir, 'up1')).sort(), ['config.json', 'model.safetensors']);
  assert.deepEqual(readdirSync(d.dir).filter((f) => f.startsWith('.')), []);
  assert.equal((await d.stop('SIGTERM', true)).code, 0);
  t.after(() => rmSync(d.dir, { recursive: true, force: true }));
  const d2 = await start({ t, dir: d.dir });
  try {
    assert.equal((await fetch(`${d2.url}/v2/models/up1/ready`)).status, 200);
    y = await infer(d2, 'up1', xreq('u2'));
    assert.equal(y.status, 200);
    assert.ok(maxDiff(y.json.outputs[0].data, X.y) < 1e-5);
  } finally { assert.equal((await d2.stop()).code, 0); }
});

// A reload of a folder and an upload of the same name sent at once: they
// run one after the other, in the order they came (the upload never
// replaces the folder while the reload reads it), and the model served
// must be the one the repository holds (the upload's), or a restart
// would serve another.
test('a folder reload racing an upload of its name: the model served is the one the repository holds', async (t) => {
  const d = await start({ t });
  try {
    const N = 512; // d_model 512: a folder read for a while (4 MiB)
    const m = () => [[N, N], new Array(N * N).fill(0.001)];
    const big = safetensors({ W_q: m(), W_k: m(), W_v: m(), W_o: m() });
    const L = (b) => post(`${d.url}/v2/repository/models/race/load`, b);
    for (let round = 0; round < 6; round++) {
      rmSync(join(d.dir, 'race'), { recursive: true, force: true });
      mkdirSync(join(d.dir, 'race'));
      writeFileSync(join(d.dir, 'race', 'model.safetensors'), big);
      writeFileSync(join(d.dir, 'race', 'config.json'), '{"n_heads": 8}');
      const [p, u] = await Promise.all([L(''), L(upload())]);
      assert.equal(u.status, 200, JSON.stringify(u.json));
      // the reload read the big folder (before the upload) or the tiny one
      assert.equal(p.status, 200, JSON.stringify(p.json));
      const meta = await (await fetch(`${d.url}/v2/models/race`)).json();
      assert.equal(meta.parameters.d_model, 8, `round ${round}: the served model is not the repository's`);
      assert.equal(readFileSync(join(d.dir, 'race', 'config.json'), 'utf8'), upload().parameters.config);
    }
    const y = await infer(d, 'race', xreq('r'));
    assert.equal(y.status, 200);
    assert.ok(maxDiff(y.json.outputs[0].data, X.y) < 1e-5);
  } finally { assert.equal((await d.stop()).code, 0, d.log()); }
});

test('bad uploads and loads: status and the parameter named; nothing written', async (t) => {
  const d = await start({ t });
  const L = (m, b) => post(`${d.url}/v2/repository/models/${m}/load`, b);
  let r = await L('bad1', { parameters: { 'file:model.safetensors': '!!!' } });
  assert.equal(r.status, 400);
  assert.match(r.json.error, /parameters\["file:model\.safetensors"\]: not valid base64/);
  // valid weights with one '=' too many: padding past what the length needs
  r = await L('bad1b', { parameters: { ...upload().parameters, 'file:model.safetensors': upload().parameters['file:model.safetensors'] + '=' } });
  assert.equal(r.status, 400, JSON.stringify(r.json));
  assert.match(r.json.error, /not valid base64: \d '=' after \d+ characters of data; padding is/);
  r = await L('bad2', { parameters: { 'file:model.safetensors': Buffer.from('garbage!').toString('base64') } });
  assert.equal(r.status, 400);
  assert.match(r.json.error, /upload of model 'bad2'/);
  r = await L('bad3', { parameters: { config: '{"n_heads": 2}' } });
  assert.equal(r.status, 400);
  assert.match(r.json.error, /file:model\.safetensors"\]: missing/);
  r = await L('bad4', { parameters: { config: 'nope', 'file:model.safetensors': upload().parameters['file:model.safetensors'] } });
  assert.equal(r.status, 400);
  assert.match(r.json.error, /parameters\.config/);
  r = await L('bad5', { parameters: { 'file:other.bin': 'AAAA' } });
  assert.equal(r.status, 400);
  assert.match(r.json.error, /file:other\.bin/);
  // an array (JSON, but not an object): named, not 'not a JSON object ()'
  // (jansson parsed it: its error text is empty)
  r = await L('bad5b', []);
  assert.equal(r.status, 400);
  assert.equal(r.json.error, 'body: expected a JSON object, got an array');
  r = await L('bad5b', 7); // not parsed at all: jansson says why
  assert.equal(r.json.error, "body: not a JSON object ('[' or '{' expected near '7')");
  r = await L('bad5c', { parameters: { config: '[1]', 'file:model.safetensors': 'AAAA' } });
  assert.equal(r.json.error, 'parameters.config: expected a JSON object, got an array');
  r = await post(`${d.url}/v2/repository/index`, '[]');
  assert.equal(r.status, 400);
  assert.equal(r.json.error, 'body: expected a JSON object, got an array');
  r = await L('bad6', { parameters: { 'file:model.safetensors': 5 } });
  assert.equal(r.status, 400);
  assert.equal(r.json.error, 'parameters["file:model.safetensors"]: must be a base64 string');
  r = await L('bad7', { parameters: 5 });
  assert.equal(r.status, 400);
  assert.equal(r.json.error, 'parameters: must be an object');
  r = await L('..', {});
  assert.equal(r.status, 404); // fetch normalises '..' away: no such route
  r = await L('a%20b', {});
  assert.equal(r.status, 400);
  assert.match(r.json.error, /model name/);
  r = await L('absent', {});
  assert.equal(r.status, 404);
  assert.match(r.json.error, /model 'absent'/);
  r = await L('sdpa', {});
  assert.equal(r.status, 400);
  for (const n of ['bad1', 'bad2', 'bad3', 'bad4', 'bad5', 'bad6', 'bad7']) assert.equal(existsSync(join(d.dir, n)), false, n);
  assert.deepEqual(readdirSync(d.dir).filter((f) => f.startsWith('.')), []);
  const s = await (await fetch(`${d.url}/v2/models/absent/ready`));
  assert.equal(s.status, 404);
  // names that never loaded and have no folder leave nothing behind: not
  // in the index, no statistics, no series in /metrics, however many
  const metrics = async () => (await fetch(`${d.url}/metrics`)).text();
  const before = (await metrics()).length;
  for (let i = 0; i < 40; i++) assert.equal((await L(`ghost${i}`, {})).status, 404);
  // loads of one name in flight at once: the last to fail drops it
  for (const r of await Promise.all([0, 1, 2, 3, 4].map(() => L('ghost0', {})))) assert.equal(r.status, 404);
  const idx = await post(`${d.url}/v2/repository/index`, '');
  const names = idx.json.map((m) => m.name);
  for (const n of ['absent', 'ghost0', 'ghost39', 'bad1', 'bad2', 'bad3', 'bad4', 'bad5']) assert.ok(!names.includes(n), `${n} in the index: ${names}`);
  assert.equal((await fetch(`${d.url}/v2/models/ghost0/stats`)).status, 404);
  const m = await metrics();
  assert.ok(!/model="(ghost|absent|bad)/.test(m), 'a name that never loaded has series in /metrics');
  assert.ok(m.length <= before + 200, `/metrics grew from ${before} to ${m.length} bytes`);
  assert.equal((await d.stop()).code, 0);
});

test('unload: in-flight requests finish, then 404; load brings it back', async (t) => {
  // The unload is answered at once; f, waiting out its batch delay, when
  // the delay ends. On a slow or loaded machine f could be answered before
  // the unload was even sent (nothing in flight to test): that round is
  // run again with twice the delay, three times at most.
  let d, f;
  for (let us = 300000, tries = 1; ; us *= 2, tries++) {
    d = await start({ t, args: ['--batch-delay-us', String(us)] });
    let answered = false;
    const inflight = infer(d, 'tiny', xreq('f')).then((r) => { answered = true; return r; });
    for (let i = 0; !answered && (await pending(d, 'tiny')) !== 1; i++) {
      assert.ok(i < 500 * SLOW, 'f never pending');
      await sleep(10);
    }
    const u = answered ? null : await post(`${d.url}/v2/repository/models/tiny/unload`, '');
    const first = !answered;
    f = await inflight;
    if (first) {
      assert.equal(u.status, 200);
      break;
    }
    assert.ok(tries < 3, `f was answered before the unload came, ${tries} times (batch delay up to ${us} us)`);
    console.log(`# f answered before the unload (batch delay ${us} us): again, longer`);
    assert.equal((await d.stop()).code, 0);
  }
  assert.equal(f.status, 200);
  assert.ok(maxDiff(f.json.outputs[0].data, X.y) < 1e-5);
  const r = await infer(d, 'tiny', xreq('g'));
  assert.equal(r.status, 404);
  // it says how to bring it back (it said only "not loaded")
  const back = "model 'tiny': not loaded (unloaded); load it with POST /v2/repository/models/tiny/load";
  assert.equal(r.json.error, back);
  assert.equal((await fetch(`${d.url}/v2/models/tiny/ready`)).status, 404);
  assert.equal((await fetch(`${d.url}/v2/health/ready`)).status, 200, 'an unloaded model is not expected');
  // its metadata and configuration name it as not loaded, not as unknown
  for (const p of ['', '/config']) {
    const m = await fetch(`${d.url}/v2/models/tiny${p}`);
    assert.equal(m.status, 404, p);
    assert.equal((await m.json()).error, back, p);
  }
  const idx = await post(`${d.url}/v2/repository/index`, '');
  assert.deepEqual(idx.json.find((m) => m.name === 'tiny'), { name: 'tiny', version: '1', state: 'UNAVAILABLE', reason: 'unloaded' });
  assert.equal((await post(`${d.url}/v2/repository/models/tiny/unload`, '')).status, 404);
  assert.equal((await post(`${d.url}/v2/repository/models/sdpa/unload`, '')).status, 400);
  assert.equal((await post(`${d.url}/v2/repository/models/tiny/load`, '')).status, 200);
  assert.equal((await infer(d, 'tiny', xreq('h'))).status, 200);
  // a body without upload parameters (re)loads the folder as well
  assert.equal((await post(`${d.url}/v2/repository/models/tiny/load`, { parameters: {} })).status, 200);
  assert.equal((await infer(d, 'tiny', xreq('i'))).status, 200);
  assert.equal((await d.stop()).code, 0);
});

test('index: a model whose load error is cut inside a UTF-8 character is still listed, with its reason', async (t) => {
  const d = await start({ t });
  try {
    // the error quotes the key cut at 64 bytes: 'x' then 2-byte characters
    // puts the cut inside one, and jansson refuses a string that is not UTF-8
    mkdirSync(join(d.dir, 'bad'));
    writeFileSync(join(d.dir, 'bad', 'model.safetensors'), readFileSync(join(d.dir, 'tiny', 'model.safetensors')));
    writeFileSync(join(d.dir, 'bad', 'config.json'), JSON.stringify({ [`x${'\u00e9'.repeat(40)}`]: 1 }));
    const load = await post(`${d.url}/v2/repository/models/bad/load`, '');
    assert.ok(load.status >= 400 && load.status < 500, `${load.status} ${load.text}`);
    const idx = await post(`${d.url}/v2/repository/index`, '');
    assert.equal(idx.status, 200);
    const bad = idx.json.find((m) => m.name === 'bad');
    assert.ok(bad, `listed: ${JSON.stringify(idx.json)}`);
    assert.equal(bad.state, 'UNAVAILABLE');
    assert.match(bad.reason, /unknown key 'x\u00e9+/);
    assert.ok(idx.json.find((m) => m.name === 'tiny' && m.state === 'READY'));
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('index: a folder added after start is listed as not loaded; a stray file is not', async (t) => {
  const d = await start({ t });
  try {
    mkdirSync(join(d.dir, 'later'));
    writeFileSync(join(d.dir, 'notes.txt'), 'not a model\n');
    const idx = await post(`${d.url}/v2/repository/index`, '');
    assert.equal(idx.status, 200);
    assert.deepEqual(idx.json.find((m) => m.name === 'later'), { name: 'later', version: '1', state: 'UNAVAILABLE', reason: 'not loaded' });
    assert.equal(idx.json.find((m) => m.name === 'notes.txt'), undefined, 'a file is not a model folder');
    assert.ok(idx.json.find((m) => m.name === 'tiny' && m.state === 'READY'));
    const ready = await post(`${d.url}/v2/repository/index`, '{"ready": true}');
    assert.equal(ready.json.find((m) => m.name === 'later'), undefined);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('index: a model unloaded (or failed) whose folder is then removed is no longer listed; its reason names it once', async (t) => {
  const d = await start({ t });
  try {
    cpSync(join(d.dir, 'tiny'), join(d.dir, 'tiny2'), { recursive: true });
    assert.equal((await post(`${d.url}/v2/repository/models/tiny2/load`, '')).status, 200);
    assert.equal((await post(`${d.url}/v2/repository/models/tiny2/unload`, '')).status, 200);
    const names = async () => (await post(`${d.url}/v2/repository/index`, '')).json.map((m) => m.name);
    assert.ok((await names()).includes('tiny2'), 'unloaded, its folder still there: listed');
    rmSync(join(d.dir, 'tiny2'), { recursive: true });
    assert.deepEqual((await names()).filter((n) => n.startsWith('tiny')), ['tiny']);
    // a load now fails (404, naming the model once) and the reason is kept
    // for the metadata, without the name a second time
    const load = await post(`${d.url}/v2/repository/models/tiny2/load`, '');
    assert.equal(load.status, 404);
    assert.match(load.json.error, /^model 'tiny2': \S+\/tiny2: no such folder; a model is a folder/);
    assert.deepEqual((await names()).filter((n) => n.startsWith('tiny')), ['tiny']);
    const meta = await fetch(`${d.url}/v2/models/tiny2`);
    assert.equal(meta.status, 404);
    assert.match((await meta.json()).error, /^model 'tiny2': not loaded \(\S+\/tiny2: no such folder; a model is a folder/);
    // its statistics stay (it had loaded): the index is what the repository holds
    assert.equal((await fetch(`${d.url}/v2/models/tiny2/stats`)).status, 200);
    // loaded models stay listed whatever happens to their folder
    cpSync(join(d.dir, 'tiny'), join(d.dir, 'tiny3'), { recursive: true });
    assert.equal((await post(`${d.url}/v2/repository/models/tiny3/load`, '')).status, 200);
    rmSync(join(d.dir, 'tiny3'), { recursive: true });
    const idx = (await post(`${d.url}/v2/repository/index`, '')).json;
    assert.deepEqual(idx.find((m) => m.name === 'tiny3'), { name: 'tiny3', version: '1', state: 'READY', reason: '' });
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('API key: infer and repository need the bearer token; health, metadata, metrics stay open', async (t) => {
  const d = await start({ t, env: { ATTND_API_KEY: 's3cret' } });
  const auth = { Authorization: 'Bearer s3cret' };
  let r = await infer(d, 'tiny', xreq('k'));
  assert.equal(r.status, 401);
  assert.equal(r.headers.get('www-authenticate'), 'Bearer');
  assert.match(r.json.error, /Authorization/);
  r = await infer(d, 'tiny', xreq('k'), { Authorization: 'Bearer s3cre' });
  assert.equal(r.status, 401);
  r = await infer(d, 'tiny', xreq('k'), { Authorization: 'Basic s3cret' });
  assert.equal(r.status, 401);
  r = await infer(d, 'tiny', xreq('k'), auth);
  assert.equal(r.status, 200);
  assert.equal((await post(`${d.url}/v2/repository/index`, '')).status, 401);
  assert.equal((await post(`${d.url}/v2/repository/index`, '', auth)).status, 200);
  assert.equal((await post(`${d.url}/v2/repository/models/tiny/unload`, '')).status, 401);
  for (const p of ['/v2/health/live', '/v2/health/ready', '/v2', '/v2/models/tiny', '/v2/models/tiny/ready', '/metrics', '/v2/models/stats'])
    assert.equal((await fetch(d.url + p)).status, 200, p);
  assert.equal((await d.stop()).code, 0);
});

test('CORS: configured origins only; preflight answered', async (t) => {
  const d = await start({ t, args: ['--cors-origins', 'http://a.example, http://b.example'], env: { ATTND_API_KEY: 'k' } });
  let r = await fetch(`${d.url}/v2`, { headers: { Origin: 'http://b.example' } });
  assert.equal(r.headers.get('access-control-allow-origin'), 'http://b.example');
  assert.equal(r.headers.get('vary'), 'Origin');
  r = await fetch(`${d.url}/v2`, { headers: { Origin: 'http://evil.example' } });
  assert.equal(r.headers.get('access-control-allow-origin'), null);
  r = await fetch(`${d.url}/v2/models/tiny/infer`, {
    method: 'OPTIONS',
    headers: { Origin: 'http://a.example', 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization, content-type' },
  });
  assert.equal(r.status, 204);
  assert.equal(r.headers.get('access-control-allow-origin'), 'http://a.example');
  assert.match(r.headers.get('access-control-allow-methods'), /POST/);
  assert.match(r.headers.get('access-control-allow-headers'), /Authorization/);
  assert.match(r.headers.get('access-control-allow-headers'), /Inference-Header-Content-Length/);
  r = await infer(d, 'tiny', xreq('c'), { Origin: 'http://a.example' }); // errors carry CORS too
  assert.equal(r.status, 401);
  assert.equal(r.headers.get('access-control-allow-origin'), 'http://a.example');
  assert.equal((await d.stop()).code, 0);
  const e = await start({ t });
  r = await fetch(`${e.url}/v2`, { headers: { Origin: 'http://a.example' } });
  assert.equal(r.headers.get('access-control-allow-origin'), null, 'no CORS unless configured');
  assert.equal((await e.stop()).code, 0);
});
