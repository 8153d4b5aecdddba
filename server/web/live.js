// live.js - a sequence as it grows.
//
// Sequence mode: with "as a sequence" ticked, Run starts a retained
// sequence on the server (API.md "Sequences"; the prompt's words embedded
// by the sample generator at positions 0..n-1); Step (or Enter in the
// field) appends the next word(s) at their true positions (the sequence's
// length, not 0); Replace last sends them in place of the last step's (a
// step at the position that step had: the server drops what followed, so
// the sequence branches); End frees it (DELETE /v2/sequences/{id}). Every
// step carries its sequence_position. After each step
// the sequence's retained map is reopened: it has grown by the new rows,
// the newest row is marked and is the step view's query, the zoom window
// moves to it. Length and K/V bytes are shown, and how long the server
// keeps it without a step (GET /v2/sequences/{id}'s idle_ms and
// idle_limit_ms); a sequence the server no longer holds (idle,
// restarted, replica gone) says so with the server's reason.
//
// Follow mode (#map=<id>&follow=1, or the Follow box on a retained map):
// another client drives the sequence; the page redraws its map as it grows
// through the long poll GET /v2/maps/{id}?wait=<rows it has> (README
// "Following a map as it grows"): one request waiting at a time, answered
// by the server as soon as the map grows, no polling loop in the page.

import * as api from './api.js';
import { tokenize } from './embed.js';

let ctx = null;    // app.js: { $, state, run, setStatus, askKey, showGrown, update }
let seq = null;    // { id, meta, words[], length, last (words of the last step), mapId, live, causal }
let followGen = 0; // bumps on every start/stop: a stale loop ends itself
let followAbort = null;
let trouble = null; // the map whose follow shows a red "trying again"
let busy = false;

const sleep = (ms) => new Promise((res) => setTimeout(res, ms));

function newId() {
  const b = crypto.getRandomValues(new Uint8Array(6));
  return `page-${Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('')}`;
}

function kib(n) {
  if (!(n >= 0)) return '—';
  return n < 1024 ? `${n} B` : n < 1 << 20 ? `${(n / 1024).toFixed(1)} KiB` : `${(n / (1 << 20)).toFixed(1)} MiB`;
}

// current: the sequence this page drives (for the tests), or null.
export function current() {
  return seq && { ...seq, words: [...seq.words] };
}

// drives: is mapId the map of a live sequence this page steps?
export function drives(mapId) {
  return !!(seq && seq.live && seq.mapId === mapId);
}

// forget: the page shows something else now (a Run): the sequence it
// drove, if any, which it can step no more, is ended (its map stays).
export function forget() {
  stopWatch();
  if (seq && seq.live) api.endSequence(seq.id).catch(() => {});
  seq = null;
  ctx.$('seq-panel').hidden = true;
}

function showPanel(note, isGone = false) {
  const $ = ctx.$;
  $('seq-panel').hidden = !seq;
  if (!seq) return;
  const info = $('seq-info');
  info.classList.toggle('gone', isGone);
  info.textContent = note;
  $('seq-step').disabled = $('seq-next').disabled = $('seq-end').disabled = !seq.live;
  $('seq-replace').disabled = !seq.live || !(seq.last > 0);
  $('seq-restart').hidden = !isGone;
  $('seq-restart').textContent = `Start again with its ${seq.words.length} word${seq.words.length === 1 ? '' : 's'}`;
}

// refreshInfo: length and K/V bytes of the sequence as the server holds
// it (GET /v2/sequences; the last answer's length when it cannot tell):
// another client may have stepped it since this page's last step, and
// the next Step appends at the length shown.
async function refreshInfo() {
  if (!seq || !seq.live) return;
  const s = seq;
  let info;
  try { info = await api.sequenceInfo(s.id); } catch (_) { /* shown as — */ }
  if (s !== seq || !s.live) return;
  showInfo(s, info);
}

// stepInfo: the panel after this page's step, answered r at t
// (performance.now()): the answer's sequence_length and sequence_bytes are
// the sequence's once that step is in, and its idle time runs from then,
// so no GET /v2/sequences/{id}; the limit and sweep are those the start's
// GET said (the server's settings). Asked (refreshInfo) when the answer
// does not say its bytes (an older attnd) or the limit is not known.
async function stepInfo(s, r, t) {
  if (!Number.isInteger(r.length) || !Number.isInteger(r.bytes) || s.limit === undefined) { await refreshInfo(); return; }
  if (s !== seq || !s.live) return;
  showInfo(s, { length: r.length, bytes: r.bytes, idle_ms: Math.floor(performance.now() - t),
    idle_limit_ms: s.limit, idle_sweep_ms: s.sweep });
}

