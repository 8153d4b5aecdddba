// maps_wait.test.mjs - the long poll behind the page's follow mode:
// GET /v2/maps/{id}?wait=N answers once the map's query rows differ from
// N, once it is gone, or after its timeout; bounded by maps-waiters (503
// past it) and maps-wait-ms; waiting blocks neither the loop nor inference;
// SIGTERM answers every waiter at once; a waiter whose client went gives
// back its slot and its connection within a tick. (A sequence's growing
// map wakes a waiter: tests/web/sequence.test.mjs, once sequences exist.)
import assert from 'node:assert/strict';
import net from 'node:net';
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
    for (const ms of [600000, 86400001, 2147483647, 9007199254740993, '123456789012345678901234567890']) {
      r = await timed(`${d.url}/v2/maps/${id}?wait=${T}&timeout_ms=${ms}`);
      assert.equal(r.status, 200, `timeout_ms=${ms}`);
      assert.ok(r.ms >= 350 && r.ms < 10000 * SLOW, `answered after ${r.ms} ms`);
    }
    // An unknown map answers 404 at once, whatever wait says.
    r = await timed(`${d.url}/v2/maps/m999-abcdef?wait=${T}`);
    assert.equal(r.status, 404);
    assert.match(r.json.error, /m999-abcdef/);
    for (const [q, field] of [['wait=x', /^wait:/], ['wait=-1', /^wait:/], [`wait=${T}&timeout_ms=soon`, /^timeout_ms:/],
      // digits alone: white space or a sign before them was taken
      ['wait=+3', /^wait:/], ['wait=%203', /^wait:/], [`wait=${T}&version=+0`, /^version:/],
      [`wait=${T}&timeout_ms=%2010`, /^timeout_ms:/], [`wait=${T}&timeout_ms=+10`, /^timeout_ms:/]]) {
      r = await timed(`${d.url}/v2/maps/${id}?${q}`);
      assert.equal(r.status, 400, q);
      assert.match(r.json.error, field, q);
    }
  } finally {
    assert.equal((await d.stop()).code, 0);
  }
});

