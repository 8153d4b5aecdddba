// seq_idle.test.mjs - --sequence-idle-ms as a client sees it: a sequence
// with no step for that long is dropped, and a step that fails is still a
// step. The client the 503 of a full K/V budget tells to "retry later"
// keeps its sequence while it retries (README, Sequences, "Lifetime").
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import net from 'node:net';
import { test } from 'node:test';
import { frame, ld, packedI64, str } from '../grpc/wire.mjs';
import { SLOW, infer, requestsUsed, start } from './helper.mjs';
import { D, checkStep, full, gqaModels, grpcCall as seqGrpcCall, metric, stepBody, tokens } from './seq_helper.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// a sanitized attnd on a loaded machine took 0.9 s past the start of r
// (f's start between) before r's first retry came: the idle period a
// retrying client keeps its sequence in must outlast a step's round trip
const IDLE = 800 * SLOW;

// The client's steps keep its sequences only if they come within the
// idle period, and a loaded machine can hold the client (or attnd reading
// it) longer than that between two steps: then a drop proves nothing.
// retryKeeps(idle) answers false when a step (or GET) whose answer was
// not the one asked for came idle or more after the send of r's or f's
// step before it (nothing else could have kept them), and the test runs
// it again with twice the idle period, twice at most.
class Stalled extends Error {}
async function retryKeeps(idle) {
  // a page is 64 tokens x 2 kv heads x (4 + 4) floats = 4096 bytes: the
  // start's 64 tokens fill a page, its 65th needs a second one, which
  // another sequence, f, holds (a step the whole budget could never take
  // is 400, not "retry later"); f's steps past its end keep it live
  const d = await start({ dir: gqaModels(), args: ['--kv-bytes', '8192', '--sequence-idle-ms', String(idle)] });
  const sent = {};
  // step(id, body): a step of sequence id; want(ok, msg) asserts ok unless
  // a sequence went unstepped for idle or more (Stalled)
  const step = async (id, body) => {
    const t = Date.now(), r = await infer(d, 'gqa', body);
    // (r's 503 needs f live too: any of them)
    const stalled = Object.values(sent).some((t0) => Date.now() - t0 >= idle);
    sent[id] = t;
    return { ...r, want: (ok, msg) => { if (!ok && stalled) throw new Stalled(); assert.ok(ok, msg); } };
  };
  try {
    const xs = tokens(65, 11);
    const ref = await full(d, xs);
    const y = [{ name: 'y' }];
    checkStep(await step('r', stepBody('r', xs.slice(0, 64 * D), { start: true, outputs: y })), ref, 0, 64, 'start');
    checkStep(await step('f', stepBody('f', xs.slice(0, 64 * D), { start: true, outputs: y })), ref, 0, 64, 'f');
    const keepF = async () => {
      const r = await step('f', stepBody('f', xs.slice(64 * D), { outputs: y, extra: { sequence_position: 65 } }));
      r.want(r.status === 409, `f: ${JSON.stringify(r.json)}`);
    };
    // a step every 100 ms for 2.5 idle periods: each one 503, none 400
    const until = Date.now() + 2.5 * idle;
    let n = 0;
    while (Date.now() < until) {
      const r = await step('r', stepBody('r', xs.slice(64 * D), { outputs: y }));
      r.want(r.status === 503, `retry ${n}: ${JSON.stringify(r.json)}`);
      assert.match(r.json.error, /kv-bytes\) and cannot take sequence 'r' from 64 to 65 tokens; end sequences or retry later/);
      await keepF();
      n++;
      await sleep(100);
    }
    const g = await fetch(`${d.url}/v2/sequences/r`);
    const body = await g.text();
    if (g.status !== 200 && Date.now() - sent.r >= idle) throw new Stalled();
    assert.equal(g.status, 200, body);
    assert.equal(JSON.parse(body).length, 64);
    assert.equal(await metric(d, 'attnd_sequences_dropped_total', 'gqa', ',reason="idle"'), 0);
    // steps past its end (409) are steps too
    const until2 = Date.now() + 1.5 * idle;
    while (Date.now() < until2) {
      const r = await step('r', stepBody('r', xs.slice(64 * D), { outputs: y, extra: { sequence_position: 65 } }));
      r.want(r.status === 409, JSON.stringify(r.json));
      await keepF();
      await sleep(100);
    }
    const g2 = await fetch(`${d.url}/v2/sequences/r`);
    const f2 = await fetch(`${d.url}/v2/sequences/f`, { method: 'DELETE' });
    if ((g2.status !== 200 || f2.status !== 200) && Date.now() - Math.min(sent.r, sent.f) >= idle) throw new Stalled();
    assert.equal(g2.status, 200);
    assert.equal(f2.status, 200);
    // nothing for the idle period (and a sweep): gone, saying so (GET is
    // not a step; the one that went is remembered for the idle period)
    const t0 = Date.now();
    let gone;
    while ((gone = await fetch(`${d.url}/v2/sequences/r`)).status === 200) {
      assert.ok(Date.now() - t0 < 10 * idle, 'still live');
      await sleep(50);
    }
    assert.equal(gone.status, 404);
    assert.match(await gone.text(), /at 64 tokens: idle past sequence-idle-ms/);
    assert.equal(await metric(d, 'attnd_sequences_dropped_total', 'gqa', ',reason="idle"'), 1);
    assert.equal(await metric(d, 'attnd_kv_bytes'), 0);
    return true;
  } catch (e) {
    if (e instanceof Stalled) return false;
    throw e;
  } finally { assert.equal((await d.stop()).code, 0); }
}