// showInfo: the panel's line on s from info (GET /v2/sequences/{id}'s
// fields; undefined when it could not be read).
function showInfo(s, info) {
  const bytes = info?.bytes;
  // (another client's steps since: Replace last has none of this page's)
  if (Number.isInteger(info?.length) && info.length !== s.length) { s.length = info.length; s.last = 0; }
  showPanel(`Sequence ${s.id} on ${s.meta.name}: ${s.length} tokens, K/V ${kib(bytes)}` +
    `${s.mapId ? `, map ${s.mapId}` : ', no map kept'}.`);
  ctx.$('seq-info').dataset.length = String(s.length);
  ctx.$('seq-info').dataset.bytes = bytes === undefined ? '' : String(bytes);
  noteIdle(s, info);
}

// noteIdle: when the server drops s without a step, from an answer of
// GET /v2/sequences/{id} (info): its idle_limit_ms (--sequence-idle-ms)
// less its idle_ms from now; shown counting down in the panel. A server
// that does not say (no idle_limit_ms) leaves s.dueAt unknown. The
// server's idle sweeps come idle_sweep_ms apart (s.sweep); one that does
// not say it is taken to sweep as attnd did before it said (guessSweep).
function noteIdle(s, info) {
  if (!info || !Number.isInteger(info.idle_limit_ms) || !Number.isInteger(info.idle_ms)) return;
  s.limit = info.idle_limit_ms;
  s.sweep = Number.isInteger(info.idle_sweep_ms) && info.idle_sweep_ms >= 0 ? info.idle_sweep_ms : guessSweep(s.limit);
  s.dueAt = performance.now() + Math.max(0, info.idle_limit_ms - info.idle_ms);
  showExpiry();
}

const secs = (ms) => (ms < 10000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms / 1000)} s`);

// showExpiry: the panel's line on how long the sequence has left, kept
// up to date by a local timer (no request): the time the server drops it
// unless a step comes (another client's step, found at the check, moves
// it on).
let tickTimer = null;
function showExpiry() {
  const el = ctx.$('seq-expiry');
  clearTimeout(tickTimer);
  tickTimer = null;
  const s = seq;
  if (!s || !s.live || s.dueAt === undefined) { el.hidden = true; el.textContent = ''; return; }
  const left = s.dueAt - performance.now();
  el.hidden = false;
  el.dataset.limitMs = String(s.limit);
  el.textContent = left > 0 ? `Without a step, the server drops it in ${secs(left)} (its limit: ${secs(s.limit)} idle).`
    : `Idle past the server's limit (${secs(s.limit)}): it drops it now; checking.`;
  if (left > 0) tickTimer = setTimeout(showExpiry, left < 10000 ? 100 : 1000);
}

// ownWords: the sequence's words are those of its map as drawn, when the
// map carries the steps' labels (another client's steps included).
function ownWords(s) {
  const r = ctx.run;
  if (r && r.mapId === s.mapId && r.labelled && r.T === s.length) s.words = [...r.tokens];
}

// failed: a step or start that did not work. A sequence the server no
// longer holds ends sequence mode with the server's words: a step's 400
// for an unknown sequence (idle, restarted, another replica), a step's
// 404 (its model is not loaded: unloading dropped its sequences), End's
// 404 (unknown or dropped); so does a 503 from a server that is shutting
// down (draining: the sequence ends with it). Another 503 (K/V budget or
// max-sequences full, memory, a model loading) asks to wait; a 401 asks
// for the key, which then does retry (the same start, step or end).
// A step's 409 for a sequence that another client ended (sequence_end)
// after this page's position is gone too.
function failed(e, retry) {
  ctx.askKey(e, retry);
  const draining = e.status === 503 && /draining/.test(e.message);
  if (seq && (draining || e.status === 404 || (e.status === 400 && /sequence/i.test(e.message) &&
      /unknown|expired|sequence_start/i.test(e.message)) || (e.status === 409 && /ended sequence/.test(e.message)))) {
    gone(e.message, draining);
    return;
  }
  if (e.status === 503) {
    ctx.setStatus(`the server cannot take it now (${e.message}); try again${e.retryAfter ? ` in ${e.retryAfter} s` : ' later'}`, true);
    return;
  }
  ctx.setStatus(e.message, true);
}

