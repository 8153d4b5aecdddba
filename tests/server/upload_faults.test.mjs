// upload_faults.test.mjs - an upload (POST .../load with the files in its
// body) on a repository whose filesystem fails the ways real ones do:
// without renameat2's RENAME_EXCHANGE and RENAME_NOREPLACE (the two-rename
// publish), a rename that fails half-way through it, a disk that fills
// during a write, fsync failing on a file or a folder. Made by
// tests/server/fsfault.c, preloaded (no root, no special mount; its faults
// change while attnd runs through the file FSFAULT_CTL names). What the
// client is told, that the repository holds one complete model under the
// name (old or new), that nothing is left behind, and that attnd serves on.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { REFS, fp32, infer, maxDiff, post, start } from './helper.mjs';
import { D16_CONFIG, D16_ST, TINY, TINY_CONFIG, body, faulty } from './repo_helper.mjs';

const TINY_ST = readFileSync(join(TINY, 'model.safetensors'));
const X = REFS.causal;
const xreq = () => ({ inputs: [fp32('x', X.shape, X.x)], parameters: { causal: true } });

const TINY_UP = body(TINY_CONFIG, TINY_ST);
const D16_UP = body(D16_CONFIG, D16_ST);

const load = (d, m, b) => post(`${d.url}/v2/repository/models/${m}/load`, b);
const dModel = async (d, m) => {
  const r = await fetch(`${d.url}/v2/models/${m}`);
  assert.equal(r.status, 200, m);
  return (await r.json()).parameters.d_model;
};
const names = async (d) => (await post(`${d.url}/v2/repository/index`, '')).json.map((m) => m.name);
/** hidden(d): what the repository holds under a dot name (the staging area: what an upload left). */
const hidden = (d) => readdirSync(d.dir).filter((f) => f.startsWith('.'));

test('a filesystem without RENAME_EXCHANGE or RENAME_NOREPLACE: uploads publish by renames, new names and replaced ones; nothing left behind', async (t) => {
  const d = await faulty(t);
  d.faults('no-rename-flags');
  // a new name: no exchange (nothing there), no no-replace: a plain rename
  let r = await load(d, 'up1', TINY_UP);
  assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.match(await d.logged(/fsfault: renameat2\(RENAME_NOREPLACE\)/), /fsfault: renameat2\(RENAME_NOREPLACE\) \S+\/up1: EINVAL/);
  assert.equal(await dModel(d, 'up1'), 8);
  // a name that exists: the old folder aside, the new one in, the old removed
  r = await load(d, 'up1', D16_UP);
  assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.match(await d.logged(/fsfault: renameat2\(RENAME_EXCHANGE\)/), /fsfault: renameat2\(RENAME_EXCHANGE\) \S+\/up1: EINVAL/);
  assert.equal(await dModel(d, 'up1'), 16);
  assert.deepEqual(readdirSync(join(d.dir, 'up1')).sort(), ['config.json', 'model.safetensors']);
  assert.equal(readFileSync(join(d.dir, 'up1', 'config.json'), 'utf8'), D16_CONFIG);
  // a model loaded from its folder at start, replaced the same way
  r = await load(d, 'tiny', D16_UP);
  assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.equal(await dModel(d, 'tiny'), 16);
  assert.ok(readFileSync(join(d.dir, 'tiny', 'model.safetensors')).equals(D16_ST));
  assert.deepEqual(hidden(d), [], 'no staging folder or old folder left');
  assert.equal((await d.stop('SIGTERM', true)).code, 0);
  // a restart (no faults) serves what the repository holds
  t.after(() => rmSync(d.dir, { recursive: true, force: true }));
  const d2 = await start({ t, dir: d.dir });
  assert.equal(await dModel(d2, 'up1'), 16);
  assert.equal(await dModel(d2, 'tiny'), 16);
  assert.equal((await d2.stop()).code, 0);
});

test('the two-rename publish failing half-way: 503 naming it, the old model back under its name and served; a new name leaves no trace', async (t) => {
  const d = await faulty(t);
  d.faults('no-rename-flags rename-in=EIO');
  let r = await load(d, 'tiny', D16_UP);
  assert.equal(r.status, 503, JSON.stringify(r.json));
  assert.match(r.json.error, /\/tiny: cannot replace \(Input\/output error\); the disk reported an error: check it \(dmesg\) before uploading again$/);
  assert.equal(r.headers.get('retry-after'), null, 'the disk\'s state: a retry in a second fails the same');
  assert.match(await d.logged(/fsfault: rename /), /fsfault: rename \S+\/tiny: EIO/);
  // the old folder went aside and came back: the name holds it, whole
  assert.equal(readFileSync(join(d.dir, 'tiny', 'config.json'), 'utf8'), TINY_CONFIG);
  assert.ok(readFileSync(join(d.dir, 'tiny', 'model.safetensors')).equals(TINY_ST));
  assert.deepEqual(hidden(d), []);
  assert.equal(await dModel(d, 'tiny'), 8, 'the model loaded before still serves');
  r = await infer(d, 'tiny', xreq());
  assert.equal(r.status, 200);
  assert.ok(maxDiff(r.json.outputs[0].data, X.y) < 1e-5);
  // a new name: the rename that publishes it fails
  r = await load(d, 'up2', TINY_UP);
  assert.equal(r.status, 503, JSON.stringify(r.json));
  assert.match(r.json.error, /\/up2: cannot replace \(Input\/output error\); the disk reported an error: check it \(dmesg\) before uploading again$/);
  assert.ok(!existsSync(join(d.dir, 'up2')));
  assert.ok(!(await names(d)).includes('up2'), 'a failed upload leaves no trace of the name');
  assert.deepEqual(hidden(d), []);
  // the disk mended: the same uploads go through
  d.faults('no-rename-flags');
  assert.equal((await load(d, 'tiny', D16_UP)).status, 200);
  assert.equal(await dModel(d, 'tiny'), 16);
  assert.equal((await load(d, 'up2', TINY_UP)).status, 200);
  assert.deepEqual(hidden(d), []);
  assert.equal((await d.stop()).code, 0);
});

