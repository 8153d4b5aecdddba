// panels.js - the text-and-numbers views beside the heatmap: the step view
// for one query row (as in the worked examples: q·k, ÷ √d_k or × the
// model's scale, softmax, weighted sum of value rows), the line view, and
// the table view.

import { rgbFor } from './colormap.js';
import { cutText } from './heatmap.js';

// fmt: a number for people; digits after the point for ordinary sizes.
export function fmt(x, digits = 6) {
  if (x === null || x === undefined || Number.isNaN(x)) return '—';
  if (x === 0) return '0';
  const a = Math.abs(x);
  if (a >= 1e-3 && a < 1e6) return x.toFixed(digits);
  return x.toExponential(3);
}

function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else e.setAttribute(k, v);
  }
  for (const k of kids) e.append(k);
  return e;
}

function vec(a, max = 6) {
  const parts = Array.from(a.slice(0, max), (x) => fmt(x, 4));
  return `[${parts.join(', ')}${a.length > max ? ', …' : ''}]`;
}

// scoreScale: how a score follows from q·k in this run, or null without
// d_k: the model's scale (run.scale: its metadata's, or a retained map's,
// config.json's or 1/√d_k as the server rounds it), 1/√d_k when the run
// has none (sdpa, an older server). own: a scale that is not 1/√d_k,
// shown as "× scale = X" where 1/√d_k is shown as "÷ √d_k = Y".
export function scoreScale(run) {
  const dk = run.headDim, sq = dk ? Math.sqrt(dk) : null;
  const own = run.scale > 0 && (!sq || Math.fround(run.scale) !== Math.fround(1 / sq));
  if (own) {
    const s = run.scale;
    return { own, head: '× scale', text: `× scale = ${fmt(s, 4)}`, scaled: (x) => x * s, qk: (x) => x / s };
  }
  if (!sq) return null;
  return { own, head: '÷ √d_k', text: `÷ √d_k = ${fmt(sq, 4)}`, scaled: (x) => x / sq, qk: (x) => x * sq };
}

const STEP_ROWS = 16; // keys listed in full up to this; else the largest

