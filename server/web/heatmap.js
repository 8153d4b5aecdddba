// heatmap.js - drawing attention maps on canvas: the focused heatmap with
// token labels, thumbnails for the head grid and the overview, the legend.
// One cell per (query, key) pair; colours come from colormap.js only.

import { LUT, MASK_RGB, MASK_STRIPE_RGB, rgbFor } from './colormap.js';

const FONT = '12px system-ui, -apple-system, "Segoe UI", sans-serif';
const LABEL_MAX = 120; // CSS px kept for a label; longer ones are cut
export const NEWEST_RGB = 'rgb(255, 176, 0)'; // the newest-row marker

// cutText: s in ctx's font cut (…) to px CSS pixels: its longest prefix
// (one character at least) that fits with the '…', found by halving the
// lengths left. Cut one character at a time, a pasted 6000-character word
// took 6000 measures of up to 6000 characters for each of its labels:
// the page stopped for 18 to 60 s after the run. Lengths count code
// points, so no cut splits an astral character's two UTF-16 units (a
// lone half draws as a replacement glyph).
export function cutText(ctx, s, px) {
  if (ctx.measureText(s).width <= px) return s;
  const cs = Array.from(s);
  const head = (n) => cs.slice(0, n).join('');
  let lo = 1, hi = cs.length - 1; // lo fits, or is the one character kept
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (ctx.measureText(`${head(mid)}…`).width <= px) lo = mid;
    else hi = mid - 1;
  }
  return `${head(lo)}…`;
}

const fit = (ctx, s) => cutText(ctx, s, LABEL_MAX);

// Size a canvas to css w x h at the device pixel ratio; returns its 2D
// context scaled so drawing uses CSS pixels.
function prepare(canvas, w, h) {
  const dpr = window.devicePixelRatio || 1;
  canvas.style.width = `${w}px`;
  canvas.style.height = `${h}px`;
  canvas.width = Math.round(w * dpr);
  canvas.height = Math.round(h * dpr);
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}

let maskPattern = null;
function hatch(ctx) {
  if (maskPattern) return maskPattern;
  const c = document.createElement('canvas');
  c.width = c.height = 6;
  const g = c.getContext('2d');
  g.fillStyle = `rgb(${MASK_RGB})`;
  g.fillRect(0, 0, 6, 6);
  g.strokeStyle = `rgb(${MASK_STRIPE_RGB})`;
  g.lineWidth = 1;
  g.beginPath();
  g.moveTo(0, 6); g.lineTo(6, 0);
  g.stroke();
  maskPattern = ctx.createPattern(c, 'repeat');
  return maskPattern;
}

// Paint rows x cols cells of view (a window of map) into an offscreen
// canvas at one pixel per cell, then scale it up without smoothing, so
// every pixel of a cell has exactly the colour map's colour.
function cellsImage(v) {
  const off = document.createElement('canvas');
  off.width = v.cols;
  off.height = v.rows;
  const g = off.getContext('2d');
  const img = g.createImageData(v.cols, v.rows);
  for (let r = 0; r < v.rows; r++)
    for (let c = 0; c < v.cols; c++) {
      const i = v.r0 + r, j = v.c0 + c;
      const o = 4 * (r * v.cols + c);
      const rgb = v.masked(i, j) ? MASK_RGB : rgbFor(v.scale, v.map[i * v.S + j]);
      img.data[o] = rgb[0]; img.data[o + 1] = rgb[1]; img.data[o + 2] = rgb[2];
      img.data[o + 3] = 255;
    }
  g.putImageData(img, 0, 0);
  return off;
}

