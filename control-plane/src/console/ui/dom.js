// Building DOM without HTML strings: text always goes in as text, so nothing the API returns (a
// node name, an error message) can become markup. The console's CSP forbids inline script and
// style anyway; this keeps the pages from ever needing them.

const BOOLEAN_PROPS = new Set(['disabled', 'checked', 'readonly', 'required', 'multiple', 'selected', 'hidden']);
const EVENT_ATTR = /^on[a-z]+$/;
// Links may go to the console's own routes, http(s) pages or a generated download; never script.
const SAFE_HREF = /^(?:#|\/|https?:|blob:|data:(?:text\/plain|application\/)|mailto:)/i;

/**
 * h(tag, attrs?, ...children): an element. attrs: class, id, for, type, name, value, placeholder,
 * disabled, checked, data-*, aria-*, role, href, title, … as attributes or properties;
 * onclick/oninput/onchange/onsubmit/… (functions) as listeners. children: strings (as text),
 * numbers, nodes, arrays of these; null/undefined/false are skipped.
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  let selectValue;
  // h('p', 'text') and h('p', node): attrs left out.
  if (attrs !== undefined && attrs !== null && (typeof attrs !== 'object' || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = undefined;
  }
  for (const [key, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (EVENT_ATTR.test(key)) {
      if (typeof value !== 'function') throw new TypeError(`h(): ${key} must be a function`);
      el.addEventListener(key.slice(2), value);
    } else if (key === 'class') {
      el.className = Array.isArray(value) ? value.filter(Boolean).join(' ') : String(value);
    } else if (key === 'for') {
      el.htmlFor = String(value);
    } else if (key === 'value') {
      // A <select> takes its value only once its options are there.
      if (el instanceof HTMLSelectElement) selectValue = String(value);
      else el.value = String(value);
    } else if (BOOLEAN_PROPS.has(key)) {
      el[key] = Boolean(value);
    } else if (key === 'href') {
      const href = String(value);
      if (!SAFE_HREF.test(href)) throw new TypeError(`h(): refusing href ${JSON.stringify(href.slice(0, 40))}`);
      el.setAttribute('href', href);
    } else if (key === 'style' || key === 'innerHTML' || key === 'outerHTML' || key === 'srcdoc') {
      // Inline style is blocked by the CSP; HTML strings are what this module exists to avoid.
      throw new TypeError(`h(): ${key} is not supported; use a class or children`);
    } else {
      el.setAttribute(key, value === true ? '' : String(value));
    }
  }
  append(el, children);
  if (selectValue !== undefined) el.value = selectValue;
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
}

/** Removes all children of `el`. */
export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
}