// renderSteps: one query row of one head, step by step.
export function renderSteps(box, run, state, qi, v) {
  box.textContent = '';
  const h = state.h, b = state.b;
  const T = run.T, S = run.S;
  const qt = run.tokens[qi];
  box.append(el('h2', {}, `Step by step: query “${qt}” (#${qi})${h === 'mean' ? ', mean over heads' : `, head ${h}`}`));
  const mean = h === 'mean';
  if (mean) box.append(el('p', { class: 'muted' }, 'The mean over heads has no single set of scores: pick a head to see every step. Mean weights:'));
  const dk = run.headDim, dv = run.vHeadDim;
  const sc = scoreScale(run);
  const hkv = run.nKvHeads || run.H;
  const kvh = mean ? 0 : Math.floor(h / (run.H / hkv));
  const ts = T * S;
  const map = v.map;
  const row = Array.from({ length: S }, (_, j) => j);
  const have = mean ? {} : { qk: run.q && run.k && dk && sc, scores: !!run.scores, v: run.v && dv };
  // Without scores the page says it lists only the weights: no weight × v
  // and no output either, even when the value rows were kept.
  if (!have.qk && !have.scores) have.v = false;
  const raw = new Float64Array(S), scaled = new Float64Array(S);
  for (const j of row) {
    if (have.qk) {
      let s = 0;
      const qo = ((b * run.H + h) * T + qi) * dk, ko = ((b * hkv + kvh) * S + j) * dk;
      for (let d = 0; d < dk; d++) s += run.q[qo + d] * run.k[ko + d];
      raw[j] = s;
      scaled[j] = sc.scaled(s);
    } else if (have.scores) {
      scaled[j] = run.scores[(b * run.H + h) * ts + qi * S + j];
      raw[j] = sc ? sc.qk(scaled[j]) : NaN;
    }
  }
  const live = row.filter((j) => !v.masked(qi, j));
  // a loop, not Math.max(...row): a row of ~125k keys or more overflows
  // the call stack as arguments
  let mx = live.length ? -Infinity : 0;
  for (const j of live) if (scaled[j] > mx) mx = scaled[j];
  const ex = new Float64Array(S);
  let sum = 0;
  for (const j of live) { ex[j] = Math.exp(scaled[j] - mx); sum += ex[j]; }

  if (have.qk || have.scores) {
    box.append(el('p', {}, (sc && sc.own
      ? `d_k = ${dk}, but the model's scale is not 1/√d_k: scores are q·k ${sc.text}. `
      : `d_k = ${dk}, so scores are divided by √d_k = ${fmt(dk ? Math.sqrt(dk) : null, 4)}. `) +
      `Softmax subtracts the row maximum (${fmt(mx, 4)}) before exponentiating; the sum of the exponentials is ${fmt(sum, 4)}.`));
  } else if (!mean) {
    box.append(el('p', { class: 'muted', 'data-why': 'no-scores' },
      `No scores for this map: ${run.missing || 'the server did not send them'}, so only the weights are listed. ` +
      (run.block ? '' // (no single cells, however it was made)
        : run.version > 0 ? 'A sequence this page starts (“as a sequence”) keeps them when its start has at most 1024 words and the store (--maps-bytes) holds them too; its steps then show q·k, ÷ √d_k and the softmax.'
        : 'Run its input again to see q·k, ÷ √d_k, the softmax and the output.')));
  }
  if (!mean && (have.qk || have.scores) && !have.v && run.source === 'map') {
    box.append(el('p', { class: 'muted small', 'data-why': 'no-values' },
      `No value rows for this map${run.missing ? `: ${run.missing}` : ''}, so the output row is not shown.`));
  }
  let shown = row;
  if (S > STEP_ROWS) {
    shown = [...row].sort((x, y) => map[qi * S + y] - map[qi * S + x]).slice(0, STEP_ROWS).sort((x, y) => x - y);
    box.append(el('p', { class: 'muted small' }, `Showing the ${STEP_ROWS} keys with the largest weights of ${S}.`));
  }
  const thead = el('tr', {}, el('th', { scope: 'col' }, 'key'));
  const cols = [];
  if (have.qk || have.scores) cols.push('q·k', sc ? sc.head : '÷ √d_k', 'exp(s − max)');
  cols.push('weight');
  if (have.v) cols.push('weight × v');
  for (const c of cols) thead.append(el('th', c === 'weight × v' ? { scope: 'col', class: 'vec' } : { scope: 'col' }, c));
  const tb = el('tbody');
  const out = have.v ? new Float64Array(dv) : null;
  for (const j of row) {
    const w = map[qi * S + j];
    if (out && !v.masked(qi, j)) {
      const vo = ((b * hkv + kvh) * S + j) * dv;
      for (let d = 0; d < dv; d++) out[d] += w * run.v[vo + d];
    }
  }
  for (const j of shown) {
    const w = map[qi * S + j];
    const m = v.masked(qi, j);
    const tr = el('tr', { class: m ? 'masked' : '' }, el('th', { scope: 'row' }, `${run.keyTokens[j]} (#${j})`));
    if (have.qk || have.scores) {
      tr.append(el('td', {}, fmt(raw[j], 4)), el('td', {}, fmt(scaled[j], 4)), el('td', {}, m ? 'masked' : fmt(ex[j], 4)));
    }
    tr.append(el('td', {}, m ? 'masked' : fmt(w, 6)));
    if (have.v) {
      const vo = ((b * hkv + kvh) * S + j) * dv;
      const wv = Array.from(run.v.subarray(vo, vo + dv), (x) => (m ? 0 : w * x));
      tr.append(el('td', { class: 'vec' }, m ? '—' : vec(wv, 4)));
    }
    tb.append(tr);
  }
  box.append(el('table', { class: 'steps-table' }, el('thead', {}, thead), tb));
  if (out) {
    box.append(el('p', {}, `Output of head ${h} for “${qt}”: o = Σ weight × v = `, el('code', { class: 'vec' }, vec(out, 8)),
      ` (d_v = ${dv}).`));
    if (run.source === 'sdpa' && run.y) {
      const yo = ((b * run.H + h) * T + qi) * dv;
      box.append(el('p', { class: 'muted small' }, 'Server output row: ', el('code', {}, vec(run.y.subarray(yo, yo + dv), 8))));
    }
  }
}

