// repository_order.test.mjs - loads, uploads and unloads of one model take
// effect one at a time, in the order they came: a call that comes while a
// load of its model runs waits for it (and for the calls before it), so
// that once all are answered the model served is the one its folder holds,
// or none when the last call was an unload. Loads are held half-way with
// a FIFO config.json (a plain load) or fsfault.so's hold-publish (an
// upload, just before its publish); the log line of each call that waits
// tells the test it has arrived.
import assert from 'node:assert/strict';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import http2 from 'node:http2';
import { connect } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { REFS, SLOW, fp32, infer, post, start } from './helper.mjs';
import { D16_CONFIG, D16_ST, TINY, TINY_CONFIG, body, faulty, fixtureRepo, slowFolder, slowStart, tracked } from './repo_helper.mjs';
import { grpcCall } from './soak_grpc.mjs';
import { str } from '../grpc/wire.mjs';

const X = REFS.causal;
const xreq = () => ({ inputs: [fp32('x', X.shape, X.x)], parameters: { causal: true } });
const TINY_ST = readFileSync(join(TINY, 'model.safetensors'));
const D16_UP = body(D16_CONFIG, D16_ST);
const load = (d, m, b = '') => post(`${d.url}/v2/repository/models/${m}/load`, b);
const unload = (d, m, b = '') => post(`${d.url}/v2/repository/models/${m}/unload`, b);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const repo = (t) => fixtureRepo(t, 'order');

/** held(t, opts): attnd (slowStart's, with opts) on a fixtures
 * repository with a slowFolder 'slow' whose load l runs, held reading its
 * config until slow.release(): {dir, d, slow, l}. */
async function held(t, opts) {
  const { dir, d, slow } = await slowStart(t, 'order', opts);
  const l = tracked(load(d, 'slow'));
  await slow.reading();
  return { dir, d, slow, l };
}

/** holdLoad(t, d, dir, m): a slowFolder m in dir and a load of it l,
 * held reading its config until slow.release(): {slow, l}. */
async function holdLoad(t, d, dir, m) {
  const slow = slowFolder(dir, m);
  t.after(() => slow.release());
  const l = tracked(load(d, m));
  await slow.reading();
  return { slow, l };
}

/** heldUpload(t): attnd (faulty's, two threads) and an upload of d16
 * weights to tiny (up), held just before its publish until gate is
 * removed: {d, gate, up}. */
async function heldUpload(t) {
  const d = await faulty(t, { args: ['--threads', '2'] });
  const gate = join(d.scratch, 'gate');
  writeFileSync(gate, '');
  d.faults(`hold-publish=${gate}`);
  t.after(() => rmSync(gate, { force: true }));
  const up = tracked(load(d, 'tiny', D16_UP));
  await logged(d, /fsfault: hold-publish \S+: held/);
  return { d, gate, up };
}

/** answered(calls): each of calls, [what, a tracked call], is answered
 * 200; a failure names what and the answer. */
async function answered(calls) {
  for (const [what, c] of calls) {
    const r = await c.p;
    assert.equal(r.status, 200, `${what}: ${JSON.stringify(r.json)}`);
  }
}

/** logged(d, re, n): the log once it holds n lines matching re (re has
 * no g flag); fails naming re when it does not within 5 s (x SLOW). */
async function logged(d, re, n = 1) {
  const g = new RegExp(re.source, 'g');
  const count = () => (d.log().match(g) || []).length;
  for (let i = 0; i < 250 * SLOW && count() < n; i++) await sleep(20);
  assert.ok(count() >= n, `the log has ${count()} of ${n} lines like ${re}:\n${d.log().slice(-3000)}`);
}

/** waits(d, m, what, before, n): the n-th "<what> waits for its turn
 * (<before> calls before it)" line of model m. */
const waits = (d, m, what, before, n = 1) =>
  logged(d, new RegExp(`model '${m}': ${what} waits for its turn \\(${before} calls? before it\\)`), n);

/** joins(d, m, what, nth, n): the n-th "<what> joins the identical one
 * waiting (its <nth> caller)" line of model m. */
const joins = (d, m, what, nth, n = 1) => {
  const th = nth % 100 >= 11 && nth % 100 <= 13 ? 'th' : ['th', 'st', 'nd', 'rd'][nth % 10] || 'th';
  return logged(d, new RegExp(`model '${m}': ${what} joins the identical one waiting \\(its ${nth}${th} caller\\)`), n);
};

