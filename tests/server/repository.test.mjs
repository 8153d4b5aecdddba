// repository.test.mjs - the model repository in the states an operator
// gets it into: a --models folder that is missing, a file or unreadable, a
// folder named like the built-in sdpa, and models whose load is still
// running when requests for them (infer, a sequence start, metadata, an
// unload) arrive. What attnd says, that it starts and serves on, and that
// the index and loads answer naming the cause.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, cpSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { ATTND, REFS, fp32, infer, maxDiff, post, start } from './helper.mjs';
import { D16_CONFIG, D16_ST, TINY, TINY_CONFIG, body, fixtureRepo, scratch, slowFolder } from './repo_helper.mjs';

const upload = () => ({
  parameters: {
    config: TINY_CONFIG,
    'file:model.safetensors': readFileSync(join(TINY, 'model.safetensors')).toString('base64'),
  },
});
const X = REFS.causal;
const xreq = (extra = {}) => ({ inputs: [fp32('x', X.shape, X.x)], parameters: { causal: true, ...extra } });
const SEED = {
  inputs: [fp32('q', [2, 4], [2, 0, 2, 0, 0, 4, 0, 2]), fp32('k', [2, 4], [1, 0, 1, 0, 0, 1, 0, 0]), fp32('v', [2, 2], [1, 2, 3, 0])],
};
const index = async (d) => {
  const r = await post(`${d.url}/v2/repository/index`, '');
  assert.equal(r.status, 200, JSON.stringify(r.json));
  return r.json;
};
const load = (d, m, body = '') => post(`${d.url}/v2/repository/models/${m}/load`, body);
const unload = (d, m) => post(`${d.url}/v2/repository/models/${m}/unload`, '');
const status = async (url) => (await fetch(url)).status;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));


test('a --models folder that does not exist: attnd says so and serves sdpa; a load names the repository; an upload creates it', async (t) => {
  const repo = join(scratch(t), 'absent');
  const d = await start({ t, dir: repo });
  assert.match(d.log(), /warn attnd: --models: \S+\/absent: cannot read the model repository: No such file or directory; create it, or point --models at the repository \(an upload creates it\); serving only sdpa/);
  assert.equal(await status(`${d.url}/v2/health/ready`), 200, 'no model is expected: ready');
  assert.deepEqual(await index(d), [{ name: 'sdpa', version: '1', state: 'READY', reason: '' }]);
  let r = await infer(d, 'sdpa', SEED);
  assert.equal(r.status, 200);
  // the cause is the repository, not the model's folder
  r = await load(d, 'tiny');
  assert.equal(r.status, 404, JSON.stringify(r.json));
  assert.match(r.json.error, /^model 'tiny': \S+\/absent: cannot read the model repository: No such file or directory; create it, or point --models at the repository \(an upload creates it\)$/);
  assert.deepEqual((await index(d)).map((m) => m.name), ['sdpa'], 'a failed load leaves no trace');
  // an upload makes the repository, and the model is there to stay
  r = await load(d, 'up1', upload());
  assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.ok(existsSync(join(repo, 'up1', 'model.safetensors')));
  r = await infer(d, 'up1', xreq());
  assert.equal(r.status, 200);
  assert.ok(maxDiff(r.json.outputs[0].data, X.y) < 1e-5);
  assert.deepEqual((await index(d)).find((m) => m.name === 'up1'), { name: 'up1', version: '1', state: 'READY', reason: '' });
  // unloaded, then the repository removed: its folder is gone with it, so
  // the index no longer lists it (a missing repository holds no folder)
  assert.equal((await unload(d, 'up1')).status, 200);
  rmSync(repo, { recursive: true });
  assert.deepEqual((await index(d)).map((m) => m.name), ['sdpa']);
  assert.equal((await d.stop()).code, 0);
});

