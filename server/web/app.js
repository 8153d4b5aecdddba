// app.js - the visualiser: input, head grid, focused heatmap, readout,
// line view, step view; the page state kept in the URL hash: link.js.
// Exports: export.js. The map shown (a head's weights, masks, scale, the
// step view's row): current.js.

import * as api from './api.js';
import { tokenize } from './embed.js';
import { drawHeatmap, drawLegend, drawThumb, hit, paintThumb, thumbImage } from './heatmap.js';
import { renderSteps, renderTable, renderLines, fmt, scoreScale } from './panels.js';
import * as live from './live.js';
import { initExport } from './export.js';
import { initCurrent, forget as forgetCurrent, headMap, maskedFn, currentScale, selQ, view } from './current.js';
import { readHash, writeHash } from './link.js';
import { initEntropy, drawEntropy, entropyAt } from './entropy.js';
import { initNorm, drawNorm, normAt, normText, normView } from './norm.js';

const $ = (id) => document.getElementById(id);

const SEED_SDPA = {
  q: [[2, 0, 2, 0], [0, 4, 0, 2]],
  k: [[1, 0, 1, 0], [0, 1, 0, 0]],
  v: [[1, 2], [3, 0]],
  tokens: ['t0', 't1'],
};
const ZOOM_AT = 96;   // maps larger than this a side get a zoom window
const TABLE_MAX = 24; // the table view is offered up to this size

const state = {
  tab: 'words', model: 'demo', text: '', json: '', causal: false, retain: false,
  map: null, b: 0, h: 0, q: null, scale: 'linear', qscale: '', auto: false, table: false,
  win: null, // { r0, c0, n } when zoomed
  follow: false, entropy: false, norm: false, // redraw as it grows (live.js); row entropy (entropy.js); α·‖v W_o‖ (norm.js)
};
let run = null;      // the current run (api.js)
let meta = null;     // metadata of the selected model
let geom = null;     // heatmap geometry for hit tests
let cursor = null;   // { i, j, mouse } keyboard/hover cell
let hoverRow = null; // query row under the pointer
initCurrent({ state, get run() { return run; } });

// askKey: on a 401, show the API-key form (and say why). retry
// (optional) is what the key then does: the action the user asked for
// that was refused (a Run, a map, a step), with what they typed; without
// one, or when the page could not even list the models, start() draws
// what the link says.
let afterKey = null;
let keyFrom = null;  // what had the focus when the form took it
let listed = false; // the models were listed (the key, if any, was good)
function askKey(e, retry) {
  if (e && e.status === 401) {
    if (retry) afterKey = retry;
    if ($('auth').hidden && document.activeElement !== document.body) keyFrom = document.activeElement;
    $('auth').hidden = false;
    $('api-key').focus();
  }
}

function setStatus(msg, isError = false) {
  const s = $('status');
  s.textContent = msg;
  s.classList.toggle('error', isError);
  s.setAttribute('role', isError ? 'alert' : 'status');
}

// ---- rendering ---------------------------------------------------------

// renderHeads: the head grid. Its thumbnails go over every cell of every
// head (millions on a long map), so they are drawn again only when what
// they show changes (another run or map, batch item, scale); moving the
// cursor or picking a head only marks the pressed one.
let runSeq = 0;      // bumps with every run drawn (finishRun)
let headsDrawn = ''; // what the head grid's thumbnails show now
const overview = { key: '', t: null }; // the overview's image and what it shows
function renderHeads() {
  const box = $('heads');
  const key = `${runSeq}/${state.b}/${state.scale}/${state.auto}`;
  if (key === headsDrawn) {
    for (const btn of box.children)
      btn.setAttribute('aria-pressed', String(String(state.h) === btn.dataset.head));
    return;
  }
  headsDrawn = key;
  box.textContent = '';
  const heads = [...Array(run.H).keys()];
  if (run.H > 1) heads.push('mean');
  for (const h of heads) {
    const btn = document.createElement('button');
    btn.type = 'button';
    btn.className = 'head';
    btn.dataset.head = String(h);
    btn.setAttribute('aria-pressed', String(state.h === h));
    btn.setAttribute('aria-label', h === 'mean' ? 'mean over heads' : `head ${h}`);
    const c = document.createElement('canvas');
    const map = headMap(state.b, h);
    drawThumb(c, { map, T: run.T, S: run.S, scale: currentScale(map), masked: maskedFn(state.b, h) }, 88);
    const cap = document.createElement('span');
    cap.textContent = h === 'mean' ? 'mean' : `head ${h}`;
    btn.append(c, cap);
    btn.addEventListener('click', () => { state.h = h; update(); });
    box.append(btn);
  }
}

