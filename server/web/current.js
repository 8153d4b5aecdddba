// current.js - the map the page shows now (app.js's run and state): a
// head's weights (the mean over heads made once per batch item), which
// cells it masked, its colour scale, the query row the step and line
// views are about, all of it as view() for the drawing code.

import { makeScale } from './colormap.js';

let ctx = null; // app.js: { state, run }
const meanCache = new Map();
const autoCache = new Map(); // (b, h) -> row of the strongest off-diagonal weight

export function initCurrent(c) { ctx = c; }

// forget: another run or map is drawn: what was worked out for the one
// before goes.
export function forget() {
  meanCache.clear();
  autoCache.clear();
}

export function headMap(b, h) {
  const run = ctx.run;
  const ts = run.T * run.S;
  if (h !== 'mean') return run.attention.subarray((b * run.H + h) * ts, (b * run.H + h + 1) * ts);
  if (run.meanPooled) return run.meanPooled.subarray(b * ts, (b + 1) * ts);
  const key = `${b}`;
  if (!meanCache.has(key)) {
    const m = new Float32Array(ts);
    for (let k = 0; k < run.H; k++) {
      const src = run.attention.subarray((b * run.H + k) * ts, (b * run.H + k + 1) * ts);
      for (let x = 0; x < ts; x++) m[x] += src[x] / run.H;
    }
    meanCache.set(key, m);
  }
  return meanCache.get(key);
}

// maskedFn(b, h): (i, j) -> true when query i did not attend key j in
// head h of item b: causal, lengths, or the explicit mask (run.mask; for
// the mean over heads, masked in every head).
export function maskedFn(b, h) {
  const run = ctx.run;
  const tv = run.tValid[b] ?? run.T, sv = run.sValid[b] ?? run.S;
  const pm = run.poolMask;
  let base = (i, j) => (run.causal && j > i) || i >= tv || j >= sv;
  if (pm) { // cell (r, c) stands for rows r*bt.., keys c*bs..
    base = (r, c) => {
      const i0 = r * pm.bt, i1 = Math.min(pm.T, (r + 1) * pm.bt) - 1, j0 = c * pm.bs;
      return (run.causal && j0 > i1) || i0 >= tv || j0 >= sv;
    };
  }
  const m = run.mask;
  if (!m) return base;
  const ts = run.T * run.S, S = run.S;
  const plane = (k) => (m.planes === 1 ? 0 : m.planes === run.B ? b : b * run.H + k);
  const heads = h === 'mean' ? [...Array(run.H).keys()] : [h];
  const offs = [...new Set(heads.map((k) => plane(k) * ts))];
  return (i, j) => base(i, j) || offs.every((o) => !m.data[o + i * S + j]);
}

export function currentScale(map) {
  const state = ctx.state;
  let vmax = 1;
  if (state.auto) { vmax = 0; for (const x of map) if (x > vmax) vmax = x; }
  return makeScale(state.scale, vmax || 1);
}

// selQ: the query row the step and line views are about: the one chosen
// (the URL's q, a click, Enter), else the row holding the strongest
// off-diagonal weight of the focused map, since query 0 of, say, a
// previous-token head has nothing to show.
export function selQ() {
  const run = ctx.run, state = ctx.state;
  if (state.q != null) return Math.min(state.q, run.T - 1);
  if (run.live) return run.T - 1; // a growing sequence: its newest token
  const key = `${state.b}/${state.h}`;
  if (!autoCache.has(key)) {
    const map = headMap(state.b, state.h), masked = maskedFn(state.b, state.h);
    let best = -1, row = 0;
    for (let i = 0; i < run.T; i++)
      for (let j = 0; j < run.S; j++) {
        if (i === j || masked(i, j)) continue;
        if (map[i * run.S + j] > best) { best = map[i * run.S + j]; row = i; }
      }
    autoCache.set(key, row);
  }
  return autoCache.get(key);
}

export function view() {
  const run = ctx.run, state = ctx.state;
  const map = headMap(state.b, state.h);
  return { map, T: run.T, S: run.S, scale: currentScale(map), masked: maskedFn(state.b, state.h) };
}
