// cli.test.mjs - the command line: --help from the settings table, env
// variables, --version, --check-models, --health-check, JSON log lines.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { connect } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { ATTND, ROOT, REFS, SANITIZER_REPORT, SLOW, fp32, infer, modelsDir, start, track } from './helper.mjs';
import { gqaModels } from './seq_helper.mjs';

const run = (args, env = {}) => spawnSync(ATTND, args, { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 30000 });

test('--help lists every setting with its flag, env variable and default', () => {
  const r = run(['--help']);
  assert.equal(r.status, 0);
  for (const [flag, env, def] of [['--host', 'ATTND_HOST', '127.0.0.1'], ['--port', 'ATTND_PORT', '8080'],
    ['--models', 'ATTND_MODELS', 'models'], ['--threads', 'ATTND_THREADS', '0'], ['--max-batch', 'ATTND_MAX_BATCH', '8'],
    ['--batch-delay-us', 'ATTND_BATCH_DELAY_US', '0'], ['--queue-size', 'ATTND_QUEUE_SIZE', '256'],
    ['--deadline-ms', 'ATTND_DEADLINE_MS', '30000'], ['--drain-ms', 'ATTND_DRAIN_MS', '30000'],
    ['--stop-flush-ms', 'ATTND_STOP_FLUSH_MS', '1000'], ['--strict-parameters', 'ATTND_STRICT_PARAMETERS', '0'],
    ['--max-body', 'ATTND_MAX_BODY', '67108864'], ['--max-json-body', 'ATTND_MAX_JSON_BODY', '16777216'],
    ['--max-tokens', 'ATTND_MAX_TOKENS', '65536'], ['--max-connections', 'ATTND_MAX_CONNECTIONS', '1024'],
    ['--connection-timeout', 'ATTND_CONNECTION_TIMEOUT', '60'], ['--api-key', 'ATTND_API_KEY', '""'],
    ['--cors-origins', 'ATTND_CORS_ORIGINS', '""'], ['--log-format', 'ATTND_LOG_FORMAT', 'text']])
    assert.match(r.stdout, new RegExp(`^${flag} +${env} +${def.replace(/[."]/g, '\\$&')} `, 'm'), flag);
  assert.match(r.stdout, /--check-models DIR/);
  assert.match(r.stdout, /--health-check URL/);
});

// Line for line, in order, none more: a row --help lost (a setting removed
// or renamed) must leave the README too, and a help line quoted elsewhere
// in the README does not stand for the table's row.
test('README settings table is the --help table', () => {
  const lines = run(['--help']).stdout.split('\n');
  const help = lines.slice(lines.findIndex((l) => l.startsWith('flag '))).filter((l) => l !== '');
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const from = readme.indexOf('\n## Settings\n');
  const block = /\n```\n(flag [^]*?)```\n/.exec(readme.slice(from));
  assert.ok(from >= 0 && block, 'README has no settings table under "Settings"');
  assert.ok(help.length > 40 && help.slice(1).every((l) => l.startsWith('--')), help.join('\n'));
  assert.deepEqual(block[1].split('\n').filter((l) => l !== ''), help);
});

// A message that names a setting names it as --help does: a flag it lists
// (`--max-body`), or its name (`maps-bytes`), never the C field under it
// (`maps_bytes`, which no flag, variable or README line has).
test('the server\'s messages name settings as --help does', () => {
  const names = run(['--help']).stdout.split('\n').map((l) => /^--(\S+)/.exec(l)?.[1]).filter(Boolean);
  const flags = new Set([...names, 'check-models', 'health-check', 'help', 'version', 'setting']);
  const bad = [];
  for (const dir of ['server', 'core', 'proto'])
    for (const f of readdirSync(join(ROOT, dir)).filter((n) => /\.[ch]$/.test(n))) {
      const src = readFileSync(join(ROOT, dir, f), 'utf8').replace(/\/\*[^]*?\*\//g, '').replace(/'(\\.|[^'\\])'/g, '');
      for (const [, lit] of src.matchAll(/"((?:\\.|[^"\\\n])*)"/g)) {
        for (const [, flag] of lit.matchAll(/--([a-z][a-z0-9-]*)/g))
          if (!flags.has(flag)) bad.push(`${dir}/${f}: --${flag} is no flag: "${lit}"`);
        for (const n of names)
          if (n.includes('-') && new RegExp(`\\b${n.replaceAll('-', '_')}\\b`).test(lit))
            bad.push(`${dir}/${f}: ${n.replaceAll('-', '_')} for the setting ${n}: "${lit}"`);
      }
    }
  assert.deepEqual(bad, []);
});