test('a client retrying a 503 (K/V budget full) as told keeps its sequence; one that sends nothing loses it', async () => {
  let idle = IDLE;
  for (let tries = 1; !(await retryKeeps(idle)); tries++, idle *= 2)
    assert.ok(tries < 3, `the client itself went idle-ms without a step, ${tries} times (idle up to ${idle} ms)`);
});

/** POST body to path on d, its head and first `split` bytes now, the rest
 * when rest() is called; done resolves {status, json} once answered. */
function slowPost(d, path, body, split) {
  const s = net.connect(d.port, '127.0.0.1');
  const b = Buffer.from(JSON.stringify(body));
  let got = Buffer.alloc(0);
  const done = new Promise((resolve, reject) => {
    s.on('data', (x) => { got = Buffer.concat([got, x]); });
    s.on('error', reject);
    s.on('close', () => {
      const text = got.toString();
      const i = text.indexOf('\r\n\r\n');
      let json = null;
      try { json = JSON.parse(text.slice(i + 4)); } catch { json = text; }
      resolve({ status: Number(text.slice(9, 12)), json });
    });
  });
  s.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${b.length}\r\nConnection: close\r\n\r\n`);
  s.write(b.subarray(0, split));
  return { rest: () => s.write(b.subarray(split)), done };
}

test('a step whose request came before the idle deadline keeps its sequence while its body still comes', async () => {
  // sweeps every idle / 4 (at most once a second): the step's head comes
  // half a period after the start's answer, the rest of its body 0.4 of a
  // period past its deadline, a sweep after it passed (and 0.6 before the
  // one more period a step on its way may keep it)
  const idle = 2000 * SLOW;
  const d = await start({ dir: gqaModels(), args: ['--sequence-idle-ms', String(idle)] });
  try {
    const xs = tokens(4, 12);
    const ref = await full(d, xs);
    checkStep(await infer(d, 'gqa', stepBody('slow', xs.slice(0, 3 * D), { start: true })), ref, 0, 3, 'start');
    const t0 = Date.now();
    await sleep(idle / 2);
    const p = slowPost(d, '/v2/models/gqa/infer', stepBody('slow', xs.slice(3 * D)), 40);
    await sleep(t0 + 1.4 * idle - Date.now());
    // its step is on its way: not dropped (it was, before: 404 idle)
    const g = await fetch(`${d.url}/v2/sequences/slow`);
    assert.equal(g.status, 200, await g.text());
    p.rest();
    checkStep(await p.done, ref, 3, 1, 'the slow step');
    assert.equal(await metric(d, 'attnd_sequences_dropped_total', 'gqa', ',reason="idle"'), 0);
    // and with no step coming it still goes
    const t1 = Date.now();
    while ((await fetch(`${d.url}/v2/sequences/slow`)).status === 200) {
      assert.ok(Date.now() - t1 < 10 * idle, 'still live');
      await sleep(50);
    }
    assert.equal(await metric(d, 'attnd_sequences_dropped_total', 'gqa', ',reason="idle"'), 1);
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('GET /v2/sequences/{id} and the list say the idle limit (sequence-idle-ms) beside idle_ms: when the server drops it', async () => {
  // (no field said it before: a client could not tell when its sequence goes)
  const idle = 60000;
  const d = await start({ dir: gqaModels(), args: ['--sequence-idle-ms', String(idle)] });
  try {
    const xs = tokens(2, 13);
    const r = await infer(d, 'gqa', stepBody('lim', xs, { start: true, outputs: [{ name: 'y' }] }));
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const g = await fetch(`${d.url}/v2/sequences/lim`);
    const one = await g.json();
    assert.equal(g.status, 200, JSON.stringify(one));
    assert.equal(one.idle_limit_ms, idle);
    assert.ok(Number.isInteger(one.idle_ms) && one.idle_ms >= 0 && one.idle_ms < idle, JSON.stringify(one));
    const { sequences } = await (await fetch(`${d.url}/v2/sequences`)).json();
    assert.equal(sequences.length, 1);
    assert.equal(sequences[0].idle_limit_ms, idle);
    // the GETs are no steps: idle_ms still counts from the start's end
    await sleep(50);
    const again = await (await fetch(`${d.url}/v2/sequences/lim`)).json();
    assert.ok(again.idle_ms >= one.idle_ms, `${again.idle_ms} after ${one.idle_ms}`);
  } finally { assert.equal((await d.stop()).code, 0); }
});

// README "Routes": the sweep comes a quarter of --sequence-idle-ms apart,
// at least 10 ms and at most 1 s
const sweepOf = (idle) => Math.min(1000, Math.max(10, Math.floor(idle / 4)));

test('GET /v2/sequences[/{id}] say the idle sweep\'s period (idle_sweep_ms), and an idle sequence is gone within its limit and a sweep', async () => {
  // (the page guessed it from idle_limit_ms with a copy of the server's
  // rule: no field said it)
  for (const idle of [1200 * SLOW, 20000]) {
    const d = await start({ dir: gqaModels(), args: ['--sequence-idle-ms', String(idle)] });
    try {
      const sent = Date.now(); // before its last activity: the start's
      const r = await infer(d, 'gqa', stepBody('sw', tokens(2, 17), { start: true, outputs: [{ name: 'y' }] }));
      assert.equal(r.status, 200, JSON.stringify(r.json));
      const one = await (await fetch(`${d.url}/v2/sequences/sw`)).json();
      assert.equal(one.idle_limit_ms, idle);
      assert.equal(one.idle_sweep_ms, sweepOf(idle), JSON.stringify(one));
      const { sequences } = await (await fetch(`${d.url}/v2/sequences`)).json();
      assert.equal(sequences[0].idle_sweep_ms, sweepOf(idle));
      if (idle > 2000 * SLOW) continue; // (the long one: its field only)
      // left alone, it is live until its limit (never dropped before:
      // the start was sent at `sent`, so its idle time began after it),
      // then gone at a sweep. How soon after the limit is not asserted:
      // the sweep's timer waits for the loop's turn, long on a loaded
      // machine (a sanitizer's build); the bound is a hang's, 20 sweeps
      // and 20 s (x SLOW)
      const until = sent + idle + (20 * one.idle_sweep_ms + 20000) * SLOW;
      let last = one;
      for (;;) {
        const g = await fetch(`${d.url}/v2/sequences/sw`);
        if (g.status === 404) {
          assert.ok(Date.now() - sent >= idle, `gone ${Date.now() - sent} ms after its start was sent: before its limit (${idle})`);
          break;
        }
        last = await g.json();
        assert.ok(Date.now() < until, `still live at idle_ms ${last.idle_ms}: its limit ${idle}, sweep ${one.idle_sweep_ms}`);
        await sleep(5);
      }
      assert.equal(await metric(d, 'attnd_sequences_dropped_total', 'gqa', ',reason="idle"'), 1);
    } finally { assert.equal((await d.stop()).code, 0); }
  }
});

/** A gRPC step of sequence id (rows xs): a ModelInferRequest for gqa,
 * x as raw_input_contents, y its one output. */
function grpcStep(id, xs) {
  const param = ld(4, Buffer.concat([str(1, 'sequence_id'), ld(2, str(3, id))]));
  return Buffer.concat([str(1, 'gqa'), param,
    ld(5, Buffer.concat([str(1, 'x'), str(2, 'FP32'), packedI64(3, [1, xs.length / D, D])])),
    ld(6, str(1, 'y')), ld(7, Buffer.from(new Float32Array(xs).buffer))]);
}

test('a gRPC step whose message began before the idle deadline keeps its sequence while the message still comes (unary and stream)', async () => {
  // as the REST case above: the step's first bytes come half a period
  // after the start's answer, the rest 0.4 of a period past its
  // deadline; a gRPC step counted from its whole message, and a message
  // still coming was not seen by the sweep
  const idle = 2000 * SLOW;
  const d = await start({ dir: gqaModels(), grpc: true, args: ['--sequence-idle-ms', String(idle)] });
  const session = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  try {
    const xs = tokens(4, 15);
    const calls = [['gu', 'ModelInfer'], ['gs', 'ModelStreamInfer']];
    for (const [id] of calls)
      assert.equal((await infer(d, 'gqa', stepBody(id, xs.slice(0, 3 * D), { start: true }))).status, 200);
    const t0 = Date.now();
    await sleep(idle / 2);
    const sent = calls.map(([id, method]) => {
      const req = session.request({ ':method': 'POST', ':path': `/inference.GRPCInferenceService/${method}`,
        'content-type': 'application/grpc', te: 'trailers' });
      const msg = frame(grpcStep(id, xs.slice(3 * D)));
      let trailers = {};
      req.on('trailers', (t) => { trailers = t; });
      const done = new Promise((res, rej) => { req.on('error', rej); req.on('close', () => res(trailers)); req.resume(); });
      req.write(msg.subarray(0, 40));
      return { id, rest: () => req.end(msg.subarray(40)), done };
    });
    await sleep(t0 + 1.4 * idle - Date.now());
    for (const { id } of sent) {
      const g = await fetch(`${d.url}/v2/sequences/${id}`);
      assert.equal(g.status, 200, `${id}: ${await g.text()}`);
    }
    for (const c of sent) c.rest();
    for (const c of sent) {
      const t = await c.done;
      assert.equal(t['grpc-status'], '0', `${c.id}: ${decodeURIComponent(t['grpc-message'] || '')}`);
      assert.equal((await (await fetch(`${d.url}/v2/sequences/${c.id}`)).json()).length, 4);
    }
    assert.equal(await metric(d, 'attnd_sequences_dropped_total', 'gqa', ',reason="idle"'), 0);
  } finally {
    session.close();
    assert.equal((await d.stop()).code, 0);
  }
});

/** A step refused for a full queue, retried as the 503 says, its id in
 * the Attnd-Sequence-Id header too when hdr is set (else only in its
 * body), keeps its sequence: a stateless request held in the queue by
 * --batch-delay-us (it waits for company none can bring: --queue-size 1
 * refuses the rest) fills it for 3 idle periods, however fast the machine
 * computes; the client retries its step every 100 ms. */
async function queueFullRetries(withHeader) {
  const idle = 700 * SLOW;
  const hold = Math.min(10000, 3 * idle);
  const d = await start({ dir: gqaModels(), args: ['--sequence-idle-ms', String(idle), '--queue-size', '1', '--instances', '1',
    '--batch-delay-us', String(hold * 1000)] });
  try {
    const xs = tokens(4, 14);
    const hdr = withHeader ? { 'Attnd-Sequence-Id': 'qf' } : {};
    const started = await infer(d, 'gqa', stepBody('qf', xs.slice(0, 3 * D), { start: true }), hdr);
    assert.equal(started.status, 200, JSON.stringify(started.json));
    // the held one is the whole sequence's stateless request: its answer
    // is the reference the steps are checked against (each request waits
    // out the batch delay, so one fewer than a reference of its own)
    const held = full(d, xs);
    held.catch(() => {}); // awaited below
    // until the held one is admitted (its body whole): it fills the queue
    const pending = async () => /^attnd_inference_pending_requests\{model="gqa",version="1"\} 1$/m
      .test(await (await fetch(`${d.url}/metrics`)).text());
    // (10 s times SLOW: a bound for a hang, not a speed)
    for (const until = Date.now() + 10000 * SLOW; !(await pending()) && Date.now() < until;) await sleep(5);
    let r = await infer(d, 'gqa', stepBody('qf', xs.slice(3 * D)), hdr);
    assert.equal(r.status, 503, JSON.stringify(r.json));
    // retried until the held one has run; past 1.6 idle periods of
    // refusals (a sweep drops an idle one within 1.25) its sequence is
    // still there (gone before)
    const t0 = Date.now();
    let checked = false;
    while (r.status === 503) {
      assert.match(r.json.error, /queue: model 'gqa' has 1 request in progress \(queue-size\); retry later/);
      if (!checked && Date.now() - t0 > 1.6 * idle) {
        const g = await fetch(`${d.url}/v2/sequences/qf`);
        assert.equal(g.status, 200, await g.text());
        checked = true;
      }
      // the batch delay ends the hold at `hold` ms: 30 s times SLOW is a
      // bound for a held request that never runs (a hang), not a speed
      // (120 s unscaled was the default build's whole-file timeout)
      assert.ok(Date.now() - t0 < 30000 * SLOW, 'the held request never ran');
      await sleep(100);
      r = await infer(d, 'gqa', stepBody('qf', xs.slice(3 * D)), hdr);
    }
    assert.ok(checked, 'the held request ran too soon to fill the queue for 1.6 idle periods');
    const ref = await held; // (200, or it throws)
    checkStep(started, ref, 0, 3, 'start');
    checkStep(r, ref, 3, 1, 'the step, once the queue has room');
  } finally { assert.equal((await d.stop()).code, 0); }
}

test('a step refused for a full queue (queue-size) with its id in the Attnd-Sequence-Id header keeps its sequence while it retries', () => queueFullRetries(true));

test('a step refused for a full queue with its id only in its body keeps its sequence too (its sequence_id read without a decode)', () => queueFullRetries(false));

test('a step refused for memory-budget before its body was read keeps its sequence while it retries: its id in the Attnd-Sequence-Id header (REST) or metadata (gRPC)', async () => {
  // a request whose head announced 99000 bytes holds them of the 150000
  // of memory-budget (beside the gRPC connection's own 81920 and two REST
  // ones' 36864 each: the holder's and this test's fetches'; were a third
  // open, 60000 would still fit once the 99000 go) while its
  // body never comes (min-body-rate 0): a
  // step of 60000 bytes (padded with a key the decoder ignores) is
  // refused from its head, 503 "retry shortly", until it goes
  const idle = 700 * SLOW;
  const d = await start({ dir: gqaModels(), grpc: true, args: ['--sequence-idle-ms', String(idle), '--memory-budget', String(150000 + 81920 + 2 * 36864),
    '--max-json-body', '100000', '--request-memory', '100000', '--max-body', '100000', '--min-body-rate', '0'] });
  const session = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  const holder = net.connect(d.port, '127.0.0.1');
  try {
    const xs = tokens(4, 16);
    for (const id of ['mr', 'mg'])
      assert.equal((await infer(d, 'gqa', stepBody(id, xs.slice(0, 3 * D), { start: true }))).status, 200);
    const rest = () => infer(d, 'gqa', { ...stepBody('mr', xs.slice(3 * D)), pad: 'p'.repeat(60000) }, { 'Attnd-Sequence-Id': 'mr' });
    const grpcMsg = Buffer.concat([grpcStep('mg', xs.slice(3 * D)), ld(99, Buffer.alloc(60000))]);
    const grpcCall = () => seqGrpcCall(session, grpcMsg, { 'attnd-sequence-id': 'mg' });
    // (an infer of sdpa: a body still coming to gqa might be a step)
    holder.write('POST /v2/models/sdpa/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
      'Content-Length: 99000\r\n\r\n{');
    const used = async () => {
      const m = await (await fetch(`${d.url}/metrics`)).text();
      const g = (n) => Number(new RegExp(`^${n} (\\d+)$`, 'm').exec(m)[1]);
      return requestsUsed(m);
    };
    // (10 s times SLOW: a bound for a hang, not a speed)
    for (const until = Date.now() + 10000 * SLOW; (await used()) < 99000 && Date.now() < until;) await sleep(5);
    const t0 = Date.now();
    while (Date.now() - t0 < 1.6 * idle) {
      const r = await rest();
      assert.equal(r.status, 503, JSON.stringify(r.json));
      assert.match(r.json.error, /memory-budget\) is in use; retry shortly/);
      const g = await grpcCall();
      assert.equal(g.code, 14, g.msg);
      assert.match(g.msg, /memory-budget\) is in use; retry shortly/);
      await sleep(100);
    }
    // past 1.6 idle periods of refusals (a sweep drops an idle one
    // within 1.25): both still there (dropped before)
    for (const id of ['mr', 'mg']) {
      const g = await fetch(`${d.url}/v2/sequences/${id}`);
      assert.equal(g.status, 200, `${id}: ${await g.text()}`);
    }
    holder.destroy();
    for (const until = Date.now() + 10000 * SLOW; (await used()) >= 99000 && Date.now() < until;) await sleep(5);
    assert.equal((await rest()).status, 200);
    assert.equal((await grpcCall()).code, 0);
    for (const id of ['mr', 'mg'])
      assert.equal((await (await fetch(`${d.url}/v2/sequences/${id}`)).json()).length, 4);
  } finally {
    holder.destroy();
    session.close();
    assert.equal((await d.stop()).code, 0);
  }
});

test('a gRPC step whose deadline passed before its message came (504) still counts as a step', async () => {
  // its grpc-timeout (50 ms) passes before its message is sent: answered
  // DEADLINE_EXCEEDED undecoded; the client tries again, as a step
  // answered 504 after its decode does, for 1.6 idle periods
  const idle = 700 * SLOW;
  const d = await start({ dir: gqaModels(), grpc: true, args: ['--sequence-idle-ms', String(idle)] });
  const session = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  try {
    const xs = tokens(4, 17);
    assert.equal((await infer(d, 'gqa', stepBody('dl', xs.slice(0, 3 * D), { start: true }))).status, 200);
    // the call counts in memory-budget (3072 bytes, beside its
    // connection's 81920) once attnd has read its HEADERS, which start its
    // deadline: its message goes 100 ms after that, not 100 ms after the
    // HEADERS were sent (a sanitized attnd on a loaded machine read both
    // in one go, and the step ran: OK, not DEADLINE_EXCEEDED)
    const used = async () => Number(/^attnd_memory_budget_used_bytes (\d+)$/m.exec(await (await fetch(`${d.url}/metrics`)).text())[1]);
    const late = () => new Promise((res, rej) => {
      const req = session.request({ ':method': 'POST', ':path': '/inference.GRPCInferenceService/ModelInfer',
        'content-type': 'application/grpc', te: 'trailers', 'grpc-timeout': '50m' });
      let t = {};
      req.on('response', (h) => { if (h['grpc-status']) t = h; });
      req.on('trailers', (h) => { t = h; });
      req.on('error', rej);
      req.on('close', () => res(Number(t['grpc-status'])));
      req.resume();
      (async () => {
        for (let i = 0; (await used()) < 81920 + 3072; i++) {
          if (i > 1000 * SLOW) throw new Error('attnd never read the call\'s HEADERS');
          await sleep(5);
        }
        await sleep(100);
        req.end(frame(grpcStep('dl', xs.slice(3 * D))));
      })().catch(rej);
    });
    const t0 = Date.now();
    while (Date.now() - t0 < 1.6 * idle) assert.equal(await late(), 4);
    const g = await fetch(`${d.url}/v2/sequences/dl`);
    assert.equal(g.status, 200, await g.text());
  } finally {
    session.close();
    assert.equal((await d.stop()).code, 0);
  }
});

// wrongStepsKeep(idle): a live sequence whose only steps for 2.5 idle
// periods are wrong (400: an x of the wrong width, one of a
// sequence_position with sequence_start, a body cut short with the
// Attnd-Sequence-Id header) is still live, its idle_ms from
// the last of them; false when the client itself went idle between two
test('a step that fails its check (400: a wrong shape or parameter) still counts as a step', async () => {
  const wrongStepsKeep = async (idle) => {
    const d = await start({ dir: gqaModels(), args: ['--sequence-idle-ms', String(idle)] });
    try {
      const xs = tokens(3, 19);
      assert.equal((await infer(d, 'gqa', stepBody('w', xs, { start: true }))).status, 200);
      let last = Date.now(), n = 0;
      const until = last + 2.5 * idle;
      while (Date.now() < until) {
        const k = n % 3;
        const t = Date.now();
        if (t - last >= idle) return false;
        let r;
        if (k === 2) { // a body that does not decode, the header naming it
          const a = await fetch(`${d.url}/v2/models/gqa/infer`, { method: 'POST', body: '{"inputs": [',
            headers: { 'Content-Type': 'application/json', 'Attnd-Sequence-Id': 'w' } });
          r = { status: a.status, json: await a.json() };
        } else {
          r = await infer(d, 'gqa', k === 0
            ? { ...stepBody('w', xs.slice(0, D)), inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 1, D + 1], data: xs.slice(0, D + 1) }] }
            : stepBody('w', xs.slice(0, D), { extra: { sequence_position: 5, sequence_start: true } }));
        }
        last = t;
        assert.equal(r.status, 400, JSON.stringify(r.json));
        if (k < 2)
          assert.match(r.json.error, k === 0 ? /inputs\[x\]\.shape/ : /sequence_position: 5 with sequence_start/);
        n++;
        await sleep(100);
      }
      const g = await fetch(`${d.url}/v2/sequences/w`);
      const body = await g.text();
      // the client itself went idle (a stall since its last wrong step),
      // whatever the answer: a 404, or a 200 read before the next sweep
      // with idle_ms past the limit
      if (Date.now() - last >= idle) return false;
      assert.equal(g.status, 200, `after ${n} wrong steps over ${2.5 * idle} ms: ${body}`);
      const info = JSON.parse(body);
      assert.equal(info.length, 3);
      // (an upper bound: its clock began again at a wrong step, sent
      // under idle ms ago, not at the start, 2.5 idle periods ago)
      assert.ok(info.idle_ms < idle, `idle_ms ${info.idle_ms}`);
      assert.equal(await metric(d, 'attnd_sequences_dropped_total', 'gqa', ',reason="idle"'), 0);
      return true;
    } finally { assert.equal((await d.stop()).code, 0); }
  };
  let idle = 500 * SLOW;
  for (let tries = 1; !(await wrongStepsKeep(idle)); tries++, idle *= 2)
    assert.ok(tries < 3, `the client itself went idle-ms without a step, ${tries} times (idle up to ${idle} ms)`);
});
