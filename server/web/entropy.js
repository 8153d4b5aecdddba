// entropy.js - each query row's entropy beside the focused map (README
// "The visualiser", Row entropy): the server's what=entropy of the
// retained map (one source of truth: not worked out here), for the head
// shown (the mean over heads: the mean of the heads' entropies, as the
// server defines h=mean), a bar per row right of the map's rows, from 0
// to ln S (a uniform row's over the map's S keys). Asked only while the
// "row entropy" box is ticked, for the map shown, once per map, version,
// batch item and head: a sequence's step (its version grew) asks again.

import * as api from './api.js';
import { fmt } from './panels.js';
import { readPlane } from './plane.js';

let ctx = null;          // app.js: { $, state, run, refresh }
const got = { key: '', values: null, note: '' }; // the last answer
let asking = null;       // { key, ac } the request on its way
const W = 96, BAR = 56;  // the column's width and its bars' longest, CSS px
let drawn = null;        // { g, run, vals } what the column shows

export function initEntropy(c) {
  ctx = c;
  const box = ctx.$('entropy-toggle');
  box.addEventListener('change', () => { ctx.state.entropy = box.checked; ctx.refresh(); });
  // its tooltip: the row under the pointer, its value and the scale's end
  ctx.$('entropy').addEventListener('mousemove', (e) => {
    const cv = ctx.$('entropy');
    if (!drawn || !drawn.vals) return;
    const { g, run, vals } = drawn;
    const r = Math.floor((e.clientY - cv.getBoundingClientRect().top - g.y0) / g.cell);
    const i = g.r0 + r;
    cv.title = r >= 0 && r < g.rows
      ? `query ${run.tokens[i]} (#${i}): entropy ${fmt(vals[i])} nats of ln S = ${fmt(Math.log(run.S))} (uniform)` : '';
  });
}

const keyOf = (run, s) => `${run.mapId}/${run.version ?? 0}/${s.b}/${s.h}`;

// ask: GET what=entropy of the map shown, item b, head h (or mean), as
// FP32: T values. An answer from another version of the map (a step
// landed since the map was read) is not shown: the map drawn next asks.
async function ask(key, run, b, h) {
  const ac = new AbortController();
  asking = { key, ac };
  let values = null, note = '';
  try {
    const id = run.mapId;
    const res = await api.send(api.url(`v2/maps/${encodeURIComponent(id)}/attention?b=${b}&h=${h}&what=entropy&format=f32`),
      { headers: api.mapHeaders(id), signal: ac.signal });
    if (!res.ok) await api.fail(res);
    ({ values = null, note } = await readPlane(res, run.version, run.T, `${run.T} rows`));
  } catch (e) {
    if (e.name === 'AbortError') return;
    note = e.message;
  }
  if (!asking || asking.key !== key) return;
  asking = null;
  Object.assign(got, { key, values, note });
  ctx.refresh();
}

// entropyAt: row i's entropy as the readout says it, or null (not shown).
export function entropyAt(i) {
  const vals = drawn && drawn.run === ctx.run && drawn.vals;
  return vals && i < vals.length ? `${fmt(vals[i])} nats (uniform: ln S = ${fmt(Math.log(ctx.run.S))})` : null;
}

// drawEntropy: the column beside the heatmap drawn with geometry g
// (drawHeatmap's), and the legend's line about it; asks the server when
// what it shows is not what it has.
export function drawEntropy(g) {
  const { $, state } = ctx, run = ctx.run;
  const cv = $('entropy'), key = $('entropy-key');
  $('entropy-toggle').checked = state.entropy;
  cv.hidden = key.hidden = !state.entropy;
  drawn = null;
  if (!state.entropy) {
    if (asking) { asking.ac.abort(); asking = null; }
    // a failed answer (a 503 "retry shortly") is kept only to be shown:
    // ticking the box again asks again
    if (got.note) Object.assign(got, { key: '', values: null, note: '' });
    return;
  }
  let why = '';
  if (!run.mapId) why = 'Row entropy comes from the server\'s retained map: tick “retain on the server” and Run.';
  else if (run.block) why = 'Row entropy is not shown on a max-pooled map (one value a row; its rows are pooled here).';
  const k = why ? '' : keyOf(run, state);
  if (k && got.key !== k && (!asking || asking.key !== k)) {
    if (asking) asking.ac.abort();
    ask(k, run, state.b, state.h);
  }
  const vals = k && got.key === k ? got.values : null;
  const lnS = Math.log(run.S);
  const whose = state.h === 'mean' ? 'the mean of the heads\' entropies' : `head ${state.h}'s`;
  key.classList.toggle('error', !!(k && got.key === k && got.note));
  key.textContent = why || (!vals ? (got.key === k && got.note ? `Row entropy: ${got.note}` : 'Row entropy: asking the server…')
    : `Row entropy (bars right of the rows, ${whose}): 0 (one key) to ln S = ln ${run.S} = ${fmt(lnS, 4)} nats (uniform).`);
  const dpr = window.devicePixelRatio || 1;
  cv.width = Math.round(W * dpr);
  cv.height = Math.round(g.h * dpr);
  cv.style.width = `${W}px`;
  cv.style.height = `${g.h}px`;
  const c2 = cv.getContext('2d');
  c2.setTransform(dpr, 0, 0, dpr, 0, 0);
  c2.clearRect(0, 0, W, g.h);
  cv.dataset.r0 = String(g.r0);
  cv.dataset.values = vals ? Array.from(vals.subarray(g.r0, g.r0 + g.rows), String).join(',') : '';
  cv.dataset.lnS = String(lnS);
  if (!vals) return;
  drawn = { g, run, vals };
  const fg = getComputedStyle(cv).color || '#ddd';
  c2.font = '11px system-ui, sans-serif';
  c2.fillStyle = fg;
  c2.textBaseline = 'bottom';
  c2.fillText('H, nats', 2, g.y0 - 4);
  c2.strokeStyle = fg; // the scale's end: ln S
  c2.strokeRect(2.5, g.y0 + 0.5, BAR, g.cell * g.rows - 1);
  c2.textBaseline = 'middle';
  for (let r = 0; r < g.rows; r++) {
    const v = vals[g.r0 + r], y = g.y0 + r * g.cell;
    c2.fillStyle = '#7cc4ff';
    c2.fillRect(3, y + (g.cell > 3 ? 1 : 0), Math.max(0, Math.min(1, lnS > 0 ? v / lnS : 0)) * (BAR - 1), Math.max(1, g.cell - (g.cell > 3 ? 2 : 0)));
    if (g.cell >= 14) { c2.fillStyle = fg; c2.fillText(v.toFixed(2), BAR + 6, y + g.cell / 2); }
  }
}