test('README metrics table is /metrics\' families: name, type and help, in order, none more', async (t) => {
  const d = await start({ t, dir: gqaModels(), grpc: true });
  const text = await (await fetch(`${d.url}/metrics`)).text();
  assert.equal((await d.stop()).code, 0);
  const fams = [];
  for (const l of text.split('\n')) {
    let m;
    if ((m = /^# HELP (\S+) (.*)$/.exec(l))) fams.push({ name: m[1], help: m[2] });
    else if ((m = /^# TYPE (\S+) (\S+)$/.exec(l))) {
      assert.equal(m[1], fams.at(-1).name, `# TYPE ${m[1]} follows its # HELP`);
      fams.at(-1).type = m[2];
    }
  }
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const block = /\n### Metrics\n[^]*?\n```\n(metric +type +meaning\n[^]*?)```\n/.exec(readme);
  assert.ok(block, 'README has a ### Metrics section with the table');
  const rows = block[1].trimEnd().split('\n').slice(1).map((l) => {
    const m = /^(\S+) +(\S+) +(.*)$/.exec(l);
    assert.ok(m, `README metrics row: ${l}`);
    return { name: m[1], type: m[2], help: m[3] };
  });
  assert.deepEqual(rows, fams);
});

test('--version', () => {
  const r = run(['--version']);
  assert.equal(r.status, 0);
  // the version, then the OpenBLAS kernels in use (attnd asks for ones
  // this CPU has when OpenBLAS fell back to pre-AVX2 ones: README, "BLAS
  // kernels")
  assert.match(r.stdout, /^attnd \d+\.\d+\.\d+( \(OpenBLAS kernels \w+\))?\n$/);
});

test('bad settings exit 2 naming the flag or the variable', () => {
  let r = run(['--port', '70000']);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--port: 70000 is outside \[0, 65535\]/);
  r = run([], { ATTND_MAX_BATCH: 'many' });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /ATTND_MAX_BATCH: 'many' is not an integer/);
  r = run(['--log-format', 'xml']);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--log-format: log format 'xml'/);
  r = run(['--nope']);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--nope: unknown flag/);
  // the key file's errors name where its path came from
  r = run([], { ATTND_API_KEY_FILE: '/nonexistent/key' });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /^attnd: ATTND_API_KEY_FILE \/nonexistent\/key: cannot read \(No such file or directory\)$/m);
  r = run(['--api-key-file', '/nonexistent/key']);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /^attnd: --api-key-file \/nonexistent\/key: cannot read/m);
  r = run(['--port']);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--port needs a value/);
  // one port for both doors (ATTND_PORT at gRPC's default 8001): not
  // "address in use (another server listens there; --reuse-port 1 ...)"
  r = run(['--models', join(ROOT, 'tests/server/fixtures/models')], { ATTND_PORT: '8001' });
  assert.equal(r.status, 2, r.stderr);
  assert.match(r.stderr, /--port 8001, --grpc-port 8001: the REST and gRPC doors need a port each/);
});

// README, "Settings": flags win. So the variable of a setting given as a
// flag is not read at all: a Kubernetes Service named attnd injects
// ATTND_PORT=tcp://<ip>:80 into a pod that does not turn service links
// off, and a --port on the command line must still start the daemon; and
// --help and --version read no variable.
test('flags win: a setting given as a flag ignores its variable, even a bad one; --help and --version read none', async (t) => {
  const env = { ATTND_PORT: 'tcp://10.96.0.1:80', ATTND_GRPC_PORT: 'tcp://10.96.0.1:8001', ATTND_LOG_FORMAT: 'xml' };
  for (const a of ['--help', '--version']) {
    const r = run([a], env);
    assert.equal(r.status, 0, `${a}: ${r.stderr}`);
    assert.equal(r.stderr, '');
  }
  const d = await start({ t, env, args: ['--log-format=text'] });
  try {
    assert.equal((await fetch(`${d.url}/v2/health/live`)).status, 200);
  } finally { assert.equal((await d.stop()).code, 0); }
  const r = run(['--port', '0'], { ATTND_GRPC_PORT: 'tcp://10.96.0.1:8001' });
  assert.equal(r.status, 2);
  assert.match(r.stderr, /ATTND_GRPC_PORT: 'tcp:\/\/10\.96\.0\.1:8001' is not an integer \(a Kubernetes Service's link variable\? set the pod's enableServiceLinks: false, as deploy\/k8s\/deployment\.yaml does, or give the setting as a flag\)/);
  // a flag holding one is no link: it is only told it is not an integer
  const f = run(['--port', 'tcp://10.96.0.1:80']);
  assert.equal(f.status, 2);
  assert.match(f.stderr, /--port: 'tcp:\/\/10\.96\.0\.1:80' is not an integer\n/);
});

