// seqgone.test.mjs - a page driving a sequence whose server keeps it long
// without a step (--sequence-idle-ms 10 min) still finds it gone soon
// when it goes another way: another client's DELETE (README "Sequence
// mode": the page asks at least every 15 s).
import { test } from 'node:test';
import { expectGone, runSequence, sequenceSuite } from './seqpage.mjs';

let suite = {};
sequenceSuite((s) => { suite = s; }, ['--sequence-idle-ms', '600000']);

// On 404935e the page asked only when the idle limit was up (10 min):
// the panel still said live after 40 s.
test('a sequence another client deleted is shown gone within the page\'s 15 s check, however long the idle limit', async () => {
  const { daemon, browser } = suite;
  const { page } = await runSequence(browser, daemon.url);
  const { id } = await page.evaluate(() => window.attnd.sequence);
  await page.waitForFunction(() => /drops it in \d/.test(document.getElementById('seq-expiry').textContent));
  const r = await fetch(`${daemon.url}/v2/sequences/${encodeURIComponent(id)}`, { method: 'DELETE' });
  if (r.status !== 200) throw new Error(`DELETE: ${r.status} ${await r.text()}`);
  await expectGone(page, id, { reason: /deleted/, timeout: 40000 });
  await page.close();
});