const LINE_MAX = 64;
const SVGNS = 'http://www.w3.org/2000/svg';

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// lineLabel: an SVG text of token s, cut (…) to px CSS pixels in the
// lines' font (bold for the query's own): a long token ran out of the
// panel, showing its wrong end. The whole token is its tooltip.
const probe = document.createElement('canvas').getContext('2d');
function lineLabel(attrs, s, px, font) {
  probe.font = font;
  const t = cutText(probe, String(s), px);
  const e = svg('text', attrs, t);
  if (t !== String(s)) e.append(svg('title', {}, String(s)));
  return e;
}

// renderLines: BertViz-style lines from query qi to every key; stroke
// opacity and width follow the weight's position on the colour scale.
export function renderLines(box, run, v, qi) {
  box.textContent = '';
  if (run.T > LINE_MAX || run.S > LINE_MAX) {
    box.setAttribute('viewBox', '0 0 300 30');
    box.setAttribute('height', '30');
    box.append(svg('text', { x: 0, y: 18, class: 'muted' }, `Shown for up to ${LINE_MAX} tokens.`));
    return;
  }
  const rh = 18, hgt = Math.max(run.T, run.S) * rh + 8, W = 300, xl = 118, xr = 182;
  box.setAttribute('viewBox', `0 0 ${W} ${hgt}`);
  box.setAttribute('height', String(hgt));
  for (let j = 0; j < run.S; j++) {
    if (v.masked(qi, j)) continue;
    const w = v.map[qi * run.S + j], p = v.scale.pos(w);
    box.append(svg('line', {
      x1: xl + 4, y1: qi * rh + 13, x2: xr - 4, y2: j * rh + 13,
      'stroke-opacity': (0.05 + 0.95 * p).toFixed(3), 'stroke-width': (0.5 + 3.5 * p).toFixed(2), class: 'attn',
    }));
  }
  const font = `12px ${getComputedStyle(box).fontFamily}`; // #lines text
  for (let i = 0; i < run.T; i++)
    box.append(lineLabel({ x: xl, y: i * rh + 17, 'text-anchor': 'end', class: i === qi ? 'sel' : '' }, run.tokens[i],
      xl - 2, i === qi ? `bold ${font}` : font));
  for (let j = 0; j < run.S; j++)
    box.append(lineLabel({ x: xr, y: j * rh + 17, class: v.masked(qi, j) ? 'muted' : '' }, run.keyTokens[j],
      W - xr - 2, font));
}

// renderTable: every weight as a number, for small maps (colour is never
// the only carrier of a value).
export function renderTable(box, run, v) {
  box.textContent = '';
  const head = el('tr', {}, el('th', { scope: 'col' }, 'query \\ key'));
  for (let j = 0; j < run.S; j++) head.append(el('th', { scope: 'col' }, run.keyTokens[j]));
  const tb = el('tbody');
  for (let i = 0; i < run.T; i++) {
    const tr = el('tr', {}, el('th', { scope: 'row' }, run.tokens[i]));
    for (let j = 0; j < run.S; j++) {
      const w = v.map[i * run.S + j];
      if (v.masked(i, j)) { tr.append(el('td', { class: 'masked' }, '—')); continue; }
      const rgb = rgbFor(v.scale, w);
      const light = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2] > 140;
      const td = el('td', {}, fmt(w, 6)); // as the readout and step view
      td.style.background = `rgb(${rgb})`; // CSSOM, allowed by the page's CSP
      td.style.color = light ? '#111' : '#f4f4f4';
      tr.append(td);
    }
    tb.append(tr);
  }
  box.append(el('table', { class: 'weights' }, el('caption', {}, 'Attention weights (rows: queries, columns: keys)'),
    el('thead', {}, head), tb));
}
