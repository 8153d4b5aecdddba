// resources.test.mjs - what attnd does when resources other than memory
// run out (descriptors, disk) or the files under it change, and what a
// crash leaves. Memory is failalloc.test.mjs's.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { connect } from 'node:net';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { SLOW, start } from './helper.mjs';

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
  assert.match(await d.logged(/http: accepting again/), /http: accepting again \(\d+ accepts had failed\)/);
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
