// seqpage.mjs - what the sequence tests share (sequence.test.mjs, a page
// that drives a sequence; twoclients.test.mjs, a sequence that the page
// and another client both step; seqidle.test.mjs, one the server drops):
// the suite's daemon and browser, a step over HTTP as another client
// sends it, and a page that started a sequence.
import assert from 'node:assert/strict';
import { browserSuite, openPage, waitDrawn } from './harness.mjs';
import { embed } from '../../server/web/embed.js';

export const D = 16; // the toy model's d_model (harness.mjs)

/** sequenceSuite(ready, extra): browserSuite (attnd started with extra)
 * whose ready(suite) is given { daemon, browser }, once /v2 lists the
 * sequences extension (every attnd does: a test of it must not skip). */
export function sequenceSuite(ready, extra = []) {
  browserSuite(async (daemon, browser) => {
    const v2 = await (await fetch(`${daemon.url}/v2`)).json();
    assert.ok((v2.extensions || []).includes('sequences'), `/v2 lists no sequences extension (every attnd has it): ${JSON.stringify(v2)}`);
    ready({ daemon, browser });
  }, extra);
}

/** stepper(url, id): step(ws, pos0, start) sends the words ws of sequence
 * id at pos0 to the toy model of the daemon at url (causal, retained, with
 * their tokens; start: its first step) and returns the answer's
 * parameters once it is 200. */
export function stepper(url, id) {
  return async (ws, pos0, start) => {
    const body = {
      inputs: [{ name: 'x', datatype: 'FP32', shape: [1, ws.length, D], data: Array.from(embed(ws, D, pos0)) }],
      outputs: [{ name: 'attention' }],
      parameters: { sequence_id: id, causal: true, retain: true, tokens: ws, sequence_position: pos0, ...(start ? { sequence_start: true } : {}) },
    };
    const r = await fetch(`${url}/v2/models/toy/infer`, {
      method: 'POST', body: JSON.stringify(body), headers: { 'Attnd-Sequence-Id': id },
    });
    const j = await r.json();
    assert.equal(r.status, 200, JSON.stringify(j));
    return j.parameters;
  };
}

// runSequence: a page of browser on the daemon at url that started a
// causal sequence of "the cat" on the toy model (Run in sequence mode),
// drawn, head 1 shown. beforeRun(page), when given, is awaited before Run
// (a route to set up).
export async function runSequence(browser, url, beforeRun) {
  const { page, errors } = await openPage(browser, `${url}/#model=toy&text=the%20cat&causal=1&h=1`);
  if (beforeRun) await beforeRun(page);
  await page.check('#seq-mode');
  await page.check('#causal');
  await page.click('#run');
  await page.waitForFunction(() => window.attnd.sequence && window.attnd.run.T === 2);
  await waitDrawn(page);
  return { page, errors };
}

/** expectGone(page, id, { reason, timeout }): waits until the sequence
 * panel of page says sequence id is gone (a step, End or the page's own
 * watch found the server no longer holds it), then asserts what every
 * such page shows: the panel names the sequence (and reason, a RegExp,
 * when given: the server's words), Step and End are disabled, and the
 * page's sequence is no longer live. Returns the panel's text. */
export async function expectGone(page, id, { reason, timeout = 30000 } = {}) {
  await page.waitForFunction(() => /is gone/.test(document.getElementById('seq-info').textContent), null, { timeout });
  const info = await page.textContent('#seq-info');
  assert.match(info, new RegExp(`Sequence ${id} is gone`));
  if (reason) assert.match(info, reason);
  assert.equal(await page.isDisabled('#seq-step'), true, 'Step is not offered on a sequence that is gone');
  assert.equal(await page.isDisabled('#seq-end'), true, 'End is not offered on a sequence that is gone');
  assert.equal(await page.evaluate(() => window.attnd.sequence.live), false);
  return info;
}
