/**
 * A small dependency-free SVG chart writer: grouped bar charts and line charts with axes, ticks, grid lines,
 * axis labels, a legend, optional horizontal reference lines, and linear or log axes. Output is a standalone
 * SVG document (every bar and point carries a <title> tooltip with its exact value).
 */

export interface BarSeries {
  name: string;
  /** One value per category; null (or a non-positive value on a log axis) leaves a gap. */
  values: (number | null)[];
}

export interface ReferenceLine {
  value: number;
  label: string;
}

export interface BarChartSpec {
  title: string;
  categories: string[];
  series: BarSeries[];
  yLabel: string;
  xLabel?: string;
  logY?: boolean;
  referenceLines?: ReferenceLine[];
  width?: number;
  height?: number;
}

export interface LinePoint {
  x: number;
  y: number;
}

export interface LineSeries {
  name: string;
  points: LinePoint[];
  dashed?: boolean;
  /** Draw a marker at each point (default true). */
  markers?: boolean;
}

export interface LineChartSpec {
  title: string;
  series: LineSeries[];
  xLabel: string;
  yLabel: string;
  logX?: boolean;
  logY?: boolean;
  referenceLines?: ReferenceLine[];
  width?: number;
  height?: number;
}

/** Okabe-Ito: distinguishable with the common colour-vision deficiencies. */
export const PALETTE = ['#0072B2', '#E69F00', '#009E73', '#D55E00', '#CC79A7', '#56B4E9', '#F0E442', '#000000'];

export function escapeXml(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&apos;');
}

/** Compact tick text: 1500 -> 1.5k, 0.25 -> 0.25, 2e6 -> 2M. */
export function formatTick(v: number): string {
  if (v === 0) return '0';
  const a = Math.abs(v);
  const trim = (x: number): string => Number(x.toPrecision(3)).toString();
  if (a >= 1e9) return `${trim(v / 1e9)}G`;
  if (a >= 1e6) return `${trim(v / 1e6)}M`;
  if (a >= 1e4) return `${trim(v / 1e3)}k`;
  if (a < 1e-3) return v.toExponential(0);
  return trim(v);
}

/** About `count` evenly spaced round ticks (steps of 1, 2 or 5 x 10^k) covering [min, max]. */
export function niceTicks(min: number, max: number, count = 5): number[] {
  if (!Number.isFinite(min) || !Number.isFinite(max)) throw new RangeError(`niceTicks: bad range [${min}, ${max}]`);
  if (min > max) [min, max] = [max, min];
  if (min === max) {
    const pad = min === 0 ? 1 : Math.abs(min) * 0.1;
    min -= pad;
    max += pad;
  }
  const raw = (max - min) / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((f) => f * mag).find((s) => s >= raw) ?? 10 * mag;
  const first = Math.floor(min / step + 1e-9);
  const last = Math.ceil(max / step - 1e-9);
  const ticks: number[] = [];
  for (let i = first; i <= last; i++) ticks.push(Number((i * step).toPrecision(12)));
  return ticks;
}

/** Powers of ten covering [min, max] (both > 0), with 2x and 5x steps added when the range spans few decades. */
export function logTicks(min: number, max: number): number[] {
  if (!(min > 0) || !(max > 0)) throw new RangeError(`logTicks: range must be positive, got [${min}, ${max}]`);
  if (min > max) [min, max] = [max, min];
  const lo = Math.floor(Math.log10(min) + 1e-9);
  let hi = Math.ceil(Math.log10(max) - 1e-9);
  if (lo === hi) hi += 1;
  const fine = hi - lo <= 2;
  const ticks: number[] = [];
  for (let e = lo; e <= hi; e++) {
    for (const f of fine ? [1, 2, 5] : [1]) {
      const v = Number((f * 10 ** e).toPrecision(12));
      if (e === hi && f > 1) break;
      ticks.push(v);
    }
  }
  // Trim ticks far outside the data while keeping one at or beyond each end.
  while (ticks.length > 2 && ticks[1]! <= min) ticks.shift();
  while (ticks.length > 2 && ticks[ticks.length - 2]! >= max) ticks.pop();
  return ticks;
}

