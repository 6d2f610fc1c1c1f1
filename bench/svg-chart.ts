// Horizontal bar charts as standalone SVG, for the figures the benchmarks and the soak print
// (`--svg-dir`): one row per category (a contestant, a table, a fault kind), one bar per series (a
// latency, before / after), each bar labelled with its value, so the chart reads without its colours.
// Accessible as an image: role="img", a <title> and a <desc> that carries every figure as text.
// No dependency: the markup is written here, every text escaped.

export interface BarSeries {
  readonly name: string;
}

export interface BarRow {
  readonly label: string;
  /** One value per series, in the series' order; null: no figure (drawn as "–"). */
  readonly values: readonly (number | null)[];
}

export interface BarChart {
  readonly title: string;
  /** What the figures are and where they come from (the command), one sentence or two. */
  readonly description: string;
  /** The unit after each value ("charges/s", "B"). */
  readonly unit: string;
  readonly series: readonly BarSeries[];
  readonly rows: readonly BarRow[];
}

// Colours with at least 4.5:1 contrast against white (WCAG AA for the legend's swatches' text is
// carried by the dark labels; the bars themselves are told apart by the legend order and the values).
const PALETTE = ['#1f5fa8', '#b8470b', '#1b7a5a', '#6a3d9a', '#a01f5c', '#4d6b10'];

const escape = (s: string): string => s.replaceAll('&', '&amp;').replaceAll('<', '&lt;').replaceAll('>', '&gt;').replaceAll('"', '&quot;');

const formatValue = (v: number): string => (Number.isInteger(v) ? v.toLocaleString('en') : v.toLocaleString('en', { maximumFractionDigits: 2 }));

export function renderBarChart(chart: BarChart): string {
  if (chart.series.length === 0) throw new RangeError('a bar chart needs at least one series');
  for (const row of chart.rows) {
    if (row.values.length !== chart.series.length) throw new RangeError(`row ${row.label}: ${row.values.length} values for ${chart.series.length} series`);
    for (const v of row.values) if (v !== null && (!Number.isFinite(v) || v < 0)) throw new RangeError(`row ${row.label}: ${v} is not a non-negative number`);
  }
  const width = 760;
  const labelWidth = 300;
  const valueRoom = 110;
  const barHeight = 14;
  const barGap = 3;
  const rowGap = 12;
  const top = 56;
  const legendHeight = 24;
  const plotWidth = width - labelWidth - valueRoom - 20;
  const max = Math.max(1, ...chart.rows.flatMap((r) => r.values.filter((v): v is number => v !== null)));
  const rowHeight = chart.series.length * (barHeight + barGap) - barGap;
  const height = top + legendHeight + chart.rows.length * (rowHeight + rowGap) + 16;
  const withUnit = (v: number) => (chart.unit ? `${formatValue(v)} ${chart.unit}` : formatValue(v));
  const desc = `${chart.description} ${chart.rows
    .map((r) => `${r.label}: ${r.values.map((v, i) => `${chart.series[i]!.name} ${v === null ? 'no figure' : withUnit(v)}`).join(', ')}`)
    .join('; ')}.`;
  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" role="img" aria-labelledby="t d" font-family="system-ui, -apple-system, 'Segoe UI', sans-serif" font-size="12">`,
    `<title id="t">${escape(chart.title)}</title>`,
    `<desc id="d">${escape(desc)}</desc>`,
    `<rect width="${width}" height="${height}" fill="#ffffff"/>`,
    `<text x="12" y="22" font-size="15" font-weight="600" fill="#111111">${escape(chart.title)}</text>`,
  ];
  // Legend, in series order.
  let x = 12;
  chart.series.forEach((s, i) => {
    out.push(`<rect x="${x}" y="${top - 16}" width="12" height="12" fill="${PALETTE[i % PALETTE.length]}"/>`);
    out.push(`<text x="${x + 16}" y="${top - 6}" fill="#111111">${escape(s.name)}</text>`);
    x += 16 + s.name.length * 7 + 18;
  });
  let y = top + legendHeight;
  for (const row of chart.rows) {
    out.push(`<text x="${labelWidth - 8}" y="${y + rowHeight / 2 + 4}" text-anchor="end" fill="#111111">${escape(row.label)}</text>`);
    row.values.forEach((v, i) => {
      const barY = y + i * (barHeight + barGap);
      const w = v === null ? 0 : Math.max(v > 0 ? 1 : 0, (v / max) * plotWidth);
      if (w > 0) out.push(`<rect x="${labelWidth}" y="${barY}" width="${w.toFixed(1)}" height="${barHeight}" fill="${PALETTE[i % PALETTE.length]}"/>`);
      out.push(`<text x="${(labelWidth + w + 6).toFixed(1)}" y="${barY + barHeight - 3}" fill="#111111">${v === null ? '–' : escape(withUnit(v))}</text>`);
    });
    y += rowHeight + rowGap;
  }
  out.push(`<line x1="${labelWidth}" y1="${top + legendHeight - 6}" x2="${labelWidth}" y2="${y - rowGap + 4}" stroke="#555555" stroke-width="1"/>`);
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}