function ensureWindow() {
  const big = Math.max(run.T, run.S) > ZOOM_AT;
  if (!big) { state.win = null; return { r0: 0, c0: 0, rows: run.T, cols: run.S }; }
  if (!state.win) { // start around the selected query (and its diagonal)
    const n = 64;
    const q = selQ();
    state.win = { r0: q - n / 2, c0: Math.min(q, run.S - 1) - n / 2, n };
  }
  const w = state.win;
  w.n = Math.max(8, Math.min(w.n, 256));
  w.r0 = Math.max(0, Math.min(w.r0, run.T - Math.min(w.n, run.T)));
  w.c0 = Math.max(0, Math.min(w.c0, run.S - Math.min(w.n, run.S)));
  return { r0: w.r0, c0: w.c0, rows: Math.min(w.n, run.T), cols: Math.min(w.n, run.S) };
}

function renderFocus() {
  const v = normView(view()); // the weights, or the norm-weighted map (norm.js)
  const win = ensureWindow();
  const title = state.h === 'mean' ? 'Mean over heads' : `Head ${state.h}`;
  // (a scale of its own, not 1/√d_k: as the server reports it, a
  // retained map's "scale", or sdpa's as sent, the float it multiplies by)
  const sc = scoreScale(run);
  $('focus-title').textContent = `${title}${run.B > 1 ? `, batch item ${state.b}` : ''} · ${run.model}` +
    (run.mapId ? ` · map ${run.mapId}` : '') + (sc && sc.own ? ` · scale ${Number(run.scale.toPrecision(7))}` : '') // (a float's digits);
  const vw = $('view').clientWidth; // beside the side panel when there is room
  const width = Math.min(760, vw > 900 ? vw - 360 : vw);
  geom = drawHeatmap($('heatmap'), {
    ...v, ...win, rowLabels: run.tokens, colLabels: run.keyTokens, maxWidth: width,
    cursor, row: hoverRow ?? selQ(), newest: run.live ? run.T - 1 : null,
  });
  drawEntropy(geom);
  drawNorm(v);
  $('heatmap').dataset.newest = run.live ? String(run.T - 1) : '';
  // Legend.
  drawLegend($('legend-bar'), 240);
  const ticks = $('legend-ticks');
  ticks.textContent = '';
  for (const [val, pos] of v.scale.ticks()) {
    const t = document.createElement('span');
    t.style.left = `${pos * 240}px`;
    t.textContent = v.scale.kind === 'log' ? val.toExponential(0) : fmt(val, 2);
    ticks.append(t);
  }
  // Overview for long sequences.
  const ow = $('overview-wrap');
  ow.hidden = !state.win;
  if (state.win) {
    // Its image goes over every cell: made again only when what it shows
    // changes, not for every cursor move or hover.
    const key = `${runSeq}/${state.b}/${state.h}/${state.scale}/${state.auto}/${v.norm ? v.norm.key : ''}`;
    if (overview.key !== key) Object.assign(overview, { key, t: thumbImage(v, 220) });
    paintThumb($('overview'), overview.t, win);
    $('zoom-info').textContent = `rows ${win.r0}–${win.r0 + win.rows - 1}, keys ${win.c0}–${win.c0 + win.cols - 1} of ${run.T} × ${run.S}`;
    $('overview-note').textContent = run.block ? `(server max-pooled ${run.block[0]}×${run.block[1]} blocks of ${run.sourceShape.join(' × ')})` : '(max-pooled)';
  }
  $('heatmap').setAttribute('aria-label',
    `${title}: ${run.T} queries by ${run.S} keys. Arrow keys move the cursor (Page Up/Down, Home/End farther); Enter selects the query row; [ and ] change the head.`);
}

// scoreAt: the scaled score (scoreScale) of cell (i, j) of head h, item b:
// the server's (a retained map's), else from q and k (a run's: it is not
// asked for the scores, as large as the weights), else null.
function scoreAt(b, h, i, j) {
  if (run.scores) return run.scores[((b * run.H + h) * run.T + i) * run.S + j];
  const dk = run.headDim, hkv = run.nKvHeads || run.H;
  if (!run.q || !run.k || !dk) return null;
  const qo = ((b * run.H + h) * run.T + i) * dk, ko = ((b * hkv + Math.floor(h / (run.H / hkv))) * run.S + j) * dk;
  let s = 0;
  for (let d = 0; d < dk; d++) s += run.q[qo + d] * run.k[ko + d];
  return scoreScale(run).scaled(s);
}