/** waiting(d, m): attnd_repository_calls_waiting of model m. */
async function waiting(d, m) {
  const text = await (await fetch(`${d.url}/metrics`)).text();
  const g = new RegExp(`^attnd_repository_calls_waiting\\{model="${m}",version="1"\\} (\\d+)$`, 'm').exec(text);
  assert.ok(g, `/metrics has no attnd_repository_calls_waiting of ${m}`);
  return Number(g[1]);
}

/** loaded(d, m, n, why): the log says n times that model m was loaded
 * (once every call is answered; a line may reach the log after the
 * answer of its load), and no more. */
async function loaded(d, m, n, why) {
  const re = new RegExp(`model '${m}' loaded \\(`);
  await logged(d, re, n);
  assert.equal((d.log().match(new RegExp(re.source, 'g')) || []).length, n, why);
}

const status = async (url) => (await fetch(url)).status;
const dModel = async (d, m) => {
  const r = await fetch(`${d.url}/v2/models/${m}`);
  assert.equal(r.status, 200, m);
  return (await r.json()).parameters.d_model;
};
const indexRow = async (d, m) => (await post(`${d.url}/v2/repository/index`, '')).json.find((e) => e.name === m);

/** unloaded(d, m): m is not served, and says it was unloaded. */
async function unloaded(d, m) {
  const r = await fetch(`${d.url}/v2/models/${m}/ready`);
  assert.equal(r.status, 404, `${m}: served after an unload that came after its load`);
  assert.equal((await r.json()).error, `model '${m}': not loaded (unloaded); load it with POST /v2/repository/models/${m}/load`);
  assert.equal((await infer(d, m, xreq())).status, 404);
  assert.deepEqual(await indexRow(d, m), { name: m, version: '1', state: 'UNAVAILABLE', reason: 'unloaded' });
}

test('an unload that comes while its model loads waits for the load, then unloads: the model ends unloaded (a first load, then a reload)', async (t) => {
  // two pool threads: one held by the slow load, one for the rest
  const { dir, d, slow, l } = await held(t);
  const u = tracked(unload(d, 'slow'));
  await waits(d, 'slow', 'unload', 1);
  assert.equal(u.done, false, 'the unload answered before the load it came after');
  assert.deepEqual(await indexRow(d, 'slow'), { name: 'slow', version: '1', state: 'LOADING', reason: '' });
  assert.ok(slow.finish());
  let r = await l.p;
  assert.equal(r.status, 200, JSON.stringify(r.json));
  r = await u.p;
  assert.equal(r.status, 200, JSON.stringify(r.json));
  await unloaded(d, 'slow');
  // a load after the unload brings it back
  assert.equal((await load(d, 'slow')).status, 200);
  assert.equal((await infer(d, 'slow', xreq())).status, 200);

  // a reload of a ready model: it serves its loaded weights until the
  // unload's turn comes, after the reload
  const { slow: tiny, l: l2 } = await holdLoad(t, d, dir, 'tiny');
  const u2 = tracked(unload(d, 'tiny'));
  await waits(d, 'tiny', 'unload', 1);
  assert.equal((await infer(d, 'tiny', xreq())).status, 200, 'a reload serves the loaded weights meanwhile');
  assert.equal(u2.done, false);
  assert.ok(tiny.finish());
  assert.equal((await l2.p).status, 200);
  assert.equal((await u2.p).status, 200);
  await unloaded(d, 'tiny');
  assert.equal((await d.stop()).code, 0);
});

test('an unload that comes while a model loads at start waits for that load: the model ends unloaded and the server ready', async (t) => {
  const dir = repo(t);
  const slow = slowFolder(dir, 'slow');
  t.after(() => slow.release());
  const d = await start({ t, dir, ready: false, args: ['--threads', '2'] });
  await slow.reading();
  assert.equal(await status(`${d.url}/v2/health/ready`), 503, 'a model found at start is loading');
  const u = tracked(unload(d, 'slow'));
  await waits(d, 'slow', 'unload', 1);
  assert.equal(u.done, false);
  assert.ok(slow.finish());
  const r = await u.p;
  assert.equal(r.status, 200, JSON.stringify(r.json));
  await unloaded(d, 'slow');
  assert.equal(await status(`${d.url}/v2/health/ready`), 200, 'an unloaded model is not expected');
  assert.equal((await d.stop()).code, 0);
});

