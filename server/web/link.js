// link.js - the page's state in the URL hash (#model=demo&text=...&h=2&q=5,
// and win=r0.c0.n for a zoomed long map, reopens the same view): writeHash
// puts it there, readHash takes it back into state (app.js's). Boxes that
// are unticked by default (retain, table, auto, ent, norm) are in it only when ticked.

import * as api from './api.js';
import * as live from './live.js';

export const INPUT_IN_URL_MAX = 16384; // words or pasted JSON kept in the link up to this

// asked (optional): the model, input tab, text, JSON, causal and retain
// boxes the drawn run was asked with: the picker, the tabs, the fields, or
// a Run that failed since (it read them, and drew nothing) say what the
// next Run asks, not what the link shows. Returns whether the link holds
// the drawn view's input: false when it is words or pasted JSON too large
// for a link.
export function writeHash(state, asked = null) {
  const a = asked || state;
  const p = new URLSearchParams();
  const input = a.tab !== 'json' ? a.text : a.json;
  if (state.map) {
    p.set('map', state.map);
    // its sequence: the proxies' route to the replica holding it (api.js)
    if (api.sequenceOfMap(state.map)) p.set('seq', api.sequenceOfMap(state.map));
  } else {
    p.set('model', a.model);
    // Too large for a link: an empty text= or json= says so when it is
    // reopened (not the example words or the seed in its place).
    p.set(a.tab !== 'json' ? 'text' : 'json', input.length <= INPUT_IN_URL_MAX ? input : '');
    p.set('causal', a.causal ? '1' : '0');
    if (a.retain) p.set('retain', '1');
    if (a.qscale) p.set('qscale', a.qscale); // sdpa's parameters.scale
  }
  if (state.b) p.set('b', String(state.b));
  p.set('h', String(state.h));
  if (state.q != null) p.set('q', String(state.q));
  // the zoom window of a long map: rows and keys from r0, c0, n a side
  if (state.win) p.set('win', `${state.win.r0}.${state.win.c0}.${state.win.n}`);
  if (state.scale !== 'linear') p.set('scale', state.scale);
  if (state.auto) p.set('auto', '1');
  if (state.table) p.set('table', '1');
  if (state.entropy) p.set('ent', '1');
  if (state.norm) p.set('norm', '1');
  // A link to a sequence this page drives follows it as it grows.
  if (state.map && (state.follow || live.drives(state.map))) p.set('follow', '1');
  history.replaceState(null, '', `#${p.toString()}`);
  return !!state.map || input.length <= INPUT_IN_URL_MAX;
}

// readHash: the link into state. Returns { given: the link names a model
// or a map, empty: its words or JSON were too large to keep in it }.
export function readHash(state) {
  const p = new URLSearchParams(location.hash.slice(1));
  const int = (k, d) => (p.has(k) && /^\d+$/.test(p.get(k)) ? Number(p.get(k)) : d);
  if (p.has('model')) state.model = p.get('model');
  if (p.has('text')) { state.text = p.get('text'); state.tab = 'words'; }
  if (p.has('json')) { state.json = p.get('json'); state.tab = 'json'; }
  state.map = p.get('map');
  if (state.map) state.tab = 'maps';
  if (state.map && p.has('seq')) api.noteSequenceMap(state.map, p.get('seq'));
  state.causal = p.get('causal') === '1';
  state.retain = p.get('retain') === '1';
  state.qscale = p.get('qscale') || '';
  state.b = int('b', 0);
  state.h = p.get('h') === 'mean' ? 'mean' : int('h', 0);
  state.q = int('q', null); // none: the strongest off-diagonal row (selQ)
  const w = /^(\d+)\.(\d+)\.(\d+)$/.exec(p.get('win') || '');
  state.win = w ? { r0: Number(w[1]), c0: Number(w[2]), n: Number(w[3]) } : null; // (app.js clamps it)
  state.scale = p.get('scale') === 'log' ? 'log' : 'linear';
  state.auto = p.get('auto') === '1';
  state.table = p.get('table') === '1';
  state.entropy = p.get('ent') === '1';
  state.norm = p.get('norm') === '1';
  state.follow = !!state.map && p.get('follow') === '1';
  const given = p.has('model') || p.has('map');
  const cut = state.tab === 'json' ? !state.json : p.has('text') && !state.text;
  return { given, empty: given && !state.map && cut };
}