// drawHeatmap(canvas, v): v = { map (T*S), T, S, r0, c0, rows, cols,
// scale, masked(i, j), rowLabels, colLabels, maxWidth, cursor {i, j},
// row (selected query), newest (a growing sequence's newest query row, or
// null) }. Returns the geometry used for hit tests:
// { x0, y0, cell, r0, c0, rows, cols }.
export function drawHeatmap(canvas, v) {
  const probe = canvas.getContext('2d');
  probe.font = FONT;
  const rowLab = [], colLab = [];
  for (let r = 0; r < v.rows; r++) rowLab.push(fit(probe, String(v.rowLabels[v.r0 + r] ?? '')));
  for (let c = 0; c < v.cols; c++) colLab.push(fit(probe, String(v.colLabels[v.c0 + c] ?? '')));
  const cw = Math.max(20, ...colLab.map((s) => probe.measureText(s).width));
  probe.font = `bold ${FONT}`; // the selected row's label is bold: room for it
  const lw = Math.max(20, ...rowLab.map((s) => probe.measureText(s).width)) + 10;
  const slant = Math.SQRT1_2; // column labels at 45 degrees
  const avail = Math.max(120, (v.maxWidth || 640) - lw - cw * slant - 16);
  const cell = Math.max(2, Math.min(48, Math.floor(Math.min(avail, 720) / Math.max(v.rows, v.cols))));
  const y0 = Math.ceil(cw * slant + 14);
  const x0 = Math.ceil(lw);
  const w = x0 + cell * v.cols + Math.ceil(cw * slant) + 8, h = y0 + cell * v.rows + 8;
  const ctx = prepare(canvas, w, h);
  ctx.clearRect(0, 0, w, h);

  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(cellsImage(v), x0, y0, cell * v.cols, cell * v.rows);
  // Masked cells: hatched over their grey.
  ctx.fillStyle = hatch(ctx);
  for (let r = 0; r < v.rows; r++)
    for (let c = 0; c < v.cols; c++)
      if (v.masked(v.r0 + r, v.c0 + c)) ctx.fillRect(x0 + c * cell, y0 + r * cell, cell, cell);

  // Labels: every k-th when cells are small.
  const every = Math.max(1, Math.ceil(13 / cell));
  ctx.font = FONT;
  ctx.fillStyle = getComputedStyle(canvas).color || '#ddd';
  ctx.textBaseline = 'middle';
  ctx.textAlign = 'right';
  for (let r = 0; r < v.rows; r += every) {
    const sel = v.row === v.r0 + r;
    ctx.font = sel ? `bold ${FONT}` : FONT;
    ctx.fillText(rowLab[r], x0 - 6, y0 + (r + 0.5) * cell);
  }
  ctx.font = FONT;
  ctx.textAlign = 'left';
  for (let c = 0; c < v.cols; c += every) {
    ctx.save();
    ctx.translate(x0 + (c + 0.5) * cell, y0 - 6);
    ctx.rotate(-Math.PI / 4);
    ctx.fillText(colLab[c], 0, 0);
    ctx.restore();
  }

  // Selected query row and keyboard/hover cursor.
  ctx.lineWidth = 2;
  if (v.row != null && v.row >= v.r0 && v.row < v.r0 + v.rows) {
    ctx.strokeStyle = 'rgba(255,255,255,0.9)';
    ctx.strokeRect(x0 - 1, y0 + (v.row - v.r0) * cell - 1, cell * v.cols + 2, cell + 2);
  }
  // The newest row of a growing sequence: an amber bar left of its cells.
  if (v.newest != null && v.newest >= v.r0 && v.newest < v.r0 + v.rows) {
    ctx.fillStyle = NEWEST_RGB;
    ctx.fillRect(x0 - 5, y0 + (v.newest - v.r0) * cell, 3, cell);
  }
  if (v.cursor && v.cursor.i >= v.r0 && v.cursor.j >= v.c0) {
    ctx.strokeStyle = '#ff5ca8';
    ctx.strokeRect(x0 + (v.cursor.j - v.c0) * cell + 1, y0 + (v.cursor.i - v.r0) * cell + 1,
      cell - 2, cell - 2);
  }
  return { x0, y0, cell, r0: v.r0, c0: v.c0, rows: v.rows, cols: v.cols, w, h };
}

