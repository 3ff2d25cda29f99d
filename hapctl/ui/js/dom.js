// A few DOM helpers. Text always goes in as text nodes, never as HTML.

export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'value' || k === 'checked' || k === 'selected') el[k] = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

/** An SVG element: attributes only (the style sheet colours it; no inline style, for the CSP). */
export function svg(tag, attrs, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/**
 * Replaces a tbody's rows, keeping the row elements whose item did not change (so focus and
 * the page's height stay put on a live update).
 */
export function rows(tbody, items, key, render, empty) {
  if (!items.length) {
    fill(tbody, h('tr', { class: 'empty' }, h('td', { colspan: empty.columns }, empty.text)));
    return;
  }
  const old = new Map([...tbody.children].map((tr) => [tr.dataset.key, tr]));
  const next = items.map((item) => {
    const sig = JSON.stringify(item);
    const k = String(key(item));
    const kept = old.get(k);
    if (kept && kept.dataset.sig === sig) return kept;
    const tr = render(item);
    tr.dataset.key = k;
    tr.dataset.sig = sig;
    return tr;
  });
  next.forEach((tr, i) => {
    if (tbody.children[i] !== tr) tbody.insertBefore(tr, tbody.children[i] || null);
  });
  while (tbody.children.length > next.length) tbody.lastElementChild.remove();
}

/** A table with a caption (its accessible name) and a tbody to fill with `rows`. */
export function table(caption, headings) {
  const tbody = h('tbody');
  const el = h('div', { class: 'table-wrap' },
    h('table', null,
      h('caption', null, caption),
      h('thead', null, h('tr', null, headings.map((t) => h('th', { scope: 'col' }, t)))),
      tbody));
  return { el, tbody, columns: headings.length };
}

/** A labelled control with its error line; `control` gets an id, name and aria wiring. */
export function field(id, label, control, hint) {
  control.id = id;
  if (!control.name) control.name = id;
  const error = h('p', { class: 'field-error', id: `${id}-error` });
  const ids = [`${id}-error`];
  let hintEl = null;
  if (hint) {
    hintEl = h('p', { class: 'hint', id: `${id}-hint` }, hint);
    ids.push(`${id}-hint`);
  }
  control.setAttribute('aria-describedby', ids.join(' '));
  return h('div', { class: 'field' }, h('label', { for: id }, label), control, hintEl, error);
}

export function clearErrors(form) {
  for (const el of form.querySelectorAll('[aria-invalid]')) el.removeAttribute('aria-invalid');
  for (const el of form.querySelectorAll('.field-error')) el.textContent = '';
}

/** Shows `message` at the control `id` of `form` (or at the form's own error line). */
export function showError(form, id, message) {
  const control = id && form.querySelector(`#${CSS.escape(id)}`);
  const line = (control && form.querySelector(`#${CSS.escape(id)}-error`)) || form.querySelector('.form-error');
  if (control) {
    control.setAttribute('aria-invalid', 'true');
    control.focus();
  }
  if (line) line.textContent = message;
}

/** A section with a heading whose status line says loading / error / nothing. */
export function state(el, kind, text) {
  el.className = `state ${kind}`;
  el.textContent = text;
}

let toastTimer = null;
export function toast(text) {
  const el = document.getElementById('toast');
  el.textContent = text;
  el.classList.add('shown');
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => el.classList.remove('shown'), 4000);
}

/** A button that asks once more before doing `action` ("Remove" → "Confirm remove"). */
export function confirmButton(label, name, action) {
  let armed = null;
  const b = h('button', { type: 'button', class: 'danger', 'aria-label': `${label} ${name}` }, label);
  b.addEventListener('click', async () => {
    if (!armed) {
      b.textContent = `Confirm ${label.toLowerCase()}`;
      armed = setTimeout(() => { b.textContent = label; armed = null; }, 4000);
      return;
    }
    clearTimeout(armed);
    armed = null;
    b.disabled = true;
    try { await action(); } finally { b.disabled = false; b.textContent = label; }
  });
  return b;
}
