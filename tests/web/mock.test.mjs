// mock.test.mjs - tests/web/mock.mjs (the stand-in API for working on the
// page without the daemon) serves what the page asks of it: the "row
// entropy" column (what=entropy) against rows worked by hand
// (entropy.test.mjs's, on the mock's sdpa), and the demo's mean over
// heads as the mean of its heads' columns. On main (4fc7e91) the mock had
// no what=entropy: the column said "the map is at version null now".
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, test } from 'node:test';
import { ENTROPY_H1, ENTROPY_SPEC, launch, openPage, sdpaHash, WAIT } from './harness.mjs';

let mock, base, browser;
before(async () => {
  mock = spawn(process.execPath, [new URL('./mock.mjs', import.meta.url).pathname, '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  base = await new Promise((resolve, reject) => {
    let out = '';
    mock.stdout.on('data', (c) => { out += c; const m = /mock on (http:\/\/\S+)\//.exec(out); if (m) resolve(m[1]); });
    mock.on('exit', (code) => reject(new Error(`mock.mjs exited ${code}: ${out}`)));
  });
  browser = await launch();
});
after(async () => {
  if (browser) await browser.close();
  if (mock) mock.kill();
});

const SPEC = ENTROPY_SPEC, H1 = ENTROPY_H1; // harness.mjs: row 0 one-hot (0 nats), row 1 scores (0, 2), row 2 uniform (ln 3)

const column = async (page, what) => {
  await page.waitForFunction(() => document.getElementById('entropy').dataset.values, null, { timeout: WAIT })
    .catch(async (e) => { throw new Error(`${what}: no column; its key says "${await page.textContent('#entropy-key')}" (${e.message})`); });
  const v = (await page.getAttribute('#entropy', 'data-values')).split(',').map(Number);
  assert.ok(v.every(Number.isFinite), `${what}: ${v}`);
  return v;
};

test('the page\'s row entropy against the mock: rows worked by hand (sdpa); max= is 400', async () => {
  const { page, errors } = await openPage(browser, `${base}/${sdpaHash(SPEC, '&causal=1&retain=1&ent=1')}`);
  const v = await column(page, 'sdpa');
  assert.equal(v.length, 3);
  assert.equal(v[0], 0, 'a one-hot row: 0 nats');
  assert.ok(Math.abs(v[1] - H1) < 1e-6, `row 1: ${v[1]}, by hand ${H1}`);
  assert.ok(Math.abs(v[2] - Math.log(3)) < 1e-6, `row 2 (uniform): ${v[2]}, ln 3`);
  const id = await page.evaluate(() => window.attnd.run.mapId);
  const r = await fetch(`${base}/v2/maps/${id}/attention?b=0&h=0&what=entropy&format=f32&max=8`);
  assert.equal(r.status, 400);
  assert.match((await r.json()).error, /^max: what=entropy is one value per query row, never pooled/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('the demo\'s mean over heads is the mean of its heads\' columns', async () => {
  const { page, errors } = await openPage(browser, `${base}/#model=demo&text=the%20cat%20sat%20on&causal=1&retain=1&h=mean&ent=1`);
  const mean = await column(page, 'mean');
  assert.match(await page.textContent('#entropy-key'), /the mean of the heads' entropies/);
  const heads = [];
  let prev = mean;
  for (const h of [0, 1]) { // (each head's column differs from the one before)
    await page.click(`#heads button[data-head="${h}"]`);
    await page.waitForFunction((m) => document.getElementById('entropy').dataset.values &&
      document.getElementById('entropy').dataset.values !== m, prev.join(','), { timeout: WAIT });
    prev = await column(page, `head ${h}`);
    heads.push(prev);
  }
  assert.equal(mean.length, 4);
  mean.forEach((m, i) => assert.ok(Math.abs(m - (heads[0][i] + heads[1][i]) / 2) < 1e-6, `row ${i}: ${m}`));
  assert.equal(heads[0][0], 0, 'row 0 (causal) sees one key');
  assert.deepEqual(errors, []);
  await page.close();
});
