// linger.test.mjs - a connection attnd closes while its client may still
// send is read until the client ends it (linger-ms), so the client gets
// its answer whole instead of a reset (server/linger.c).
import assert from 'node:assert/strict';
import http from 'node:http';
import { connect } from 'node:net';
import { test } from 'node:test';
import { SLOW, start } from './helper.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// a bound on a wait: unref'd, so a test that ends sooner does not wait it out
const bound = (ms) => new Promise((r) => setTimeout(r, ms).unref());

/** the demo request whose answer (y and 4 heads' 256 x 256 maps, as JSON)
 * is 2.4 MB: more than the socket buffers hold while its client waits */
function bigRequest() {
  const T = 256;
  return JSON.stringify({
    inputs: [{ name: 'x', datatype: 'FP32', shape: [1, T, 64], data: Array.from({ length: T * 64 }, (_, i) => 0.01 * (i % 97)) }],
    outputs: [{ name: 'y' }, { name: 'attention' }],
  });
}

/**
 * exchange(port, chunks, pauseMs): connect, write each chunk (waiting for
 * each write to be taken by the kernel), read nothing for pauseMs (or until
 * the promise pauseMs() returns has settled), then read
 * until the end. Resolves { status, length (Content-Length), got (body bytes
 * received), wrote (every chunk written), error (a socket error's code) }.
 */
function exchange(port, chunks, pauseMs = 0, from = '127.0.0.1') {
  return new Promise((resolve) => {
    const sock = connect({ port, host: '127.0.0.1', localAddress: from });
    const parts = [];
    let wrote = false;
    let error = null;
    sock.pause();
    sock.on('data', (b) => parts.push(b));
    sock.on('error', (e) => { error = e.code || String(e); });
    sock.on('close', () => {
      const buf = Buffer.concat(parts);
      const end = buf.indexOf('\r\n\r\n');
      const head = end < 0 ? buf.toString('latin1') : buf.subarray(0, end).toString('latin1');
      const st = /^HTTP\/1\.[01] (\d+)/.exec(head);
      const cl = /\r\ncontent-length: *(\d+)/i.exec(head);
      resolve({ status: st ? Number(st[1]) : 0, length: cl ? Number(cl[1]) : -1,
        got: end < 0 ? 0 : buf.length - end - 4, wrote, error, text: head });
    });
    sock.on('connect', async () => {
      for (const c of chunks) {
        const ok = await new Promise((res) => sock.write(c, (e) => res(!e)));
        if (!ok) break;
      }
      wrote = !error;
      await (typeof pauseMs === 'function' ? pauseMs() : sleep(pauseMs));
      sock.resume();
      if (!sock.destroyed) sock.end();
    });
  });
}

/** metric(d, re, from): re's number in /metrics, asked from local address
 * from on a connection of its own that the client ends (attnd keeps it
 * open: asking does not make a socket linger) */
function metric(d, re, from = '127.0.0.1') {
  return new Promise((resolve, reject) => {
    let sock = null;
    http.get({ host: '127.0.0.1', port: d.port, path: '/metrics', localAddress: from, agent: false,
      headers: { Connection: 'keep-alive' } }, (res) => {
      let text = '';
      res.on('data', (b) => { text += b; });
      res.on('end', () => { sock.destroy(); resolve(Number(re.exec(text)?.[1])); });
    }).on('socket', (s) => { sock = s; }).on('error', reject);
  });
}
const lingered = (d, end, from) => metric(d, new RegExp(`\\nattnd_lingered_connections_total\\{end="${end}"\\} (\\d+)\\n`), from);
const lingering = (d, from) => metric(d, /\nattnd_lingering_connections (\d+)\n/, from);
/** until(f, want): f() once it is want, or what it is after 5 s (x SLOW) */
async function until(f, want) {
  let v = await f();
  for (const end = Date.now() + 5000 * SLOW; v !== want && Date.now() < end; v = await f()) await sleep(20);
  return v;
}
/** halfOpen(port, from): a connection from local address from that sends
 * an HTTP/1.0 request (attnd closes after its answer) and keeps its own
 * side open; resolves once attnd's end came */
async function halfOpen(port, from = '127.0.0.1') {
  const s = connect({ port, host: '127.0.0.1', localAddress: from, allowHalfOpen: true });
  s.on('error', () => {});
  s.on('data', () => {});
  await new Promise((res) => s.on('connect', res));
  s.write('GET /v2 HTTP/1.0\r\n\r\n');
  await new Promise((res) => { s.on('end', res); s.on('close', res); });
  return s;
}