test('timeout_ms is kept to the millisecond, below the 100 ms tick and between ticks', async () => {
  // The waiters' maps are looked at every 100 ms; a timeout that falls
  // before the next look was answered at it: timeout_ms=5 after 100 ms,
  // 110 after 200, a 5 ms wait beside a long one at the long one's tick.
  // Those are floors, whatever the machine's speed (the looks count from
  // the first waiter's arrival, re-armed from each look): an answer before
  // the tick is what only a timer kept to the millisecond gives. A loaded
  // machine answers late now and then, so each case may take up to TRIES
  // waits, one of which must come before its tick; every one of them
  // waited its timeout_ms at least. The log's line says, for each request,
  // when it ended (its time stamp) and the server's own time for it
  // (total_us), hence when it came.
  const d = await start({ args: ['--maps-wait-ms', '20000', '--log-flush-ms', '10'] });
  const TRIES = 10;
  // lines(path, from, n): the first n lines of GET path (200) past from,
  // once they are there: {total, end, start} each (ms)
  const lines = async (path, from, n) => {
    const re = new RegExp(`^(\\S+) info GET ${path}\\S* 200 .*total_us=(\\d+)$`, 'gm');
    const log = await d.logged({ test: (l) => [...l.matchAll(re)].length >= n }, 5000, from);
    const got = [...log.matchAll(re)].slice(0, n).map((m) => {
      const total = Number(m[2]) / 1000;
      return { total, end: Date.parse(m[1]), start: Date.parse(m[1]) - total };
    });
    assert.equal(got.length, n, `lines of GET ${path} in:\n${log}`);
    return got;
  };
  const waiters = async () => Number(/^attnd_maps_waiters (\d+)$/m.exec(await (await fetch(`${d.url}/metrics`)).text())[1]);
  try {
    const id = await retain(d, 1);
    const path = `/v2/maps/${id}`;
    for (const [ms, tick] of [[5, 100], [110, 200]]) {
      const took = [];
      while (took.length < TRIES && !(took.at(-1) < tick)) {
        const from = d.log().length;
        const r = await timed(`${d.url}${path}?wait=${T}&timeout_ms=${ms}`);
        assert.equal(r.status, 200);
        const [{ total }] = await lines(path, from, 1);
        assert.ok(total >= ms, `timeout_ms=${ms}: answered after ${total} ms, before its timeout`);
        took.push(total);
      }
      assert.ok(took.at(-1) < tick, `timeout_ms=${ms}: answered at the ${tick} ms tick or later each time (${took.map((x) => x.toFixed(1)).join(', ')} ms)`);
    }
    // one long wait holds the tick; a short one joins once it waits
    const beside = [];
    while (beside.length < TRIES && !(beside.at(-1) < 100)) {
      const from = d.log().length;
      const long = timed(`${d.url}${path}?wait=${T}&timeout_ms=1000`);
      for (let i = 0; (await waiters()) !== 1; i++) {
        assert.ok(i < 1000 * SLOW, 'the long wait never waited');
        await new Promise((res) => setTimeout(res, 5));
      }
      const r = await timed(`${d.url}${path}?wait=${T}&timeout_ms=5`);
      assert.equal(r.status, 200);
      assert.equal((await long).status, 200);
      // the long one came first (it waited before the short one was sent)
      const [held, short] = (await lines(path, from, 2)).sort((a, b) => a.start - b.start);
      assert.ok(held.total >= 1000, `the long wait: answered after ${held.total} ms, before its timeout`);
      assert.ok(short.total >= 5, `timeout_ms=5 beside a long wait: answered after ${short.total} ms, before its timeout`);
      // the long one's first tick: 100 ms after it came, at the soonest
      // (+ 2: the stamps are whole milliseconds)
      beside.push(short.end - held.start + 2);
    }
    assert.ok(beside.at(-1) < 100, `timeout_ms=5 beside a long wait: answered at its tick or later each time (${beside.map((x) => x.toFixed(1)).join(', ')} ms after the long one came)`);
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
    // evicted once it waits (200 ms was allowed for that: a loaded
    // machine could evict first, and the 404 then came to a map already
    // gone, testing nothing of the wait)
    await until(async () => (await metric(d.port, 'attnd_maps_waiters')) === 1, 5000 * SLOW, 'the wait never waited');
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
    for (let k = 0; k < 100 * SLOW; k++) {
      const m = await (await fetch(`${d.url}/metrics`)).text();
      if (/^attnd_maps_waiters 2$/m.test(m)) break;
      assert.ok(k < 100 * SLOW - 1, 'attnd_maps_waiters never reached 2'); // (5 s times SLOW: a hang)
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

// ---- waiters whose clients went --------------------------------------------
// A parked waiter is suspended: libmicrohttpd does not read its socket, so
// only maps_wait.c sees that its client went. These use raw sockets, to
// close them in each way a client can and to know which connections are
// open (fetch keeps its own).

const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
/** p, or nothing once ms have passed (the timer does not outlive it). */
function within(p, ms) {
  let t;
  return Promise.race([p, new Promise((res) => { t = setTimeout(res, ms); })]).finally(() => clearTimeout(t));
}
const head = (path, close = false) =>
  `GET ${path} HTTP/1.1\r\nHost: t\r\n${close ? 'Connection: close\r\n' : ''}\r\n`;

/** A raw connection that sent `text`; c.data collects what comes back,
 * c.done resolves when it is closed. */
function rawOpen(port, text) {
  const s = net.connect(port, '127.0.0.1');
  const c = { s, data: '', closed: false };
  c.done = new Promise((res) => s.on('close', () => { c.closed = true; res(); }));
  s.on('data', (b) => { c.data += b; });
  s.on('error', () => {});
  s.write(text);
  return c;
}

/** GET path on a connection of its own (closed after the answer):
 * {status (0: closed or reset with no answer), body, ms}. */
async function rawGet(port, path) {
  const t0 = Date.now();
  const c = rawOpen(port, head(path, true));
  await c.done;
  const m = /^HTTP\/1\.1 (\d{3})/.exec(c.data);
  const at = c.data.indexOf('\r\n\r\n');
  return { status: m ? Number(m[1]) : 0, body: at < 0 ? '' : c.data.slice(at + 4), ms: Date.now() - t0 };
}

async function metric(port, name) {
  const r = await rawGet(port, '/metrics');
  const m = new RegExp(`^${name} (\\d+)$`, 'm').exec(r.body);
  assert.ok(m, `no ${name} in /metrics (status ${r.status})`);
  return Number(m[1]);
}

/** Poll ok() every 50 ms; fail with why past ms. */
async function until(ok, ms, why) {
  const t0 = Date.now();
  while (!(await ok())) {
    assert.ok(Date.now() - t0 < ms, `${why} after ${Date.now() - t0} ms`);
    await sleep(50);
  }
  return Date.now() - t0;
}

test('a waiter whose client went (closed, reset or half-closed) frees its maps-waiters slot and its connection at once', async () => {
  const d = await start({ args: ['--maps-waiters', '4', '--maps-wait-ms', '20000'] });
  try {
    const id = await retain(d, 1);
    // Open now: fetch's keep-alive and the /metrics request itself.
    const base = await metric(d.port, 'attnd_open_connections');
    const w = [0, 1, 2, 3].map(() => rawOpen(d.port, head(`/v2/maps/${id}?wait=${T}`)));
    await until(async () => (await metric(d.port, 'attnd_maps_waiters')) === 4, 5000 * SLOW,
      'attnd_maps_waiters never reached 4');
    assert.equal((await rawGet(d.port, `/v2/maps/${id}?wait=${T}`)).status, 503);
    // Two clients close (FIN), one resets (RST), one half-closes
    // (shutdown(SHUT_WR)): all four went, as libmicrohttpd sees it.
    w[0].s.destroy();
    w[1].s.destroy();
    w[2].s.resetAndDestroy();
    w[3].s.end();
    // Let go within a tick or two, not at the end of their 20 s wait.
    const ms = await until(async () => (await metric(d.port, 'attnd_maps_waiters')) === 0 &&
      (await metric(d.port, 'attnd_open_connections')) <= base, 2000 * SLOW,
    'the waiters whose clients went still hold their slots or connections');
    assert.ok(ms < 2000 * SLOW, `let go after ${ms} ms`);
    // The half-closed one is closed by attnd, with the map's metadata
    // (unchanged) when libmicrohttpd still sends it, or none.
    await within(w[3].done, 2000 * SLOW);
    assert.ok(w[3].closed, 'the half-closed waiter was not closed');
    assert.ok(w[3].data === '' || /^HTTP\/1\.1 200 /.test(w[3].data), w[3].data.slice(0, 100));
    // Each is logged and counted 499 (a client that went, as nginx logs
    // it), not 200: the log's answers are those their clients waited for.
    // (The fifth wait, refused, is the 503.)
    const lines = (log) => [...log.matchAll(new RegExp(`GET /v2/maps/${id} (\\d+) `, 'g'))].map((m) => m[1]);
    await d.logged({ test: (log) => lines(log).length >= 5 }, 3000 * SLOW);
    assert.deepEqual(lines(d.log()), ['503', '499', '499', '499', '499'], 'the waits, as logged');
    assert.equal(await metric(d.port, 'attnd_http_responses_total\\{code="499"\\}'), 4);
    // A new wait is taken (and answered at its timeout), not 503.
    const r = await rawGet(d.port, `/v2/maps/${id}?wait=${T}&timeout_ms=300`);
    assert.equal(r.status, 200, r.body);
    assert.ok(r.ms >= 250, `answered after ${r.ms} ms, before its timeout`);
    assert.deepEqual(JSON.parse(r.body).shape, [1, 1, T, T]);
  } finally {
    assert.equal((await d.stop()).code, 0);
  }
});

test('waiters whose clients went no longer fill max-connections-per-ip (new connections were reset)', async () => {
  const d = await start({ args: ['--max-connections-per-ip', '6', '--maps-wait-ms', '20000'] });
  try {
    const id = await retain(d, 1);
    // Fill the address's connections with waiters (fetch may keep one).
    const n = 6 - ((await metric(d.port, 'attnd_open_connections')) - 1);
    const w = Array.from({ length: n }, () => rawOpen(d.port, head(`/v2/maps/${id}?wait=${T}`)));
    await sleep(500);
    assert.ok(w.every((c) => !c.closed && c.data === ''), 'a waiter was answered or refused');
    for (const c of w) c.s.destroy();
    // n new connections at once are served within a tick or two (while
    // the waiters held them, every new one was reset).
    await until(async () => (await Promise.all(Array.from({ length: n },
      () => rawGet(d.port, '/v2/health/live')))).every((r) => r.status === 200), 2000 * SLOW,
    'new connections still refused');
  } finally {
    assert.equal((await d.stop()).code, 0);
  }
});

test('a request pipelined behind a wait is not taken for a client that went', async () => {
  const d = await start({ args: ['--maps-wait-ms', '20000'] });
  try {
    const id = await retain(d, 1);
    const t0 = Date.now();
    const c = rawOpen(d.port, head(`/v2/maps/${id}?wait=${T}&timeout_ms=800`) +
      head('/v2/health/live', true));
    await within(c.done, 10000 * SLOW);
    const ms = Date.now() - t0;
    assert.ok(c.closed, 'no answer to the pipelined request');
    assert.equal(c.data.match(/HTTP\/1\.1 200 /g)?.length, 2, c.data);
    assert.ok(ms >= 700, `the wait answered after ${ms} ms, before its timeout`);
  } finally {
    assert.equal((await d.stop()).code, 0);
  }
});