// gone: the server no longer holds the sequence this page drives (why:
// the server's words): the panel says so and offers no more steps, but
// "Start again" with its words (and Run, whose field has them).
function gone(why, draining = false) {
  stopWatch();
  seq.live = false;
  showPanel(draining ? `Sequence ${seq.id} ends with the server, which is shutting down (${why}). ` +
    'Start again once it is back to begin a new one with its words.'
    : `Sequence ${seq.id} is gone: the server no longer holds it (${why}). ` +
    'Start again to begin a new one with its words.', true);
  ctx.$('text').value = seq.words.join(' ');
  ctx.setStatus(`sequence ${seq.id} ${draining ? 'ends: the server is shutting down' : 'is gone'}: ${why}`, true);
  // The field or button that had the focus is disabled now: the focus
  // goes to Run, which starts it again, not to the top of the page.
  const f = document.activeElement;
  if (!f || f === document.body || f.disabled) ctx.$('run').focus();
}

// watch: while this page drives a live sequence, ask the server whether
// it still holds it (GET /v2/sequences/{id}, which does not count as a
// step) when it is due to drop it: at idle_limit_ms after its last step
// (noteIdle), plus one of the server's idle sweeps (its idle_sweep_ms),
// so that one left alone past --sequence-idle-ms says it is gone without
// waiting for a Step to be refused, and a page left open asks nothing
// before then. Still live then: another client
// stepped it (a later due time), or a step of it is on its way (asked
// again a sweep later). A server that does not say its limit is asked
// every WATCH_MS. Only while the tab is shown (a hidden one asks as it
// comes back, which also finds a restart or an unload) and never beside
// a step on its way; one request at a time; an answer it cannot read (no
// connection, 5xx, 401) asks again WATCH_MS later. However long the
// server's limit (60 s by default, up to a day), it asks at least every
// WATCH_MAX_MS, so a sequence gone for another reason (deleted by another
// client, the server restarted, its model unloaded) says so within that.
const WATCH_MS = 5000;
const WATCH_MAX_MS = 15000;
let watchTimer = null;

// guessSweep: the sweep of a server that does not say it (no
// idle_sweep_ms): attnd's rule then, a quarter of the limit, 10 ms to 1 s.
const guessSweep = (limit) => Math.min(1000, Math.max(10, limit / 4));

function watch(ms) {
  clearTimeout(watchTimer);
  watchTimer = null;
  if (!seq || !seq.live) return;
  if (ms === undefined) ms = seq.dueAt === undefined ? WATCH_MS : Math.max(0, seq.dueAt - performance.now()) + seq.sweep + 50;
  watchTimer = setTimeout(checkLive, Math.min(ms, WATCH_MAX_MS));
}

function stopWatch() {
  clearTimeout(watchTimer);
  watchTimer = null;
  clearTimeout(tickTimer);
  tickTimer = null;
  ctx.$('seq-expiry').hidden = true;
}

async function checkLive() {
  const s = seq;
  watchTimer = null;
  if (!s || !s.live || document.hidden) return; // (visibilitychange asks again)
  if (busy) { watch(); return; }
  let st = null;
  try { st = await api.sequenceState(s.id); } catch (_) { st = null; }
  if (s !== seq || !s.live) return;
  if (st && st.gone !== undefined) { if (!busy) gone(st.gone); else watch(); return; }
  if (!st) { watch(WATCH_MS); return; }
  noteIdle(s, st.info);
  // overdue (a step of it on its way, or the sweep not yet come): a sweep on
  if (s.dueAt !== undefined && s.dueAt <= performance.now()) watch(s.sweep + 50);
  else watch();
}

// restart: "Start again" on a sequence that is gone: a new one with its
// words (the server's, as drawn), causal as it was.
function restart() {
  if (!seq || seq.live) return;
  const $ = ctx.$;
  $('text').value = seq.words.join(' ');
  $('seq-mode').checked = true;
  $('causal').checked = seq.causal !== false;
  $('run').click();
}