// A variable that names no setting changed nothing, silently: a ConfigMap
// or `docker run -e` with ATTND_KV_BYTE (for ATTND_KV_BYTES) left the 4 GiB
// K/V default under a 2Gi memory limit, and the replica was OOM-killed with
// its sequences instead of answering 503. The daemon now says so as it
// starts, naming the setting it is nearest to; a Service link's variables
// (Kubernetes injects them for the Services attnd, attnd-sequences, ...
// unless enableServiceLinks is false) are not settings and pass unnamed.
test('an ATTND_* variable that names no setting is logged as ignored, with the setting it is nearest to', async (t) => {
  const env = {
    ATTND_KV_BYTE: '536870912', ATTND_DRAIN_MSS: '1000', ATTND_NO_SUCH_THING: '1', ATTND_MAX_BATCH: '4',
    ATTND_SERVICE_HOST: '10.96.0.1', ATTND_SEQUENCES_SERVICE_PORT_HTTP: '80', ATTND_SESSIONS_PORT: 'tcp://10.96.0.3:80',
    ATTND_PORT_80_TCP_ADDR: '10.96.0.1', ATTND_SEQUENCES_PORT_8001_TCP: 'tcp://10.96.0.2:8001',
    ATTND_NAME: '/web/attnd', ATTND_ENV_ATTND_PORT: '8080', // docker --link's
  };
  const d = await start({ t, env });
  try {
    const log = await d.logged(/listening on/);
    assert.match(log, /warn attnd: ATTND_KV_BYTE is no setting and is ignored \(did you mean ATTND_KV_BYTES\? attnd --help lists them\)/);
    assert.match(log, /ATTND_DRAIN_MSS is no setting and is ignored \(did you mean ATTND_DRAIN_MS\?/);
    assert.match(log, /ATTND_NO_SUCH_THING is no setting and is ignored \(attnd --help lists them\)/);
    for (const n of ['ATTND_MAX_BATCH', 'ATTND_SERVICE_HOST', 'ATTND_SEQUENCES_SERVICE_PORT_HTTP', 'ATTND_SESSIONS_PORT', 'ATTND_PORT_80_TCP_ADDR', 'ATTND_SEQUENCES_PORT_8001_TCP', 'ATTND_NAME', 'ATTND_ENV_ATTND_PORT'])
      assert.doesNotMatch(log, new RegExp(`${n} is no setting`), n);
    // --help, --version and --health-check (Docker's HEALTHCHECK, every 30 s) say nothing
    for (const a of [['--help'], ['--version'], ['--health-check', `${d.url}/v2/health/live`]]) {
      const r = run(a, env);
      assert.equal(r.status, 0, a[0]);
      assert.equal(r.stderr, '', a[0]);
    }
  } finally { assert.equal((await d.stop()).code, 0); }
});

test('--host: an IPv6 address serves, bracketed in its listening line; an address not of this machine exits 1 saying so', async (t) => {
  const r = run(['--host', '192.0.2.1', '--port', '0', '--grpc-port', '0', '--models', join(ROOT, 'tests/server/fixtures/models')]);
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /--host 192\.0\.2\.1 --port 0: cannot listen \(.+; in use, or not an address of this machine\)/);
  const dir = modelsDir();
  const args = ['--host', '::1', '--port', '0', '--grpc-port', '0', '--models', dir];
  const proc = spawn(ATTND, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (c) => { log += c; });
  track(proc, { args, dir, log: () => log });
  const exit = new Promise((res) => proc.on('exit', (code, signal) => res({ code, signal })));
  let m;
  for (const until = Date.now() + 20000 * SLOW; !(m = /listening on http:\/\/\[::1\]:(\d+)/.exec(log)) && proc.exitCode === null && Date.now() < until;)
    await new Promise((res) => setTimeout(res, 20));
  if (!m && /cannot listen \((Cannot assign requested address|Address family not supported)/.test(log)) {
    proc.kill('SIGKILL');
    await exit;
    rmSync(dir, { recursive: true, force: true });
    t.skip('no IPv6 loopback here');
    return;
  }
  assert.ok(m, log);
  const d = { url: `http://[::1]:${m[1]}` };
  const x = REFS.causal;
  for (const until = Date.now() + 20000 * SLOW; (await fetch(`${d.url}/v2/health/ready`).catch(() => null))?.status !== 200;) {
    assert.ok(Date.now() < until, log);
    await new Promise((res) => setTimeout(res, 20));
  }
  const a = await infer(d, 'tiny', { inputs: [fp32('x', x.shape, x.x)] });
  assert.equal(a.status, 200, JSON.stringify(a.json));
  proc.kill('SIGTERM');
  assert.equal((await exit).code, 0, log);
  assert.doesNotMatch(log, SANITIZER_REPORT);
  rmSync(dir, { recursive: true, force: true });
});

test('--host ::: both doors take IPv4 clients too, as on Linux by default (REST took only IPv6 ones: 127.0.0.1 was refused)', async (t) => {
  const dir = modelsDir();
  const args = ['--host', '::', '--port', '0', '--grpc-port', '-1', '--models', dir];
  const proc = spawn(ATTND, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (c) => { log += c; });
  track(proc, { args, dir, log: () => log });
  const exit = new Promise((res) => proc.on('exit', (code, signal) => res({ code, signal })));
  t.after(() => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });
  let m, g;
  for (const until = Date.now() + 20000 * SLOW; !((m = /listening on http:\/\/\[::\]:(\d+)/.exec(log)) &&
    (g = /listening on grpc:\/\/\[::\]:(\d+)/.exec(log))) && proc.exitCode === null && Date.now() < until;)
    await new Promise((res) => setTimeout(res, 20));
  if (!m && /cannot listen \((Cannot assign requested address|Address family not supported)/.test(log)) {
    proc.kill('SIGKILL');
    await exit;
    t.skip('no IPv6 here');
    return;
  }
  assert.ok(m && g, log);
  if (readFileSync('/proc/sys/net/ipv6/bindv6only', 'utf8').trim() !== '0') {
    proc.kill('SIGKILL');
    await exit;
    t.skip('net.ipv6.bindv6only is set: :: is IPv6 only on this system');
    return;
  }
  const live = await fetch(`http://127.0.0.1:${m[1]}/v2/health/live`).catch((e) => e);
  assert.equal(live.status, 200, `REST over IPv4: ${live.cause?.code || live.status}`);
  const grpc = await new Promise((res) => {
    const s = connect(Number(g[1]), '127.0.0.1', () => { s.destroy(); res('connected'); });
    s.on('error', (e) => res(e.code));
  });
  assert.equal(grpc, 'connected', 'gRPC over IPv4');
  proc.kill('SIGTERM');
  assert.equal((await exit).code, 0, log);
  assert.doesNotMatch(log, SANITIZER_REPORT);
});

test('--check-models: 0 when every folder loads, 1 naming a broken one', () => {
  const dir = mkdtempSync(join(tmpdir(), 'attnd-check-'));
  try {
    mkdirSync(join(dir, 'good'));
    writeFileSync(join(dir, 'good', 'model.safetensors'), readFileSync(join(ROOT, 'tests/server/fixtures/models/tiny/model.safetensors')));
    writeFileSync(join(dir, 'good', 'config.json'), '{"n_heads": 2}');
    let r = run(['--check-models', dir]);
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /^good: ok/m);
    mkdirSync(join(dir, 'broken'));
    writeFileSync(join(dir, 'broken', 'model.safetensors'), 'not a safetensors file');
    r = run(['--check-models', dir]);
    assert.equal(r.status, 1);
    assert.match(r.stdout, /^broken: /m);
  } finally { rmSync(dir, { recursive: true, force: true }); }
});

