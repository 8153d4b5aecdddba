// twoclients.test.mjs - a sequence the page drives while another client
// (this test, over HTTP, as curl or a Python script would) steps it too
// (README "Sequence mode", "Sending a step again, branching"): the page
// says what the other client did, draws the sequence as the server holds
// it, and its next Step goes where the server's length says. Split from
// sequence.test.mjs, whose file had grown past the runner's per-file
// time under load.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openPage } from './harness.mjs';
import { embed } from '../../server/web/embed.js';
import { D, expectGone, runSequence as startSequence, sequenceSuite, stepper as seqStepper } from './seqpage.mjs';

let daemon, browser;
sequenceSuite((s) => ({ daemon, browser } = s));

const stepper = (id) => seqStepper(daemon.url, id);
const runSequence = () => startSequence(browser, daemon.url);

// Another client steps the sequence this page drives (README "Sending a
// step again, branching"): a step at a lower sequence_position takes it
// back, and the page's next Step, at the length it knew, was answered 409
// "past the end": the status line said so, the panel kept the old length
// and every Step after it was 409 again (a dead button).
test('a sequence another client stepped back: the next Step says so, draws the server\'s rows, and Step appends there', async () => {
  const { page, errors } = await runSequence();
  await page.fill('#seq-next', 'sat on');
  await page.click('#seq-step');
  await page.waitForFunction(() => window.attnd.run.T === 4 && document.getElementById('seq-info').dataset.length === '4');
  const { id, mapId } = await page.evaluate(() => window.attnd.sequence);
  const other = stepper(id);
  assert.equal((await other(['dog'], 1, false)).sequence_length, 2); // [the, dog]
  await page.fill('#seq-next', 'mat');
  await page.click('#seq-step'); // at 4: 409, past the end of 2
  await page.waitForFunction(() => /stepped it back|HTTP 409/.test(document.getElementById('status').textContent), null, { timeout: 30000 });
  const status = await page.textContent('#status');
  assert.match(status, new RegExp(`sequence ${id} holds 2 tokens, not 4`));
  assert.match(status, /"mat" was not applied/);
  await page.waitForFunction(() => document.getElementById('seq-info').dataset.length === '2');
  assert.match(await page.textContent('#seq-info'), /: 2 tokens, K\/V/);
  assert.equal(await page.evaluate(() => window.attnd.run.T), 2, 'the map drawn as the server holds it');
  assert.deepEqual(await page.evaluate(() => window.attnd.run.tokens), ['the', 'dog']);
  assert.deepEqual((await page.evaluate(() => window.attnd.sequence)).words, ['the', 'dog']);
  assert.equal(await page.isDisabled('#seq-step'), false);
  assert.equal(await page.isDisabled('#seq-replace'), true, 'no step of this page to replace');
  assert.equal(await page.inputValue('#seq-next'), 'mat');
  // Step again: appended at 2, as the server's length says.
  await page.click('#seq-step');
  await page.waitForFunction(() => window.attnd.run.T === 3 && document.body.dataset.state === 'ready', null, { timeout: 30000 });
  assert.deepEqual((await page.evaluate(() => window.attnd.sequence)).words, ['the', 'dog', 'mat']);
  const m = await (await fetch(`${daemon.url}/v2/maps/${mapId}`)).json();
  assert.deepEqual(m.tokens, ['the', 'dog', 'mat']);
  await page.waitForFunction(() => document.getElementById('seq-info').dataset.length === '3');
  assert.deepEqual(errors.filter((e) => !/status of 409/.test(e)), []);
  await page.click('#seq-end');
  await page.close();
});

// The rows are labelled as the server holds them: another client went
// back to 1 and sent two words, and the page's step (at the length it
// knew) replaced the second; the page labelled the rows with its own
// words ("the cat sat" over the server's "the a sat") and said only "+1".
test('a step after another client\'s: the rows\' words are the server\'s, and the status line says another client stepped too', async () => {
  const { page, errors } = await runSequence();
  const { id, mapId } = await page.evaluate(() => window.attnd.sequence);
  assert.equal((await stepper(id)(['a', 'b'], 1, false)).sequence_length, 3); // [the, a, b]
  await page.fill('#seq-next', 'sat');
  await page.click('#seq-step'); // at 2: [the, a, sat]
  await page.waitForFunction(() => window.attnd.run.T === 3 && document.body.dataset.state === 'ready', null, { timeout: 30000 });
  const m = await (await fetch(`${daemon.url}/v2/maps/${mapId}`)).json();
  assert.deepEqual(m.tokens, ['the', 'a', 'sat']);
  assert.deepEqual(await page.evaluate(() => window.attnd.run.tokens), m.tokens);
  assert.deepEqual((await page.evaluate(() => window.attnd.sequence)).words, m.tokens);
  assert.match(await page.textContent('#status'), /another client stepped it too since this page's last step/);
  assert.deepEqual(errors, []);
  await page.click('#seq-end');
  await page.close();
});

// Another client ended it with sequence_end past this page's position:
// the page's step is 409 "an ended sequence takes no step", which left
// Step offered, every press 409 again.
test('a sequence another client ended: the next Step says it is gone, and offers no more steps', async () => {
  const { page, errors } = await runSequence();
  const { id } = await page.evaluate(() => window.attnd.sequence);
  const r = await fetch(`${daemon.url}/v2/models/toy/infer`, {
    method: 'POST', headers: { 'Attnd-Sequence-Id': id },
    body: JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 2, D], data: Array.from(embed(['x', 'y'], D, 2)) }],
      parameters: { sequence_id: id, sequence_position: 2, sequence_end: true, tokens: ['x', 'y'] } }),
  });
  assert.equal(r.status, 200, await r.text());
  await page.fill('#seq-next', 'sat');
  await page.click('#seq-step'); // at 2, in the ended 4 tokens: 409
  await expectGone(page, id, { reason: /is gone.*ended .* ago at 4 tokens/ });
  assert.deepEqual(errors.filter((e) => !/status of 409/.test(e)), []);
  await page.close();
});