test('load, load, unload sent while the first load runs: each waits its turn, and the model ends unloaded', async (t) => {
  const { dir, d, slow, l: l1 } = await held(t);
  const l2 = tracked(load(d, 'slow'));
  await waits(d, 'slow', 'load', 1);
  const u = tracked(unload(d, 'slow'));
  await waits(d, 'slow', 'unload', 2);
  assert.ok(!l1.done && !l2.done && !u.done, 'a call answered before the load it came after ended');
  slow.settle(); // the second load reads a plain config.json
  assert.ok(slow.release());
  await answered([['first load', l1], ['second load', l2], ['unload', u]]);
  await unloaded(d, 'slow');
  // an unload that waited for a first load that fails: nothing to unload
  const { slow: bad, l: lb } = await holdLoad(t, d, dir, 'bad');
  const ub = tracked(unload(d, 'bad'));
  await waits(d, 'bad', 'unload', 1);
  assert.ok(bad.release('not json'));
  let r = await lb.p;
  assert.equal(r.status, 400, JSON.stringify(r.json));
  r = await ub.p;
  assert.equal(r.status, 404, JSON.stringify(r.json));
  assert.equal(r.json.error, "model 'bad': not loaded");
  assert.equal((await indexRow(d, 'bad')).state, 'UNAVAILABLE');
  assert.equal((await d.stop()).code, 0);
});

test('an upload held before its publish, then an unload and a load of the folder: they run after it, and the model served is the one its folder holds', async (t) => {
  // review of a551019: the unload "held" and the folder's load installed
  // the old weights (d8) while the folder then got the upload's (d16)
  const { d, gate, up } = await heldUpload(t);
  const u = tracked(unload(d, 'tiny'));
  await waits(d, 'tiny', 'unload', 1);
  const l = tracked(load(d, 'tiny'));
  await waits(d, 'tiny', 'load', 2);
  assert.equal(await dModel(d, 'tiny'), 8, 'the model loaded before the upload serves meanwhile');
  assert.ok(!up.done && !u.done && !l.done);
  rmSync(gate);
  await answered([['upload', up], ['unload', u], ['load', l]]);
  assert.equal(await dModel(d, 'tiny'), 16, 'the served model is not the one the folder holds');
  assert.equal(readFileSync(join(d.dir, 'tiny', 'config.json'), 'utf8'), D16_CONFIG);
  assert.equal((await d.stop('SIGTERM', true)).code, 0);
  // a restart serves what it served
  t.after(() => rmSync(d.dir, { recursive: true, force: true }));
  const d2 = await start({ t, dir: d.dir });
  assert.equal(await dModel(d2, 'tiny'), 16);
  assert.equal((await d2.stop()).code, 0);
});

test('upload A held before its publish, an unload, then upload B: B runs last, and B is both served and in the folder', async (t) => {
  const B_CONFIG = JSON.stringify({ ...JSON.parse(TINY_CONFIG), description: 'B' });
  const { d, gate, up: a } = await heldUpload(t);
  const u = tracked(unload(d, 'tiny'));
  await waits(d, 'tiny', 'unload', 1);
  const b = tracked(load(d, 'tiny', body(B_CONFIG, TINY_ST)));
  await waits(d, 'tiny', 'load with a body', 2);
  assert.ok(!a.done && !u.done && !b.done);
  rmSync(gate);
  await answered([['upload A', a], ['unload', u], ['upload B', b]]);
  assert.equal(readFileSync(join(d.dir, 'tiny', 'config.json'), 'utf8'), B_CONFIG, 'the folder holds upload B');
  assert.equal(await dModel(d, 'tiny'), 8, 'upload B (d_model 8) is served, not A (16)');
  assert.equal((await d.stop()).code, 0);
});

test('calls for other models do not wait for a model\'s load', async (t) => {
  const { dir, d, slow, l } = await held(t);
  assert.equal((await unload(d, 'tiny')).status, 200);
  assert.equal((await load(d, 'tiny')).status, 200);
  const up = await load(d, 'up1', body(TINY_CONFIG, TINY_ST));
  assert.equal(up.status, 200, JSON.stringify(up.json));
  assert.equal((await infer(d, 'up1', xreq())).status, 200);
  assert.equal((await unload(d, 'up1')).status, 200);
  assert.equal(l.done, false, 'the slow load is still held');
  assert.doesNotMatch(d.log(), /waits for its turn/);
  assert.ok(slow.finish());
  assert.equal((await l.p).status, 200);
  assert.equal((await d.stop()).code, 0);
});