test('--health-check: 0 on 200, 1 otherwise', async (t) => {
  const d = await start({ t });
  try {
    // spawnSync would block the event loop the daemon answers on: use async
    const hc = (url) => new Promise((res) => {
      import('node:child_process').then(({ execFile }) =>
        execFile(ATTND, ['--health-check', url], (err, stdout, stderr) => res({ code: err ? err.code : 0, stderr })));
    });
    assert.equal((await hc(`${d.url}/v2/health/ready`)).code, 0);
    const nf = await hc(`${d.url}/nope`);
    assert.equal(nf.code, 1);
    assert.match(nf.stderr, /HTTP 404/);
    assert.equal((await hc('http://127.0.0.1:1/v2/health/live')).code, 1);
    assert.equal((await hc('ftp://x')).code, 1);
  } finally { await d.stop(); }
});

// Docker's HEALTHCHECK on a daemon listening on :: (README, "Settings":
// --host) names the host as an IPv6 literal in brackets.
test('--health-check: an IPv6 host in brackets, with and without a path', async (t) => {
  const probe = spawnSync('node', ['-e', "require('net').createServer().listen(0, '::1', function () { this.close(); }).on('error', () => process.exit(3))"]);
  if (probe.status !== 0) { t.skip('no IPv6 loopback'); return; }
  const d = await start({ t, args: ['--host', '::1'] }); // tests listen on loopback only
  try {
    const hc = (url) => new Promise((res) => {
      import('node:child_process').then(({ execFile }) =>
        execFile(ATTND, ['--health-check', url], (err, stdout, stderr) => res({ code: err ? err.code : 0, stderr })));
    });
    assert.equal((await hc(`http://[::1]:${d.port}/v2/health/ready`)).code, 0);
    assert.equal((await hc(`http://[::1]:${d.port}`)).code, 0); // GET /: the page
    const nf = await hc(`http://[::1]:${d.port}/nope`);
    assert.equal(nf.code, 1);
    assert.match(nf.stderr, /HTTP 404/);
    const bad = await hc(`http://[::1:${d.port}/v2/health/ready`);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /bad IPv6 host/);
  } finally { assert.equal((await d.stop()).code, 0); }
});