function renderReadout() {
  const r = $('readout');
  const c = cursor;
  if (!c) {
    r.innerHTML = '<p class="muted">Hover or use the arrow keys on the map to read a cell.</p>';
    return;
  }
  const v = view();
  const w = v.map[c.i * run.S + c.j];
  const masked = v.masked(c.i, c.j);
  const score = state.h === 'mean' ? null : scoreAt(state.b, state.h, c.i, c.j);
  const sc = scoreScale(run);
  const rows = [
    ['query', `${run.tokens[c.i]} (#${c.i})`],
    ['key', `${run.keyTokens[c.j]} (#${c.j})`],
    // a max-pooled cell is its block's largest weight, not one weight
    [run.block ? `weight, largest of its ${run.block[0]} × ${run.block[1]} block` : 'weight',
      masked ? `masked (0)` : fmt(w), 'weight'],
  ];
  if (entropyAt(c.i)) rows.push(['row entropy', entropyAt(c.i), 'entropy']);
  if (normAt(c.i, c.j)) rows.push([`norm-weighted, ${normText(run)}`, normAt(c.i, c.j), 'norm']);
  if (score != null) {
    rows.push(['scaled score', fmt(score)]);
    if (sc) rows.push(['q·k', `${fmt(sc.qk(score))}  (${sc.text})`]);
  }
  r.innerHTML = '';
  const dl = document.createElement('dl');
  for (const [k, val, field] of rows) {
    const dt = document.createElement('dt'); dt.textContent = k;
    const dd = document.createElement('dd'); dd.textContent = val;
    dd.dataset.field = field || k.replace(/[^a-z]+/g, '-');
    dl.append(dt, dd);
  }
  r.append(dl);
}

function renderSide() {
  // No row chosen yet: the steps follow the row of the hovered cell.
  const qi = hoverRow ?? (state.q == null && cursor && cursor.mouse ? cursor.i : selQ());
  const v = view();
  renderLines($('lines'), run, v, qi);
  renderSteps($('steps'), run, state, qi, v);
  const small = run.T <= TABLE_MAX && run.S <= TABLE_MAX;
  $('table-wrap').hidden = !small;
  $('table-view').hidden = !(small && state.table);
  if (small && state.table) renderTable($('table-view'), run, v);
}

function update() {
  if (!run) return;
  state.b = Math.min(state.b, run.B - 1);
  // labels sent one list per item: item b's
  if (run.itemTokens) run.tokens = run.itemTokens[state.b];
  if (run.itemKeyTokens && run.itemKeyTokens[state.b]) run.keyTokens = run.itemKeyTokens[state.b];
  // (one head has no mean: a link's h=mean shows head 0)
  if (state.h !== 'mean' || run.H === 1) state.h = state.h === 'mean' ? 0 : Math.min(state.h, run.H - 1);
  if (state.q != null) state.q = Math.min(state.q, run.T - 1);
  $('view').hidden = false;
  $('batch-wrap').hidden = run.B <= 1;
  $('follow-wrap').hidden = !state.map;
  $('follow').checked = state.follow;
  $('scale').value = state.scale;
  $('auto').checked = state.auto;
  $('table-toggle').checked = state.table;
  renderHeads();
  renderFocus();
  renderReadout();
  renderSide();
  writeHash(state, run && run.asked);
  document.body.dataset.state = 'ready';
}

// ---- running -----------------------------------------------------------

// loadMeta: fetch and show the model's metadata; applyDefault sets the
// causal box to the model's default (not when the URL says otherwise).
async function loadMeta(name, applyDefault) {
  const m = await api.modelMeta(name);
  if (name !== state.model) return m; // another model was chosen meanwhile
  meta = m;
  const p = meta.parameters || {};
  infoMap = null;
  $('sdpa-scale-wrap').hidden = name !== 'sdpa';
  $('model-info').textContent = name === 'sdpa'
    ? 'sdpa: raw scaled dot-product attention on Q, K, V you give.'
    : `d_model ${p.d_model}, ${p.n_heads} heads (${p.n_kv_heads} kv), d_k ${p.head_dim}, d_v ${p.v_head_dim}` +
      `${p.causal ? ', causal' : ''}${p.rope ? ', RoPE' : ''}`;
  if (applyDefault && p.causal !== undefined) $('causal').checked = !!p.causal;
  return meta;
}

// sdpaScale: the scale field of sdpa (parameters.scale, what q is
// multiplied by before Q K^T): undefined when empty (the server's
// 1/√d_k); a number as typed, which the server checks (a positive number
// that a float holds, else its 400 says so).
function sdpaScale(text) {
  if (!text) return undefined;
  const x = Number(text);
  if (!Number.isFinite(x)) throw new Error(`scale: "${text}" is not a number (empty: 1/√d_k)`);
  return x;
}

function parseJSONInput() {
  let spec;
  try { spec = JSON.parse(state.json); } catch (e) { throw new Error(`JSON input: ${e.message}`); }
  if (typeof spec !== 'object' || spec === null) throw new Error('JSON input: expected an object');
  return spec;
}

