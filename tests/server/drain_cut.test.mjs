// drain_cut.test.mjs - the drain cut short (a second signal, or
// --drain-ms passed): every call that has an answer, or gets one from the
// cut itself (503 / UNAVAILABLE "draining"), has it written before its
// connection closes, on both doors, within a short flush; a call still
// running (a model load) holds the stop until it ends, and then answers.
// A client that does not read cannot hold the exit past the flush.
// Loads are held half-way with a FIFO config.json (repo_helper.mjs).
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import http2 from 'node:http2';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { SLOW, start } from './helper.mjs';
import { TINY, slowFolder } from './repo_helper.mjs';
import { grpcCall } from './soak_grpc.mjs';
import { str } from '../grpc/wire.mjs';

const LOAD = '/inference.GRPCInferenceService/RepositoryModelLoad';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** repo(t): a fresh models folder holding the fixtures (tiny). */
function repo(t) {
  const top = mkdtempSync(join(tmpdir(), 'attnd-cut-'));
  t.after(() => rmSync(top, { recursive: true, force: true }));
  const dir = join(top, 'models');
  cpSync(join(TINY, '..'), dir, { recursive: true });
  return dir;
}

/** tracked(p): {p, done}: done turns true once p has settled. */
function tracked(p) {
  const o = { done: false };
  o.p = p.finally(() => { o.done = true; });
  return o;
}

/** session(t, d): an HTTP/2 connection to d's gRPC port. */
function session(t, d) {
  const s = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  s.on('error', () => {}); // the server's close at its exit
  t.after(() => s.destroy());
  return s;
}

/** cut(d): SIGTERM, then a second one once the drain has begun. */
async function cut(d) {
  d.proc.kill('SIGTERM');
  assert.match(await d.logged(/draining/), /draining/);
  d.proc.kill('SIGTERM');
  assert.match(await d.logged(/drain timeout/), /drain timeout/);
}

test('gRPC: a load running when the drain is cut short holds the stop, and its call answers OK when it ends; exit 0', async (t) => {
  const dir = repo(t);
  const d = await start({ t, dir, grpc: true, args: ['--threads', '2'] });
  const slow = slowFolder(dir, 'slow');
  t.after(() => slow.release());
  const l = tracked(grpcCall(session(t, d), LOAD, [str(2, 'slow')]));
  await slow.reading();
  await cut(d);
  await sleep(300 * SLOW);
  assert.equal(l.done, false, "the held load's call ended before its load");
  assert.doesNotMatch(d.log(), /drained; stopping/);
  slow.settle();
  assert.ok(slow.release());
  const r = await l.p;
  assert.equal(r.grpcStatus, 0, JSON.stringify(r));
  assert.deepEqual(await d.exit, { code: 0, sig: null }, d.log());
  await d.stop();
});

test('gRPC: a load waiting for its turn answers UNAVAILABLE "not done" at the cut, not a torn connection; the running one still answers OK', async (t) => {
  const dir = repo(t);
  const d = await start({ t, dir, grpc: true, args: ['--threads', '2'] });
  const slow = slowFolder(dir, 'slow');
  t.after(() => slow.release());
  const s = session(t, d);
  const l = tracked(grpcCall(s, LOAD, [str(2, 'slow')]));
  await slow.reading();
  const w = tracked(grpcCall(s, LOAD, [str(2, 'slow')]));
  assert.match(await d.logged(/model 'slow': load waits for its turn/), /waits for its turn/);
  await cut(d);
  const r = await w.p;
  assert.equal(r.grpcStatus, 14, JSON.stringify(r));
  assert.equal(r.message, 'server: draining (shutting down): the drain timeout passed before its turn; not done');
  assert.equal(l.done, false, 'the running load is not cut short');
  slow.settle();
  assert.ok(slow.release());
  assert.equal((await l.p).grpcStatus, 0, JSON.stringify(await l.p));
  assert.deepEqual(await d.exit, { code: 0, sig: null }, d.log());
  await d.stop();
});