// A key file saved on Windows ends its line in CR LF, one written by hand
// often in a space: neither is part of the key (config.c, load_key_file).
test('--api-key-file: spaces, tabs and CR ending its first line are not the key; beside --api-key or ATTND_API_KEY it is refused', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'attnd-key-'));
  const kf = join(dir, 'key');
  try {
    writeFileSync(kf, 'k3y \t\r\nsecond line\n');
    const d = await start({ t, args: ['--api-key-file', kf] });
    try {
      const index = (key) => fetch(`${d.url}/v2/repository/index`, { method: 'POST', headers: { Authorization: `Bearer ${key}` } });
      assert.equal((await index('k3y')).status, 200);
      assert.equal((await index('second line')).status, 401);
    } finally { assert.equal((await d.stop()).code, 0); }
    for (const [args, env, from] of [
      [['--api-key', 'other', '--api-key-file', kf], {}, '--api-key-file'],
      [['--api-key-file', kf, '--api-key', 'other'], {}, '--api-key-file'],
      [['--api-key-file', kf], { ATTND_API_KEY: 'other' }, '--api-key-file'],
      [[], { ATTND_API_KEY_FILE: kf, ATTND_API_KEY: 'other' }, 'ATTND_API_KEY_FILE']]) {
      const r = run([...args, '--port', '0', '--grpc-port', '0'], env);
      assert.equal(r.status, 2, `${args} ${JSON.stringify(env)}: ${r.stderr}`);
      assert.equal(r.stderr, `attnd: ${from} ${kf}: --api-key (or ATTND_API_KEY) is set too; use one\n`);
    }
  } finally { rmSync(dir, { recursive: true, force: true }); }
});

test('--log-format json: one JSON line per request with id, model, status, batch, times', async (t) => {
  const d = await start({ t, args: ['--log-format', 'json'] });
  const c = REFS.causal;
  await infer(d, 'tiny', { id: 'log-me', inputs: [fp32('x', c.shape, c.x)] });
  const e = await d.stop();
  assert.equal(e.code, 0);
  const lines = d.log().trim().split('\n').map((l) => JSON.parse(l));
  const l = lines.find((o) => o.id === 'log-me');
  assert.ok(l, d.log());
  assert.equal(l.status, 200);
  assert.equal(l.model, 'tiny');
  assert.equal(l.path, '/v2/models/tiny/infer');
  assert.equal(l.batch, 1);
  for (const k of ['queue_us', 'compute_us', 'total_us']) assert.equal(typeof l[k], 'number', k);
});