// hit(geom, x, y): what CSS point (x, y) of the heatmap is over:
// { kind: 'cell', i, j } | { kind: 'row', i } | { kind: 'col', j } | null.
export function hit(g, x, y) {
  if (!g) return null;
  const c = Math.floor((x - g.x0) / g.cell), r = Math.floor((y - g.y0) / g.cell);
  const inC = c >= 0 && c < g.cols, inR = r >= 0 && r < g.rows;
  if (inC && inR) return { kind: 'cell', i: g.r0 + r, j: g.c0 + c };
  if (inR && x < g.x0) return { kind: 'row', i: g.r0 + r };
  if (inC && y < g.y0) return { kind: 'col', j: g.c0 + c };
  return null;
}

// drawThumb(canvas, v, px): the whole map at most px CSS pixels a side,
// max-pooled when larger than px (so a strong weight never vanishes);
// window {r0, c0, rows, cols} outlined when given. Returns the thumbnail
// (thumbImage), which paintThumb draws again with another window without
// going over the map's cells again.
export function drawThumb(canvas, v, px, win) {
  const t = thumbImage(v, px);
  paintThumb(canvas, t, win);
  return t;
}

// thumbImage(v, px): drawThumb's pooled image, one pixel per block:
// { off (canvas), px, bt, bs, rows, cols }. Goes over every cell of v.
export function thumbImage(v, px) {
  const bt = Math.max(1, Math.ceil(v.T / px)), bs = Math.max(1, Math.ceil(v.S / px));
  const rows = Math.ceil(v.T / bt), cols = Math.ceil(v.S / bs);
  const off = document.createElement('canvas');
  off.width = cols; off.height = rows;
  const g = off.getContext('2d');
  const img = g.createImageData(cols, rows);
  for (let r = 0; r < rows; r++)
    for (let c = 0; c < cols; c++) {
      let m = -1, masked = true;
      for (let i = r * bt; i < Math.min(v.T, (r + 1) * bt); i++)
        for (let j = c * bs; j < Math.min(v.S, (c + 1) * bs); j++) {
          if (v.masked(i, j)) continue;
          masked = false;
          if (v.map[i * v.S + j] > m) m = v.map[i * v.S + j];
        }
      const rgb = masked ? MASK_RGB : rgbFor(v.scale, m);
      const o = 4 * (r * cols + c);
      img.data[o] = rgb[0]; img.data[o + 1] = rgb[1]; img.data[o + 2] = rgb[2]; img.data[o + 3] = 255;
    }
  g.putImageData(img, 0, 0);
  return { off, px, bt, bs, rows, cols };
}

// paintThumb(canvas, t, win): thumbnail t (thumbImage) into canvas, window
// win outlined when given.
export function paintThumb(canvas, t, win) {
  const { off, px, bt, bs, rows, cols } = t;
  const k = Math.max(1, Math.floor(px / Math.max(rows, cols)));
  const ctx = prepare(canvas, cols * k, rows * k);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(off, 0, 0, cols * k, rows * k);
  if (win) {
    ctx.strokeStyle = '#ff5ca8';
    ctx.lineWidth = 2;
    ctx.strokeRect((win.c0 / bs) * k + 1, (win.r0 / bt) * k + 1,
      Math.max(3, (win.cols / bs) * k - 2), Math.max(3, (win.rows / bt) * k - 2));
  }
}

// drawLegend(canvas, scale, width): the colour bar; tick labels are DOM.
export function drawLegend(canvas, width) {
  const ctx = prepare(canvas, width, 14);
  for (let x = 0; x < width; x++) {
    const k = Math.round((x / (width - 1)) * 255);
    ctx.fillStyle = `rgb(${LUT[3 * k]},${LUT[3 * k + 1]},${LUT[3 * k + 2]})`;
    ctx.fillRect(x, 0, 1, 14);
  }
}