// startSequence: Run in sequence mode (app.js doRun). Ends the sequence
// this page drove before, if any (forget: its panel goes, so a start that
// fails offers no Step on it).
export async function startSequence(meta, words, causal) {
  forget();
  setFollow(false);
  const id = newId();
  try {
    let r = await api.seqStep(meta, id, words, 0, { start: true, causal });
    if (r.length === undefined) throw new Error(`${meta.name}: this attnd keeps no sequences (its answer has no sequence_length)`);
    // weights and scores take twice the weights' bytes: a store that
    // holds the weights alone keeps them (a start again begins it anew)
    if (!r.mapId && r.scores) r = await api.seqStep(meta, id, words, 0, { start: true, causal, scores: false });
    if (!r.mapId) { // nothing to draw: ended, not left to idle out unseen
      api.endSequence(id).catch(() => {});
      const sc = r.scores;
      const H = (meta.parameters || {}).n_heads || 1;
      throw new Error(`the server kept no map for sequence ${id} (so it was ended): ${H} head${H === 1 ? '' : 's'} of ` +
        `${words.length} × ${words.length} weights${sc ? ' and scores' : ''} take ${api.mb((sc ? 8 : 4) * H * words.length ** 2)}, more than its retained-map store holds ` +
        '(--maps-bytes), or it keeps none. Start with fewer words.');
    }
    seq = { id, meta, words: [...words], length: r.length ?? words.length, last: words.length, mapId: r.mapId, live: true, causal };
    ctx.state.q = null;
    await ctx.showGrown(r.mapId, `sequence ${id} started`, seq.words);
    await refreshInfo();
    watch();
    ctx.$('seq-next').focus();
  } catch (e) {
    failed(e, () => startSequence(meta, words, causal));
    document.body.dataset.state = 'error';
  }
}

// step: Step (replace false) appends the typed words; Replace last
// (replace true) sends them at the position of the last step's words.
// While one is on its way (a slow server) the status line says so, and
// another Step says that it waits for it rather than nothing.
async function step(replace) {
  const $ = ctx.$;
  if (!seq || !seq.live || (replace && !(seq.last > 0))) return;
  if (busy) { ctx.setStatus(`sequence ${seq.id}: the last step is still on its way; wait for it`); return; }
  const words = tokenize($('seq-next').value);
  if (!words.length) { ctx.setStatus('Next word(s): type at least one word', true); return; }
  busy = true;
  document.body.dataset.state = 'loading';
  const pos0 = replace ? seq.length - seq.last : seq.length;
  ctx.setStatus(`sequence ${seq.id}: ${replace ? 'replacing the last step with' : 'stepping'} ` +
    `${words.length} word${words.length === 1 ? '' : 's'} at position ${pos0}…`);
  try {
    // the version of its map as this page drew it: its own step adds one
    const v0 = ctx.run && ctx.run.mapId === seq.mapId ? ctx.run.version : undefined;
    const r = await api.seqStep(seq.meta, seq.id, words, pos0, { causal: seq.causal });
    const answered = performance.now();
    seq.words = [...seq.words.slice(0, pos0), ...words];
    seq.length = r.length ?? pos0 + words.length;
    seq.last = words.length;
    $('seq-next').value = '';
    if (!r.mapId) { // the store dropped the map: the sequence goes on undrawn
      const had = seq.mapId;
      seq.mapId = null;
      await stepInfo(seq, r, answered);
      ctx.setStatus(`sequence ${seq.id}: ${seq.length} tokens, but its map${had ? ` ${had}` : ''} is no longer ` +
        'kept (evicted for newer maps, grown past maps-bytes, or ended by a replace that failed): the view shows its last retained state', true);
      document.body.dataset.state = 'ready';
      return;
    }
    seq.mapId = r.mapId;
    ctx.state.q = null; // the step view goes to the new token
    // More than one version on: another client stepped it too since this
    // page drew it (its rows may be the ones this step replaced).
    const other = (m) => (Number.isInteger(v0) && m.version > v0 + 1 ? `; another client stepped it too since this ` +
      `page's last step (its map went from version ${v0} to ${m.version}): the rows are the server's` : '');
    await ctx.showGrown(seq.mapId, (m) => (replace ? `sequence ${seq.id}: the last step replaced → ${seq.length} tokens`
      : `sequence ${seq.id}: +${words.length} → ${seq.length} tokens`) + other(m), seq.words);
    ownWords(seq);
    await stepInfo(seq, r, answered);
    watch();
  } catch (e) {
    if (!(e.status === 409 && /past the end/.test(e.message) && await behind(seq, pos0, words))) failed(e, () => step(replace));
    document.body.dataset.state = 'ready';
  } finally {
    busy = false;
  }
}