test('a request\'s text log line: time to the millisecond, method, path, status, id, model, batch, times', async (t) => {
  const d = await start({ t });
  const c = REFS.causal;
  const t0 = Date.now();
  await infer(d, 'tiny', { id: 'text-me', inputs: [fp32('x', c.shape, c.x)] });
  const r = await fetch(`${d.url}/v2/models/nope/ready`);
  assert.equal(r.status, 404);
  await r.arrayBuffer();
  const t1 = Date.now();
  assert.equal((await d.stop()).code, 0);
  const line = d.log().split('\n').find((l) => l.includes(' id=text-me '));
  const m = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z info POST \/v2\/models\/tiny\/infer 200 id=text-me model=tiny batch=1 queue_us=(\d+) compute_us=(\d+) total_us=(\d+)$/.exec(line);
  assert.ok(m, `${line}\n${d.log()}`);
  const at = Date.parse(`${m[1]}Z`);
  assert.ok(at >= t0 - 1000 && at <= t1 + 1000, `${m[1]} not between ${new Date(t0).toISOString()} and ${new Date(t1).toISOString()}`);
  assert.ok(Number(m[4]) >= Number(m[2]) + Number(m[3]) - 1, line);
  // no id, no model: '-'
  assert.match(d.log(), /Z info GET \/v2\/models\/nope\/ready 404 id=- model=- batch=0 queue_us=0 compute_us=0 total_us=\d+$/m);
});

