// "Try a request" in the WAF section: a request evaluated by the agent's rules without being
// sent (POST /v1/waf/test, `hapctl waf test`): its verdict, score and the rules that matched,
// each with its message. Errors land at the field the API names.

import { call } from '../api.js';
import { h, fill, rows, table, field, clearErrors, showError, state } from '../dom.js';

/** `Name: value` lines as the API's headers; the first line that is not one, if any. */
export function headerLines(text) {
  const headers = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (!line) continue;
    const at = line.indexOf(':');
    if (at < 1) return { headers, bad: i + 1 };
    headers.push({ name: line.slice(0, at).trim(), value: line.slice(at + 1).trim() });
  }
  return { headers, bad: null };
}

/** The verdict line of a trial's answer. */
export function trialSummary(t) {
  const word = { block: 'Blocked', detect: 'Detected (logged, not blocked)', pass: 'Passed', off: 'Not inspected (WAF off)' }[t.verdict] || t.verdict;
  const counted = t.counted.length ? ` · counted: ${t.counted.join(', ')}` : '';
  return `${word}: score ${t.score} of threshold ${t.threshold}${counted} · policy ${t.policy_from} (${t.policy})`;
}

/** The control of the form that an API error's field names. */
export function trialControl(apiField) {
  const top = (apiField || '').split(/[.[]/)[0];
  return { url: 'pwt-url', method: 'pwt-method', header: 'pwt-headers', headers: 'pwt-headers', body: 'pwt-body' }[top] || null;
}

const LEVEL = { block: 'bad', detect: 'warn', pass: 'ok', off: 'off' };

export function trialForm() {
  const url = h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: 'https://shop.example.com/search?q=…' });
  const method = h('select', null, ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS'].map((m) => h('option', { value: m }, m)));
  const headers = h('textarea', { rows: 3, spellcheck: 'false', placeholder: 'User-Agent: Mozilla/5.0' });
  const body = h('textarea', { rows: 3, spellcheck: 'false' });
  const submit = h('button', { type: 'submit' }, 'Evaluate');
  const verdict = h('p', { id: 'pwt-verdict', class: 'state off', role: 'status' }, 'Nothing evaluated yet.');
  const mt = table('Rules the request matched', ['Rule', 'Points', 'Message']);
  mt.el.hidden = true;
  // Evaluating changes nothing: a read-only session may.
  const form = h('form', { 'aria-labelledby': 'pwt', novalidate: true, 'data-read': true },
    h('h3', { id: 'pwt' }, 'Try a request'),
    field('pwt-url', 'URL', url, 'A path, or an http(s) URL whose host picks its domain\'s policy. Nothing is sent.'),
    field('pwt-method', 'Method', method),
    field('pwt-headers', 'Headers', headers, 'One Name: value per line.'),
    field('pwt-body', 'Body', body),
    h('p', { class: 'form-error', role: 'alert' }),
    h('div', { class: 'actions' }, submit));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearErrors(form);
    if (!url.value.trim()) { showError(form, 'pwt-url', 'A path or URL is needed.'); return; }
    const lines = headerLines(headers.value);
    if (lines.bad) { showError(form, 'pwt-headers', `line ${lines.bad}: must be Name: value`); return; }
    submit.disabled = true;
    state(verdict, 'loading', 'Evaluating…');
    try {
      const t = (await call('POST', '/v1/waf/test', {
        url: url.value.trim(), method: method.value, headers: lines.headers, body: body.value || undefined,
      })).json;
      state(verdict, LEVEL[t.verdict] || 'off', trialSummary(t));
      mt.el.hidden = false;
      rows(mt.tbody, t.matched, (m) => m.id, (m) => h('tr', null,
        h('th', { scope: 'row' }, String(m.id)), h('td', null, `+${m.points}`), h('td', null, m.message)),
      { columns: mt.columns, text: 'No rule matched.' });
    } catch (e) {
      state(verdict, 'off', 'Not evaluated.');
      mt.el.hidden = true;
      fill(mt.tbody);
      showError(form, trialControl(e.field), e.message);
    } finally {
      submit.disabled = false;
    }
  });
  return h('div', { class: 'trial' }, form, verdict, mt.el);
}