interface Axis {
  ticks: number[];
  map(v: number): number;
  lo: number;
  hi: number;
}

/** Maps the data range onto pixels [p0, p1]; the domain is widened to whole ticks. */
function makeAxis(values: number[], log: boolean, p0: number, p1: number, includeZero: boolean): Axis {
  const usable = values.filter((v) => Number.isFinite(v) && (!log || v > 0));
  let min = usable.length ? Math.min(...usable) : log ? 1 : 0;
  let max = usable.length ? Math.max(...usable) : log ? 10 : 1;
  if (includeZero && !log) min = Math.min(0, min);
  const ticks = log ? logTicks(min, max) : niceTicks(min, max, 6);
  const lo = ticks[0]!;
  const hi = ticks[ticks.length - 1]!;
  const f = log ? Math.log10 : (v: number) => v;
  const flo = f(lo);
  const fhi = f(hi);
  const span = fhi - flo || 1;
  return { ticks, lo, hi, map: (v: number) => p0 + ((f(v) - flo) / span) * (p1 - p0) };
}

const FONT = 'font-family="Helvetica, Arial, sans-serif"';

interface Frame {
  width: number;
  height: number;
  left: number;
  right: number;
  top: number;
  bottom: number;
}

function header(f: Frame, title: string): string[] {
  return [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<svg xmlns="http://www.w3.org/2000/svg" width="${f.width}" height="${f.height}" viewBox="0 0 ${f.width} ${f.height}" ${FONT} font-size="12">`,
    `<rect x="0" y="0" width="${f.width}" height="${f.height}" fill="#ffffff"/>`,
    `<text x="${f.width / 2}" y="22" text-anchor="middle" font-size="16" font-weight="bold">${escapeXml(title)}</text>`,
  ];
}

function legend(f: Frame, names: string[], dashed: boolean[] = []): string[] {
  // One row under the title; entries are spaced by their label length.
  const out: string[] = ['<g class="legend">'];
  const widths = names.map((n) => 28 + n.length * 7 + 16);
  let x = f.width / 2 - widths.reduce((a, b) => a + b, 0) / 2;
  names.forEach((name, i) => {
    const color = PALETTE[i % PALETTE.length]!;
    const y = 40;
    if (dashed.length) {
      out.push(`<line x1="${x}" y1="${y}" x2="${x + 22}" y2="${y}" stroke="${color}" stroke-width="2.5"${dashed[i] ? ' stroke-dasharray="6 4"' : ''}/>`);
    } else {
      out.push(`<rect x="${x}" y="${y - 6}" width="22" height="12" fill="${color}"/>`);
    }
    out.push(`<text x="${x + 28}" y="${y + 4}">${escapeXml(name)}</text>`);
    x += widths[i]!;
  });
  out.push('</g>');
  return out;
}

function yAxis(f: Frame, axis: Axis, label: string): string[] {
  const out: string[] = ['<g class="y-axis">'];
  for (const t of axis.ticks) {
    const y = round(axis.map(t));
    out.push(`<line x1="${f.left}" y1="${y}" x2="${f.width - f.right}" y2="${y}" stroke="#e0e0e0"/>`);
    out.push(`<line x1="${f.left - 5}" y1="${y}" x2="${f.left}" y2="${y}" stroke="#333333"/>`);
    out.push(`<text x="${f.left - 8}" y="${y + 4}" text-anchor="end">${escapeXml(formatTick(t))}</text>`);
  }
  out.push(`<line x1="${f.left}" y1="${f.top}" x2="${f.left}" y2="${f.height - f.bottom}" stroke="#333333"/>`);
  const cy = (f.top + f.height - f.bottom) / 2;
  out.push(`<text x="16" y="${cy}" text-anchor="middle" transform="rotate(-90 16 ${cy})">${escapeXml(label)}</text>`);
  out.push('</g>');
  return out;
}

function referenceLines(f: Frame, axis: Axis, lines: ReferenceLine[] | undefined): string[] {
  const out: string[] = [];
  for (const r of lines ?? []) {
    if (!(r.value >= axis.lo && r.value <= axis.hi)) continue;
    const y = round(axis.map(r.value));
    out.push(`<line x1="${f.left}" y1="${y}" x2="${f.width - f.right}" y2="${y}" stroke="#B00020" stroke-dasharray="4 3"/>`);
    out.push(`<text x="${f.width - f.right - 4}" y="${y - 4}" text-anchor="end" fill="#B00020">${escapeXml(r.label)}</text>`);
  }
  return out;
}

function round(v: number): number {
  return Math.round(v * 10) / 10;
}

/** Grouped bars: one group per category, one bar per series. */
export function barChart(spec: BarChartSpec): string {
  for (const s of spec.series) {
    if (s.values.length !== spec.categories.length) {
      throw new RangeError(`barChart: series "${s.name}" has ${s.values.length} values for ${spec.categories.length} categories`);
    }
  }
  const longest = Math.max(0, ...spec.categories.map((c) => c.length));
  const width = spec.width ?? Math.max(640, Math.min(1800, 90 + spec.categories.length * (spec.series.length * 14 + 18)));
  const rotate = spec.categories.length * (longest * 7 + 10) > width - 90;
  const f: Frame = {
    width,
    height: spec.height ?? 480,
    // The first rotated label reaches left of its bar by about cos(40) x its width.
    left: rotate ? Math.max(70, Math.ceil(longest * 7 * 0.77) - 10) : 70,
    right: 20,
    top: 56,
    // Labels rotated by 40 degrees need about sin(40) x their width below the axis.
    bottom: (rotate ? 24 + Math.min(160, Math.ceil(longest * 7 * 0.65)) : 30) + (spec.xLabel ? 22 : 0),
  };
  const values = spec.series.flatMap((s) => s.values.filter((v): v is number => v !== null));
  const refs = (spec.referenceLines ?? []).map((r) => r.value);
  const axis = makeAxis([...values, ...refs], spec.logY ?? false, f.height - f.bottom, f.top, true);
  const out = [...header(f, spec.title), ...legend(f, spec.series.map((s) => s.name)), ...yAxis(f, axis, spec.yLabel)];

  const plotW = f.width - f.left - f.right;
  const groupW = plotW / Math.max(1, spec.categories.length);
  const barW = (groupW * 0.8) / Math.max(1, spec.series.length);
  const base = spec.logY ? axis.lo : Math.max(axis.lo, 0);
  const y0 = axis.map(base);
  out.push('<g class="bars">');
  spec.categories.forEach((cat, ci) => {
    const gx = f.left + ci * groupW + groupW * 0.1;
    spec.series.forEach((s, si) => {
      const v = s.values[ci];
      if (v === null || v === undefined || !Number.isFinite(v) || (spec.logY && v <= 0)) return;
      const y = axis.map(v);
      const top = Math.min(y, y0);
      const h = Math.abs(y0 - y);
      out.push(
        `<rect x="${round(gx + si * barW)}" y="${round(top)}" width="${round(Math.max(1, barW - 1))}" height="${round(h)}" fill="${PALETTE[si % PALETTE.length]}">` +
          `<title>${escapeXml(`${cat} / ${s.name}: ${formatTick(v)}`)}</title></rect>`,
      );
    });
  });
  out.push('</g>');

  out.push('<g class="x-axis">');
  const xb = f.height - f.bottom;
  out.push(`<line x1="${f.left}" y1="${xb}" x2="${f.width - f.right}" y2="${xb}" stroke="#333333"/>`);
  spec.categories.forEach((cat, ci) => {
    const cx = round(f.left + (ci + 0.5) * groupW);
    if (rotate) {
      out.push(`<text x="${cx}" y="${xb + 14}" text-anchor="end" transform="rotate(-40 ${cx} ${xb + 14})">${escapeXml(cat)}</text>`);
    } else {
      out.push(`<text x="${cx}" y="${xb + 18}" text-anchor="middle">${escapeXml(cat)}</text>`);
    }
  });
  if (spec.xLabel) out.push(`<text x="${f.left + plotW / 2}" y="${f.height - 8}" text-anchor="middle">${escapeXml(spec.xLabel)}</text>`);
  out.push('</g>');
  out.push(...referenceLines(f, axis, spec.referenceLines));
  out.push('</svg>', '');
  return out.join('\n');
}

/** Lines over a numeric x axis (linear or log), one per series, with point markers. */
export function lineChart(spec: LineChartSpec): string {
  const f: Frame = { width: spec.width ?? 800, height: spec.height ?? 480, left: 70, right: 24, top: 56, bottom: 56 };
  const xs = spec.series.flatMap((s) => s.points.map((p) => p.x));
  const ys = spec.series.flatMap((s) => s.points.map((p) => p.y));
  const refs = (spec.referenceLines ?? []).map((r) => r.value);
  const xAxis = makeAxis(xs, spec.logX ?? false, f.left, f.width - f.right, false);
  const yAx = makeAxis([...ys, ...refs], spec.logY ?? false, f.height - f.bottom, f.top, !spec.logY);
  const out = [
    ...header(f, spec.title),
    ...legend(f, spec.series.map((s) => s.name), spec.series.map((s) => s.dashed ?? false)),
    ...yAxis(f, yAx, spec.yLabel),
  ];

  out.push('<g class="x-axis">');
  const xb = f.height - f.bottom;
  for (const t of xAxis.ticks) {
    const x = round(xAxis.map(t));
    out.push(`<line x1="${x}" y1="${f.top}" x2="${x}" y2="${xb}" stroke="#e0e0e0"/>`);
    out.push(`<line x1="${x}" y1="${xb}" x2="${x}" y2="${xb + 5}" stroke="#333333"/>`);
    out.push(`<text x="${x}" y="${xb + 18}" text-anchor="middle">${escapeXml(formatTick(t))}</text>`);
  }
  out.push(`<line x1="${f.left}" y1="${xb}" x2="${f.width - f.right}" y2="${xb}" stroke="#333333"/>`);
  out.push(`<text x="${(f.left + f.width - f.right) / 2}" y="${f.height - 10}" text-anchor="middle">${escapeXml(spec.xLabel)}</text>`);
  out.push('</g>');

  out.push('<g class="lines">');
  spec.series.forEach((s, si) => {
    const color = PALETTE[si % PALETTE.length]!;
    const pts = s.points.filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y) && (!spec.logX || p.x > 0) && (!spec.logY || p.y > 0));
    if (pts.length === 0) return;
    const d = pts.map((p) => `${round(xAxis.map(p.x))},${round(yAx.map(p.y))}`).join(' ');
    out.push(`<polyline points="${d}" fill="none" stroke="${color}" stroke-width="2.5"${s.dashed ? ' stroke-dasharray="6 4"' : ''}/>`);
    if (s.markers ?? true) {
      for (const p of pts) {
        out.push(
          `<circle cx="${round(xAxis.map(p.x))}" cy="${round(yAx.map(p.y))}" r="3.5" fill="${color}">` +
            `<title>${escapeXml(`${s.name}: (${formatTick(p.x)}, ${formatTick(p.y)})`)}</title></circle>`,
        );
      }
    }
  });
  out.push('</g>');
  out.push(...referenceLines(f, yAx, spec.referenceLines));
  out.push('</svg>', '');
  return out.join('\n');
}