// viewGen: bumps with every Run and every map opened; an answer that
// comes back after a newer one was asked for (a slow Run overtaken by the
// next, a map clicked and then a Run) is dropped, its error too, so the
// page never draws other than what its input and its link say. Its
// requests are aborted (viewAbort) so that it stops downloading (up to
// 64 MiB) and the server, seeing its client go, need not finish it.
let viewGen = 0;
let viewAbort = null;
function nextView() {
  if (viewAbort) viewAbort.abort();
  viewAbort = new AbortController();
  return ++viewGen;
}

// doRun: Run the input. Returns its generation once drawn (viewGen while
// it is the one shown), null when it failed.
async function doRun() {
  const g = nextView(), signal = viewAbort.signal;
  document.body.dataset.state = 'loading';
  setStatus('running…');
  state.causal = $('causal').checked;
  state.retain = $('retain').checked;
  state.text = $('text').value;
  state.json = $('json').value;
  state.qscale = $('sdpa-scale').value.trim();
  try {
    // The model chosen a moment ago may still be loading its metadata (or
    // failed to): not the previous model's, nor none.
    if (state.model !== 'sdpa' && meta?.name !== state.model) await loadMeta(state.model, false);
    const opts = { causal: state.causal, retain: state.retain, signal };
    const asked = { model: state.model, tab: state.model === 'sdpa' ? 'json' : state.tab, // for the link
      text: state.text, json: state.json, causal: state.causal, retain: state.retain,
      qscale: state.model === 'sdpa' ? state.qscale : '' };
    let r;
    if (state.model === 'sdpa') {
      if (state.tab !== 'json') selectTab('json');
      r = await api.inferSdpa(parseJSONInput(), { ...opts, scale: sdpaScale(state.qscale) });
    } else if (state.tab === 'json') {
      const spec = parseJSONInput();
      if (!spec.x) throw new Error('JSON input: "x" missing');
      const shape = api.shapeOf(spec.x, 'x');
      const full = shape.length === 2 ? [1, ...shape] : shape;
      const toks = api.labels(spec.tokens, full[1], 'tokens', ['query', 'queries'], (i) => `t${i}`);
      let ctx = null;
      if (spec.context) { // cross-attention: keys and values from context
        const cs = api.shapeOf(spec.context, 'context');
        const cfull = cs.length === 2 ? [1, ...cs] : cs;
        ctx = { shape: cfull, data: Float32Array.from(spec.context.flat(Infinity)),
          tokens: api.labels(spec.key_tokens, cfull[1], 'key_tokens', ['key', 'keys'], (j) => `c${j}`) };
      }
      r = await api.inferX(meta, full, Float32Array.from(spec.x.flat(Infinity)), toks, opts, ctx, spec.mask);
    } else {
      const words = tokenize(state.text);
      if (!words.length) throw new Error('Tokens: type at least one word');
      if ($('seq-mode').checked) { // a retained sequence, stepped below
        await live.startSequence(meta, words, state.causal);
        return g;
      }
      r = await api.inferWords(meta, words, opts);
    }
    if (g !== viewGen) return g;
    if (r.mapOnly) { // too large to carry whole: read from the store, pooled
      if (!r.mapId) throw new Error('the server kept no map for this run');
      live.forget();
      live.setFollow(false);
      return openMap(r.mapId);
    }
    run = r;
    run.asked = asked;
    live.forget();
    state.map = null;
    live.setFollow(false); // a wait still pending draws nothing now
    finishRun(run.mapId ? `retained as map ${run.mapId}` : '');
  } catch (e) {
    if (e.status === 404) refreshModels();
    if (g === viewGen) {
      setStatus(e.message, true);
      askKey(e, () => doRun());
      document.body.dataset.state = 'error';
    }
    return null;
  }
  return g;
}

// finishRun: draw the new run. keep (optional): a keyboard cursor that
// stays on its cell (a map that grew still has it).
function finishRun(note, keep = null) {
  runSeq++;
  forgetCurrent();
  state.win = null;
  cursor = keep && keep.i < run.T && keep.j < run.S ? keep : null;
  hoverRow = null;
  const bs = $('batch');
  bs.textContent = '';
  for (let b = 0; b < run.B; b++) bs.append(new Option(String(b), String(b)));
  bs.value = String(Math.min(state.b, run.B - 1));
  setStatus(`${run.model}: B=${run.B}, H=${run.H}, T=${run.T}, S=${run.S}${note ? ` · ${note}` : ''}`);
  update();
}

