// seqwatch.test.mjs - what the page asks the server about the sequence it
// drives: how long the server keeps it without a step (GET
// /v2/sequences/{id}'s idle_ms and idle_limit_ms, shown counting down),
// asked again only when that time is up, not every few seconds (README
// "Sequence mode"); and the requests of one Step.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { browserSuite } from './harness.mjs';
import { expectGone, runSequence } from './seqpage.mjs';

// longer than the page's old 5 s poll, so a check before the time is up
// shows; short enough for a test
const IDLE = 8000;

let daemon, browser;
browserSuite(async (d, b) => {
  daemon = d;
  browser = b;
  const v2 = await (await fetch(`${daemon.url}/v2`)).json();
  assert.ok((v2.extensions || []).includes('sequences'), `/v2 lists no sequences extension (every attnd has it): ${JSON.stringify(v2)}`);
}, ['--sequence-idle-ms', String(IDLE)]);

// On main (12e5dc2) the panel did not say when the server drops it, and
// the page asked every 5 s: at 5 s, idle_ms ~5000 of 8000.
test('the panel counts down to the idle drop, and the page asks whether the sequence is gone only once that time is up', async () => {
  // the page's GET /v2/sequences/{id}, from before the Run: [status, body],
  // in the order they were sent. The first is the start's panel's (the
  // second test's info), not a check: a listener added after the Run
  // heard it too when its answer came late (CI once: idle_ms 215)
  const asked = [];
  const { page, errors } = await runSequence(browser, daemon.url, async (p) => {
    p.on('request', (q) => {
      if (q.method() === 'GET' && /^\/v2\/sequences\/[^/]+$/.test(new URL(q.url()).pathname))
        asked.push(q.response().then(async (r) => r && [r.status(), await r.json().catch(() => null)]));
    });
  });
  const { id } = await page.evaluate(() => window.attnd.sequence);
  await page.waitForFunction(() => /drops it in \d/.test(document.getElementById('seq-expiry').textContent));
  assert.equal(await page.isVisible('#seq-expiry'), true);
  assert.match(await page.textContent('#seq-expiry'), /\(its limit: 8\.0 s idle\)/);
  assert.equal(await page.getAttribute('#seq-expiry', 'data-limit-ms'), String(IDLE));
  await expectGone(page, id, { reason: /idle/, timeout: 60000 });
  assert.equal(await page.isHidden('#seq-expiry'), true, 'no countdown on a sequence that is gone');
  // every check after the start's came once the server's idle time was
  // up: 404, or live with idle_ms at the limit (a sweep not yet come)
  const answers = (await Promise.all(asked)).slice(1).filter(Boolean); // answered ones
  assert.ok(answers.length >= 1, 'the page asked');
  assert.equal(answers.at(-1)[0], 404);
  for (const [status, body] of answers) {
    if (status === 404) continue;
    assert.equal(status, 200);
    assert.equal(body.idle_limit_ms, IDLE);
    assert.ok(body.idle_ms >= IDLE, `asked at idle_ms ${body.idle_ms} of ${IDLE}: before the time was up`);
  }
  assert.deepEqual(errors.filter((e) => !/status of 404/.test(e)), []);
  await page.close();
});

// On main (9615dae) the page waited a sweep of its own guess (a quarter
// of the limit, at most 1 s: 1000 ms here) past the limit, whatever the
// server said its sweep was.
test('the page asks whether its sequence is gone one of the server\'s sweeps (idle_sweep_ms) past the idle limit, as the server says it', async () => {
  const SWEEP = 4000; // what the server says here (its own: 1000 ms)
  const seen = []; // the page's GET /v2/sequences/{id}, the start's panel's first
  const { page, errors } = await runSequence(browser, daemon.url, async (p) => {
    // every GET /v2/sequences/{id}: the server's answer, its sweep told as SWEEP
    await p.route(/\/v2\/sequences\/[^/?]+$/, async (route) => {
      if (route.request().method() !== 'GET') { await route.continue(); return; }
      const r = await route.fetch();
      const body = await r.json().catch(() => null);
      if (r.status() === 200 && body) body.idle_sweep_ms = SWEEP;
      seen.push({ at: Date.now(), status: r.status(), body });
      await route.fulfill({ response: r, json: body ?? undefined });
    });
  });
  const { id } = await page.evaluate(() => window.attnd.sequence);
  await expectGone(page, id, { reason: /idle/, timeout: 60000 });
  // the start's panel GET, then the page's check
  assert.ok(seen.length >= 2, JSON.stringify(seen));
  const [info, check] = seen;
  assert.equal(info.status, 200);
  assert.equal(info.body.idle_limit_ms, IDLE);
  const due = IDLE - info.body.idle_ms;
  assert.ok(check.at - info.at >= due + SWEEP, `asked ${check.at - info.at} ms after the answer that said the ` +
    `sequence goes in ${due} ms and the server sweeps every ${SWEEP} ms: before its sweep`);
  assert.deepEqual(errors.filter((e) => !/status of 404/.test(e)), []);
  await page.close();
});

// On main (12e5dc2) a Step made 7 requests: its map's metadata twice
// (before its planes and after, to see that no other step came between);
// on 9615dae 6: the panel read the sequence (GET /v2/sequences/{id}) for
// its length and K/V bytes, which the step's answer now says.
test('a Step makes 5 requests: the step, its map\'s metadata once, weights, mask and scores in one each; the panel from the step\'s answer', async () => {
  const { page, errors } = await runSequence(browser, daemon.url);
  const { id, mapId } = await page.evaluate(() => window.attnd.sequence);
  const asked = [];
  page.on('request', (r) => { const u = new URL(r.url()); asked.push(`${r.method()} ${u.pathname}${u.search}`); });
  await page.fill('#seq-next', 'sat');
  await page.click('#seq-step');
  await page.waitForFunction(() => window.attnd.run.T === 3 && document.body.dataset.state === 'ready' &&
    document.getElementById('seq-info').dataset.length === '3');
  assert.equal((await page.evaluate(() => window.attnd.run.version)), 1);
  const m = `/v2/maps/${mapId}`;
  assert.deepEqual(asked, [
    'POST /v2/models/toy/infer',
    `GET ${m}`,
    `GET ${m}/attention?b=all&h=all&what=attention&format=f32`,
    `GET ${m}/attention?b=all&h=all&what=mask&format=f32`,
    `GET ${m}/attention?b=all&h=all&what=scores&format=f32`,
  ]);
  // the panel's figures are the server's: 3 tokens, its K/V bytes
  const info = await (await fetch(`${daemon.url}/v2/sequences/${id}`)).json();
  assert.equal(info.length, 3);
  assert.equal(await page.getAttribute('#seq-info', 'data-bytes'), String(info.bytes));
  assert.match(await page.textContent('#seq-info'), /: 3 tokens, K\/V /);
  assert.match(await page.textContent('#seq-expiry'), /drops it in \d/);
  assert.deepEqual(errors, []);
  await page.close();
});