test('a --models path that is a file: attnd says so and serves sdpa; a load and an upload answer naming it', async (t) => {
  const file = join(scratch(t), 'models.txt');
  writeFileSync(file, 'not a folder\n');
  const d = await start({ t, dir: file });
  assert.match(d.log(), /warn attnd: --models: \S+\/models\.txt: cannot read the model repository: Not a directory; point --models at a folder of model folders; serving only sdpa/);
  assert.equal(await status(`${d.url}/v2/health/ready`), 200);
  assert.deepEqual(await index(d), [{ name: 'sdpa', version: '1', state: 'READY', reason: '' }]);
  let r = await load(d, 'tiny');
  assert.equal(r.status, 404, JSON.stringify(r.json));
  assert.match(r.json.error, /^model 'tiny': \S+\/models\.txt: cannot read the model repository: Not a directory; point --models at a folder of model folders$/);
  // the repository's state, not a passing one: no Retry-After
  r = await load(d, 'up1', upload());
  assert.equal(r.status, 503, JSON.stringify(r.json));
  assert.match(r.json.error, /\/models\.txt\/\.attnd-staging: cannot create \(Not a directory\); point --models at a folder of model folders$/);
  assert.equal(r.headers.get('retry-after'), null);
  assert.equal(readFileSync(file, 'utf8'), 'not a folder\n', 'the file is left as it was');
  assert.equal((await infer(d, 'sdpa', SEED)).status, 200);
  assert.deepEqual((await index(d)).map((m) => m.name), ['sdpa']);
  assert.equal((await d.stop()).code, 0);
});

// Root reads any folder (CAP_DAC_OVERRIDE): as root, attnd runs without
// that capability (setpriv), as any other user would.
const AS_USER = process.getuid?.() !== 0 ? [] : ['setpriv', '--bounding-set=-dac_override,-dac_read_search'];
const HAVE_SETPRIV = spawnSync('setpriv', ['--version']).status === 0;