test('a JSON log line escapes what the client sent: id, path', async (t) => {
  const d = await start({ t, args: ['--log-format', 'json'] });
  const c = REFS.causal;
  const id = 'q"uo\\te\u0001';
  await infer(d, 'tiny', { id, inputs: [fp32('x', c.shape, c.x)] });
  // an id is logged whole, up to the 255 bytes a request may give (the
  // log kept 63: a long trace id could not be found)
  const long = `trace-${'0123456789'.repeat(24)}-end`; // 250 bytes
  assert.equal((await infer(d, 'tiny', { id: long, inputs: [fp32('x', c.shape, c.x)] })).status, 200);
  // a raw quote and backslash in the path (fetch would percent-encode them)
  const { request } = await import('node:http');
  await new Promise((res, rej) => request({ host: '127.0.0.1', port: new URL(d.url).port, path: '/no"pe\\' }, (r) => {
    r.resume();
    r.on('end', res);
  }).on('error', rej).end());
  assert.equal((await d.stop()).code, 0);
  const lines = d.log().trim().split('\n').map((l) => JSON.parse(l));
  const l = lines.find((o) => o.model === 'tiny');
  assert.equal(l.id, id);
  assert.ok(lines.some((o) => o.id === long), d.log());
  assert.match(l.ts, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  assert.ok(lines.some((o) => o.path === '/no"pe\\'), d.log());
});

// A load's error quotes the uploaded config's unknown key, which JSON
// lets hold any character: a newline in it wrote a second line, one the
// client chose, to a text log. MHD percent-decodes the path (%FF is the
// byte 0xff) and the log kept 63 bytes of an id (cut inside a character):
// JSON lines that were not UTF-8, which a strict reader refuses.
test('a log line stays one line of UTF-8 whatever the client sent', async (t) => {
  const { body, D16_ST } = await import('./repo_helper.mjs');
  const forged = '2026-01-01T00:00:00.000Z info attnd: FORGED';
  const utf8 = (b) => new TextDecoder('utf-8', { fatal: true }).decode(b);
  for (const format of ['text', 'json']) {
    const d = await start({ t, args: ['--log-format', format] });
    const raw = [];
    d.proc.stderr.on('data', (b) => raw.push(Buffer.from(b)));
    const cfg = `{"n_heads": 4, "k\\n${forged}\\r\\u001b[2J": 1}`;
    const r = await fetch(`${d.url}/v2/repository/models/up/load`, {
      method: 'POST', body: JSON.stringify(body(cfg, D16_ST)) });
    assert.equal(r.status, 400);
    assert.ok((await r.json()).error.includes(`k\n${forged}`));
    assert.equal((await fetch(`${d.url}/v2/%FF%C3x`)).status, 404);
    const c = REFS.causal;
    const id = 'é'.repeat(40); // 80 bytes: the log keeps 63
    assert.equal((await infer(d, 'tiny', { id, inputs: [fp32('x', c.shape, c.x)] })).status, 200);
    assert.equal((await d.stop()).code, 0);
    const lines = utf8(Buffer.concat(raw)).trim().split('\n');
    const start_ = format === 'json' ? /^\{"ts":"/ : /^\d{4}-\d\d-\d\dT[\d:.]+Z (info|warn|error) /;
    for (const l of lines) assert.match(l, start_, `${format}:\n${d.log()}`);
    assert.ok(!lines.some((l) => l.startsWith(forged)), d.log());
    const load = lines.find((l) => l.includes('unknown key'));
    assert.ok(load && !/[\x00-\x1f\x7f]/.test(load), load);
    if (format === 'json') {
      const o = lines.map((l) => JSON.parse(l));
      assert.ok(o.find((x) => x.msg && x.msg.includes(`'k\n${forged}\r\u001b[2J'`)), d.log());
      assert.ok(o.some((x) => x.path === '/v2/\ufffd\ufffdx'), d.log());
      assert.ok(o.find((x) => x.model === 'tiny').id.startsWith('é'.repeat(31)), d.log());
    } else {
      assert.ok(load.includes(`'k\\n${forged}\\r\\u001b[2J'`), load);
    }
  }
});

// A text line's fields are split at spaces: an id (any string) or a
// percent-decoded path with a space could pass for the fields after it.
test('a text log line\'s fields hold no space: an id or a path cannot pass for the fields after it', async (t) => {
  const d = await start({ t });
  const c = REFS.causal;
  const id = 'x model=forged batch=99';
  assert.equal((await infer(d, 'tiny', { id, inputs: [fp32('x', c.shape, c.x)] })).status, 200);
  assert.equal((await fetch(`${d.url}/v2/a%20200%20id=y`)).status, 404);
  assert.equal((await d.stop()).code, 0);
  const fields = (l) => Object.fromEntries(l.split(' ').slice(5).map((f) => [f.slice(0, f.indexOf('=')), f.slice(f.indexOf('=') + 1)]));
  const inf = d.log().split('\n').find((l) => l.includes('/v2/models/tiny/infer'));
  assert.deepEqual([fields(inf).id, fields(inf).model, fields(inf).batch], ['x\\u0020model=forged\\u0020batch=99', 'tiny', '1'], inf);
  const nf = d.log().split('\n').find((l) => l.includes(' GET /v2/a'));
  assert.match(nf, / GET \/v2\/a\\u0020200\\u0020id=y 404 id=- model=- /, nf);
});

test('a request\'s log line reaches stderr while the daemon idles', async (t) => {
  const d = await start({ t, args: ['--log-format', 'json', '--busy-poll-us', '0'] });
  try {
    const c = REFS.causal;
    for (const id of ['seen-1', 'seen-2']) {
      await infer(d, 'tiny', { id, inputs: [fp32('x', c.shape, c.x)] });
      const log = await d.logged(new RegExp(`"id":"${id}"`), 3000);
      assert.ok(log.includes(`"id":"${id}"`), `no line for ${id} before the daemon stopped:\n${log}`);
    }
  } finally { await d.stop(); }
});

// GET /v2/health/live n times, one after another, each bounded: a daemon
// whose loop blocks on its stderr fails here instead of hanging the file.
async function lives(d, n) {
  for (let i = 0; i < n; i++) {
    const r = await fetch(`${d.url}/v2/health/live`, { signal: AbortSignal.timeout(10000) });
    assert.equal(r.status, 200);
    await r.arrayBuffer();
  }
}

test('a stderr nobody reads stops neither the requests nor the exit; lines past --log-buffer are counted and reported', async (t) => {
  const d = await start({ t, args: ['--log-buffer', '16384', '--log-flush-ms', '5'] });
  // ~100 bytes a line: 3000 lines fill node's buffer and the pipe (64 KiB)
  // and leave the writer blocked with the 16 KiB buffer full
  d.proc.stderr.pause();
  await lives(d, 3000);
  const m = await (await fetch(`${d.url}/metrics`, { signal: AbortSignal.timeout(10000) })).text();
  const dropped = Number((/^attnd_log_lines_dropped_total (\d+)$/m.exec(m) || [])[1]);
  assert.ok(dropped > 0, `attnd_log_lines_dropped_total ${dropped}`);
  d.proc.stderr.resume();
  const notice = / warn attnd: \d+ log lines? dropped: stderr did not keep up/;
  assert.match(await d.logged(notice, 10000), notice);
  // every line written is whole
  for (const l of d.log().trim().split('\n'))
    assert.match(l, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (info|warn|error) /, l);
  // blocked again, SIGTERM still ends it, within a few seconds, with 0
  d.proc.stderr.pause();
  await lives(d, 3000);
  const t0 = Date.now();
  d.proc.kill('SIGTERM');
  const e = await Promise.race([d.exit, new Promise((r) => setTimeout(() => r(null), 15000))]);
  assert.ok(e && e.code === 0, `exit ${JSON.stringify(e)} after ${Date.now() - t0} ms`);
  const closed = new Promise((r) => d.proc.stderr.once('close', r));
  d.proc.stderr.resume();
  await closed;
  await d.stop();
});

// start a daemon with these variables set (a value) or unset (undefined)
async function startWith(t, vars) {
  const saved = {};
  for (const [k, v] of Object.entries(vars)) {
    saved[k] = process.env[k];
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  }
  try {
    return await start({ t });
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}
const environOf = (d) => readFileSync(`/proc/${d.proc.pid}/environ`, 'utf8').split('\0');

test('the daemon runs as "attnd" with one OpenBLAS thread and malloc on huge pages (it re-executes itself by its own path)', async (t) => {
  const d = await startWith(t, { OPENBLAS_NUM_THREADS: undefined, GLIBC_TUNABLES: undefined });
  // ps, pgrep and container-test find the daemon by this name
  assert.equal(readFileSync(`/proc/${d.proc.pid}/comm`, 'utf8').trim(), 'attnd');
  const environ = environOf(d);
  assert.ok(environ.includes('OPENBLAS_NUM_THREADS=1'), 'OPENBLAS_NUM_THREADS=1 in its environment');
  assert.ok(environ.includes('GLIBC_TUNABLES=glibc.malloc.hugetlb=1'), environ.filter((e) => e.startsWith('GLIBC')).join(' '));
  await d.stop();
  // the caller's own choice stays
  const e = await startWith(t, { GLIBC_TUNABLES: 'glibc.malloc.hugetlb=0' });
  assert.ok(environOf(e).includes('GLIBC_TUNABLES=glibc.malloc.hugetlb=0'));
  await e.stop();
});

// README, "BLAS kernels": OpenBLAS 0.3.21 falls back to its Prescott (SSE3)
// kernels on CPUs newer than it; attnd asks for ones this CPU has.
const PRE_AVX2 = ['Prescott', 'Core2', 'Penryn', 'Dunnington', 'Nehalem', 'Atom', 'Katmai', 'Coppermine',
  'Northwood', 'Banias', 'Athlon', 'Opteron', 'Opteron_SSE3', 'Barcelona', 'Bobcat', 'Bulldozer',
  'Piledriver', 'Steamroller', 'Excavator', 'Sandybridge', 'Unknown'];
test('OpenBLAS runs kernels this CPU has; OPENBLAS_CORETYPE set by the caller wins', (t) => {
  const flags = (readFileSync('/proc/cpuinfo', 'utf8').match(/^flags\s*:(.*)$/m) || ['', ''])[1].trim().split(/\s+/);
  const env = { ...process.env };
  delete env.OPENBLAS_CORETYPE;
  const r = spawnSync(ATTND, ['--version'], { encoding: 'utf8', env, timeout: 30000 });
  assert.equal(r.status, 0);
  const m = r.stdout.match(/OpenBLAS kernels (\w+)/);
  assert.ok(m, `--version names the kernels: ${r.stdout}`);
  if (!flags.includes('avx2') || !flags.includes('fma')) t.diagnostic('no AVX2+FMA here: any kernels do');
  else assert.ok(!PRE_AVX2.includes(m[1]), `a CPU with AVX2 and FMA runs ${m[1]} kernels`);
  // the caller's choice is kept (Prescott runs on every x86-64)
  assert.match(run(['--version'], { OPENBLAS_CORETYPE: 'Prescott' }).stdout, /OpenBLAS kernels Prescott/);
});
