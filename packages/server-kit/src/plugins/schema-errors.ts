/**
 * One readable `{ message, param }` for a list of JSON-schema validation errors (fastify's ajv errors, typebox's
 * `Errors()`): the first problem, the offending field as a dotted/indexed path ('messages[0].content'), one
 * message per union-typed field instead of one per branch. The servers turn it into their own 400 bodies.
 */

/** The fields of an ajv / typebox validation error this reads. */
export interface SchemaError {
  keyword: string;
  instancePath: string;
  params: Record<string, unknown>;
  message?: string;
}

/** '/messages/0/content' → 'messages[0].content' (JSON-pointer escapes undone). */
export function paramOf(instancePath: string): string {
  return instancePath
    .split('/')
    .filter((s) => s.length > 0)
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce((acc, seg) => (/^\d+$/.test(seg) ? `${acc}[${seg}]` : acc === '' ? seg : `${acc}.${seg}`), '');
}

/**
 * The first problem in `errors`, with `context` ('body', 'querystring', 'metadata') naming the whole value.
 * `unionHints` maps a union-typed field's name (the last non-index segment) to what it accepts, e.g.
 * `{ stop: 'must be a string or an array of strings' }`.
 */
export function describeSchemaErrors(
  errors: readonly SchemaError[],
  context: string,
  unionHints: Readonly<Record<string, string>> = {},
): { message: string; param: string | null } {
  const required = errors.find((e) => e.keyword === 'required');
  if (required) {
    const props = (required.params.requiredProperties ?? required.params.missingProperty ?? []) as string[] | string;
    const missing = Array.isArray(props) ? props : [props];
    const param = [paramOf(required.instancePath), missing[0] ?? ''].filter((s) => s !== '').join('.');
    return { message: `${context}: ${missing.map((m) => `'${m}'`).join(', ')} ${missing.length === 1 ? 'is' : 'are'} required${required.instancePath ? ` in ${paramOf(required.instancePath)}` : ''}`, param };
  }
  const first = errors[0];
  if (!first) return { message: `${context} is invalid`, param: null };
  // The outermost union (anyOf) around the first error: its field gets one message, not one per branch.
  const union = errors
    .filter((e) => e.keyword === 'anyOf' && (first.instancePath === e.instancePath || first.instancePath.startsWith(`${e.instancePath}/`)))
    .sort((a, b) => a.instancePath.length - b.instancePath.length)[0];
  if (union) {
    const param = paramOf(union.instancePath);
    const key = union.instancePath.split('/').filter((s) => s !== '' && !/^\d+$/.test(s)).pop() ?? '';
    const hint = unionHints[key];
    if (hint) return { message: `${param} ${hint}`, param };
    // Nullable fields (X | null): report X's complaint.
    const branches = errors.filter((e) => e !== union && e.keyword !== 'anyOf' && e.instancePath.startsWith(union.instancePath) && e.message !== 'must be null');
    const messages = [...new Set(branches.map((e) => e.message ?? 'is invalid'))];
    return { message: `${param} ${messages.join(' or ') || 'has an invalid value'}`, param };
  }
  const param = paramOf(first.instancePath);
  return { message: `${param || context} ${first.message ?? 'is invalid'}`, param: param || null };
}