// The repository's own mode (0: nothing; 0600: its names, but none of its
// folders) is named, not the model folder a load asks for.
const DENIED = "Permission denied; give attnd's user read and search \\(r-x\\) permission on it, or point --models elsewhere";
for (const mode of [0o000, 0o600]) {
  test(`a --models folder attnd may not read (mode ${mode.toString(8).padStart(4, '0')}): attnd says so and serves sdpa; loads and uploads name the cause; once readable it serves its models`, {
    skip: AS_USER.length && !HAVE_SETPRIV && 'needs setpriv (util-linux) to drop root\'s right to read any folder',
  }, async (t) => {
    const repo = join(scratch(t), 'models');
    cpSync(join(TINY, '..'), repo, { recursive: true });
    chmodSync(repo, mode);
    const d = await start({ t, dir: repo, wrap: AS_USER.length ? AS_USER : undefined });
    assert.match(d.log(), new RegExp(`warn attnd: --models: \\S+/models: cannot read the model repository: ${DENIED}; serving only sdpa`));
    assert.equal(await status(`${d.url}/v2/health/ready`), 200);
    // the index says it cannot list the repository (a list of sdpa alone
    // said the repository held nothing); the repository's state, not a
    // passing one: no Retry-After
    let r = await post(`${d.url}/v2/repository/index`, '');
    assert.equal(r.status, 503, JSON.stringify(r.json));
    assert.match(r.json.error, new RegExp(`^index: \\S+/models: cannot read the model repository: ${DENIED}$`));
    assert.equal(r.headers.get('retry-after'), null);
    assert.deepEqual((await post(`${d.url}/v2/repository/index`, '{"ready": true}')).json.map((m) => m.name), ['sdpa'],
      'the ready models are listed from memory');
    // tiny is a folder, and the repository is what attnd may not read:
    // "not a folder", "not found" or tiny's folder named would send the
    // operator looking for the wrong thing
    r = await load(d, 'tiny');
    assert.equal(r.status, 503, JSON.stringify(r.json));
    assert.match(r.json.error, new RegExp(`^model 'tiny': \\S+/models: cannot read the model repository: ${DENIED}$`));
    assert.doesNotMatch(r.json.error, /not a folder|models\/tiny/);
    assert.equal(r.headers.get('retry-after'), null);
    r = await load(d, 'up1', upload());
    assert.equal(r.status, 503, JSON.stringify(r.json));
    assert.match(r.json.error, /\/models\/\.attnd-staging: cannot (create|write) \(Permission denied\); give attnd's user write and search \(rwx\) permission on the repository$/);
    assert.equal(r.headers.get('retry-after'), null);
    assert.equal((await infer(d, 'sdpa', SEED)).status, 200);
    // the operator fixes the mode: no restart needed
    chmodSync(repo, 0o755);
    assert.deepEqual((await index(d)).find((m) => m.name === 'tiny'), { name: 'tiny', version: '1', state: 'UNAVAILABLE', reason: 'not loaded' });
    assert.equal((await load(d, 'tiny')).status, 200);
    assert.equal((await infer(d, 'tiny', xreq())).status, 200);
    assert.equal((await d.stop()).code, 0);
  });
}

test('a model folder, or its weights, attnd may not read: a load answers 503 naming it and what to do, not 404; the index gives the reason; once readable it loads', {
  skip: AS_USER.length && !HAVE_SETPRIV && 'needs setpriv (util-linux) to drop root\'s right to read any folder',
}, async (t) => {
  const repo = join(scratch(t), 'models');
  cpSync(join(TINY, '..'), repo, { recursive: true });
  cpSync(TINY, join(repo, 'late'), { recursive: true });
  cpSync(TINY, join(repo, 'sealed'), { recursive: true });
  chmodSync(join(repo, 'tiny'), 0);
  chmodSync(join(repo, 'sealed', 'model.safetensors'), 0);
  const d = await start({ t, dir: repo, ready: false, wrap: AS_USER.length ? AS_USER : undefined });
  const folder = "cannot read: Permission denied; give attnd's user read and search \\(r-x\\) permission on the folder";
  const file = "cannot open: Permission denied; give attnd's user read permission on it";
  // found at start: failed, with the reason, and ready says so
  assert.match(await d.logged(/load: model 'tiny'/), new RegExp(`error attnd: load: model 'tiny': \\S+/models/tiny: ${folder}`));
  for (let i = 0; i < 250 && !(await index(d)).find((m) => m.name === 'sealed' && m.state === 'UNAVAILABLE'); i++) await sleep(20);
  const idx = await index(d);
  assert.match(idx.find((m) => m.name === 'tiny').reason, new RegExp(`^\\S+/models/tiny: ${folder}$`));
  assert.match(idx.find((m) => m.name === 'sealed').reason, new RegExp(`^\\S+/models/sealed/model\\.safetensors: ${file}$`));
  assert.equal(await status(`${d.url}/v2/health/ready`), 503, 'a model found at start failed to load');
  // a load: 503 without Retry-After (the folder's state, until someone
  // acts), not 404 (it is there)
  for (const [m, want] of [['tiny', `/models/tiny: ${folder}`], ['sealed', `/models/sealed/model\\.safetensors: ${file}`]]) {
    const r = await load(d, m);
    assert.equal(r.status, 503, `${m}: ${JSON.stringify(r.json)}`);
    assert.match(r.json.error, new RegExp(`^model '${m}': \\S+${want}$`), m);
    assert.equal(r.headers.get('retry-after'), null, m);
  }
  // a folder that was readable and loaded at start, then closed: its
  // load fails the same way, and the weights loaded before serve on
  chmodSync(join(repo, 'late'), 0);
  let r = await load(d, 'late');
  assert.equal(r.status, 503, JSON.stringify(r.json));
  assert.match(r.json.error, new RegExp(`^model 'late': \\S+/models/late: ${folder}$`));
  assert.equal((await infer(d, 'late', xreq())).status, 200);
  // the operator fixes the modes: no restart needed
  chmodSync(join(repo, 'tiny'), 0o755);
  chmodSync(join(repo, 'late'), 0o755);
  chmodSync(join(repo, 'sealed', 'model.safetensors'), 0o644);
  for (const m of ['tiny', 'late', 'sealed']) assert.equal((await load(d, m)).status, 200, m);
  assert.equal(await status(`${d.url}/v2/health/ready`), 200);
  assert.equal((await infer(d, 'sealed', xreq())).status, 200);
  assert.equal((await d.stop()).code, 0);
});

test('a folder named sdpa: the built-in model keeps the name, the start says how to serve the folder, and --check-models flags it', async (t) => {
  const repo = join(scratch(t), 'models');
  mkdirSync(repo);
  cpSync(TINY, join(repo, 'tiny'), { recursive: true });
  cpSync(TINY, join(repo, 'sdpa'), { recursive: true });
  const d = await start({ t, dir: repo });
  assert.match(d.log(), /warn attnd: \S+\/models\/sdpa: 'sdpa' is the built-in model; folder ignored \(rename it to serve it\)/);
  assert.equal(await status(`${d.url}/v2/health/ready`), 200, 'the folder is not a model that failed');
  // listed once, as the built-in
  const idx = await index(d);
  assert.deepEqual(idx.filter((m) => m.name === 'sdpa'), [{ name: 'sdpa', version: '1', state: 'READY', reason: '' }]);
  assert.ok(idx.find((m) => m.name === 'tiny' && m.state === 'READY'));
  const meta = await (await fetch(`${d.url}/v2/models/sdpa`)).json();
  assert.equal(meta.platform, 'attnd_sdpa');
  // the seeds' first example through the built-in, not the folder's weights
  let r = await infer(d, 'sdpa', { ...SEED, outputs: [{ name: 'attention' }] });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.ok(maxDiff(r.json.outputs[0].data, [0.881, 0.119, 0.119, 0.881]) < 1e-3);
  for (const [what, call] of [['load', () => load(d, 'sdpa')], ['upload', () => load(d, 'sdpa', upload())], ['unload', () => unload(d, 'sdpa')]]) {
    r = await call();
    assert.equal(r.status, 400, `${what}: ${JSON.stringify(r.json)}`);
    assert.equal(r.json.error, "model 'sdpa': built in; it cannot be loaded or unloaded", what);
  }
  assert.equal(readFileSync(join(repo, 'sdpa', 'config.json'), 'utf8'), TINY_CONFIG, 'the upload wrote nothing');
  assert.equal((await infer(d, 'sdpa', SEED)).status, 200);
  assert.equal((await d.stop()).code, 0);
  // --check-models said "sdpa: ok" and 0, and attnd then did not serve it
  const c = spawnSync(ATTND, ['--check-models', repo], { encoding: 'utf8' });
  assert.equal(c.status, 1, c.stdout + c.stderr);
  assert.match(c.stdout, /^sdpa: not served: 'sdpa' is the built-in model \(rename the folder to serve it\)$/m);
  assert.match(c.stdout, /^tiny: ok /m);
});

// GET /v2/models is what a Triton or KServe user types for the list of
// models; neither has one there (Triton's http_server.cc answers any path
// its routes do not match 404 "Not Found"), so attnd's 404 names where the
// list is: POST /v2/repository/index, which the page reads too. It said
// only "path: no endpoint /v2/models".
test('GET /v2/models (and /v2/models/): 404 naming the list, POST /v2/repository/index, which answers it', async (t) => {
  const d = await start({ t });
  try {
    const hint = "the model list is POST /v2/repository/index, as on Triton (body {}: every model, loaded or not; " +
      '{"ready":true}: the ready ones); a model\'s metadata is GET /v2/models/<name>';
    for (const [method, path] of [['GET', '/v2/models'], ['GET', '/v2/models/'], ['POST', '/v2/models']]) {
      const r = await json(await fetch(`${d.url}${path}`, { method }));
      assert.equal(r.status, 404, `${method} ${path}: ${JSON.stringify(r.json)}`);
      assert.equal(r.json.error, `path: no endpoint ${path}: ${hint}`, `${method} ${path}`);
    }
    // the hint is for those two paths only
    const other = await json(await fetch(`${d.url}/v2/modelsx`));
    assert.deepEqual([other.status, other.json.error], [404, 'path: no endpoint /v2/modelsx']);
    // and what it names answers as it says
    // (models/demo is in the fixtures too when it has been built)
    const state = (list) => Object.fromEntries(list.filter((m) => m.name !== 'demo').map((m) => [m.name, m.state]));
    assert.deepEqual(state(await index(d)), { sdpa: 'READY', tiny: 'READY' });
    assert.equal((await unload(d, 'tiny')).status, 200);
    const ready = await post(`${d.url}/v2/repository/index`, { ready: true });
    assert.equal(ready.status, 200, JSON.stringify(ready.json));
    assert.deepEqual(state(ready.json), { sdpa: 'READY' });
    assert.deepEqual(state(await index(d)), { sdpa: 'READY', tiny: 'UNAVAILABLE' });
  } finally { assert.equal((await d.stop()).code, 0); }
});

// An unload of a name the server never knew (a typo, another replica's
// model) is the 404 of one unloaded already; it leaves no entry behind.
test('an unload of a model never known: 404 not loaded, as one unloaded already; the index does not gain it', async (t) => {
  const d = await start({ t });
  try {
    const before = await index(d);
    let r = await unload(d, 'never-here');
    assert.equal(r.status, 404, JSON.stringify(r.json));
    assert.equal(r.json.error, "model 'never-here': not loaded");
    assert.deepEqual(await index(d), before);
    assert.equal((await unload(d, 'tiny')).status, 200);
    r = await unload(d, 'tiny');
    assert.equal(r.status, 404, JSON.stringify(r.json));
    assert.equal(r.json.error, "model 'tiny': not loaded");
  } finally { assert.equal((await d.stop()).code, 0); }
});

/** json(r): a fetch Response as post() answers: {status, headers, json}. */
const json = async (r) => {
  const text = await r.text();
  return { status: r.status, headers: r.headers, json: text ? JSON.parse(text) : null };
};

/** refused(d, m): every request for m while its first load runs gets 503
 * saying it is loading, with Retry-After; nothing hangs or crashes. */
async function refused(d, m) {
  const want = `model '${m}': still loading; retry shortly`;
  const calls = {
    infer: () => infer(d, m, xreq()),
    'sequence start': () => infer(d, m, xreq({ sequence_id: 'seq-1', sequence_start: true })),
    'sequence step': () => infer(d, m, xreq({ sequence_id: 'seq-1' })),
    metadata: async () => json(await fetch(`${d.url}/v2/models/${m}`)),
    config: async () => json(await fetch(`${d.url}/v2/models/${m}/config`)),
  };
  for (const [what, call] of Object.entries(calls)) {
    const r = await call();
    assert.equal(r.status, 503, `${what}: ${JSON.stringify(r.json)}`);
    assert.equal(r.json.error, want, what);
    assert.equal(r.headers.get('retry-after'), '1', what);
  }
  const ready = await json(await fetch(`${d.url}/v2/models/${m}/ready`));
  assert.equal(ready.status, 503);
  assert.equal(ready.json.error, `model '${m}': loading`);
  assert.deepEqual((await index(d)).find((e) => e.name === m), { name: m, version: '1', state: 'LOADING', reason: '' });
}

test('requests for a model whose first load is still running (at start, then a POST load): 503 saying it is loading; then it serves', async (t) => {
  const repo = join(scratch(t), 'models');
  cpSync(join(TINY, '..'), repo, { recursive: true });
  const slow = slowFolder(repo, 'slow');
  t.after(() => slow.release());
  // two pool threads: one held by the slow load, one for the rest
  const d = await start({ t, dir: repo, ready: false, args: ['--threads', '2'] });
  await slow.reading();
  assert.equal(await status(`${d.url}/v2/health/ready`), 503, 'a model found at start is loading');
  await refused(d, 'slow');
  assert.equal((await infer(d, 'tiny', xreq())).status, 200, 'the other models serve meanwhile');
  assert.equal((await infer(d, 'sdpa', SEED)).status, 200);
  assert.ok(slow.release());
  for (let i = 0; i < 500 && (await status(`${d.url}/v2/health/ready`)) !== 200; i++) await sleep(20);
  let r = await infer(d, 'slow', xreq());
  assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.ok(maxDiff(r.json.outputs[0].data, X.y) < 1e-5);
  assert.equal((await fetch(`${d.url}/v2/models/slow`)).status, 200);

  // a POST load of a new folder, with requests for it meanwhile
  const slow2 = slowFolder(repo, 'slow2');
  t.after(() => slow2.release());
  const pending = load(d, 'slow2');
  await slow2.reading();
  await refused(d, 'slow2');
  assert.equal(await status(`${d.url}/v2/health/ready`), 200, 'a model loaded on request does not make the server unready');
  assert.ok(slow2.release());
  r = await pending;
  assert.equal(r.status, 200, JSON.stringify(r.json));
  r = await infer(d, 'slow2', xreq({ sequence_id: 'seq-2', sequence_start: true }));
  assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.equal(r.json.parameters.sequence_length, X.shape[1]);
  assert.equal((await d.stop()).code, 0);
});

test('a load body with a key twice: 400 naming the key (the upload in one copy of "parameters" was dropped for the folder, or taken); nothing loaded or written', async (t) => {
  const repo = fixtureRepo(t, 'dupkeys');
  const d = await start({ t, dir: repo });
  // a folder attnd did not load at start: a load of it would serve tiny
  cpSync(TINY, join(repo, 'later'), { recursive: true });
  const up = JSON.stringify(body(D16_CONFIG, D16_ST).parameters);
  const b64 = JSON.stringify(D16_ST.toString('base64'));
  const cases = [
    [`{"parameters": ${up}, "parameters": {}}`, 'request body: duplicate key "parameters"'],
    [`{"parameters": {}, "parameters": ${up}}`, 'request body: duplicate key "parameters"'],
    [`{"a": 1, "parameters": {}, "a": 1}`, 'request body: duplicate key "a"'],
    ['{"parameters": {"x": 1, "x": 1}}', 'parameters: duplicate key "x"'],
    [`{"parameters": {"config": ${JSON.stringify(D16_CONFIG)}, "config": "{}", "file:model.safetensors": ${b64}}}`, 'parameters: duplicate key "config"'],
    [`{"parameters": {"file:model.safetensors": ${b64}, "file:model.safetensors": ${b64}}}`, 'parameters: duplicate key "file:model.safetensors"'],
    // an escape spells the same key
    ['{"parameters": {"c\\u0061usal": true, "causal": true}}', 'parameters: duplicate key "causal"'],
  ];
  for (const [text, want] of cases) {
    for (const m of ['later', 'fresh']) {
      const r = await load(d, m, text);
      assert.equal(r.status, 400, `${m} ${text.slice(0, 80)}: ${JSON.stringify(r.json)}`);
      assert.equal(r.json.error, want, text.slice(0, 80));
    }
    assert.equal(await status(`${d.url}/v2/models/later/ready`) === 200, false, 'nothing loaded');
  }
  assert.equal(readFileSync(join(repo, 'later', 'config.json'), 'utf8'), TINY_CONFIG, 'nothing written');
  assert.equal(existsSync(join(repo, 'fresh')), false);
  assert.deepEqual((await index(d)).map((m) => m.name).sort(), ['later', 'sdpa', 'tiny'], 'no trace of fresh');
  // the same bodies with the key once load as they say
  assert.equal((await load(d, 'later', '{"parameters": {}}')).status, 200);
  assert.equal((await load(d, 'fresh', `{"parameters": ${up}}`)).status, 200);
  assert.equal((await (await fetch(`${d.url}/v2/models/fresh`)).json()).parameters.d_model, 16);
  assert.equal((await d.stop()).code, 0, d.log());
});