// openMap: show retained map id. Returns as doRun does.
async function openMap(id) {
  const g = nextView(), signal = viewAbort.signal;
  document.body.dataset.state = 'loading';
  setStatus(`opening map ${id}…`);
  try {
    const r = await api.openMap(id, (p) => { if (g === viewGen) setStatus(`opening map ${id}: ${p}…`); }, signal);
    if (g !== viewGen) return g;
    run = r;
    state.map = id;
    run.live = state.follow;
    showMapModel(id);
    finishRun(run.created ? `retained ${when(run.created)}` : '');
    // Following goes on with this map: the wait on the one shown before
    // ends, its answer draws nothing.
    if (state.follow) live.setFollow(true);
  } catch (e) {
    if (g === viewGen) {
      setStatus(e.message, true);
      askKey(e, () => openMap(id));
      document.body.dataset.state = 'error';
    }
    return null;
  }
  return g;
}

// showGrown: redraw map id after it grew (a sequence's step, followed or
// driven here): the newest row becomes the step view's query unless one
// was picked (a step driven here drops the pick first), the zoom window
// keeps its size and moves to the newest row unless a row is picked or a
// keyboard cursor is on the map (it stays, as does the cursor), head and
// batch item stay. tokens (optional) label the rows of a map that has
// no labels of its own (one that has them is labelled as the server
// holds it: another client may have stepped or rewound it); wanted
// (optional) says, once the map is read, whether it is still to be drawn
// (the page may show another one by then; a Run or a map opened meanwhile
// always wins). note may be a function of the map as read (its rows: a
// step may land between a wait's answer and the reading). Throws the
// daemon's error.
async function showGrown(id, note, tokens, wanted) {
  const g = viewGen;
  const next = await api.openMap(id);
  if (g !== viewGen || (wanted && !wanted())) return;
  if (tokens && tokens.length === next.T && !next.block && !next.labelled) next.tokens = next.keyTokens = tokens;
  next.live = true;
  const win = state.win && { ...state.win };
  const keep = cursor && !cursor.mouse ? cursor : null;
  const studied = state.q != null || keep;
  run = next;
  state.map = id;
  if (state.model !== run.model) showMapModel(id);
  else if (infoMap === id) $('model-info').textContent = mapInfo(id); // its shape as it grew
  // and in the Retained list, which named the shape it had when listed
  for (const b of $('maps').querySelectorAll('button[data-map]'))
    if (b.dataset.map === id) b.textContent = mapLabel({ id, model: run.model, shape: run.shape, created: run.created });
  finishRun(typeof note === 'function' ? note(next) : note, keep);
  if (win && state.win) { // keep the zoom, at the newest row and key
    state.win = studied ? win : { n: win.n, r0: run.T - win.n, c0: run.S - win.n };
    update();
  }
}

// showMapModel: the input panel names the map's own model and shape, not
// the one selected before the map was opened (infoMap: the map it names,
// whose shape showGrown keeps as the map grows or is stepped back; null
// when it shows a model's metadata).
let infoMap = null;
const mapInfo = (id) => `Map ${id}: model ${run.model}, shape [${run.shape.join(', ')}]` +
  `${run.block ? `, shown max-pooled in ${run.block[0]}×${run.block[1]} blocks` : ''}.`;
function showMapModel(id) {
  state.model = run.model;
  const sel = $('model');
  if (![...sel.options].some((o) => o.value === run.model)) sel.append(new Option(run.model, run.model));
  sel.value = run.model;
  infoMap = id;
  $('model-info').textContent = mapInfo(id);
  api.modelMeta(run.model).then((m) => { if (state.model === run.model) meta = m; }, () => {});
}

// when: a server time (ISO 8601) for people: "12 s ago (30 Nov 2026,
// 16:35:02)" in the browser's locale and time zone.
function when(iso) {
  const t = new Date(iso);
  if (Number.isNaN(t.getTime())) return String(iso);
  const s = Math.max(0, Math.round((Date.now() - t.getTime()) / 1000));
  const ago = s < 60 ? `${s} s` : s < 3600 ? `${Math.round(s / 60)} min`
    : s < 86400 ? `${Math.round(s / 3600)} h` : `${Math.round(s / 86400)} d`;
  return `${ago} ago (${t.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'medium' })})`;
}

// mapLabel: a retained map as the Retained list names it.
const mapLabel = (m) => `${m.id} · ${m.model} · [${m.shape.join(', ')}] · ${when(m.created)}`;

async function refreshMaps() {
  const ul = $('maps');
  ul.textContent = '';
  try {
    const { maps } = await api.listMaps();
    if (!maps.length) ul.innerHTML = '<li class="muted">No retained maps yet: tick “retain on the server” and run.</li>';
    for (const m of maps) {
      const li = document.createElement('li');
      const b = document.createElement('button');
      b.type = 'button';
      b.dataset.map = m.id;
      b.textContent = mapLabel(m);
      b.addEventListener('click', () => openMap(m.id));
      li.append(b);
      ul.append(li);
    }
  } catch (e) { setStatus(e.message, true); askKey(e, refreshMaps); }
}