test('at most repository-waiters calls wait for one model: the next answers 503 saying so; the others run', async (t) => {
  const { dir, d, slow, l } = await held(t, { args: ['--repository-waiters', '2'] });
  const w1 = tracked(load(d, 'slow'));
  await waits(d, 'slow', 'load', 1);
  const w2 = tracked(unload(d, 'slow'));
  await waits(d, 'slow', 'unload', 2);
  // a load (not the unload waiting last) and an upload: no place left
  for (const r of [await load(d, 'slow'), await load(d, 'slow', body(TINY_CONFIG, TINY_ST))]) {
    assert.equal(r.status, 503, JSON.stringify(r.json));
    assert.equal(r.json.error, "model 'slow': 2 repository calls wait already for the load of it that runs (repository-waiters); retry once they are answered");
    assert.equal(r.headers.get('retry-after'), '1');
  }
  // an unload, the same as the last one waiting, joins it: it takes no place
  const w3 = tracked(unload(d, 'slow'));
  await joins(d, 'slow', 'unload', 2);
  assert.equal((await unload(d, 'tiny')).status, 200, 'another model is not limited');
  assert.ok(slow.finish());
  for (const c of [l, w1, w2, w3]) assert.equal((await c.p).status, 200);
  await unloaded(d, 'slow');
  assert.equal((await d.stop()).code, 0);
});

test('SIGTERM: the calls that wait still run in their turn; past drain-ms they answer 503, not done', async (t) => {
  let { dir, d, slow, l } = await held(t);
  let u = tracked(unload(d, 'slow'));
  await waits(d, 'slow', 'unload', 1);
  d.proc.kill('SIGTERM');
  await logged(d, /draining/);
  assert.equal(u.done, false);
  assert.ok(slow.finish());
  assert.equal((await l.p).status, 200);
  assert.equal((await u.p).status, 200);
  assert.equal((await d.stop()).code, 0);

  // a drain timeout while the load is held: the unload never ran
  d = await start({ t, dir, args: ['--threads', '2', '--drain-ms', '300'] });
  ({ slow, l } = await holdLoad(t, d, dir, 'slow'));
  u = tracked(unload(d, 'slow'));
  await waits(d, 'slow', 'unload', 1);
  d.proc.kill('SIGTERM');
  const r = await u.p;
  assert.equal(r.status, 503, JSON.stringify(r.json));
  assert.equal(r.json.error, 'server: draining (shutting down): the drain was cut short before its turn; not done');
  assert.equal(l.done, false, 'the running load is not cut short');
  assert.ok(slow.finish());
  assert.equal((await l.p).status, 200);
  assert.equal((await d.stop()).code, 0);
});

test('an unload whose client goes while it waits is still carried out in its turn', async (t) => {
  const { dir, d, slow, l } = await held(t);
  const sock = connect(d.port, '127.0.0.1');
  await new Promise((res) => sock.on('connect', res));
  sock.write('POST /v2/repository/models/slow/unload HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n');
  await waits(d, 'slow', 'unload', 1);
  sock.destroy();
  assert.ok(slow.finish());
  assert.equal((await l.p).status, 200);
  await logged(d, /http: POST \/v2\/repository\/models\/slow\/unload was carried out \(200\), but its client went/);
  await unloaded(d, 'slow');
  assert.equal(await status(`${d.url}/v2/health/ready`), 200);
  assert.equal((await d.stop()).code, 0);
});

test('gRPC: RepositoryModelUnload waits its turn as REST\'s unload does; a call cancelled while it waits is still carried out', async (t) => {
  const { d, slow } = await slowStart(t, 'order', { grpc: true });
  const session = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  t.after(() => session.close());
  const UNLOAD = '/inference.GRPCInferenceService/RepositoryModelUnload';
  const LOAD = '/inference.GRPCInferenceService/RepositoryModelLoad';
  const l = tracked(grpcCall(session, LOAD, [str(2, 'slow')]));
  await slow.reading();
  const u = tracked(grpcCall(session, UNLOAD, [str(2, 'slow')]));
  await waits(d, 'slow', 'unload', 1);
  // a load whose call is cancelled while it waits: it runs in its turn
  const gone = await grpcCall(session, LOAD, [str(2, 'slow')], { cancelMs: 0 });
  await waits(d, 'slow', 'load', 2);
  assert.equal(gone.grpcStatus, null, JSON.stringify(gone));
  assert.equal(u.done, false);
  assert.ok(slow.finish());
  assert.equal((await l.p).grpcStatus, 0, JSON.stringify(await l.p));
  assert.equal((await u.p).grpcStatus, 0, JSON.stringify(await u.p));
  // the cancelled load came last: the model is loaded again
  for (let i = 0; i < 250 * SLOW && (await status(`${d.url}/v2/models/slow/ready`)) !== 200; i++) await sleep(20);
  assert.equal(await status(`${d.url}/v2/models/slow/ready`), 200);
  session.close();
  assert.equal((await d.stop()).code, 0);
});