// behind: a step answered 409 "past the end": the sequence holds fewer
// tokens than this page knew, as another client sent a step at a lower
// sequence_position (went back) since this page's last step. The step
// changed nothing; the page reads the sequence's length and map again,
// draws the server's rows and says so; the typed words stay, and the
// next Step appends them there. Replace last has no step of this page
// to replace. False when the sequence is not listed (then failed says
// what the 409 said).
async function behind(s, pos0, words) {
  let info;
  try { info = await api.sequenceInfo(s.id); } catch (_) { return false; }
  if (s !== seq) return true;
  if (!info || !Number.isInteger(info.length) || info.length >= pos0) return false;
  s.length = info.length;
  s.last = 0;
  s.words = s.words.slice(0, s.length);
  const why = `sequence ${s.id} holds ${s.length} token${s.length === 1 ? '' : 's'}, not ${pos0}: another client ` +
    `stepped it back (a step at a lower sequence_position); "${words.join(' ')}" was not applied and is still ` +
    `in the field: Step appends it at position ${s.length}`;
  s.mapId = info.map_id || null;
  let drawn = s.mapId ? '' : ' (it keeps no map: the view shows its last retained state)';
  if (s.mapId) {
    ctx.state.q = null;
    try {
      await ctx.showGrown(s.mapId, 'drawn as the server holds it now', s.words);
      ownWords(s);
    } catch (e) { drawn = ` (its map ${s.mapId} could not be read: ${e.message})`; }
  }
  await refreshInfo();
  if (s === seq) ctx.setStatus(`${why}${drawn}.`, true);
  return true;
}

async function end() {
  if (!seq || !seq.live) return;
  try {
    await api.endSequence(seq.id);
    seq.live = false;
    stopWatch();
    showPanel(`Sequence ${seq.id} ended: its keys and values are freed; its map ${seq.mapId} stays retained.`);
    ctx.setStatus(`sequence ${seq.id} ended`);
    ctx.update(); // the link stops following
  } catch (e) { failed(e, end); }
}

// setFollow: start or stop following the retained map the page shows.
export function setFollow(on) {
  const st = ctx.state;
  followGen++;
  if (followAbort) followAbort.abort();
  followAbort = null;
  // Its red "trying again" would stay, and nothing tries any more.
  if (trouble && !on) ctx.setStatus(`stopped following map ${trouble}`);
  trouble = null;
  st.follow = !!on && !!st.map;
  if (ctx.run && !(seq && seq.live && seq.mapId === st.map)) ctx.run.live = st.follow;
  if (st.follow) follow(followGen);
}

// follow: the long-poll loop. One request at a time; each asks the server
// to answer when the map has other than the rows drawn now. A wait that
// fails (no connection, 503 past --maps-waiters, another 5xx) says so in
// red and that it tries again; the next one asks for a short answer
// (timeout_ms), so that the first good answer, grown or not, clears the
// red line within seconds, not at the map's next step. A 401 asks for the
// key and stops the loop with following still on (the link keeps
// follow=1): the key starts it again.
const RETRY_WAIT_MS = 1500;