const TABS = ['words', 'json', 'maps'];

// selectTab: show one input pane; the selected tab is the tablist's one
// tab stop (roving tabindex, WAI-ARIA tabs pattern).
function selectTab(tab) {
  state.tab = tab;
  for (const t of TABS) {
    $(`tab-${t}`).setAttribute('aria-selected', String(t === tab));
    $(`tab-${t}`).tabIndex = t === tab ? 0 : -1;
    $(`pane-${t}`).hidden = t !== tab;
  }
  $('run-opts').hidden = tab === 'maps';
  if (tab === 'maps') refreshMaps();
}

// ---- interaction -------------------------------------------------------

function pointer(e) {
  const r = $('heatmap').getBoundingClientRect();
  return hit(geom, e.clientX - r.left, e.clientY - r.top);
}

function onMove(e) {
  if (!run) return;
  const h = pointer(e);
  const prev = JSON.stringify([cursor, hoverRow]);
  if (h && h.kind === 'cell') { cursor = { i: h.i, j: h.j, mouse: true }; hoverRow = null; }
  else if (h && h.kind === 'row') { hoverRow = h.i; cursor = null; }
  else { hoverRow = null; }
  if (prev !== JSON.stringify([cursor, hoverRow])) { renderFocus(); renderReadout(); renderSide(); }
}

function onKey(e) {
  if (!run) return;
  // Arrows by one cell; PageUp/PageDown by a window's rows (8 unzoomed);
  // Home/End to the row's first/last key, with Ctrl to the first/last row.
  const pg = state.win ? state.win.n : 8, far = 1 << 30, ctl = e.ctrlKey || e.metaKey;
  const d = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1],
    PageUp: [-pg, 0], PageDown: [pg, 0], Home: [ctl ? -far : 0, -far], End: [ctl ? far : 0, far] }[e.key];
  if (d) {
    e.preventDefault();
    const c = cursor || { i: selQ(), j: 0 };
    cursor = { i: Math.max(0, Math.min(run.T - 1, c.i + d[0])), j: Math.max(0, Math.min(run.S - 1, c.j + d[1])) };
    if (state.win) { // keep the cursor inside the zoom window
      const w = state.win, n = w.n;
      if (cursor.i < w.r0 || cursor.i >= w.r0 + n) w.r0 = cursor.i - (n >> 1);
      if (cursor.j < w.c0 || cursor.j >= w.c0 + n) w.c0 = cursor.j - (n >> 1);
    }
  } else if (e.key === 'Enter' || e.key === ' ') {
    e.preventDefault(); // (Space scrolled the page)
    if (cursor) state.q = cursor.i;
    else cursor = { i: selQ(), j: 0 }; // shown first, on the step view's row
  } else if (e.key === '[' || e.key === ']') { // previous / next head (then the mean)
    const heads = [...Array(run.H).keys()];
    if (run.H > 1) heads.push('mean');
    const k = heads.indexOf(state.h) + (e.key === ']' ? 1 : -1);
    state.h = heads[(k + heads.length) % heads.length];
  } else return;
  update();
}