/** pipelinedBehindClose(d): the big request with Connection: close, and
 * requests pipelined behind it; its client reads nothing until attnd has
 * computed the answer (attnd_inference_count_total, counted as its batch
 * ends, before the answer is written) and 500 ms more, so attnd writes
 * while the client still does not read and closes with the answer's tail
 * unsent. A fixed 500 ms from the send was not always enough: under load
 * the answer came after it and the client read as attnd wrote, so
 * nothing was left for linger-ms 0's reset to cut. */
async function pipelinedBehindClose(d) {
  const count = () => metric(d, /\nattnd_inference_count_total\{model="demo",version="1"\} (\d+)\n/);
  const before = await count();
  const body = bigRequest();
  const head = `POST /v2/models/demo/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n` +
    `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`;
  // 600 KB of requests pipelined behind it: more than libmicrohttpd reads
  // ahead, so bytes wait unread in the socket when it closes
  return exchange(d.port, [head + body + 'GET /v2 HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(20000)],
    async () => { await until(count, before + 1); await sleep(500); });
}

test('an answer before Connection: close arrives whole though requests were pipelined behind it; with linger-ms 0 a reset cuts it', async (t) => {
  const d = await start({ t });
  try {
    for (let i = 0; i < 3; i++) {
      const r = await pipelinedBehindClose(d);
      assert.equal(r.status, 200, r.text);
      assert.ok(r.length > 2e6, r.text);
      assert.equal(r.got, r.length, `try ${i}: ${r.got} of ${r.length} bytes came (error ${r.error})`);
      assert.equal(r.error, null);
    }
    assert.equal(await lingered(d, 'client'), 3);
    assert.equal(await lingering(d), 0);
  } finally {
    assert.equal((await d.stop()).code, 0);
  }
  // the behaviour this guards against: without lingering the client's
  // kernel gets a reset and the answer's tail is lost
  const z = await start({ t, args: ['--linger-ms', '0'] });
  try {
    const r = await pipelinedBehindClose(z);
    assert.equal(r.status, 200, r.text);
    assert.ok(r.got < r.length, `${r.got} of ${r.length} bytes came`);
    assert.equal(await lingered(z, 'client'), 0);
  } finally {
    assert.equal((await z.stop()).code, 0);
  }
});

test('a client whose 8 MB body is refused from the head (401) finishes writing it and reads the 401', async (t) => {
  const d = await start({ t, env: { ATTND_API_KEY: 'k' } });
  try {
    const n = 8 << 20;
    const head = `POST /v2/models/demo/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${n}\r\n\r\n`;
    const r = await exchange(d.port, [head, Buffer.alloc(n, 0x20)], 100);
    assert.equal(r.wrote, true, `the body's write failed: ${r.error}`);
    assert.equal(r.status, 401, r.text);
    assert.equal(r.got, r.length);
    assert.equal(r.error, null);
    assert.equal(await lingered(d, 'client'), 1);
  } finally {
    assert.equal((await d.stop()).code, 0);
  }
});

test('a client that never stops sending is closed after linger-ms; the server serves on', async (t) => {
  const d = await start({ t, env: { ATTND_API_KEY: 'k' }, args: ['--linger-ms', '300'] });
  try {
    // allowHalfOpen: the client's side stays open after attnd's end
    const sock = connect({ port: d.port, host: '127.0.0.1', allowHalfOpen: true });
    await new Promise((r) => sock.on('connect', r));
    let answer = '';
    let closedAt = 0;
    sock.on('data', (b) => { answer += b; });
    sock.on('error', () => {});
    const closed = new Promise((r) => sock.on('close', () => { closedAt = Date.now(); r(); }));
    sock.write(`POST /v2/models/demo/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n`);
    const t0 = Date.now();
    const junk = Buffer.alloc(16384, 0x61);
    const feed = setInterval(() => { if (!sock.destroyed) sock.write(junk); }, 5);
    await Promise.race([closed, bound(10000 * SLOW)]);
    clearInterval(feed);
    assert.ok(closedAt, 'the connection was not closed within 10 s');
    assert.ok(closedAt - t0 >= 250, `closed after ${closedAt - t0} ms, before linger-ms`);
    assert.match(answer, /^HTTP\/1\.1 401 /);
    assert.equal(await lingered(d, 'limit'), 1);
    assert.equal(await lingering(d), 0);
    assert.equal((await fetch(`${d.url}/v2/health/ready`)).status, 200);
  } finally {
    assert.equal((await d.stop()).code, 0);
  }
});

test('a connection whose client ended it first does not linger; lingering sockets are capped at max-connections; SIGTERM does not wait for them', async (t) => {
  const d = await start({ t, args: ['--max-connections', '2', '--linger-ms', '600000'] });
  try {
    // a keep-alive request, then the client ends: nothing to linger for
    const r = await exchange(d.port, ['GET /v2 HTTP/1.1\r\nHost: x\r\n\r\n']);
    assert.equal(r.status, 200);
    // HTTP/1.0 (attnd closes) from clients that keep their side open
    const held = [];
    for (let i = 0; i < 4; i++) held.push(await halfOpen(d.port));
    assert.equal(await lingering(d), 2, 'at most max-connections linger');
    assert.equal(await lingered(d, 'client'), 0, 'the first client ended its side: not lingered');
    // their clients end: the sockets go at once
    for (const s of held) s.end();
    assert.equal(await until(() => lingering(d), 0), 0);
    assert.equal(await lingered(d, 'client'), 2);
    // one held at SIGTERM: the exit does not wait for linger-ms
    const s = await halfOpen(d.port);
    assert.equal(await lingering(d), 1);
    const t0 = Date.now();
    assert.equal((await d.stop()).code, 0);
    assert.ok(Date.now() - t0 < 5000 * SLOW, `exit took ${Date.now() - t0} ms`);
    s.destroy();
  } finally {
    if (d.proc.exitCode === null) await d.stop('SIGKILL');
  }
});

test('at most max-connections-per-ip sockets of one address linger; they do not count against its new connections', async (t) => {
  const d = await start({ t, args: ['--max-connections-per-ip', '2', '--linger-ms', '600000'] });
  try {
    const held = [];
    for (let i = 0; i < 4; i++) held.push(await halfOpen(d.port, '127.0.0.3'));
    assert.equal(await lingering(d, '127.0.0.2'), 2);
    // 127.0.0.3 has 2 sockets lingering: two new connections of its own
    // at once are both served (counted, the second would be refused)
    const rs = await Promise.all([0, 1].map(() => exchange(d.port, ['GET /v2 HTTP/1.1\r\nHost: x\r\n\r\n'], 100, '127.0.0.3')));
    assert.deepEqual(rs.map((r) => r.status), [200, 200], rs.map((r) => r.text).join(' | '));
    for (const s of held) s.end();
    assert.equal(await until(() => lingering(d, '127.0.0.2'), 0), 0);
    assert.equal(await lingered(d, 'client', '127.0.0.2'), 2);
  } finally {
    assert.equal((await d.stop()).code, 0);
  }
});

test('a lingering socket discards at most max-body bytes, then closes', async (t) => {
  const d = await start({ t, env: { ATTND_API_KEY: 'k' }, args: ['--linger-ms', '600000', '--max-body', '1048576'] });
  try {
    const sock = connect({ port: d.port, host: '127.0.0.1', allowHalfOpen: true });
    await new Promise((r) => sock.on('connect', r));
    let answer = '';
    let sent = 0;
    sock.on('data', (b) => { answer += b; });
    sock.on('error', () => {});
    const closed = new Promise((r) => sock.on('close', r));
    sock.write('POST /v2/models/demo/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n');
    const junk = Buffer.alloc(16384, 0x61);
    const feed = setInterval(() => { if (!sock.destroyed) { sock.write(junk); sent += junk.length; } }, 2);
    await Promise.race([closed, bound(30000 * SLOW)]);
    clearInterval(feed);
    assert.ok(sock.destroyed, `still open after ${sent} bytes sent`);
    assert.match(answer, /^HTTP\/1\.1 401 /);
    assert.ok(sent >= 1048576, `closed after ${sent} bytes sent`);
    assert.equal(await lingered(d, 'limit'), 1);
    assert.equal(await lingering(d), 0);
  } finally {
    assert.equal((await d.stop()).code, 0);
  }
});

test('the gRPC door lingers too: a client that sent it HTTP/1.1 and more gets the end, not a reset', async (t) => {
  const d = await start({ t, grpc: true });
  try {
    const s = connect({ port: d.grpcPort, host: '127.0.0.1', allowHalfOpen: true });
    await new Promise((r) => s.on('connect', r));
    let error = null;
    s.on('error', (e) => { error = e.code; });
    s.on('data', () => {});
    const ended = new Promise((r) => { s.on('end', r); s.on('close', r); });
    // not the HTTP/2 preface: attnd ends the connection with 100 KB unread
    s.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n' + 'x'.repeat(100000));
    await ended;
    assert.equal(error, null);
    assert.equal(await lingering(d), 1);
    s.end();
    assert.equal(await until(() => lingering(d), 0), 0);
    assert.equal(await lingered(d, 'client'), 1);
  } finally {
    assert.equal((await d.stop()).code, 0);
  }
});
