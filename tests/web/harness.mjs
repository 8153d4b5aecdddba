// harness.mjs - what the browser tests share: start the real attnd on a
// free loopback port with a model folder, launch Debian's chromium through
// playwright-core (browserSuite: both, before a file's tests, and their
// teardown after), and an independent viridis (from the published stops,
// not the page's code) to compare drawn pixels with.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, afterEach, before } from 'node:test';
import { chromium } from 'playwright-core';
import { sanitizerReport } from '../sanitizer.mjs';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const ATTND = process.env.ATTND || path.join(ROOT, 'build/default/attnd');
export const ARTIFACTS = path.join(ROOT, 'tests/web/artifacts');
// WAIT: how long a test waits for the page to reach a state (drawn, an
// error shown, a step followed) before it fails: a hang's bound, not a
// speed. Playwright's own default (30 s), x 5 for a sanitized attnd (as
// tests/server/helper.mjs's SLOW). Waits of 3-15 s failed on a host 8x
// slower at compute (cgroup cpu quota 25000 of 2 cores), where each took
// well under a second on this one.
export const WAIT = 30000 * (/sanitiz|thread|address|undefined/.test(ATTND) ? 5 : 1);

// A small attention model written as safetensors (canonical names), so the
// tests do not depend on any generated weights: d_model 16, 2 heads of 8.
// W_q = W_k = W_v = identity, W_o = identity: head h attends by the dot
// product of columns 8h..8h+7 of x (content half for head 0, position
// half for head 1 with the sample generator). config: more config.json
// keys (e.g. a scale of its own).
function writeToyModel(dir, config = {}) {
  const D = 16;
  const eye = new Float32Array(D * D);
  for (let i = 0; i < D; i++) eye[i * D + i] = 1;
  const names = ['W_q', 'W_k', 'W_v', 'W_o'];
  const header = {};
  names.forEach((n, k) => { header[n] = { dtype: 'F32', shape: [D, D], data_offsets: [k * D * D * 4, (k + 1) * D * D * 4] }; });
  let h = JSON.stringify(header);
  h += ' '.repeat((8 - (h.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(h.length));
  const data = Buffer.concat(names.map(() => Buffer.from(eye.buffer)));
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'model.safetensors'), Buffer.concat([len, Buffer.from(h), data]));
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({ n_heads: 2, description: 'test toy: identity projections', ...config }));
}

// modelsDir: a fresh folder with `toy`, plus the repository's `demo` model
// when one has been built (models/demo), plus toys: {name: config keys},
// more toys with configs of their own.
// (each is also removed when this process ends, however its daemon ended)
export function modelsDir(toys = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'attnd-web-'));
  made.add(dir);
  writeToyModel(path.join(dir, 'toy'));
  for (const [name, config] of Object.entries(toys)) writeToyModel(path.join(dir, name), config);
  const demo = path.join(ROOT, 'models/demo');
  if (fs.existsSync(path.join(demo, 'model.safetensors'))) fs.symlinkSync(demo, path.join(dir, 'demo'));
  return dir;
}

// Daemons started and not yet exited, with their models folders: whatever
// happens (a failed hook, node's --test-timeout stopping the file with
// SIGTERM, Ctrl-C) they are SIGKILLed and the folders removed when this
// process ends. Playwright closes the browsers it launched on exit.
const live = new Map();
const made = new Set();
function killAll(why) {
  for (const [proc, info] of live) {
    try { proc.kill('SIGKILL'); } catch { /* already gone */ }
    fs.rmSync(info.models, { recursive: true, force: true });
    if (why !== 'exit') process.stderr.write(`harness: ${why}: killed attnd; its log ends:\n${info.log().slice(-2000)}\n`);
  }
  live.clear();
  for (const dir of made) fs.rmSync(dir, { recursive: true, force: true });
  made.clear();
}
process.on('exit', () => killAll('exit'));
for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP'])
  process.on(sig, () => { killAll(`${sig} (the test runner's timeout?)`); process.exit(1); });