function wire() {
  $('tab-words').addEventListener('click', () => selectTab('words'));
  $('tab-json').addEventListener('click', () => selectTab('json'));
  $('tab-maps').addEventListener('click', () => selectTab('maps'));
  // Tabs by keyboard: Left/Right (wrapping), Home/End move to a tab and
  // select it (automatic activation).
  document.querySelector('[role=tablist]').addEventListener('keydown', (e) => {
    const k = TABS.indexOf(state.tab);
    const next = { ArrowLeft: k - 1, ArrowRight: k + 1, Home: 0, End: TABS.length - 1 }[e.key];
    if (next === undefined) return;
    e.preventDefault();
    const t = TABS[(next + TABS.length) % TABS.length];
    selectTab(t);
    $(`tab-${t}`).focus();
  });
  $('refresh-maps').addEventListener('click', refreshMaps);
  $('run').addEventListener('click', doRun);
  $('text').addEventListener('keydown', (e) => { if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); doRun(); } });
  $('model').addEventListener('change', async () => {
    state.model = $('model').value;
    try {
      await loadMeta(state.model, true);
      if (state.model === 'sdpa') { $('json').value = JSON.stringify(SEED_SDPA); selectTab('json'); }
      else if (state.tab === 'json') selectTab('words');
    } catch (e) { setStatus(e.message, true); }
  });
  $('model').addEventListener('focus', refreshModels);
  window.addEventListener('focus', refreshModels);
  document.addEventListener('visibilitychange', () => { if (!document.hidden) refreshModels(); });
  $('batch').addEventListener('change', () => { state.b = Number($('batch').value); update(); });
  $('scale').addEventListener('change', () => { state.scale = $('scale').value; update(); });
  $('auto').addEventListener('change', () => { state.auto = $('auto').checked; update(); });
  $('table-toggle').addEventListener('change', () => { state.table = $('table-toggle').checked; update(); });
  $('follow').addEventListener('change', () => { live.setFollow($('follow').checked); update(); });
  const hm = $('heatmap');
  hm.addEventListener('mousemove', onMove);
  hm.addEventListener('mouseleave', () => {
    hoverRow = null;
    if (cursor && cursor.mouse) cursor = null; // a keyboard cursor stays
    renderFocus(); renderReadout(); renderSide();
  });
  hm.addEventListener('click', (e) => {
    const h = pointer(e);
    if (h && (h.kind === 'cell' || h.kind === 'row')) { state.q = h.i; update(); }
  });
  hm.addEventListener('keydown', onKey);
  $('overview').addEventListener('click', (e) => {
    const r = $('overview').getBoundingClientRect();
    const fx = (e.clientX - r.left) / r.width, fy = (e.clientY - r.top) / r.height;
    const n = state.win.n;
    state.win.r0 = Math.round(fy * run.T - n / 2);
    state.win.c0 = Math.round(fx * run.S - n / 2);
    update();
  });
  // The overview by keyboard: arrows move the zoom window by a quarter of
  // its size, Page Up/Down by its size, Home/End to the map's first and
  // last cell.
  $('overview').addEventListener('keydown', (e) => {
    const w = state.win, n = w && w.n, q = n >> 2, far = 1 << 30;
    const d = { ArrowUp: [-q, 0], ArrowDown: [q, 0], ArrowLeft: [0, -q], ArrowRight: [0, q],
      PageUp: [-n, 0], PageDown: [n, 0], Home: [-far, -far], End: [far, far] }[e.key];
    if (!w || !d) return;
    e.preventDefault();
    w.r0 = Math.max(0, Math.min(w.r0 + d[0], far));
    w.c0 = Math.max(0, Math.min(w.c0 + d[1], far));
    update();
  });
  $('zoom-in').addEventListener('click', () => { state.win.n >>= 1; update(); });
  $('zoom-out').addEventListener('click', () => { state.win.n <<= 1; update(); });
  $('copy-link').addEventListener('click', async () => {
    if (!writeHash(state, run && run.asked)) { // the drawn run's input, not the form's now
      setStatus('This input is too large for a link: tick “retain on the server” and run, then copy the link to the map.', true);
      return;
    }
    try { await navigator.clipboard.writeText(location.href); setStatus('link copied'); }
    catch (_) { setStatus(`link: ${location.href}`); }
  });
  window.addEventListener('resize', () => { if (run) renderFocus(); });
  watchDpr();
  // A link pasted into this tab changes only the fragment: draw what it
  // says (writeHash's replaceState fires no hashchange).
  window.addEventListener('hashchange', () => { start(); });
}

// watchDpr: the canvases are sized in device pixels (heatmap.js), and a
// new device pixel ratio (browser zoom, the window moved to another
// screen) need not resize the window: they are drawn again at the new
// ratio, the head grid's thumbnails too, else the map goes blurry.
function watchDpr() {
  matchMedia(`(resolution: ${window.devicePixelRatio || 1}dppx)`).addEventListener('change', () => {
    headsDrawn = '';
    if (run) update();
    watchDpr();
  }, { once: true });
}

// Hooks for the browser tests: where a cell is drawn, in CSS pixels of
// the page and in device pixels of the canvas.
window.attnd = {
  state, get run() { return run; }, get sequence() { return live.current(); },
  cellCenter(i, j) {
    const g = geom, r = $('heatmap').getBoundingClientRect();
    const x = g.x0 + (j - g.c0 + 0.5) * g.cell, y = g.y0 + (i - g.r0 + 0.5) * g.cell;
    const dpr = window.devicePixelRatio || 1;
    return { pageX: r.left + x, pageY: r.top + y, px: Math.floor(x * dpr), py: Math.floor(y * dpr), cell: g.cell };
  },
};

