// resources.test.mjs - what attnd does when resources other than memory
// run out (descriptors, disk) or the files under it change, and what a
// crash leaves. Memory is failalloc.test.mjs's.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import http2 from 'node:http2';
import { connect } from 'node:net';
import { chmodSync, cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { frame } from '../grpc/wire.mjs';
import { ATTND, SLOW, mulberry32, post, start } from './helper.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const HAVE_PRLIMIT = spawnSync('prlimit', ['--version']).status === 0;
const TICK = Number(spawnSync('getconf', ['CLK_TCK']).stdout?.toString()) || 100;

/** cpuSeconds(pid): user + system CPU the process has used. */
function cpuSeconds(pid) {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const rest = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return (Number(rest[11]) + Number(rest[12])) / TICK; // fields 14, 15
}

/** hold(port, n): n connections opened (and left silent) to port. */
async function hold(port, n) {
  const socks = [];
  for (let i = 0; i < n; i++) {
    const s = connect({ port, host: '127.0.0.1' });
    s.on('error', () => {});
    socks.push(s);
  }
  await Promise.all(socks.map((s) => new Promise((r) => { s.once('connect', r); s.once('error', r); s.once('close', r); })));
  return socks;
}

/** ask(port, ms): one GET /v2/health/live on a new connection; resolves
 * with the status line's code, or 0 when nothing came within ms. */
function ask(port, ms) {
  return new Promise((resolve) => {
    const s = connect({ port, host: '127.0.0.1' });
    let buf = '';
    const done = (v) => { clearTimeout(t); s.destroy(); resolve(v); };
    const t = setTimeout(() => done(0), ms);
    s.on('error', () => done(-1));
    s.on('data', (d) => {
      buf += d;
      const m = /^HTTP\/1\.1 (\d+)/.exec(buf);
      if (m) done(Number(m[1]));
    });
    s.write('GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n');
  });
}

const acceptLines = (log) => (log.match(/http: cannot accept a connection: Too many open files/g) || []).length;

test('descriptors run out with no REST connection open: no spinning, a line a second, served again', {
  skip: !HAVE_PRLIMIT && 'needs prlimit (util-linux)',
}, async (t) => {
  // 64 descriptors: the gRPC door's silent connections take what is left
  const d = await start({ t, grpc: true, wrap: ['prlimit', '--nofile=64'] });
  const socks = await hold(d.grpcPort, 80);
  await sleep(300);
  const pending = ask(d.port, 20000 * SLOW); // waits in the listen backlog
  await sleep(300);
  const cpu0 = cpuSeconds(d.proc.pid);
  await sleep(1500);
  const cpu = cpuSeconds(d.proc.pid) - cpu0;
  // 0.9.75's libmicrohttpd busy-waited here: 1.5-2.4 s of CPU in 1.5 s
  // (the loop thread and the pool threads' busy polls), and two log lines
  // a turn (137,000 in 2.5 s)
  assert.ok(cpu < 0.5, `attnd used ${cpu.toFixed(2)} s of CPU in 1.5 s while out of descriptors`);
  const log = await d.logged(/cannot accept a connection: Too many open files/);
  assert.ok(acceptLines(log) >= 1 && acceptLines(log) <= 4, `${acceptLines(log)} lines about failed accepts`);
  assert.match(log, /descriptor limit 64/);
  for (const s of socks) s.destroy();
  assert.equal(await pending, 200, 'the connection that waited is served once descriptors are free');
  assert.equal(await ask(d.port, 5000), 200);
  assert.match(await d.logged(/http: accepting again/), /http: accepting again \(\d+ accepts? had failed\)/);
  assert.equal((await d.stop()).code, 0);
});

test('descriptors run out while a keep-alive REST client stays: the door opens again once they are free', {
  skip: !HAVE_PRLIMIT && 'needs prlimit (util-linux)',
}, async (t) => {
  const d = await start({ t, grpc: true, wrap: ['prlimit', '--nofile=64'] });
  // a client that keeps its connection busy the whole time
  const ka = connect({ port: d.port, host: '127.0.0.1' });
  let answers = 0;
  ka.on('data', (b) => { answers += (b.toString().match(/HTTP\/1\.1 200/g) || []).length; });
  const tick = setInterval(() => ka.write('GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n'), 100);
  try {
    await sleep(300);
    const socks = await hold(d.grpcPort, 80);
    await sleep(300);
    assert.equal(await ask(d.port, 500), 0, 'no descriptor for a new connection');
    for (const s of socks) s.destroy();
    await sleep(300);
    // 0.9.75's libmicrohttpd stopped accepting until one of its own
    // connections closed: this one waited as long as the keep-alive did
    assert.equal(await ask(d.port, 5000 * SLOW), 200, 'a new connection is served while the keep-alive one stays');
    assert.ok(answers > 5, `the keep-alive client was answered (${answers})`);
  } finally {
    clearInterval(tick);
    ka.destroy();
  }
  assert.equal((await d.stop()).code, 0);
});

test('descriptors run out twice: each run is logged at once with its count from 1, its end once, with the hint; a backlog emptied is no failure', {
  skip: !HAVE_PRLIMIT && 'needs prlimit (util-linux)',
}, async (t) => {
  const d = await start({ t, grpc: true, wrap: ['prlimit', '--nofile=64'] });
  const count = (re) => (d.log().match(re) || []).length;
  const again = /http: accepting again \(\d+ accepts? had failed\)/g;
  for (let run = 1; run <= 2; run++) {
    const socks = await hold(d.grpcPort, 80);
    await sleep(300);
    const before = d.log().length;
    const pending = ask(d.port, 20000 * SLOW); // waits in the listen backlog
    for (let i = 0; i < 250 * SLOW && !/http: cannot accept/.test(d.log().slice(before)); i++) await sleep(20);
    // each run's first failure is logged at once (not held back by the
    // last run's line a second), counting itself alone
    const first = /http: cannot accept a connection: [^\n]*/.exec(d.log().slice(before))?.[0] || '';
    assert.match(first, /Too many open files \(failed accepts since the last line: 1; .*descriptor limit 64\): accepting again every 100 ms \(raise ulimit -n, or lower --max-connections\)/, `run ${run}`);
    await sleep(300); // more failures, each retry, unlogged within the second
    for (const s of socks) s.destroy();
    assert.equal(await pending, 200, `run ${run}: the connection that waited is served`);
    for (let i = 0; i < 3; i++) assert.equal(await ask(d.port, 5000 * SLOW), 200);
    await d.logged(new RegExp(`(http: accepting again[^]*){${run}}`));
    await sleep(200); // a line each accept made would be there by now
    assert.equal(count(again), run, `one "accepting again" a run:\n${d.log()}`);
  }
  // every failed accept was one for want of descriptors (an empty backlog,
  // EAGAIN, ends a turn of accepts: it is no failure, and pauses nothing)
  assert.doesNotMatch(d.log(), /cannot accept a connection: (?!Too many open files)/);
  assert.equal((await d.stop()).code, 0);
});

/** serverLive(session, ms): one ServerLive call on session; resolves with
 * its grpc-status, or -1 when it did not end within ms. */
function serverLive(session, ms) {
  return new Promise((resolve) => {
    const req = session.request({ ':method': 'POST', ':path': '/inference.GRPCInferenceService/ServerLive', 'content-type': 'application/grpc', te: 'trailers' });
    let head = {};
    const t = setTimeout(() => { req.close(); resolve(-1); }, ms);
    req.on('response', (h) => { head = h; });
    req.on('trailers', (tr) => { head = { ...head, ...tr }; });
    req.on('data', () => {});
    req.on('error', () => { clearTimeout(t); resolve(-1); });
    req.on('end', () => { clearTimeout(t); resolve(Number(head['grpc-status'])); });
    req.end(frame(Buffer.alloc(0)));
  });
}

const grpcAcceptLines = (log) => (log.match(/grpc: cannot accept a connection: Too many open files/g) || []).length;

test('descriptors run out: a gRPC connection opened meanwhile waits, and is served once they are free', {
  skip: !HAVE_PRLIMIT && 'needs prlimit (util-linux)',
}, async (t) => {
  const d = await start({ t, grpc: true, wrap: ['prlimit', '--nofile=64'] });
  const socks = await hold(d.grpcPort, 80);
  await sleep(300);
  // a gRPC client connecting now: libuv's accept (uv_listen) accepted it
  // with a descriptor it kept for that and closed it at once, and said
  // nothing of it
  const session = http2.connect(`http://127.0.0.1:${d.grpcPort}`);
  let ended = null;
  session.on('error', (e) => { ended ||= e.code || String(e); });
  session.on('close', () => { ended ||= 'closed'; });
  await sleep(1500);
  assert.equal(ended, null, 'the connection waits in the backlog while descriptors are out');
  const log = await d.logged(/grpc: cannot accept a connection: Too many open files/);
  assert.ok(grpcAcceptLines(log) >= 1 && grpcAcceptLines(log) <= 4, `${grpcAcceptLines(log)} lines about failed gRPC accepts`);
  assert.match(log, /grpc: cannot accept a connection: .*descriptor limit 64.*accepting again every 100 ms/);
  for (const s of socks) s.destroy();
  try {
    assert.equal(await serverLive(session, 5000 * SLOW), 0, 'the connection that waited is served');
  } finally {
    session.destroy();
  }
  assert.match(await d.logged(/grpc: accepting again/), /grpc: accepting again \(\d+ accepts? had failed\)/);
  assert.equal((await d.stop()).code, 0);
});

const here = import.meta.dirname || new URL('.', import.meta.url).pathname;
const tinyDir = join(here, 'fixtures', 'models', 'tiny');
const tinyUpload = () => JSON.stringify({
  parameters: {
    config: readFileSync(join(tinyDir, 'config.json'), 'utf8'),
    'file:model.safetensors': readFileSync(join(tinyDir, 'model.safetensors')).toString('base64'),
  },
});

/** keepAlive(port): one connection for requests in turn, opened now (a
 * test that then takes every descriptor still talks to attnd through it).
 * send(method, path, body) resolves with {status, head, text}. */
async function keepAlive(port) {
  const sock = connect({ port, host: '127.0.0.1' });
  await new Promise((r, j) => { sock.once('connect', r); sock.once('error', j); });
  let buf = Buffer.alloc(0);
  let waiting = null;
  sock.on('data', (d) => {
    buf = Buffer.concat([buf, d]);
    const end = buf.indexOf('\r\n\r\n');
    if (end < 0 || !waiting) return;
    const head = buf.subarray(0, end).toString();
    const len = Number(/content-length: *(\d+)/i.exec(head)?.[1] || 0);
    if (buf.length < end + 4 + len) return;
    const text = buf.subarray(end + 4, end + 4 + len).toString();
    buf = buf.subarray(end + 4 + len);
    const w = waiting;
    waiting = null;
    w({ status: Number(/^HTTP\/1\.1 (\d+)/.exec(head)[1]), head, text });
  });
  return {
    send(method, path, body = '') {
      return new Promise((r) => {
        waiting = r;
        sock.write(`${method} ${path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
      });
    },
    close: () => sock.destroy(),
  };
}

test('out of descriptors: a load and an upload answer 503 naming them, and work once descriptors are back', {
  skip: !HAVE_PRLIMIT && 'needs prlimit (util-linux)',
}, async (t) => {
  const d = await start({ t, grpc: true, wrap: ['prlimit', '--nofile=64'] });
  const c = await keepAlive(d.port);
  try {
    assert.equal((await c.send('POST', '/v2/repository/models/tiny/unload')).status, 200);
    const socks = await hold(d.grpcPort, 80);
    await sleep(300);
    let r = await c.send('POST', '/v2/repository/models/tiny/load');
    assert.equal(r.status, 503, r.text);
    assert.match(r.text, /Too many open files/);
    // (descriptors come back: a retry soon may succeed)
    assert.match(r.head, /\r\nRetry-After: 1\r\n/i);
    // a new name's entry needs a descriptor (its batch timer): this said
    // "load: out of memory"
    r = await c.send('POST', '/v2/repository/models/up1/load', tinyUpload());
    assert.equal(r.status, 503, r.text);
    assert.match(r.text, /file descriptors/);
    assert.doesNotMatch(r.text, /memory/);
    for (const s of socks) s.destroy();
    await sleep(300);
    assert.equal((await c.send('POST', '/v2/repository/models/tiny/load')).status, 200);
    r = await c.send('POST', '/v2/repository/models/up1/load', tinyUpload());
    assert.equal(r.status, 200, r.text);
  } finally {
    c.close();
  }
  assert.equal((await d.stop()).code, 0);
});

/** safetensors(d): a canonical F32 weight set of d_model d, 4 heads,
 * zeros: 16 d^2 bytes of tensors. */
function safetensors(dm) {
  const n = dm * dm * 4;
  const head = {};
  ['W_q', 'W_k', 'W_v', 'W_o'].forEach((k, i) => {
    head[k] = { dtype: 'F32', shape: [dm, dm], data_offsets: [i * n, (i + 1) * n] };
  });
  let h = JSON.stringify(head);
  h += ' '.repeat((8 - (h.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(h.length));
  return Buffer.concat([len, Buffer.from(h), Buffer.alloc(4 * n)]);
}

const ROOT_ONLY = process.getuid?.() !== 0 ? 'needs root (mounts a 1 MiB tmpfs as the repository)' : false;

test('a repository disk that is full or read-only: an upload answers 503 naming it, leaves nothing, and attnd serves on', {
  skip: ROOT_ONLY,
}, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'attnd-tmpfs-'));
  const sh = (...a) => {
    const r = spawnSync(a[0], a.slice(1));
    assert.equal(r.status, 0, `${a.join(' ')}: ${r.stderr}`);
  };
  // root without the right to mount (a container's): nothing to test here
  const m = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'tmpfs', dir]);
  if (m.status !== 0) {
    rmSync(dir, { recursive: true, force: true });
    t.skip(`cannot mount a tmpfs here: ${m.stderr}`);
    return;
  }
  try {
    cpSync(tinyDir, join(dir, 'tiny'), { recursive: true });
    const d = await start({ t, dir });
    const before = readdirSync(dir).sort();
    const big = JSON.stringify({
      parameters: { config: '{"n_heads": 4}', 'file:model.safetensors': safetensors(256).toString('base64') },
    });
    let r = await post(`${d.url}/v2/repository/models/big/load`, big);
    assert.equal(r.status, 503, JSON.stringify(r.json));
    assert.match(r.json.error, /No space left on device\); free space on the repository's disk$/);
    // the disk's state: a retry in a second fails the same until someone acts
    assert.equal(r.headers.get('retry-after'), null);
    assert.deepEqual(readdirSync(dir).sort(), before, 'nothing left in the repository');
    const idx = await post(`${d.url}/v2/repository/index`, '');
    assert.equal(idx.json.find((m) => m.name === 'big'), undefined, 'no trace of the name');
    assert.equal((await fetch(`${d.url}/v2/models/tiny/ready`)).status, 200);
    sh('mount', '-o', 'remount,ro', dir);
    r = await post(`${d.url}/v2/repository/models/up1/load`, tinyUpload());
    assert.equal(r.status, 503, JSON.stringify(r.json));
    assert.match(r.json.error, /Read-only file system\); check the repository's mount \(remount it read-write\), or point --models at a writable folder$/);
    assert.equal(r.headers.get('retry-after'), null);
    assert.equal((await fetch(`${d.url}/v2/health/ready`)).status, 200);
    assert.equal((await d.stop()).code, 0);
    // what a crashed upload left, on a repository now read-only: the start
    // said it had removed it
    sh('mount', '-o', 'remount,rw', dir);
    mkdirSync(join(dir, '.attnd-staging', 'tiny~999999999~1'), { recursive: true });
    writeFileSync(join(dir, '.attnd-staging', 'tiny~999999999~1', 'model.safetensors'), 'partial');
    sh('mount', '-o', 'remount,ro', dir);
    const d2 = await start({ t, dir });
    assert.match(d2.log(), /could not remove 1 staging folder left by an interrupted upload \(Read-only file system; removed 0\)/);
    assert.doesNotMatch(d2.log(), /removed 1 staging folder/);
    assert.equal((await d2.stop()).code, 0);
  } finally {
    spawnSync('umount', [dir]);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a weight file cut short while it loads fails that load with 503; attnd lives and keeps the model it had', async (t) => {
  const d = await start({ t });
  const file = join(d.dir, 'big', 'model.safetensors');
  const whole = safetensors(1024); // 16 MiB: a load long enough to cut into
  mkdirSync(join(d.dir, 'big'));
  writeFileSync(join(d.dir, 'big', 'config.json'), '{"n_heads": 4}');
  writeFileSync(file, whole);
  assert.equal((await post(`${d.url}/v2/repository/models/big/load`, '')).status, 200);
  const rnd = mulberry32(7);
  let cut = 0;
  for (let i = 0; i < 80 && cut < 3; i++) {
    writeFileSync(file, whole);
    const load = post(`${d.url}/v2/repository/models/big/load`, '');
    await sleep(rnd() * 40 * SLOW);
    truncateSync(file, 4096); // what `cp new old` does first
    const r = await load;
    if (r.status === 503) {
      assert.match(r.json.error, /the file changed while it was read/);
      cut++;
    } else {
      // done before the cut (200) or opened after it (400: the file is short)
      assert.ok(r.status === 200 || r.status === 400, `${r.status} ${JSON.stringify(r.json)}`);
    }
  }
  // a SIGBUS killed attnd here before: the first cut that hit a load
  assert.ok(cut > 0, 'no cut fell inside a load');
  assert.equal((await fetch(`${d.url}/v2/models/big/ready`)).status, 200, 'the model loaded before stays');
  assert.equal((await d.stop()).code, 0);
});

test('at start the descriptor soft limit rises to the hard one, and one under --max-connections is logged', {
  skip: !HAVE_PRLIMIT && 'needs prlimit (util-linux)',
}, async (t) => {
  const openFiles = (pid) => /Max open files\s+(\d+)\s+(\d+)/.exec(readFileSync(`/proc/${pid}/limits`, 'utf8')).slice(1).map(Number);
  let d = await start({ t, wrap: ['prlimit', '--nofile=100:4096'] });
  assert.deepEqual(openFiles(d.proc.pid), [4096, 4096]);
  assert.doesNotMatch(d.log(), /descriptor limit \(ulimit -n\)/);
  assert.equal((await d.stop()).code, 0);
  d = await start({ t, wrap: ['prlimit', '--nofile=64'], args: ['--max-connections', '100'] });
  assert.match(d.log(), /descriptor limit \(ulimit -n\) 64 is below the 392 that --max-connections 100 needs \(both doors. connections, their headroom, as many lingering closes/);
  assert.equal((await d.stop()).code, 0);
  d = await start({ t, wrap: ['prlimit', '--nofile=64'], args: ['--max-connections', '100', '--linger-ms', '0'] });
  assert.match(d.log(), /descriptor limit \(ulimit -n\) 64 is below the 292 that --max-connections 100 needs/);
  assert.equal((await d.stop()).code, 0);
});

test('SIGTERM with a live sequence and a long poll on its map: the poll is answered at once, the exit says the sequence is dropped', async (t) => {
  const d = await start({ t });
  const x = (n) => ({ name: 'x', datatype: 'FP32', shape: [1, n, 8], data: Array.from({ length: 8 * n }, (_, i) => (i % 7) / 10) });
  const r = await post(`${d.url}/v2/models/tiny/infer`, {
    inputs: [x(3)], parameters: { sequence_id: 9, sequence_start: true, retain: true },
  });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  const id = r.json.parameters.map_id;
  const wait = fetch(`${d.url}/v2/maps/${id}?wait=3&timeout_ms=20000`);
  await sleep(300);
  d.proc.kill('SIGTERM');
  const w = await wait;
  assert.equal(w.status, 200);
  assert.deepEqual((await w.json()).shape.slice(2), [3, 3]);
  assert.equal((await d.stop()).code, 0);
  // not held to its timeout: attnd's own count of the wait (total_us, from
  // its arrival to its answer) is under the 20 s timeout_ms, whatever the
  // build's speed (the client's clock under 10 s was one)
  const line = new RegExp(`GET /v2/maps/${id}\\S* 200 .*total_us=(\\d+)$`, 'm').exec(d.log());
  assert.ok(line, d.log());
  assert.ok(Number(line[1]) < 20e6, `the waiter was held to its timeout: ${line[0]}`);
  assert.match(d.log(), /exit: 1 live sequence dropped/);
});

test('a stderr whose reader went: requests go on, and the lines lost count in attnd_log_lines_dropped_total', async (t) => {
  const d = await start({ t });
  d.proc.stderr.destroy(); // the log collector died: writes get EPIPE
  await sleep(100);
  for (let i = 0; i < 40; i++) assert.equal((await fetch(`${d.url}/v2/health/live`)).status, 200);
  await sleep(600 * SLOW); // past --log-flush-ms: the writer has tried
  const m = await (await fetch(`${d.url}/metrics`)).text();
  const dropped = Number(/^attnd_log_lines_dropped_total (\d+)/m.exec(m)[1]);
  assert.ok(dropped >= 40, `attnd_log_lines_dropped_total ${dropped}`);
  assert.equal((await d.stop()).code, 0);
});

test('a thread limit too low for --threads ends the start with a message, not a silent abort', {
  skip: process.getuid?.() !== 0 ? 'needs root (runs attnd as nobody: root is exempt from ulimit -u)'
    : spawnSync('setpriv', ['--version']).status !== 0 && 'needs setpriv (util-linux)',
}, () => {
  // nobody may not reach the checkout (a clone under /root, mode 700): the
  // binary and the models go to a folder of their own it can read
  const box = mkdtempSync(join(tmpdir(), 'attnd-nproc-'));
  chmodSync(box, 0o755);
  cpSync(ATTND, join(box, 'attnd'));
  cpSync(join(here, 'fixtures', 'models'), join(box, 'models'), { recursive: true });
  // main + log writer = 2 threads: the pool's 2 do not fit under 3
  let r;
  try {
    r = spawnSync('setpriv', ['--reuid=nobody', '--regid=nogroup', '--clear-groups',
      'prlimit', '--nproc=3:3', join(box, 'attnd'), '--port', '0', '--grpc-port', '0', '--host', '127.0.0.1',
      '--models', join(box, 'models'), '--threads', '2'], { timeout: 20000 * SLOW });
  } finally {
    rmSync(box, { recursive: true, force: true });
  }
  const err = r.stderr.toString();
  // libuv aborted (SIGABRT, exit 134) when its first work found no thread
  assert.equal(r.signal, null, `killed by ${r.signal}: ${err}`);
  assert.equal(r.status, 1, err);
  assert.match(err, /cannot start 2 compute threads \(--threads\): Resource temporarily unavailable; .*ulimit -u/);
});

test("libmicrohttpd's repeated messages are counted, not logged one a request, even two that alternate", async (t) => {
  const d = await start({ t });
  const t0 = Date.now();
  // each request gets libmicrohttpd's two messages, one after the other
  for (let i = 0; i < 100; i++) {
    await new Promise((res) => {
      const s = connect({ port: d.port, host: '127.0.0.1' }, () => s.write('GET /v2/health/live HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n'));
      s.on('data', () => s.destroy());
      s.on('error', res);
      s.on('close', res);
    });
  }
  const seconds = Math.ceil((Date.now() - t0) / 1000);
  const what = ["Failed to parse `Content-Length' header", 'Error processing request'];
  const lines = (w) => d.log().split('\n').filter((l) => l.includes(`http: ${w}`));
  // the lines, plus the counts in them: every message, once its count is out
  const told = (w) => lines(w).reduce((n, l) => n + (/\((\d+) more times in/.test(l) ? Number(/\((\d+) more/.exec(l)[1]) : 1), 0);
  for (let until = Date.now() + 5000 * SLOW; what.some((w) => told(w) < 100) && Date.now() < until;) await sleep(50);
  for (const w of what) {
    assert.equal(told(w), 100, `${w}: every one told\n${lines(w).join('\n')}`);
    // a line each before: 100 here, thousands a second from a client in a loop;
    // now a line and a count line a second at most
    assert.ok(lines(w).length <= 2 * (seconds + 1), `${w}: ${lines(w).length} lines in ${seconds} s`);
  }
  assert.equal((await d.stop()).code, 0);
});