// The Follow box ticked on the sequence this page drives: another
// client's step was drawn (T=3) while the panel said "2 tokens", and
// Replace last offered to replace the other client's word as the page's.
test('following the sequence this page drives: another client\'s step is drawn, and the panel says its length', async () => {
  const { page, errors } = await runSequence();
  await page.check('#follow');
  const { id } = await page.evaluate(() => window.attnd.sequence);
  assert.equal((await stepper(id)(['sat'], 2, false)).sequence_length, 3);
  await page.waitForFunction(() => window.attnd.run.T === 3 && document.body.dataset.state === 'ready', null, { timeout: 30000 });
  await page.waitForFunction(() => document.getElementById('seq-info').dataset.length === '3', null, { timeout: 30000 })
    .catch(() => {});
  assert.match(await page.textContent('#seq-info'), /: 3 tokens, K\/V/);
  assert.deepEqual((await page.evaluate(() => window.attnd.sequence)).words, ['the', 'cat', 'sat']);
  assert.equal(await page.isDisabled('#seq-replace'), true, 'the last step is not this page\'s');
  // The page's Step appends after it.
  await page.fill('#seq-next', 'on');
  await page.click('#seq-step');
  await page.waitForFunction(() => window.attnd.run.T === 4 && document.body.dataset.state === 'ready', null, { timeout: 30000 });
  assert.deepEqual((await page.evaluate(() => window.attnd.sequence)).words, ['the', 'cat', 'sat', 'on']);
  assert.deepEqual(errors, []);
  await page.click('#seq-end');
  await page.close();
});

// The panel's length and K/V bytes (which say where the next Step goes,
// after another client's steps) were read from GET /v2/sequences, the
// list of every live sequence (its first 4096 only: past them the page's
// own was not found, its length not updated), once per step of every
// page: now GET /v2/sequences/{id}, the one sequence (at the start; a
// step's figures come from its answer).
test('the panel reads its own sequence (GET /v2/sequences/{id}), not the list of every live one', async () => {
  const asked = [];
  const { page, errors } = await startSequence(browser, daemon.url, (p) => p.on('request', (r) => {
    const u = new URL(r.url());
    if (u.pathname.startsWith('/v2/sequences')) asked.push(u.pathname);
  }));
  const { id } = await page.evaluate(() => window.attnd.sequence);
  assert.equal((await stepper(id)(['sat'], 2, false)).sequence_length, 3); // another client's step
  await page.fill('#seq-next', 'on');
  await page.click('#seq-step'); // at 2: replaces "sat"
  await page.waitForFunction(() => window.attnd.run.T === 3 && document.getElementById('seq-info').dataset.length === '3' &&
    document.body.dataset.state === 'ready');
  assert.ok(Number(await page.getAttribute('#seq-info', 'data-bytes')) > 0, 'its K/V bytes shown');
  assert.ok(asked.length > 0, 'the panel asked the server');
  assert.deepEqual(asked.filter((p) => p !== `/v2/sequences/${id}`), [], `asked: ${asked.join(' ')}`);
  assert.deepEqual(errors, []);
  await page.click('#seq-end');
  await page.close();
});

// A second tab following the sequence's map (#map=<id>&follow=1) shows
// the Retained list, which named the map's shape when it was listed
// ([1, 2, 2, 2]) while the map drawn beside it grew: now its entry says
// the shape drawn (on main, 8e4e250, it stayed [1, 2, 2, 2]).
test('a tab following a sequence\'s map: its Retained list entry says the shape as the map grows', async () => {
  const { page, errors } = await runSequence();
  const { id, mapId } = await page.evaluate(() => window.attnd.sequence);
  const { page: other, errors: otherErrors } = await openPage(browser, `${daemon.url}/#map=${mapId}&follow=1&h=0`);
  const entry = `#maps button:has-text("${mapId}")`;
  await other.waitForSelector(entry);
  assert.match(await other.textContent(entry), /\[1, 2, 2, 2\]/);
  assert.equal((await stepper(id)(['sat', 'on'], 2, false)).sequence_length, 4);
  await other.waitForFunction(() => window.attnd.run.T === 4 && document.body.dataset.state === 'ready', null, { timeout: 30000 });
  assert.match(await other.textContent(entry), new RegExp(`^${mapId} · toy · \\[1, 2, 4, 4\\]`));
  assert.deepEqual(otherErrors, []);
  assert.deepEqual(errors, []);
  await other.close();
  await page.click('#seq-end');
  await page.close();
});
