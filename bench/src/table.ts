/** Plain-text tables with aligned columns (numbers right-aligned, text left-aligned). */

export type Cell = string | number | boolean | null | undefined;
export type Row = Record<string, Cell>;

export interface Column {
  key: string;
  header: string;
  /** Default: right for numbers, left for everything else (decided per column from its first value). */
  align?: 'left' | 'right';
  /** Formats a value; the default prints numbers with 3 significant digits and null as '-'. */
  format?: (value: Cell, row: Row) => string;
}

export interface TableSpec {
  columns: Column[];
  rows: Row[];
  /** Lines printed under the table (notes, units, caveats). */
  notes?: string[];
}

/** 3 significant digits, without exponent for everyday magnitudes. */
export function formatNumber(v: number, digits = 3): string {
  if (!Number.isFinite(v)) return String(v);
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 10 ** digits) return Math.round(v).toString();
  if (a < 1e-3) return v.toExponential(digits - 1);
  return Number(v.toPrecision(digits)).toString();
}

export function formatCell(v: Cell): string {
  if (v === null || v === undefined) return '-';
  if (typeof v === 'number') return formatNumber(v);
  return String(v);
}

export function formatTable(spec: TableSpec): string {
  const { columns, rows } = spec;
  const text = rows.map((row) => columns.map((c) => (c.format ? c.format(row[c.key], row) : formatCell(row[c.key]))));
  const widths = columns.map((c, j) => Math.max(c.header.length, ...text.map((r) => r[j]!.length)));
  const aligns = columns.map((c) => c.align ?? (rows.some((r) => typeof r[c.key] === 'number') ? 'right' : 'left'));
  const pad = (s: string, j: number): string => (aligns[j] === 'right' ? s.padStart(widths[j]!) : s.padEnd(widths[j]!));
  const line = (cells: string[]): string => cells.map(pad).join('  ').trimEnd();
  const out = [line(columns.map((c) => c.header)), line(widths.map((w) => '-'.repeat(w))), ...text.map(line)];
  for (const note of spec.notes ?? []) out.push(note);
  return out.join('\n');
}
