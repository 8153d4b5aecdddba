// export.js - the focused map as files: PNG (the canvas as drawn; a
// zoomed map, whose canvas holds its window only, whole at one pixel a
// cell), JSON (its numbers with their labels) and .npy (float32 [T, S],
// for numpy), named for the map (or model), batch item and head; a
// max-pooled map's say so (name, JSON).

import { thumbImage } from './heatmap.js';

let ctx = null; // app.js: { $, state, run, headMap(b, h), view() }

function download(name, blob) {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.append(a);
  a.click();
  setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
}

// baseName: the files' name; a max-pooled map's says so (-max3x3).
function baseName() {
  const r = ctx.run, pool = r.block ? `-max${r.block[0]}x${r.block[1]}` : '';
  return `attnd-${r.mapId || r.model}-b${ctx.state.b}-h${ctx.state.h}${pool}`;
}

// A .npy file (format 1.0): magic, header dict padded to 64 bytes, data.
function npy(data, shape) {
  let hdr = `{'descr': '<f4', 'fortran_order': False, 'shape': (${shape.join(', ')}), }`;
  const total = 10 + hdr.length + 1;
  hdr += ' '.repeat((64 - (total % 64)) % 64) + '\n';
  const head = new Uint8Array(10 + hdr.length);
  head.set([0x93, 78, 85, 77, 80, 89, 1, 0, hdr.length & 255, hdr.length >> 8]);
  head.set(new TextEncoder().encode(hdr), 10);
  return new Blob([head, new Float32Array(data)], { type: 'application/octet-stream' });
}

// initExport: wire the PNG, JSON and .npy buttons.
export function initExport(c) {
  ctx = c;
  const { $ } = c;
  $('export-png').addEventListener('click', () => {
    const png = (b) => download(`${baseName()}.png`, b);
    if (!ctx.state.win) { $('heatmap').toBlob(png, 'image/png'); return; }
    const v = ctx.view(); // one pixel a cell: no pooling at T x S pixels
    thumbImage(v, Math.max(v.T, v.S)).off.toBlob(png, 'image/png');
  });
  $('export-json').addEventListener('click', () => {
    const map = ctx.headMap(ctx.state.b, ctx.state.h);
    download(`${baseName()}.json`, new Blob([JSON.stringify({
      model: ctx.run.model, map_id: ctx.run.mapId || null, b: ctx.state.b, h: ctx.state.h,
      tokens: ctx.run.tokens, key_tokens: ctx.run.keyTokens, shape: [ctx.run.T, ctx.run.S],
      causal: ctx.run.causal,
      // a max-pooled map: each number the largest of a block of the map
      ...(ctx.run.block ? { max_pooled_block: ctx.run.block, source_shape: ctx.run.sourceShape } : {}),
      data: Array.from(map),
    })], { type: 'application/json' }));
  });
  $('export-npy').addEventListener('click', () =>
    download(`${baseName()}.npy`, npy(ctx.headMap(ctx.state.b, ctx.state.h), [ctx.run.T, ctx.run.S])));
}