// Each fault while the files are written: the upload fails before it is
// published, with 503 naming the file and the cause (the disk's state: no
// Retry-After), nothing in the repository, no trace of the name.
const WRITE_FAULTS = [
  ['write=ENOSPC', 'write', /\/\.attnd-staging\/up3~\d+~\d+\/model\.safetensors: write failed \(No space left on device\); free space on the repository's disk$/],
  ['fsync=EIO', 'fsync', /\/\.attnd-staging\/up3~\d+~\d+\/model\.safetensors: write failed \(Input\/output error\); the disk reported an error: check it \(dmesg\) before uploading again$/],
  // the folder's entries not on disk: a crash could lose the files the
  // published name points to (this answered 200)
  ['fsync-dir=EIO', 'fsync-dir', /\/\.attnd-staging\/up3~\d+~\d+: cannot sync the folder \(Input\/output error\); the disk reported an error: check it \(dmesg\) before uploading again$/],
];

test('the disk fills, or fsync fails, while an upload is written: 503 naming the file, nothing published or left, attnd serves on', async (t) => {
  const d = await faulty(t);
  for (const [words, call, want] of WRITE_FAULTS) {
    d.faults(words);
    const mark = d.log().length;
    const r = await load(d, 'up3', TINY_UP);
    assert.equal(r.status, 503, `${words}: ${JSON.stringify(r.json)}`);
    assert.match(r.json.error, want, words);
    assert.equal(r.headers.get('retry-after'), null, words);
    const fault = new RegExp(`fsfault: ${call} `);
    assert.match(await d.logged(fault, 5000, mark), fault, words);
    assert.ok(!existsSync(join(d.dir, 'up3')), words);
    assert.deepEqual(hidden(d), [], `${words}: the staging folder is removed`);
    assert.ok(!(await names(d)).includes('up3'), words);
    assert.equal((await fetch(`${d.url}/v2/health/ready`)).status, 200, words);
    assert.equal((await infer(d, 'tiny', xreq())).status, 200, words);
  }
  // a filesystem that cannot sync a folder at all (EINVAL) is no failure:
  // the staged folder's fsync fails so, and the upload is published,
  // listed and served
  d.faults('fsync-dir=EINVAL');
  const mark = d.log().length;
  let r = await load(d, 'up3', TINY_UP);
  assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.match(await d.logged(/fsfault: fsync-dir /, 5000, mark), /fsfault: fsync-dir \(a staged folder\): EINVAL/,
    'the staged folder\'s fsync was made to fail');
  assert.deepEqual(readdirSync(join(d.dir, 'up3')).sort(), ['config.json', 'model.safetensors']);
  assert.deepEqual(hidden(d), []);
  assert.ok((await names(d)).includes('up3'));
  r = await infer(d, 'up3', xreq());
  assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.ok(maxDiff(r.json.outputs[0].data, X.y) < 1e-5);
  // the repository's own sync failing after the publish: the model is in
  // (answered 200), and the log says it may not survive a crash
  d.faults('fsync-repo=EIO');
  r = await load(d, 'up4', TINY_UP);
  assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.match(await d.logged(/could not be synced/), /warn attnd: load: upload of model 'up4': published, but the repository \S+ could not be synced \(Input\/output error\): after a crash of the host the folder may be missing or old; the disk reported an error: check it \(dmesg\) before uploading again/);
  d.faults('');
  assert.equal((await infer(d, 'up4', xreq())).status, 200);
  assert.deepEqual(hidden(d), []);
  assert.equal((await d.stop()).code, 0);
});

// glibc's libpcprofile.so opens PCPROFILE_OUTPUT in its constructor; the
// dynamic loader runs that constructor before the shim's (a library
// preloaded after it), so its open() is the shim's before the shim has
// done anything. The shim set libc's functions in a constructor then, and
// attnd died of SIGSEGV at start.
const TRIPLET = { x64: 'x86_64-linux-gnu', arm64: 'aarch64-linux-gnu' }[process.arch];
const PCPROFILE = [`/usr/lib/${TRIPLET}`, `/lib/${TRIPLET}`, '/usr/lib64', '/lib64']
  .map((dir) => join(dir, 'libpcprofile.so')).find((p) => TRIPLET && existsSync(p));

test('a library whose constructor opens a file before the shim\'s runs: attnd starts, and the faults apply', {
  skip: !PCPROFILE && 'needs glibc\'s libpcprofile.so (libc6)',
}, async (t) => {
  const out = join(mkdtempSync(join(tmpdir(), 'attnd-pcprofile-')), 'pc.out');
  t.after(() => rmSync(dirname(out), { recursive: true, force: true }));
  const d = await faulty(t, { after: [PCPROFILE], env: { PCPROFILE_OUTPUT: out } });
  assert.ok(existsSync(out), 'libpcprofile\'s constructor opened its file (through the shim)');
  d.faults('write=ENOSPC');
  const r = await load(d, 'up5', TINY_UP);
  assert.equal(r.status, 503, JSON.stringify(r.json));
  assert.match(r.json.error, /write failed \(No space left on device\)/);
  assert.match(await d.logged(/fsfault: write /), /fsfault: write \(a staged file\): ENOSPC/);
  d.faults('');
  assert.equal((await load(d, 'up5', TINY_UP)).status, 200);
  assert.equal((await infer(d, 'up5', xreq())).status, 200);
  assert.equal((await d.stop()).code, 0);
});
