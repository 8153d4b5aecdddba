// norm.js - the norm-weighted map in place of the weights (README "The
// visualiser", Norm-weighted map): the server's what=norm of the retained
// map, Kobayashi et al. 2020's cell (i, j) = alpha_ij * |v_j W_O|_2 of the
// head shown (for the mean over heads, the server's h=mean: the mean of
// the heads' cells), drawn on a colour scale of its own, from 0 to the
// plane's largest cell (the values are lengths, not weights in [0, 1]).
// Asked only while the "norm-weighted" box is ticked, for the map shown,
// once per map, version, batch item and head; a map that keeps no norms
// (a sequence's: the server answers 400 with why) is asked once, and the
// legend says the server's reason while the weights stay drawn.

import * as api from './api.js';
import { makeScale } from './colormap.js';
import { fmt } from './panels.js';
import { readPlane } from './plane.js';

let ctx = null;          // app.js: { $, state, run, refresh }
const got = { key: '', values: null, max: 0, note: '' }; // the last answer
const none = new Map();  // map id -> the server's 400: it keeps no norms
let asking = null;       // { key, ac } the request on its way

export function initNorm(c) {
  ctx = c;
  const box = ctx.$('norm-toggle');
  box.addEventListener('change', () => { ctx.state.norm = box.checked; ctx.refresh(); });
}

const keyOf = (run, s) => `${run.mapId}/${run.version ?? 0}/${s.b}/${s.h}`;

// normOf: what the norms are of, as the map's metadata says ("v W_o", or
// "v" for sdpa, which has no W_o); a run read from its answer, not from
// the metadata: the server's rule (sdpa's are of v).
const normOf = (run) => run.normOf || (run.source === 'sdpa' ? 'v' : 'v W_o');
export const normText = (run) => `α · ‖${normOf(run)}‖`;

// ask: GET what=norm of the map shown, item b, head h (or mean), as FP32,
// T x S values (pooled as the weights were: max=, block maxima). An
// answer from another version of the map is not shown: the map drawn
// next asks. A 400 is the map's (it keeps no norms): not asked again.
async function ask(key, run, b, h) {
  const ac = new AbortController();
  asking = { key, ac };
  let values = null, note = '', max = 0;
  try {
    const id = run.mapId, q = run.block ? `&max=${api.POOL_N}` : '';
    const res = await api.send(api.url(`v2/maps/${encodeURIComponent(id)}/attention?b=${b}&h=${h}&what=norm&format=f32${q}`),
      { headers: api.mapHeaders(id), signal: ac.signal });
    if (res.status === 400) {
      const why = await api.fail(res).then(() => new Error('400'), (e) => e);
      if (why.name === 'AbortError' || ac.signal.aborted) return; // unticked, another head: not the map's answer
      none.set(id, why.message);
      if (asking && asking.key === key) asking = null;
      ctx.refresh();
      return;
    }
    if (!res.ok) await api.fail(res);
    ({ values = null, note } = await readPlane(res, run.version, run.T * run.S, `${run.T} × ${run.S} cells`));
    if (values) for (const x of values) if (x > max) max = x;
  } catch (e) {
    if (e.name === 'AbortError') return;
    note = e.message;
  }
  if (!asking || asking.key !== key) return;
  asking = null;
  Object.assign(got, { key, values, max, note });
  ctx.refresh();
}

// shown: the norm-weighted plane drawn now ({ values, max }), or null (the
// weights are drawn). Asks the server when what it has is not the map's.
function shown() {
  const { state } = ctx, run = ctx.run;
  if (!state.norm) {
    if (asking) { asking.ac.abort(); asking = null; }
    // a failed answer (a 503 "retry shortly") is kept only to be shown
    if (got.note) Object.assign(got, { key: '', values: null, note: '' });
    return null;
  }
  if (!run.mapId || none.has(run.mapId)) return null;
  const k = keyOf(run, state);
  if (got.key !== k && (!asking || asking.key !== k)) {
    if (asking) asking.ac.abort();
    ask(k, run, state.b, state.h);
  }
  return got.key === k && got.values ? got : null;
}

// normView(v): the view to draw (current.js's view()): v itself, or, with
// the box ticked and the server's answer here, its cells the norm-weighted
// ones on a scale from 0 to their largest (linear or log as chosen).
export function normView(v) {
  const n = shown();
  return n ? { ...v, map: n.values, scale: makeScale(ctx.state.scale, n.max), norm: n } : v;
}

// normAt(i, j): cell (i, j)'s norm-weighted value as the readout says it,
// or null (not drawn).
export function normAt(i, j) {
  const n = ctx.state.norm && ctx.run.mapId && got.key === keyOf(ctx.run, ctx.state) ? got.values : null;
  return n ? fmt(n[i * ctx.run.S + j]) : null;
}

// drawNorm(v): the box and the legend's line about what is drawn: the
// weights or alpha * |v W_o| and its scale, or why the norms are not
// shown (no retained map, the server's reason, a failed request).
export function drawNorm(v) {
  const { $, state } = ctx, run = ctx.run;
  const box = $('norm-toggle'), key = $('norm-key');
  box.checked = state.norm;
  key.hidden = !state.norm;
  const reason = run.mapId ? none.get(run.mapId) : null;
  box.parentElement.title = reason ? `No norm-weighted map: ${reason}`
    : 'draw alpha · ‖v W_o‖ (Kobayashi et al. 2020) in place of the weights, from the server (what=norm)';
  $('heatmap').dataset.drawn = v.norm ? 'norm' : 'attention';
  key.dataset.max = v.norm ? String(v.norm.max) : '';
  if (!state.norm) return;
  const k = run.mapId ? keyOf(run, state) : '';
  let text, error = false;
  if (!run.mapId) text = 'The norm-weighted map comes from the server\'s retained map: tick “retain on the server” and Run.';
  else if (reason) { text = `No norm-weighted map (the weights are drawn): ${reason}`; error = true; }
  else if (v.norm) {
    const whose = state.h === 'mean' ? `the mean of the heads' ${normText(run)}` : `head ${state.h}'s ${normText(run)}`;
    text = `Drawn: ${whose} (norm-weighted${run.block ? ', the largest of each block' : ''}); colour scale 0 to the map's largest, ${fmt(v.norm.max, 4)}, not 1.`;
  } else if (got.key === k && got.note) { text = `Norm-weighted map: ${got.note} (the weights are drawn; untick and tick the box to ask again)`; error = true; }
  else text = 'Norm-weighted map: asking the server…';
  key.textContent = text;
  key.classList.toggle('error', error);
}
