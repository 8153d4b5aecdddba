// seqidle.test.mjs - a sequence the page drives, which the server drops
// while the page is left alone (idle past --sequence-idle-ms): the page
// says it is gone by itself, before anyone presses Step, and offers to
// start it again with its words (README "Sequence mode").
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { expectGone, runSequence, sequenceSuite } from './seqpage.mjs';

let daemon, browser;
sequenceSuite((s) => ({ daemon, browser } = s), ['--sequence-idle-ms', '1500']);

// notLive(id): resolves once the server no longer holds sequence id.
async function notLive(id) {
  for (let k = 0; k < 600; k++) { // (a hang's bound: 60 s)
    const r = await fetch(`${daemon.url}/v2/sequences/${encodeURIComponent(id)}`, { headers: { 'Attnd-Sequence-Id': id } });
    await r.text();
    if (r.status === 404) return;
    await new Promise((res) => setTimeout(res, 100));
  }
  throw new Error(`sequence ${id} still live after 60 s`);
}

// On main (8e4e250) the panel said "2 tokens" with Step enabled until
// Step was pressed, then a 400; nothing offered to start it again.
test('a sequence dropped for idleness: the page says it is gone without a Step, and Start again begins it anew with its words', async () => {
  const { page, errors } = await runSequence(browser, daemon.url);
  const { id, words } = await page.evaluate(() => window.attnd.sequence);
  assert.deepEqual(words, ['the', 'cat']);
  await notLive(id); // dropped by the server, no step sent since
  await expectGone(page, id, { timeout: 60000 });
  assert.equal(await page.isVisible('#seq-restart'), true);
  assert.match(await page.textContent('#seq-restart'), /Start again with its 2 words/);
  // (chromium logs the watch's 404 as a console error: the answer expected)
  assert.deepEqual(errors.filter((e) => !/status of 404/.test(e)), []);
  errors.length = 0;
  await page.click('#seq-restart');
  await page.waitForFunction((old) => window.attnd.sequence && window.attnd.sequence.live &&
    window.attnd.sequence.id !== old && window.attnd.run.T === 2 && document.body.dataset.state === 'ready', id);
  const again = await page.evaluate(() => window.attnd.sequence);
  assert.deepEqual(again.words, ['the', 'cat']);
  assert.equal(again.causal, true);
  assert.equal(await page.isHidden('#seq-restart'), true);
  assert.equal(await page.isDisabled('#seq-step'), false);
  // (not stepped here: under --sequence-idle-ms 1500 a loaded machine
  // could drop it before the step; its start was answered 200)
  assert.deepEqual(errors.filter((e) => !/status of 404/.test(e)), []);
  await page.close();
});
