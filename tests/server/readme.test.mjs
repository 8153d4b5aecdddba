// readme.test.mjs - the README's shell examples work when pasted.
// Extracts the ```sh blocks of the README sections that talk to a running
// daemon, starts attnd as `make run` does (build/default/attnd, defaults,
// `models/` of the working directory) but on a free loopback port, rewrites
// localhost:8080 / 127.0.0.1:8080 in the commands to that port (and
// 127.0.0.1:8001 likewise to its gRPC port; the only other rewrite: the
// examples' /tmp/ files go to a tmp/ of the scratch folder, so that two
// runs at once do not read each other's half-written /tmp/upload.json and
// nothing is left in /tmp), and runs each block
// with bash -e -o pipefail in a scratch copy of the repo's models/,
// proto/kserve.proto and tools/ (the examples upload models/demo2 there,
// generate the gRPC stubs from the .proto and export PyTorch layers into
// models/ with tools/export_torch.py). Each command must succeed
// and print no {"error": ...} (unless its "# -> {"error": ..." says that is
// what it gives) and no HTTP 4xx/5xx status line; a result the
// README states in a comment (in a here-document too) must show:
//   `cmd   # 200 when ready`          the output has a line "200"
//   `# ...: weights [[a,b],[c,d]]`    the next command's JSON has those
//                                     values (to the digits given)
//   `# -> x ... y`                    the previous command printed x, then y
//                                     (map ids m<N>-<tag> match any id)
//   `cmd   # now in models/X/`        that folder exists afterwards
//   `cmd   # ... "key" ...`           the output contains "key"
// Blocks that need make targets, Docker, kubectl, a cluster or their own
// fixed ports are skipped by name, with the reason printed (SKIP below);
// the gRPC and "Weight sets" blocks when what they need is missing.
// README_TEST_VERBOSE=1 prints every command with its output. The
// "Engine" section's C examples are compiled with the project's warnings
// and run (the decoder step's under LeakSanitizer).
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { ATTND, ROOT, SLOW, track } from './helper.mjs';

// Section heading -> why its sh blocks are not run here.
const SKIP = {
  attnd: 'make run / make test / apt-get: the test itself runs inside make test',
  Docker: 'needs a Docker engine (make container-test covers the image)',
  Kubernetes: 'needs docker push, kubectl and a real cluster (make check-deploy validates the manifests)',
  'Several replicas behind nginx': 'fixed ports 8081-8083 and foreground nginx; make check-deploy runs it (tests/deploy/failover.mjs)',
  'Engine (`core/`)': 'make targets and PyTorch: part of make test / make bench themselves',
  'Protocol details (proto/)': 'make fuzz / make bench-proto: clang and long runs',
};
// Sections whose blocks are run against the daemon, in README order
// ("Sequences across replicas": its step with the header works against one
// attnd as through nginx; make check-deploy checks the routing).
const RUN = ['API', 'Retained attention maps', 'Sequences (decoder steps over a server-held K/V cache)',
  'Sequences across replicas'];
// The gRPC example needs what its comment names (Debian: python3-grpcio
// protobuf-compiler protobuf-compiler-grpc); without them it is skipped.
const has = (cmd, args) => spawnSync(cmd, args, { stdio: 'ignore' }).status === 0;
if (has('protoc', ['--version']) && has('sh', ['-c', 'command -v grpc_python_plugin']) &&
    has('/usr/bin/python3', ['-c', 'import grpc, google.protobuf'])) RUN.push('gRPC');