async function follow(gen) {
  const st = ctx.state;
  let quietNoted = false; // said that no live sequence writes the map
  let writer = null; // the live sequence seen writing it
  while (gen === followGen && st.follow && st.map && ctx.run) {
    const id = st.map;
    const rows = ctx.run.sourceShape ? ctx.run.sourceShape[0] : ctx.run.T;
    const version = ctx.run.version;
    followAbort = new AbortController();
    const t0 = Date.now();
    let r;
    try {
      r = await api.waitMap(id, rows, followAbort.signal, version, trouble ? RETRY_WAIT_MS : 0);
    } catch (e) {
      if (gen !== followGen) return;
      trouble = id;
      ctx.setStatus(`following map ${id}: ${e.message}; trying again in 1 s`, true);
      await sleep(1000);
      continue;
    }
    if (gen !== followGen) return;
    if (st.map !== id) continue; // another map is shown now
    if (r.status === 404) {
      st.follow = false;
      ctx.update();
      ctx.setStatus(`Map ${id} is gone (${r.meta?.error || 'evicted or unknown'}): ` +
        'the store evicted it for newer maps, or the server restarted; it will not grow any more.', true);
      return;
    }
    if (r.status === 401) {
      ctx.askKey({ status: 401 }, () => { if (st.follow && st.map === id) setFollow(true); });
      ctx.setStatus(`following map ${id}: the server wants its API key (${r.meta?.error || 'HTTP 401'}); ` +
        'give it above and following goes on', true);
      return;
    }
    if (r.status >= 500) {
      const s = Math.min(30, r.retryAfter);
      trouble = id;
      ctx.setStatus(`following map ${id}: the server answered ${r.meta?.error ? `${r.meta.error} (HTTP ${r.status})`
        : `HTTP ${r.status}`}; trying again in ${s} s`, true);
      await sleep(1000 * s);
      continue;
    }
    if (r.status !== 200 || !r.meta || !Array.isArray(r.meta.shape)) {
      st.follow = false;
      ctx.update();
      ctx.setStatus(`following map ${id}: ${r.meta?.error || r.notJSON || `HTTP ${r.status}`}`, true);
      return;
    }
    if (r.meta.shape[2] !== rows || (Number.isInteger(version) && r.meta.version !== version)) {
      quietNoted = false;
      trouble = null; // showGrown's note replaces the red line
      try { // (a query row the watcher picked stays picked)
        // (the rows read, which a step landing meanwhile makes more
        // than the wait's answer said)
        await ctx.showGrown(id, (m) => `following map ${id}: ${m.sourceShape ? m.sourceShape[0] : m.T} rows`, undefined,
          () => gen === followGen && st.map === id);
        // The map of the sequence this page drives, grown by another
        // client's step: its panel's length and words as the server's.
        if (seq && seq.live && seq.mapId === id && ctx.run.mapId === id) {
          await refreshInfo();
          ownWords(seq);
        }
      } catch (e) {
        if (gen !== followGen) return;
        trouble = id;
        ctx.setStatus(`following map ${id}: ${e.message}; trying again in 1 s`, true);
        await sleep(1000);
      }
      continue;
    }
    if (trouble) {
      trouble = null;
      ctx.setStatus(`following map ${id}: the server answers again; ${rows} rows, waiting for more`);
    }
    // Nothing new. Answered at once (a draining server answers every wait
    // so, as does --maps-wait-ms 0): ask again after a second, not at once.
    if (Date.now() - t0 < 1000) await sleep(1000 - (Date.now() - t0));
    if (gen !== followGen) return;
    // The wait timed out with nothing new: say whether anyone still writes
    // it, asked at every such answer until none does (a sequence may end,
    // idle out or go with its model at any time after its last step).
    if (!quietNoted) {
      // (false: not told this time, asked again at the next quiet answer)
      const s = await api.liveSequenceOfMap(id, writer?.map === id ? writer.id : undefined).catch(() => false);
      if (gen !== followGen) return;
      if (s) writer = { map: id, id: s.id };
      else if (s !== false) quietNoted = true; // (undefined: the daemon lists none, cannot tell)
      if (s === null)
        ctx.setStatus(`following map ${id}: ${writer?.map !== id ? 'no live sequence writes it now'
          : `sequence ${writer.id}, which wrote it, is no longer live`} (ended, deleted, idle past the server's ` +
          'sequence-idle-ms, or its model unloaded); still watching');
    }
  }
}

export function initLive(c) {
  ctx = c;
  const $ = c.$;
  $('seq-step').addEventListener('click', () => step(false));
  $('seq-replace').addEventListener('click', () => step(true));
  $('seq-end').addEventListener('click', end);
  $('seq-restart').addEventListener('click', restart);
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden && seq && seq.live && !watchTimer) checkLive();
  });
  $('seq-next').addEventListener('keydown', (e) => {
    if (e.key === 'Enter') { e.preventDefault(); step(false); }
  });
  // A page that goes away (closed, reloaded, another address) can step its
  // sequence no more: it is ended, its K/V freed now rather than at the
  // idle timeout (its map stays retained). Back from the browser's cache,
  // the page's next Step says it is gone.
  window.addEventListener('pagehide', () => {
    if (seq && seq.live) api.endSequence(seq.id, true).catch(() => {});
  });
}
