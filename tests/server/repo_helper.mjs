// repo_helper.mjs - ways to hold a model repository call half-way, for
// the tests of loads and uploads that overlap other requests: a model
// folder whose load blocks until released (slowFolder), and attnd with
// tests/server/fsfault.c preloaded (faulty), whose faults include holding
// an upload just before its publish.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { closeSync, constants, cpSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ATTND, safetensors, start } from './helper.mjs';

export const TINY = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'models', 'tiny');
export const TINY_CONFIG = readFileSync(join(TINY, 'config.json'), 'utf8');
export const SHIM = join(dirname(ATTND), 'tests', 'server', 'fsfault.so');
// a second model, told apart from tiny by its d_model (16)
export const D16_CONFIG = '{"n_heads": 4, "description": "d16"}';
export const D16_ST = (() => {
  const m = (k) => [[16, 16], Array.from({ length: 256 }, (_, i) => ((i * k) % 7) / 70)];
  return safetensors({ W_q: m(1), W_k: m(2), W_v: m(3), W_o: m(5) });
})();
/** body(config, st): a load request that uploads config.json and st. */
export const body = (config, st) => ({ parameters: { config, 'file:model.safetensors': st.toString('base64') } });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** scratch(t, name): a fresh folder (attnd-<name>-...), removed after the
 * test, even one a failed test left locked. */
export function scratch(t, name = 'repo') {
  const dir = mkdtempSync(join(tmpdir(), `attnd-${name}-`));
  t.after(() => {
    spawnSync('chmod', ['-R', 'u+rwx', dir]);
    rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

/** fixtureRepo(t, name): a models folder holding the fixtures (tiny), in
 * a scratch folder. */
export function fixtureRepo(t, name) {
  const dir = join(scratch(t, name), 'models');
  cpSync(join(TINY, '..'), dir, { recursive: true });
  return dir;
}

/** slowStart(t, name, opts): attnd (start's opts, two pool threads) on a
 * fixtures repository (fixtureRepo(t, name)) that also holds
 * slowFolder 'slow', released after the test: {dir, d, slow}. */
export async function slowStart(t, name, { args = [], ...opts } = {}) {
  const dir = fixtureRepo(t, name);
  const d = await start({ t, dir, ...opts, args: ['--threads', '2', ...args] });
  const slow = slowFolder(dir, 'slow');
  t.after(() => slow.release());
  return { dir, d, slow };
}

/** tracked(p): {p, done}: done turns true once p has settled. */
export function tracked(p) {
  const o = { done: false };
  o.p = p.finally(() => { o.done = true; });
  return o;
}

/**
 * slowFolder(dir, name): a model folder whose config.json is a FIFO, so
 * that a load of it stays in progress (its pool thread blocked reading the
 * config) until release() writes the config: a slow disk, without timing.
 * reading() resolves once a load has opened the FIFO (it then holds the
 * write end open: the load waits in its read). release(text) writes text
 * (tiny's config by default) and is safe when no load waits; settle()
 * puts a plain config.json in its place; finish() settles, then releases
 * (release's answer): the held load and the later ones read tiny's config.
 */
export function slowFolder(dir, name) {
  const folder = join(dir, name);
  mkdirSync(folder, { recursive: true });
  cpSync(join(TINY, 'model.safetensors'), join(folder, 'model.safetensors'));
  const fifo = join(folder, 'config.json');
  rmSync(fifo, { force: true });
  assert.equal(spawnSync('mkfifo', [fifo]).status, 0, 'mkfifo');
  let fd = null;
  // opens only while a reader waits (a load): never blocks
  const tryOpen = () => {
    try {
      fd = openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK);
      return true;
    } catch (e) {
      if (e.code === 'ENXIO' || e.code === 'ENOENT') return false;
      throw e;
    }
  };
  return {
    async reading() {
      for (let i = 0; i < 1000 && fd === null && !tryOpen(); i++) await sleep(20);
      assert.notEqual(fd, null, `no load of ${name} opened its config.json`);
    },
    release(text = TINY_CONFIG) {
      if (fd === null && !tryOpen()) return false;
      writeSync(fd, text);
      closeSync(fd);
      fd = null;
      return true;
    },
    settle() {
      rmSync(fifo, { force: true });
      writeFileSync(fifo, TINY_CONFIG);
    },
    finish() {
      this.settle();
      return this.release();
    },
  };
}

/**
 * faulty(t, {after, env, ...start's}): attnd (start) with fsfault.so
 * preloaded (then the libraries of after); d.faults(words) sets its
 * faults (the control file's words, fsfault.c).
 */
export async function faulty(t, { after = [], env = {}, ...opts } = {}) {
  assert.ok(existsSync(SHIM), `${SHIM} (make ${SHIM.slice(SHIM.indexOf('build/'))})`);
  const scratch = mkdtempSync(join(tmpdir(), 'attnd-fsfault-'));
  t.after(() => rmSync(scratch, { recursive: true, force: true }));
  const ctl = join(scratch, 'ctl');
  writeFileSync(ctl, '');
  // a sanitizer's runtime must come first in the library list; the shim
  // only wraps libc's calls, so the order does not matter to it
  const asan = [process.env.ASAN_OPTIONS, 'verify_asan_link_order=0'].filter(Boolean).join(':');
  const d = await start({
    t, ...opts,
    env: { ...env, LD_PRELOAD: [SHIM, ...after].join(' '), FSFAULT_CTL: ctl, ASAN_OPTIONS: asan },
  });
  d.faults = (words) => writeFileSync(ctl, words);
  d.scratch = scratch;
  return d;
}
