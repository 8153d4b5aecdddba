// crash.test.mjs - what attnd leaves on stderr when it dies of a fault or
// an abort (server/crash.c): the report, the log lines that were still
// waiting for the writer, the stack and the addr2line command, then death
// by the same signal. The faults are sent (kill, tgkill): a real one would
// need a bug. ASan and TSan builds keep their sanitizer's own report.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import http from 'node:http';
import { test } from 'node:test';
import { fp32, infer, start } from './helper.mjs';

const SANITIZED = /address|thread/.test(process.env.ATTND_BIN || '') && 'an ASan or TSan build keeps its own report';
const HAVE_ADDR2LINE = spawnSync('addr2line', ['--version']).status === 0;
const x = (t) => ({ inputs: [fp32('x', [1, t, 64], Array.from({ length: t * 64 }, (_, i) => Math.sin(i)))] });

/** call(agent, d, method, path, body): {status, reused} over agent's socket. */
function call(agent, d, method, path, body) {
  return new Promise((resolve, reject) => {
    const req = http.request(`${d.url}${path}`, { method, agent, headers: body ? { 'Content-Type': 'application/json' } : {} }, (r) => {
      r.resume();
      r.on('end', () => resolve({ status: r.statusCode, reused: req.reusedSocket }));
    });
    req.on('error', reject);
    req.end(body && JSON.stringify(body));
  });
}

/** threads(pid): [{tid, comm}] of the process. */
function threads(pid) {
  return readdirSync(`/proc/${pid}/task`).map((tid) => ({ tid: Number(tid), comm: readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim() }));
}

/** tgkill(pid, tid, sig): sig to one thread (node's kill is the process's). */
function tgkill(pid, tid, sig) {
  const r = spawnSync('python3', ['-c', `import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
if libc.syscall(234, ${pid}, ${tid}, signal.${sig}) != 0: raise OSError(ctypes.get_errno(), "tgkill")`]);
  assert.equal(r.status, 0, `tgkill: ${r.stderr}`);
}

test('a fault on the loop thread: the report, the log lines still waiting, the stack, then death by that signal', { skip: SANITIZED }, async (t) => {
  // a request's line would wait 10 s for company: only the report writes it
  const d = await start({ t, args: ['--log-flush-ms', '10000', '--inline-conns', '1'] });
  // The client has the answer while the loop may still be in sendmsg, its
  // line not yet queued; a second request on the same connection is read
  // only after the first's completion (which queues the line) has run.
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  assert.equal((await call(agent, d, 'POST', '/v2/models/demo/infer', x(3))).status, 200);
  assert.deepEqual(await call(agent, d, 'GET', '/v2/health/live'), { status: 200, reused: true });
  agent.destroy();
  const { sig } = await d.stop('SIGSEGV');
  const log = d.log();
  assert.equal(sig, 'SIGSEGV', log);
  assert.match(log, /fatal attnd: crashed: SIGSEGV sent by pid \d+ on the loop thread \(tid \d+\); attnd [\d.]+, up \d+ s\n/);
  const report = log.slice(log.indexOf('fatal attnd: crashed'));
  assert.match(report, / info POST \/v2\/models\/demo\/infer 200 /, 'the request line waiting for the writer is in the report');
  assert.match(report, /fatal attnd: {3}#0 \S+attnd\(\+0x[0-9a-f]+\)/);
  assert.match(report, /libuv\.so\S* uv_run\+0x/, 'the loop thread is in libuv\'s loop');
  const cmd = /for the daemon's frames' functions and lines: (addr2line -f -C -i -e \S+(?: 0x[0-9a-f]+)+)\n/.exec(report);
  assert.ok(cmd, report);
  if (HAVE_ADDR2LINE) {
    const out = spawnSync('sh', ['-c', cmd[1]]).stdout.toString();
    assert.match(out, /^on_fatal$/m, out);
    assert.match(out, /^main$/m, out);
    assert.match(out, /server\/main\.c:\d+/, out);
  }
});

test('a fault on a pool thread names the thread and its last job; an abort too; JSON logs stay JSON', { skip: SANITIZED || (process.arch !== 'x64' && 'tgkill is system call 234 on x86-64 only') }, async (t) => {
  const d = await start({ t, args: ['--threads', '1', '--inline-conns', '0', '--log-format', 'json'] });
  const r = await infer(d, 'demo', x(2));
  assert.equal(r.status, 200);
  const pool = threads(d.proc.pid).filter((th) => th.comm === 'attnd-pool');
  assert.equal(pool.length, 1, JSON.stringify(threads(d.proc.pid)));
  assert.ok(threads(d.proc.pid).some((th) => th.comm === 'attnd-log'));
  tgkill(d.proc.pid, pool[0].tid, 'SIGBUS');
  const { sig } = await d.stop('SIGBUS');
  const lines = d.log().trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(sig, 'SIGBUS', d.log());
  const fatal = lines.filter((l) => l.level === 'fatal').map((l) => l.msg);
  assert.match(fatal[0], new RegExp(`^crashed: SIGBUS sent by pid \\d+ on a pool thread \\(tid ${pool[0].tid}\\)`));
  // its last job was the request's (decoded, then run, on the one thread)
  assert.match(fatal[1], /^its last job: (decoding|running) a request, model 'demo', begun \d+\.\d{3} ms before$/);
  assert.ok(fatal.some((m) => /^ {2}#\d+ /.test(m)));
  assert.ok(lines.every((l) => typeof l.ts === 'string' && /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/.test(l.ts)), 'every line keeps the log\'s timestamp');

  const a = await start({ t, args: ['--threads', '1'] });
  a.proc.kill('SIGABRT');
  assert.equal((await a.stop('SIGABRT')).sig, 'SIGABRT');
  assert.match(a.log(), /fatal attnd: crashed: SIGABRT sent by pid \d+ on the loop thread/);
});

// As a container's entrypoint attnd is its pid namespace's init, which a
// signal with the default action does not end unless the kernel forces it
// (a fault): the report's re-raise was dropped, so a sent SIGABRT or
// SIGSEGV left the daemon running after 'crashed' (and abort(3)'s own
// fallback fault found the handler again and hung its thread). It now
// exits with 128 + the signal, the status a runtime reports for that death.
const UNSHARE = spawnSync('unshare', ['--pid', '--fork', 'true']).status === 0;
test('as a pid namespace\'s init (a container\'s entrypoint), a sent SIGABRT or SIGSEGV ends it after its report', { skip: SANITIZED || (!UNSHARE && 'unshare --pid needs root') }, async (t) => {
  for (const [sig, code] of [['SIGABRT', 134], ['SIGSEGV', 139]]) {
    // unshare forks attnd as pid 1 of a new namespace and exits with its status
    const d = await start({ t, args: ['--threads', '1'], wrap: ['unshare', '--pid', '--fork', '--kill-child'] });
    const child = Number(readFileSync(`/proc/${d.proc.pid}/task/${d.proc.pid}/children`, 'utf8').trim());
    assert.ok(child > 0, 'attnd runs under unshare');
    assert.equal(readFileSync(`/proc/${child}/status`, 'utf8').match(/^NSpid:.*\s(\d+)$/m)?.[1], '1', 'attnd is pid 1 in its namespace');
    process.kill(child, sig);
    const ended = await Promise.race([d.exit, new Promise((res) => setTimeout(() => res(null), 5000))]);
    assert.match(d.log(), new RegExp(`fatal attnd: crashed: ${sig} sent by pid \\d+ on the loop thread`));
    assert.deepEqual(ended, { code, sig: null }, `${sig}: still running 5 s after its report`);
    await d.stop('SIGKILL');
  }
});
