import { describe, expect, it } from 'vitest';
import { barChart, escapeXml, formatTick, lineChart, logTicks, niceTicks } from '../src/svg.js';
import { findAll, parseXml } from './xml.js';

describe('the XML checker used below', () => {
  it('rejects what is not well-formed', () => {
    expect(() => parseXml('<svg><g></svg>')).toThrow(/closes/);
    expect(() => parseXml('<svg><text>a & b</text></svg>')).toThrow(/&/);
    expect(() => parseXml('<svg x=1></svg>')).toThrow(/attributes/);
    expect(() => parseXml('<svg a="1" a="2"/>')).toThrow(/duplicate/);
    expect(() => parseXml('<svg/><svg/>')).toThrow(/one root/);
    expect(parseXml('<svg a="1"><text>x &amp; y</text></svg>').children[0]!.text).toBe('x &amp; y');
  });
});

describe('bar chart', () => {
  const spec = {
    title: 'GEMM <ours> & "ORT"',
    categories: ['BERT m=1', 'BERT m=8', 'Llama m=1'],
    series: [
      { name: 'ours', values: [10, 200, 5] },
      { name: 'ORT', values: [12, null, 6] },
    ],
    yLabel: 'GFLOP/s',
  };

  it('is well-formed SVG with one bar per non-null value, axes, legend and escaped text', () => {
    const svg = barChart(spec);
    const root = parseXml(svg);
    expect(root.name).toBe('svg');
    expect(root.attrs.xmlns).toBe('http://www.w3.org/2000/svg');
    const groups = findAll(root, 'g');
    const bars = groups.find((g) => g.attrs.class === 'bars')!;
    expect(bars.children.filter((c) => c.name === 'rect')).toHaveLength(5);
    const legend = groups.find((g) => g.attrs.class === 'legend')!;
    expect(findAll(legend, 'text').map((t) => t.text)).toEqual(['ours', 'ORT']);
    const texts = findAll(root, 'text').map((t) => t.text);
    expect(texts).toContain('GEMM &lt;ours&gt; &amp; &quot;ORT&quot;');
    expect(texts).toEqual(expect.arrayContaining(['BERT m=1', 'BERT m=8', 'Llama m=1', 'GFLOP/s']));
    // Linear axis from 0: a tick at 0 and one at or above the largest bar.
    const ticks = findAll(groups.find((g) => g.attrs.class === 'y-axis')!, 'text').map((t) => Number(t.text)).filter(Number.isFinite);
    expect(ticks[0]).toBe(0);
    expect(Math.max(...ticks)).toBeGreaterThanOrEqual(200);
  });

  it('taller values draw taller bars, all from the same baseline', () => {
    const root = parseXml(barChart(spec));
    const rects = findAll(root, 'rect').filter((r) => r.children.some((c) => c.name === 'title'));
    const h = rects.map((r) => Number(r.attrs.height));
    const bottom = rects.map((r) => Number(r.attrs.y) + Number(r.attrs.height));
    // order: ours m=1, ORT m=1, ours m=8, ours Llama, ORT Llama
    expect(h[2]).toBeGreaterThan(h[0]!);
    expect(h[1]).toBeGreaterThan(h[0]!);
    for (const b of bottom) expect(b).toBeCloseTo(bottom[0]!, 0);
  });

  it('log axis: decade ticks, and non-positive values leave gaps', () => {
    const root = parseXml(barChart({ ...spec, logY: true, series: [{ name: 'x', values: [0.5, 300, 0] }], referenceLines: [{ value: 1000, label: 'peak' }] }));
    const yTicks = findAll(findAll(root, 'g').find((g) => g.attrs.class === 'y-axis')!, 'text').map((t) => t.text);
    expect(yTicks.slice(0, -1)).toEqual(['0.1', '1', '10', '100', '1000']);
    expect(findAll(findAll(root, 'g').find((g) => g.attrs.class === 'bars')!, 'rect')).toHaveLength(2);
    expect(findAll(root, 'text').map((t) => t.text)).toContain('peak');
  });

  it('rejects a series whose length does not match the categories', () => {
    expect(() => barChart({ ...spec, series: [{ name: 'bad', values: [1] }] })).toThrow(/1 values for 3 categories/);
  });
});

describe('line chart', () => {
  it('draws one polyline per series on log-log axes', () => {
    const svg = lineChart({
      title: 'roofline',
      xLabel: 'flop/byte',
      yLabel: 'GFLOP/s',
      logX: true,
      logY: true,
      series: [
        { name: 'all', points: [{ x: 0.125, y: 3 }, { x: 8, y: 200 }, { x: 64, y: 200 }] },
        { name: 'one', points: [{ x: 0.125, y: 3 }, { x: 4, y: 100 }], dashed: true, markers: false },
      ],
    });
    const root = parseXml(svg);
    const lines = findAll(root, 'polyline');
    expect(lines).toHaveLength(2);
    expect(lines[1]!.attrs['stroke-dasharray']).toBeDefined();
    expect(lines[0]!.attrs.points!.split(' ')).toHaveLength(3);
    expect(findAll(root, 'circle')).toHaveLength(3);
    // y grows upwards: the 200 GFLOP/s point sits above the 3 GFLOP/s one.
    const ys = lines[0]!.attrs.points!.split(' ').map((p) => Number(p.split(',')[1]));
    expect(ys[1]).toBeLessThan(ys[0]!);
    const xTicks = findAll(findAll(root, 'g').find((g) => g.attrs.class === 'x-axis')!, 'text').map((t) => t.text);
    expect(xTicks).toEqual(expect.arrayContaining(['0.1', '1', '10', '100']));
  });
});

describe('ticks and labels', () => {
  it('niceTicks covers the range with round steps', () => {
    expect(niceTicks(0, 1, 5)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
    expect(niceTicks(0, 232, 6)).toEqual([0, 50, 100, 150, 200, 250]);
    expect(niceTicks(-3, 7, 5)).toEqual([-4, -2, 0, 2, 4, 6, 8]);
    const same = niceTicks(5, 5);
    expect(same[0]).toBeLessThan(5);
    expect(same[same.length - 1]).toBeGreaterThan(5);
  });

  it('logTicks gives decades, with 2x and 5x over a short range', () => {
    expect(logTicks(0.06, 900)).toEqual([0.01, 0.1, 1, 10, 100, 1000]);
    expect(logTicks(3, 40)).toEqual([2, 5, 10, 20, 50]);
    expect(() => logTicks(0, 10)).toThrow(RangeError);
  });

  it('formats ticks compactly and escapes XML', () => {
    expect(formatTick(1500)).toBe('1500');
    expect(formatTick(15000)).toBe('15k');
    expect(formatTick(2e6)).toBe('2M');
    expect(formatTick(0.25)).toBe('0.25');
    expect(escapeXml(`<a href="x">'&'</a>`)).toBe('&lt;a href=&quot;x&quot;&gt;&apos;&amp;&apos;&lt;/a&gt;');
  });
});