async function main() {
  wire();
  live.initLive({
    $, state, setStatus, askKey, showGrown, update,
    get run() { return run; },
  });
  initExport({ $, state, headMap, view: () => normView(view()), get run() { return run; } }); // PNG: as drawn
  initEntropy({ $, state, get run() { return run; }, refresh: () => { if (run) update(); } });
  initNorm({ $, state, get run() { return run; }, refresh: () => { if (run) update(); } });
  $('auth').addEventListener('submit', (e) => {
    e.preventDefault();
    // A header carries printable ASCII only: fetch would refuse the
    // request before sending it.
    if (/[^\x20-\x7e]/.test($('api-key').value)) {
      setStatus('API key: it has characters a request header cannot carry (printable ASCII only); check what was pasted', true);
      $('api-key').focus();
      return;
    }
    api.setApiKey($('api-key').value);
    $('auth').hidden = true;
    // The focus goes back where the refused action came from, not to the
    // top of the page with the hidden form.
    if (keyFrom && keyFrom.isConnected) keyFrom.focus();
    keyFrom = null;
    const retry = listed && afterKey;
    afterKey = null;
    if (retry) retry();
    else start();
  });
  await start();
}

// fillModels: the picker lists names (and the selected model, listed or
// not: a map's, a link's); untouched when that is what it lists already,
// so an open picker does not close or jump.
function fillModels(names) {
  const sel = $('model'), want = [...names];
  if (sel.value && !want.includes(sel.value)) want.push(sel.value);
  if (String([...sel.options].map((o) => o.value)) === String(want)) return;
  const v = sel.value;
  sel.textContent = '';
  for (const m of want) sel.append(new Option(m, m));
  sel.value = v;
}

// refreshModels: ask the server for its models again, for the picker: a
// model another client loaded (or unloaded) through the API since the
// page listed them shows up without a reload. Asked when the picker takes
// the focus (a click or Tab to it: what someone looking for a model does
// first), when the tab comes back to the front (after loading a model in
// a terminal), and after a run answered 404 (its model is gone): no poll,
// so an idle page costs the server nothing. One request at a time; one
// asked meanwhile is asked after it.
let modelsAsking = null;
async function refreshModels() {
  if (!listed) return;
  if (modelsAsking) { modelsAsking.again = true; return; }
  modelsAsking = { again: false };
  try {
    const l = await api.listModels();
    if (!l.error) fillModels(l.names);
  } catch (_) { /* a 401: the next action asks for the key */ }
  const again = modelsAsking.again;
  modelsAsking = null;
  if (again) refreshModels();
}

// start: read the URL, list the models, then draw what the URL asks for.
// Runs again after an API key is given.
async function start() {
  document.body.dataset.state = 'loading';
  live.setFollow(false);
  afterKey = null;
  const { given: fromUrl, empty: noInput } = readHash(state);
  setStatus('asking the server for its models…');
  listed = true;
  let unlistedWhy = null; // the server could not list its models
  const models = await api.listModels().then((l) => { unlistedWhy = l.error; return l.names; }, (e) => {
    listed = e.status !== 401;
    askKey(e);
    setStatus(e.message, true);
    return ['sdpa'];
  });
  const sel = $('model');
  sel.textContent = '';
  for (const m of models) sel.append(new Option(m, m));
  // A link's model that is not listed (unknown, still loading, another
  // server's) is kept and its error shown: never another model's map in
  // its place.
  const unlisted = fromUrl && !state.map && !models.includes(state.model);
  if (unlisted) sel.append(new Option(state.model, state.model));
  else if (!models.includes(state.model)) state.model = models.includes('demo') ? 'demo' : models[0];
  sel.value = state.model;
  if (state.text || (noInput && state.tab === 'words')) $('text').value = state.text;
  $('json').value = noInput && state.tab === 'json' ? '' : state.json || JSON.stringify(SEED_SDPA);
  $('causal').checked = state.causal;
  $('retain').checked = state.retain;
  $('sdpa-scale').value = state.qscale;
  selectTab(state.tab);
  try { await loadMeta(state.model, !fromUrl); } catch (e) {
    setStatus(e.message, true);
    askKey(e);
    if (unlisted) { document.body.dataset.state = 'error'; return; }
  }
  const keep = { b: state.b, h: state.h, q: state.q, win: state.win };
  let g;
  if (state.map) g = await openMap(state.map);
  else if (noInput) {
    document.body.dataset.state = 'idle';
    setStatus(`This link has no input: the ${state.tab === 'json' ? 'JSON was' : 'words were'} too large to keep in a link. ` +
      `Paste ${state.tab === 'json' ? 'it' : 'them'} again, or tick “retain on the server”, run, and link to the map.`, true);
    return;
  } else if (fromUrl) {
    $('causal').checked = state.causal;
    g = await doRun();
  } else {
    document.body.dataset.state = 'idle';
    if (unlistedWhy) setStatus(`The server could not list its models (${unlistedWhy.message}): only sdpa, built in, ` +
      'is offered; the list is asked again when the model picker takes the focus.', true);
    else setStatus('Choose a model and press Run.');
    return;
  }
  if (g !== viewGen) return; // it failed, or was overtaken
  Object.assign(state, keep);
  update(); // (openMap started following when the link asks)
}

main();