// startAttnd: run the daemon on 127.0.0.1, port 0 (it picks a free one and
// logs it). Resolves to { url, stop(), log(), signal(sig), exited() } once
// it listens and is ready (signal: e.g. SIGTERM to start its drain; stop()
// then cuts it short; exited(): its { code, sig } once it has exited, else
// null). toys: more toy models (modelsDir).
export async function startAttnd(extra = [], { toys = {} } = {}) {
  if (!fs.existsSync(ATTND)) throw new Error(`${ATTND}: not built (make all)`);
  const models = modelsDir(toys);
  const proc = spawn(ATTND, ['--host', '127.0.0.1', '--port', '0', '--grpc-port', '0', '--models', models,
    '--threads', '2', ...extra], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let ended = null;
  live.set(proc, { models, log: () => out });
  // Its end, whenever it comes: stop() may be called long after a crash.
  const exit = new Promise((res) => proc.on('exit', (code, sig) => {
    ended = { code, sig };
    live.delete(proc);
    res(ended);
  }));
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => { proc.kill('SIGKILL'); reject(new Error(`attnd did not start:\n${out}`)); }, WAIT);
    const onData = (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    };
    proc.stdout.on('data', onData);
    proc.stderr.on('data', onData);
    exit.then(({ code, sig }) => { clearTimeout(timer); reject(new Error(`attnd exited ${sig || code}:\n${out}`)); });
  });
  for (let i = 0; i < 100; i++) { // models load in the background
    const r = await fetch(`${url}/v2/health/ready`).catch(() => null);
    if (r && r.status === 200) break;
    await new Promise((res) => setTimeout(res, 100));
  }
  return {
    url,
    log: () => out,
    signal: (sig) => proc.kill(sig),
    exited: () => ended,
    // stop(): SIGTERM (unless it has exited already), then its exit; throws
    // when its output holds a sanitizer's report, or it ended other than
    // by exiting 0: a crash, or no exit within 2 x WAIT of the SIGTERM (it
    // is SIGKILLed then, and an exit report of LeakSanitizer's is lost).
    stop: async () => {
      let killed = false, t;
      if (!ended) {
        proc.kill('SIGTERM');
        t = setTimeout(() => { killed = true; proc.kill('SIGKILL'); }, 2 * WAIT);
      }
      const { code, sig } = await exit;
      clearTimeout(t);
      fs.rmSync(models, { recursive: true, force: true });
      const report = sanitizerReport(out);
      if (report || code !== 0) {
        const how = killed ? `no exit ${2 * WAIT} ms after SIGTERM; SIGKILLed` : `exit ${sig || code}`;
        throw new Error(`attnd ended badly (${how}):\n${report || out.slice(-4000)}`);
      }
    },
  };
}

export async function launch() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
}

// browserSuite: the before/after pair of a browser test file. Before its
// tests: attnd started (startAttnd(extra, opts)) and chromium launched
// (launch()), then ready(daemon, browser) awaited, so the file keeps its
// own `daemon` and `browser` and does there any set-up that needs them
// (a second top-level before() would not wait for this one: node 20
// starts a file's top-level before hooks as they are registered). After
// them: the browser closed, then the daemon stopped (stop() throws on a
// sanitizer's report or a bad exit, failing the file). After each test: a
// sanitizer's report that came during it fails it.
export function browserSuite(ready, extra = [], opts = {}) {
  let daemon, browser;
  before(async () => {
    daemon = await startAttnd(extra, opts);
    browser = await launch();
    await ready(daemon, browser);
  });
  // A sanitizer's report fails the test it came in (and the file, in
  // after: stop() throws on it); each report fails one test, not every
  // later one.
  let seen = 0;
  afterEach(() => {
    if (!daemon) return;
    const report = sanitizerReport(daemon.log(), seen);
    seen = daemon.log().length;
    if (report) throw new Error(`attnd's sanitizer report during this test:\n${report}`);
  });
  after(async () => {
    if (browser) await browser.close();
    if (daemon) await daemon.stop();
  });
}

