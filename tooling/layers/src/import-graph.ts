/**
 * The run-time import graph of the workspace's TypeScript sources, read with the TypeScript parser.
 *
 * What counts as run time: every import and re-export except `import type` / `export type`. Under the
 * repository's `verbatimModuleSyntax`, `import { type A } from 'x'` still compiles to `import {} from 'x'`, which
 * loads x; so it counts. Dynamic `import('x')` counts too. Workspace packages (`@tessera/*`) resolve through their
 * exports map's `@tessera/source` condition to their `src/`, so the walk crosses packages exactly as the tests do.
 */
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import ts from 'typescript';

export interface WorkspacePackage {
  name: string;
  dir: string;
  manifest: {
    dependencies?: Record<string, string>;
    exports?: Record<string, unknown>;
    private?: boolean;
  };
}

/** Every package of the workspace (packages/*, apps/*, native, bench, tooling/*), by name. */
export function readWorkspace(root: string): Map<string, WorkspacePackage> {
  const dirs: string[] = [];
  for (const group of ['packages', 'apps', 'tooling']) {
    const base = join(root, group);
    if (!existsSync(base)) continue;
    for (const d of readdirSync(base)) dirs.push(join(base, d));
  }
  dirs.push(join(root, 'native'), join(root, 'bench'));
  const out = new Map<string, WorkspacePackage>();
  for (const dir of dirs) {
    const file = join(dir, 'package.json');
    if (!existsSync(file)) continue;
    const manifest = JSON.parse(readFileSync(file, 'utf8')) as WorkspacePackage['manifest'] & { name: string };
    out.set(manifest.name, { name: manifest.name, dir, manifest });
  }
  return out;
}

/** The source file a workspace specifier (`@tessera/x` or `@tessera/x/sub`) resolves to, or null. */
function resolvePackageSpecifier(spec: string, workspace: Map<string, WorkspacePackage>): string | null {
  const m = /^(@tessera\/[^/]+)(\/.*)?$/.exec(spec);
  if (!m) return null;
  const pkg = workspace.get(m[1]!);
  if (!pkg) return null;
  const sub = m[2] === undefined ? '.' : `.${m[2]}`;
  const entry = pkg.manifest.exports?.[sub];
  let target: string | undefined;
  if (typeof entry === 'string') target = entry;
  else if (entry && typeof entry === 'object') {
    const e = entry as Record<string, unknown>;
    const pick = e['@tessera/source'] ?? e['import'] ?? e['default'];
    if (typeof pick === 'string') target = pick;
  }
  if (target === undefined) return null;
  return resolve(pkg.dir, target);
}

function resolveRelative(from: string, spec: string): string | null {
  const base = resolve(dirname(from), spec);
  const candidates = [base, base.replace(/\.js$/, '.ts'), base.replace(/\.mjs$/, '.mts'), `${base}.ts`, join(base, 'index.ts')];
  for (const c of candidates) if (existsSync(c) && statSync(c).isFile()) return c;
  return null;
}

/** The run-time module specifiers of one source file. */
export function runtimeSpecifiers(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.ES2022, false, ts.ScriptKind.TS);
  const out: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node)) {
      if (!node.importClause?.isTypeOnly && ts.isStringLiteral(node.moduleSpecifier)) out.push(node.moduleSpecifier.text);
    } else if (ts.isExportDeclaration(node)) {
      if (!node.isTypeOnly && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier)) out.push(node.moduleSpecifier.text);
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      const arg = node.arguments[0];
      if (arg && ts.isStringLiteral(arg)) out.push(arg.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return out;
}

export interface Reach {
  /** The forbidden package reached. */
  target: string;
  /** The import chain from the entry to the first file that imports it (paths relative to the root). */
  chain: string[];
}

/**
 * Walks the run-time imports from `entries` (source files) and returns the first path to each forbidden package
 * (matched by name, e.g. '@tessera/native'), following relative imports and workspace packages.
 */
export function findForbidden(root: string, entries: readonly string[], forbidden: ReadonlySet<string>, workspace = readWorkspace(root)): Reach[] {
  const parent = new Map<string, string | null>();
  const queue: string[] = [];
  for (const e of entries) {
    parent.set(e, null);
    queue.push(e);
  }
  const found = new Map<string, Reach>();
  const chainOf = (file: string): string[] => {
    const chain: string[] = [];
    for (let f: string | null | undefined = file; f; f = parent.get(f)) chain.unshift(relative(root, f));
    return chain;
  };
  while (queue.length > 0) {
    const file = queue.shift()!;
    for (const spec of runtimeSpecifiers(file)) {
      const pkgName = /^(@tessera\/[^/]+)/.exec(spec)?.[1];
      if (pkgName !== undefined && forbidden.has(pkgName)) {
        if (!found.has(pkgName)) found.set(pkgName, { target: pkgName, chain: [...chainOf(file), spec] });
        continue;
      }
      const next = spec.startsWith('.') ? resolveRelative(file, spec) : resolvePackageSpecifier(spec, workspace);
      if (next === null || parent.has(next) || !next.endsWith('.ts')) continue;
      parent.set(next, file);
      queue.push(next);
    }
  }
  return [...found.values()];
}