test('twenty identical loads while one runs: the first waits its turn, the others join it; none answers 503, and the folder is read twice, not twenty-one times', async (t) => {
  // review: a client retrying a slow load filled the 16 places with the
  // same load, got 503, and each was run again, one after another
  const { dir, d, slow, l } = await held(t);
  // the same as the load that runs: it waits (that one may have read the
  // folder before a change), and does not join it
  const calls = [tracked(load(d, 'slow'))];
  await waits(d, 'slow', 'load', 1);
  for (let i = 0; i < 19; i++) calls.push(tracked(load(d, 'slow')));
  // until the last has joined, or one is answered (503 past 16 waiting)
  for (let i = 0; i < 250 * SLOW && !calls.some((c) => c.done) && !/\(its 20th caller\)/.test(d.log()); i++) await sleep(20);
  const early = await Promise.all(calls.filter((c) => c.done).map((c) => c.p));
  assert.deepEqual(early.map((r) => `${r.status} ${r.json?.error}`), [], 'loads answered before the load they came after ended');
  await joins(d, 'slow', 'load', 20);
  assert.equal(await waiting(d, 'slow'), 20, 'attnd_repository_calls_waiting: one queued, 19 joined');
  assert.equal(await waiting(d, 'tiny'), 0);
  assert.ok(slow.finish());
  for (const c of [l, ...calls]) {
    const r = await c.p;
    assert.equal(r.status, 200, JSON.stringify(r.json));
  }
  await loaded(d, 'slow', 2, 'the folder was loaded once for the twenty identical loads');
  assert.equal(await waiting(d, 'slow'), 0);
  assert.equal((await infer(d, 'slow', xreq())).status, 200);
  assert.equal((await d.stop()).code, 0);
});