// openPage: a page at url, failing the test on any page error; waits
// until the page has drawn (body[data-state] ready) or failed.
export async function openPage(browser, url, viewport = { width: 1400, height: 1000 }) {
  const page = await browser.newPage({ viewport, deviceScaleFactor: 1 });
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  await page.goto(url);
  await waitDrawn(page);
  return { page, errors };
}

export async function waitDrawn(page) {
  await page.waitForFunction(() => ['ready', 'error', 'idle'].includes(document.body.dataset.state),
    null, { timeout: WAIT });
  const st = await page.evaluate(() => document.body.dataset.state);
  if (st !== 'ready') throw new Error(`page state ${st}: ${await page.textContent('#status')}`);
}

// retainAndReopen(page): Run again with Retain checked, then open the
// retained map from the Maps tab; its id, once the page has drawn it from
// the map (run.source 'map').
export async function retainAndReopen(page) {
  await page.check('#retain');
  await page.click('#run');
  await waitDrawn(page);
  const id = await page.evaluate(() => window.attnd.run.mapId);
  assert.match(id, /^m\d+-[0-9a-f]{6}$/);
  await page.click('#tab-maps');
  await page.click(`#maps button:has-text("${id}")`);
  await page.waitForFunction((m) => location.hash.includes(`map=${m}`), id);
  await waitDrawn(page);
  assert.equal(await page.evaluate(() => window.attnd.run.source), 'map');
  return id;
}

// Viridis at ten equally spaced points (matplotlib's map; the values
// viridisLite::viridis(10) prints), linear in between: the test's own
// copy, so a wrong table or interpolation in the page shows up.
const STOPS = ['440154', '482878', '3e4a89', '31688e', '26828e', '1f9e89', '35b779', '6dcd59', 'b4de2c', 'fde725']
  .map((h) => [0, 2, 4].map((k) => parseInt(h.slice(k, k + 2), 16)));
export function viridis(t) {
  const x = Math.min(1, Math.max(0, t)) * 9, i = Math.min(8, Math.floor(x)), f = x - i;
  return STOPS[i].map((c, k) => c + (STOPS[i + 1][k] - c) * f);
}

// pixel(page, i, j): [r, g, b] at the centre of heatmap cell (i, j).
export async function pixel(page, i, j) {
  return page.evaluate(([a, b]) => {
    const c = window.attnd.cellCenter(a, b);
    const d = document.getElementById('heatmap').getContext('2d').getImageData(c.px, c.py, 1, 1).data;
    return [d[0], d[1], d[2]];
  }, [i, j]);
}

export function near(got, want, tol = 2) {
  return got.every((v, k) => Math.abs(v - want[k]) <= tol);
}

// sdpaHash: the page URL fragment that runs sdpa on q, k, v.
export function sdpaHash(spec, extra = '') {
  return `#model=sdpa&json=${encodeURIComponent(JSON.stringify(spec))}${extra}`;
}

// entropy.test and mock.test: the seeds' worked example with a third row, causal: row 0 sees key 0
// alone (one-hot: 0 nats); row 1 the seeds' second row, scores (0, 2)
// over keys 0 and 1; row 2 is q = 0, every score 0 over all 3 keys
// (uniform: ln 3 = ln S).
export const ENTROPY_SPEC = {
  q: [[2, 0, 2, 0], [0, 4, 0, 2], [0, 0, 0, 0]],
  k: [[1, 0, 1, 0], [0, 1, 0, 0], [0, 0, 1, 0]],
  v: [[1, 2], [3, 0], [0, 1]],
  tokens: ['t0', 't1', 't2'],
};
const p1 = Math.exp(2) / (Math.exp(2) + 1);
export const ENTROPY_H1 = -(p1 * Math.log(p1) + (1 - p1) * Math.log(1 - p1)); // 0.3668..., by hand
