/**
 * A minimal XML well-formedness check for the SVG tests: balanced tags, quoted attributes without duplicates,
 * no stray '<' or unescaped '&' in text or attribute values. Returns the elements it saw.
 */
export interface XmlElement {
  name: string;
  attrs: Record<string, string>;
  /** Text directly inside the element (entities left as written). */
  text: string;
  children: XmlElement[];
}

const NAME = /^[A-Za-z_][\w.:-]*$/;
const ENTITY = /&(?:amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);/g;

function checkText(s: string, where: string): void {
  if (s.includes('<')) throw new Error(`raw '<' in ${where}`);
  if (s.replace(ENTITY, '').includes('&')) throw new Error(`unescaped '&' in ${where}`);
}

export function parseXml(doc: string): XmlElement {
  let i = 0;
  if (doc.startsWith('<?xml')) {
    const end = doc.indexOf('?>');
    if (end < 0) throw new Error('unterminated XML declaration');
    i = end + 2;
  }
  const root: XmlElement = { name: '#document', attrs: {}, text: '', children: [] };
  const stack: XmlElement[] = [root];
  while (i < doc.length) {
    const lt = doc.indexOf('<', i);
    const text = doc.slice(i, lt < 0 ? doc.length : lt);
    checkText(text, `text of <${stack[stack.length - 1]!.name}>`);
    stack[stack.length - 1]!.text += text;
    if (lt < 0) break;
    const gt = doc.indexOf('>', lt);
    if (gt < 0) throw new Error(`unterminated tag at ${lt}`);
    const tag = doc.slice(lt + 1, gt);
    i = gt + 1;
    if (tag.startsWith('/')) {
      const name = tag.slice(1).trim();
      const open = stack.pop();
      if (!open || open.name !== name) throw new Error(`</${name}> closes <${open?.name ?? 'nothing'}>`);
      continue;
    }
    const selfClosing = tag.endsWith('/');
    const body = selfClosing ? tag.slice(0, -1) : tag;
    const nameMatch = /^\s*([^\s/>]+)/.exec(body);
    if (!nameMatch || !NAME.test(nameMatch[1]!)) throw new Error(`bad tag name in <${tag}>`);
    const el: XmlElement = { name: nameMatch[1]!, attrs: {}, text: '', children: [] };
    let rest = body.slice(nameMatch[0].length);
    const attr = /^\s+([A-Za-z_][\w.:-]*)="([^"]*)"/;
    for (;;) {
      const m = attr.exec(rest);
      if (!m) break;
      if (m[1]! in el.attrs) throw new Error(`duplicate attribute ${m[1]} on <${el.name}>`);
      checkText(m[2]!, `attribute ${m[1]} of <${el.name}>`);
      el.attrs[m[1]!] = m[2]!;
      rest = rest.slice(m[0].length);
    }
    if (rest.trim() !== '') throw new Error(`malformed attributes in <${tag}>: "${rest.trim()}"`);
    stack[stack.length - 1]!.children.push(el);
    if (!selfClosing) stack.push(el);
  }
  if (stack.length !== 1) throw new Error(`unclosed <${stack[stack.length - 1]!.name}>`);
  if (root.children.length !== 1) throw new Error(`expected one root element, got ${root.children.length}`);
  if (root.text.trim() !== '') throw new Error('text outside the root element');
  return root.children[0]!;
}

export function findAll(el: XmlElement, name: string, out: XmlElement[] = []): XmlElement[] {
  for (const c of el.children) {
    if (c.name === name) out.push(c);
    findAll(c, name, out);
  }
  return out;
}