test('calls that differ do not join: load, unload, load, a load with other parameters, uploads each wait their turn; unloads (whatever their bodies) and the same load parameters spaced otherwise join', async (t) => {
  const { dir, d, slow, l: l0 } = await held(t);
  const l1 = tracked(load(d, 'slow'));
  await waits(d, 'slow', 'load', 1);
  const u1 = tracked(unload(d, 'slow'));
  await waits(d, 'slow', 'unload', 2);
  const u2 = tracked(unload(d, 'slow'));
  await joins(d, 'slow', 'unload', 2);
  // attnd reads nothing of an unload's body: other parameters join too
  const u3 = tracked(unload(d, 'slow', '{"parameters":{"unload_dependents":true}}'));
  await joins(d, 'slow', 'unload', 3);
  const l2 = tracked(load(d, 'slow'));
  await waits(d, 'slow', 'load', 3);
  const l3 = tracked(load(d, 'slow', '{"parameters":{"note":"x","n":1}}'));
  await waits(d, 'slow', 'load with a body', 4);
  const l4 = tracked(load(d, 'slow', '{ "parameters" : { "n" : 1, "note" : "x" } }'));
  await joins(d, 'slow', 'load', 2);
  const up1 = tracked(load(d, 'slow', D16_UP));
  await waits(d, 'slow', 'load with a body', 5);
  const up2 = tracked(load(d, 'slow', D16_UP)); // the same bytes: an upload never joins
  await waits(d, 'slow', 'load with a body', 6);
  assert.equal(await waiting(d, 'slow'), 9, 'attnd_repository_calls_waiting: six queued, three joined');
  assert.doesNotMatch(d.log(), /': load joins the identical one waiting \(its 3rd caller\)/);
  assert.ok(slow.finish());
  await answered([['load', l0], ['load', l1], ['unload', u1], ['the unload that joined it', u2], ['the unload with parameters that joined it', u3], ['load', l2],
    ['load with parameters', l3], ['the load that joined it', l4], ['upload', up1], ['the same upload', up2]]);
  // l0, l1, l2, l3 read the folder; each upload loads its staged folder
  await loaded(d, 'slow', 6);
  assert.equal(await waiting(d, 'slow'), 0);
  assert.equal(await dModel(d, 'slow'), 16, 'the last call, an upload, is served');
  assert.equal((await d.stop()).code, 0);
});

test('a call that joined another, whose client goes while it waits: the other is answered, both are carried out once; and the other\'s client going leaves it answered', async (t) => {
  const { d, slow, l } = await held(t);
  const raw = async (what) => {
    const sock = connect(d.port, '127.0.0.1');
    await new Promise((res) => sock.on('connect', res));
    sock.on('error', () => {});
    sock.write(`POST /v2/repository/models/slow/${what} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n`);
    return sock;
  };
  // a load whose client goes (it waits), a load that joins it, another
  // whose client goes that joins it too
  const first = await raw('load');
  await waits(d, 'slow', 'load', 1);
  const joined = tracked(load(d, 'slow'));
  await joins(d, 'slow', 'load', 2);
  const gone = await raw('load');
  await joins(d, 'slow', 'load', 3);
  first.destroy();
  gone.destroy();
  assert.equal(await waiting(d, 'slow'), 3);
  assert.ok(slow.finish());
  assert.equal((await l.p).status, 200);
  const r = await joined.p;
  assert.equal(r.status, 200, JSON.stringify(r.json));
  await logged(d, /http: POST \/v2\/repository\/models\/slow\/load was carried out \(200\), but its client went/, 2);
  await loaded(d, 'slow', 2);
  assert.equal(await waiting(d, 'slow'), 0);
  assert.equal(await status(`${d.url}/v2/models/slow/ready`), 200);
  assert.equal((await d.stop()).code, 0);
});

test('SIGTERM: a call that joined another is answered with it in its turn; past drain-ms both answer 503, not done', async (t) => {
  let { dir, d, slow, l } = await held(t);
  let u1 = tracked(unload(d, 'slow'));
  await waits(d, 'slow', 'unload', 1);
  let u2 = tracked(unload(d, 'slow'));
  await joins(d, 'slow', 'unload', 2);
  d.proc.kill('SIGTERM');
  await logged(d, /draining/);
  assert.ok(!u1.done && !u2.done);
  assert.ok(slow.finish());
  for (const c of [l, u1, u2]) assert.equal((await c.p).status, 200);
  assert.equal((await d.stop()).code, 0);

  d = await start({ t, dir, args: ['--threads', '2', '--drain-ms', '300'] });
  ({ slow, l } = await holdLoad(t, d, dir, 'slow'));
  u1 = tracked(unload(d, 'slow'));
  await waits(d, 'slow', 'unload', 1);
  u2 = tracked(unload(d, 'slow'));
  await joins(d, 'slow', 'unload', 2);
  d.proc.kill('SIGTERM');
  for (const c of [u1, u2]) {
    const r = await c.p;
    assert.equal(r.status, 503, JSON.stringify(r.json));
    assert.equal(r.json.error, 'server: draining (shutting down): the drain was cut short before its turn; not done');
  }
  assert.equal(l.done, false, 'the running load is not cut short');
  assert.ok(slow.finish());
  assert.equal((await l.p).status, 200);
  assert.equal((await d.stop()).code, 0);
});

test('gRPC: RepositoryModelLoad joins an identical REST load waiting; a joined call cancelled while it waits is dropped, the others answered', async (t) => {
  const { d, slow, l } = await held(t, { grpc: true });
  const session = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  t.after(() => session.close());
  const LOAD = '/inference.GRPCInferenceService/RepositoryModelLoad';
  const rest = tracked(load(d, 'slow'));
  await waits(d, 'slow', 'load', 1);
  const g = tracked(grpcCall(session, LOAD, [str(2, 'slow')]));
  await joins(d, 'slow', 'load', 2);
  const gone = await grpcCall(session, LOAD, [str(2, 'slow')], { cancelMs: 0 });
  await joins(d, 'slow', 'load', 3);
  assert.equal(gone.grpcStatus, null, JSON.stringify(gone));
  assert.equal(await waiting(d, 'slow'), 3);
  assert.ok(slow.finish());
  assert.equal((await l.p).status, 200);
  assert.equal((await rest.p).status, 200);
  assert.equal((await g.p).grpcStatus, 0, JSON.stringify(await g.p));
  await loaded(d, 'slow', 2);
  assert.equal(await waiting(d, 'slow'), 0);
  session.close();
  assert.equal((await d.stop()).code, 0);
});