else SKIP.gRPC = 'needs protoc, grpc_python_plugin and python3-grpcio (make check-grpc makes the same calls)';
// "Weight sets" exports PyTorch layers with tools/export_torch.py into the
// scratch copy's models/; it needs Debian's python3-torch.
if (has('/usr/bin/python3', ['-c', 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)'])) RUN.push('Weight sets');
else SKIP['Weight sets'] = 'needs PyTorch (/usr/bin/python3 with torch: apt-get install python3-torch)';

/** The README's ```sh blocks as [{section, code}] (section = nearest heading). */
function shBlocks(text) {
  const out = [];
  let section = '';
  let block = null;
  for (const line of text.split('\n')) {
    if (block) {
      if (/^```\s*$/.test(line)) { out.push({ section, code: block.join('\n') }); block = null; }
      else block.push(line);
    } else if (/^```sh\s*$/.test(line)) block = [];
    else {
      const h = /^#{1,4} (.*)$/.exec(line);
      if (h) section = h[1].trim();
    }
  }
  return out;
}

/**
 * Split a block into commands: a command ends at a newline outside quotes
 * and $( ), and not after a backslash, | or &&. Returns [{cmd, comment, before}] where comment
 * is the trailing "# ..." of its last line and before the comment-only lines
 * just above it; a trailing "# -> ..." line becomes after of the previous.
 * A here-document (<<'TAG' ... TAG) belongs to its command, and a "# -> ..."
 * line inside it is an after of that command.
 */
function commands(code) {
  const cmds = [];
  let cur = '';
  let quote = null;
  let depth = 0;
  let pending = [];
  let heredoc = null; // the closing tag of a here-document being read
  for (const line of code.split('\n')) {
    if (heredoc) {
      cur += '\n' + line;
      const arrow = /^#\s*->\s*(.*)$/.exec(line.trim());
      if (arrow) cmds[cmds.length - 1].after.push(arrow[1]);
      if (line === heredoc) { cmds[cmds.length - 1].cmd = cur; cur = ''; heredoc = null; }
      continue;
    }
    if (!quote && !depth && !cur) {
      const t = line.trim();
      if (t === '') { pending = []; continue; }
      if (t.startsWith('#')) {
        const arrow = /^#\s*->\s*(.*)$/.exec(t);
        if (arrow && cmds.length) cmds[cmds.length - 1].after.push(arrow[1]);
        else pending.push(t.slice(1).trim());
        continue;
      }
    }
    let comment = '';
    for (let i = 0; i < line.length; i++) {
      const c = line[i];
      if (quote === "'") { if (c === "'") quote = null; continue; }
      if (c === '\\') { i++; continue; }
      if (quote === '"') { if (c === '"') quote = null; continue; }
      if (c === "'" || c === '"') quote = c;
      else if (c === '(') depth++;
      else if (c === ')') depth--;
      else if (c === '#' && (i === 0 || /\s/.test(line[i - 1]))) { comment = line.slice(i + 1).trim(); break; }
    }
    cur += (cur ? '\n' : '') + line;
    const code = comment ? line.slice(0, line.lastIndexOf('#')) : line;
    if (!quote && !depth && !/(\\|\||&&)\s*$/.test(code)) {
      cmds.push({ cmd: cur, comment, before: pending, after: [] });
      const doc = /<<-?\s*(['"]?)(\w+)\1\s*$/.exec(code);
      if (doc) heredoc = doc[2]; // cur goes on to the closing tag
      else cur = '';
      pending = [];
    }
  }
  assert.ok(quote === null && depth === 0 && !cur && !heredoc, `unterminated command in:\n${code}`);
  return cmds;
}

const PORT_RE = /\b(localhost|127\.0\.0\.1):8080\b/g;
const GRPC_PORT_RE = /\b(localhost|127\.0\.0\.1):8001\b/g;
const TMP_RE = /(?<![\w.\/-])\/tmp\//g;
const MARK = '@@readme-cmd';

/** Run a block's commands as one bash -e -o pipefail script; outputs by command. */
function runBlock(cmds, port, grpcPort, cwd) {
  const script = cmds.map((c, i) => `printf '\\n${MARK} %d\\n' ${i}\n${c.cmd.replace(PORT_RE, `$1:${port}`)
    .replace(GRPC_PORT_RE, `$1:${grpcPort}`).replace(TMP_RE, `${cwd}/tmp/`)}`)
    .join('\n') + `\nprintf '\\n${MARK} end\\n'\n`;
  // python3 as on a fresh Debian 12: /usr/bin first (pyenv shims need a
  // shell setup the examples should not depend on).
  const env = { ...process.env, PATH: `/usr/local/bin:/usr/bin:/bin:${process.env.PATH || ''}` };
  const r = spawnSync('bash', ['-e', '-o', 'pipefail', '-c', script], {
    cwd, env, encoding: 'latin1', timeout: 60000 * SLOW, maxBuffer: 64 << 20,
  });
  const parts = r.stdout.split(new RegExp(`\\n?${MARK} `));
  const outs = [];
  let reached = -1;
  for (const p of parts.slice(1)) {
    const nl = p.indexOf('\n');
    const tag = p.slice(0, nl);
    if (tag === 'end') { reached = cmds.length; break; }
    reached = Number(tag);
    outs[reached] = p.slice(nl + 1);
  }
  return { status: r.status, signal: r.signal, stderr: r.stderr, outs, reached };
}

/** All numbers of every "data" array in a JSON text (flattened). */
function dataArrays(text) {
  const found = [];
  const walk = (v) => {
    if (Array.isArray(v)) v.forEach(walk);
    else if (v && typeof v === 'object')
      for (const [k, x] of Object.entries(v)) {
        if (k === 'data' && Array.isArray(x)) found.push(x.flat(Infinity));
        else walk(x);
      }
  };
  walk(JSON.parse(text));
  return found;
}

const escapeRe = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const ID_RE = 'm\\d+-[0-9a-f]+';

/** Check one command's output against what the README says about it. */
function checkOutput(c, out, cwd) {
  const what = `\n$ ${c.cmd}\n${out}`;
  // an error only where the README shows that error as the result
  if (!c.after.some((a) => /^\{"error":/.test(a)))
    assert.doesNotMatch(out, /\{\s*"error"\s*:/, `error response:${what}`);
  for (const m of out.matchAll(/^HTTP\/[\d.]+ (\d{3})/gm))
    assert.ok(Number(m[1]) < 400, `HTTP ${m[1]}:${what}`);
  if (/^200\b/.test(c.comment)) assert.match(out, /^200$/m, `expected 200:${what}`);
  const now = /\bnow in (\S+?)\/?(\s|$)/.exec(c.comment);
  if (now) assert.ok(existsSync(join(cwd, now[1])), `${now[1]} missing after:${what}`);
  for (const m of c.comment.matchAll(/"([^"]+)"/g)) assert.ok(out.includes(`"${m[1]}"`), `no "${m[1]}":${what}`);
  for (const b of c.before) {
    const w = /weights (\[\[.*\]\])/.exec(b);
    if (!w) continue;
    const want = JSON.parse(w[1]).flat(Infinity);
    const digits = Math.max(...w[1].match(/\d+\.\d+/g).map((s) => s.split('.')[1].length));
    const tol = 0.5 * 10 ** -digits + 1e-7;
    const ok = dataArrays(out).some((d) => d.length === want.length && d.every((x, i) => Math.abs(x - want[i]) <= tol));
    assert.ok(ok, `no output data ${w[1]} (±${tol}):${what}`);
  }
  for (const a of c.after) {
    const re = a.split('...').map((s) => escapeRe(s.trim()).replace(new RegExp(ID_RE, 'g'), ID_RE)).join('[\\s\\S]*');
    assert.match(out, new RegExp(re), `expected "${a}":${what}`);
  }
}

const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
const blocks = shBlocks(readme);
let daemon = null;
let work = null;

test('every README sh block is either run here or skipped with a reason', () => {
  const said = new Set();
  for (const b of blocks) {
    if (RUN.includes(b.section) || said.has(b.section)) continue;
    said.add(b.section);
    assert.ok(SKIP[b.section], `README section "${b.section}" has a sh block this test neither runs nor skips`);
    console.log(`SKIP README "${b.section}": ${SKIP[b.section]}`);
  }
  for (const s of RUN) assert.ok(blocks.some((b) => b.section === s), `README has no sh block under "${s}"`);
});

test('README "How it got here" lists every round of bench/ROUNDS.md, in order', () => {
  const rounds = [...readFileSync(join(ROOT, 'bench', 'ROUNDS.md'), 'utf8').matchAll(/^## (.+)$/gm)].map((m) => m[1]);
  const from = readme.indexOf('### How it got here');
  assert.ok(from >= 0 && rounds.length > 0, 'README has no "How it got here" or ROUNDS.md no rounds');
  const section = readme.slice(from, readme.indexOf('\n## ', from));
  const listed = [...section.matchAll(/^- (.+)$/gm)].map((m) => m[1]);
  assert.deepEqual(listed, rounds);
});

// The "Engine" section's C examples, as a user pastes them into a program
// of theirs built with this project's own warnings: the includes on top,
// the rest in main() after what they use (zeroed weights; no biases; the
// decoder step's example after the first's cfg, w, ex and err, with
// core/kv.h). The step's example runs under LeakSanitizer: what it creates
// it frees, so a program that steps sequences in a loop does not grow.
const ENGINE_C_INCLUDES = ['#include <stdio.h>', '#include <stdlib.h>'];
const ENGINE_C_BUFFERS = ['    enum { T = 5, D = 768 };',
  ...['w_q', 'w_k', 'w_v', 'w_o'].map((n) => `    float *${n} = calloc(D * D, sizeof(float));`),
  '    float *b_q = NULL, *b_k = NULL, *b_v = NULL, *b_o = NULL;',
  '    float *x = calloc(T * D, sizeof(float)), *y = calloc(T * D, sizeof(float));'];
const ENGINE_C_FREE = ['w_q', 'w_k', 'w_v', 'w_o', 'x', 'y'].map((n) => `    free(${n});`);

/** The README's ```c blocks after the "Engine" heading, each as its lines. */
function engineBlocks() {
  const from = readme.indexOf('\n## Engine (`core/`)');
  assert.ok(from >= 0, 'README has no "Engine" section');
  const to = readme.indexOf('\n## ', from + 1);
  return [...readme.slice(from, to).matchAll(/\n```c\n([^]*?)```\n/g)].map((m) => m[1].trimEnd().split('\n'));
}

/** Compile src with the project's warnings (and extra flags) against libattn_core.a, run it; {status, stderr, src}. */
function compileRun(t, src, extra = []) {
  const lib = join(ROOT, 'build', 'default', 'libattn_core.a');
  if (!existsSync(lib)) { t.skip('no build/default/libattn_core.a (make builds it)'); return null; }
  const dir = mkdtempSync(join(tmpdir(), 'attnd-readme-c-'));
  try {
    writeFileSync(join(dir, 'ex.c'), src);
    const blas = spawnSync('pkg-config', ['--libs', 'openblas'], { encoding: 'utf8' }).stdout?.trim().split(/\s+/).filter(Boolean) || [];
    const cc = spawnSync('cc', ['-std=c11', '-D_GNU_SOURCE', '-pthread', '-Wall', '-Wextra', '-Wshadow', '-Wstrict-prototypes',
      '-Wmissing-prototypes', '-Wformat=2', '-Wvla', '-Werror', ...extra, `-I${ROOT}`, '-o', join(dir, 'ex'), join(dir, 'ex.c'), lib,
      ...(blas.length ? blas : ['-lopenblas']), '-lm'], { encoding: 'utf8' });
    assert.equal(cc.status, 0, `${src}\n${cc.stderr}`);
    const r = spawnSync(join(dir, 'ex'), [], { encoding: 'utf8', timeout: 30000 * SLOW });
    return { status: r.status, stderr: r.stderr, src };
  } finally { rmSync(dir, { recursive: true, force: true }); }
}

test('README "Engine" C example compiles with the project\'s warnings and runs', (t) => {
  const blocks = engineBlocks();
  assert.ok(blocks.length >= 1, 'README has no C example under "Engine"');
  const lines = blocks[0];
  const src = [...ENGINE_C_INCLUDES, ...lines.filter((l) => l.startsWith('#include')),
    'int main(void)', '{', ...ENGINE_C_BUFFERS,
    ...lines.filter((l) => !l.startsWith('#include')), '    return 0;', '}', ''].join('\n');
  const r = compileRun(t, src);
  if (!r) return;
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stderr, '', 'attn_forward refused the example');
});

test('README "Engine" decoder-step C example compiles, runs and frees what it made', (t) => {
  const blocks = engineBlocks();
  assert.ok(blocks.length >= 2, 'README has no decoder-step C example under "Engine"');
  const step = blocks[1];
  assert.ok(step.some((l) => l.includes('attn_kv_reserve')), `the second C example is not the step's:\n${step.join('\n')}`);
  // what it uses of the first example (cfg, w, ex, err), as that one
  // makes them, and t new rows of x and y
  const src = [...ENGINE_C_INCLUDES, '#include "core/attn.h"', '#include "core/exec.h"', '#include "core/kv.h"',
    'int main(void)', '{', ...ENGINE_C_BUFFERS, '    int t = 3;',
    '    attn_config cfg = {.d_model = 768, .n_heads = 12, .n_kv_heads = 12, .head_dim = 64, .v_head_dim = 64};',
    '    attn_weights w = {w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o, ATTN_ROWS};',
    '    attn_exec *ex;', '    attn_exec_create(&ex, 0);', '    char err[ATTN_ERRMAX];',
    ...step, '    attn_exec_destroy(ex);', ...ENGINE_C_FREE, '    return 0;', '}', ''].join('\n');
  const r = compileRun(t, src, ['-fsanitize=address', '-fno-omit-frame-pointer', '-g']);
  if (!r) return;
  assert.equal(r.status, 0, `${r.src}\n${r.stderr}`);
  assert.doesNotMatch(r.stderr, /Sanitizer/, `${r.src}\n${r.stderr}`);
});

before(async () => {
  // `make run` in a scratch folder: the default --models is ./models.
  work = mkdtempSync(join(tmpdir(), 'attnd-readme-'));
  cpSync(join(ROOT, 'models'), join(work, 'models'), { recursive: true });
  cpSync(join(ROOT, 'proto', 'kserve.proto'), join(work, 'proto', 'kserve.proto')); // the gRPC example's protoc
  cpSync(join(ROOT, 'tools'), join(work, 'tools'), { recursive: true }); // "Weight sets": tools/export_torch.py
  mkdirSync(join(work, 'tmp')); // the examples' /tmp/
  const proc = spawn(ATTND, ['--port', '0', '--grpc-port', '-1'], { cwd: work, stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  proc.stderr.on('data', (d) => { log += d; });
  const exit = new Promise((res) => proc.on('exit', res));
  daemon = { proc, exit, log: () => log };
  track(proc, { args: ['--port', '0'], dir: work, log: daemon.log });
  const deadline = Date.now() + 20000 * SLOW;
  while (!daemon.port || !daemon.grpcPort) {
    const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(log);
    const g = /listening on grpc:\/\/127\.0\.0\.1:(\d+)/.exec(log);
    if (m && g) daemon.port = Number(m[1]), daemon.grpcPort = Number(g[1]);
    else if (proc.exitCode !== null || Date.now() > deadline) throw new Error(`attnd did not start:\n${log}`);
    else await new Promise((r) => setTimeout(r, 20));
  }
});

after(async () => {
  if (daemon && daemon.proc.exitCode === null && daemon.proc.signalCode === null) {
    daemon.proc.kill('SIGTERM');
    const t = setTimeout(() => daemon.proc.kill('SIGKILL'), 30000 * SLOW);
    await daemon.exit;
    clearTimeout(t);
  }
  if (work) rmSync(work, { recursive: true, force: true });
});

for (const [n, b] of blocks.entries()) {
  if (!RUN.includes(b.section)) continue;
  test(`README "${b.section}" block ${n} works as pasted`, () => {
    const cmds = commands(b.code);
    assert.ok(cmds.length > 0);
    // Like a user after `make run`: wait until ready before pasting.
    for (let i = 0; ; i++) {
      const r = spawnSync('curl', ['-s', '-o', '/dev/null', '-w', '%{http_code}', `127.0.0.1:${daemon.port}/v2/health/ready`], { encoding: 'utf8', timeout: 5000 });
      if (r.stdout === '200') break;
      assert.ok(i < 500 * SLOW, `attnd not ready:\n${daemon.log()}`);
      spawnSync('sleep', ['0.02']);
    }
    const r = runBlock(cmds, daemon.port, daemon.grpcPort, work);
    const failed = r.reached >= 0 && r.reached < cmds.length ? cmds[r.reached].cmd : '(none)';
    assert.equal(r.status, 0, `bash exit ${r.status} ${r.signal || ''} at:\n$ ${failed}\n${r.outs[r.reached] || ''}\nstderr:\n${r.stderr}`);
    assert.equal(r.reached, cmds.length, 'the block did not run to its end');
    cmds.forEach((c, i) => {
      if (process.env.README_TEST_VERBOSE) console.log(`$ ${c.cmd}\n${r.outs[i]}`);
      checkOutput(c, r.outs[i] ?? '', work);
    });
    console.log(`README "${b.section}" block ${n}: ${cmds.length} commands ok`);
  });
}

test('the examples wrote their /tmp/ files in the scratch folder, not in /tmp', () => {
  const every = [...new Set(blocks.filter((b) => RUN.includes(b.section))
    .flatMap((b) => [...b.code.matchAll(/(?<![\w.\/-])\/tmp\/([\w.-]+)/g)].map((m) => m[1])))];
  assert.ok(every.includes('upload.json') && every.includes('s0.json'), `the examples' /tmp/ files: ${every}`);
  for (const f of every) assert.ok(existsSync(join(work, 'tmp', f)), `${f} not in the scratch tmp/ (${every})`);
});

test('after the examples, attnd exits 0 on SIGTERM with a clean log', async () => {
  daemon.proc.kill('SIGTERM');
  const t = setTimeout(() => daemon.proc.kill('SIGKILL'), 30000 * SLOW);
  const code = await daemon.exit;
  clearTimeout(t);
  assert.equal(code, 0, daemon.log());
  assert.doesNotMatch(daemon.log(), /Sanitizer|runtime error/, daemon.log());
});
