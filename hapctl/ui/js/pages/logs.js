// Logs: the access log (GET /v1/logs, read as `hapctl logs` reads it), newest first, filtered
// by domain, status and client. The newest page is a live tail (polled with ETags like the
// other pages); older pages go back by the API's `next` and stay as they are.

import { h, rows, table, state } from '../dom.js';
import { poll, stamp } from '../live.js';
import { logsPath, logTime, duration } from '../format.js';

const FILTERS = [
  ['domain', 'Domain', 'shop.example.com or *.example.com'],
  ['status', 'Status', '404 or 4xx'],
  ['client', 'Client', '203.0.113.7'],
];

export default {
  title: 'Logs',
  mount(main) {
    const inputs = {};
    const fields = FILTERS.map(([k, label, placeholder]) => {
      const input = h('input', { type: 'text', id: `l-${k}`, name: `l-${k}`, placeholder, autocomplete: 'off', spellcheck: 'false', 'aria-describedby': `l-${k}-error` });
      inputs[k] = input;
      return h('div', { class: 'field' }, h('label', { for: `l-${k}` }, label), input, h('p', { class: 'field-error', id: `l-${k}-error` }));
    });
    const status = h('p', { class: 'state loading', role: 'status' }, 'Loading…');
    const summary = h('p', { class: 'summary' });
    const newest = h('button', { type: 'button', disabled: true }, 'Newest (live)');
    const older = h('button', { type: 'button', disabled: true }, 'Older');
    const t = table('Requests (newest first)', ['Time', 'Status', 'Method', 'Host', 'Path', 'Client', 'Total', 'Termination', 'Request id']);
    // The pages gone back through: `before` of each, the newest (live) one first.
    const pages = [null];
    let next = null;
    const typed = () => Object.fromEntries(FILTERS.map(([k]) => [k, inputs[k].value]));
    const showFieldError = (e) => {
      for (const [k] of FILTERS) {
        const bad = e && e.field === k;
        if (bad) inputs[k].setAttribute('aria-invalid', 'true'); else inputs[k].removeAttribute('aria-invalid');
        main.querySelector(`#l-${k}-error`).textContent = bad ? e.message : '';
      }
    };
    const p = poll(() => logsPath(typed(), pages[pages.length - 1]), 2000, (r) => {
      status.hidden = true;
      showFieldError(null);
      stamp();
      next = r.next;
      older.disabled = !next;
      newest.disabled = pages.length === 1;
      const where = pages.length === 1 ? `${r.records.length} newest request(s), live` : `page ${pages.length}, ${r.records.length} request(s)`;
      summary.textContent = r.partial ? `${where}, in the last 16 MiB of the log searched: Older searches further back` : where;
      rows(t.tbody, r.records, (x) => x.id, (x) => h('tr', null,
        h('td', null, logTime(x.ts)),
        h('td', { class: x.status >= 500 ? 'bad' : x.status >= 400 ? 'warn' : null }, String(x.status)),
        h('td', null, x.method),
        h('td', null, x.host),
        h('td', { class: 'path' }, x.path),
        h('td', null, x.client),
        h('td', null, duration(x.ta)),
        h('td', null, x.denied_by && x.denied_by !== '-' ? `${x.term} · ${x.denied_by}` : x.term),
        h('th', { scope: 'row' }, h('code', null, x.id))), { columns: t.columns, text: 'No request matches: nothing logged yet, or nothing for these filters.' });
    }, (e) => {
      if (e.field && inputs[e.field]) { status.hidden = true; showFieldError(e); return; }
      status.hidden = false;
      state(status, 'error', `Cannot read the access log: ${e.message}`);
    });
    let debounce = null;
    for (const input of Object.values(inputs)) {
      input.addEventListener('input', () => {
        clearTimeout(debounce);
        debounce = setTimeout(() => { pages.length = 1; p.now(); }, 250);
      });
    }
    older.addEventListener('click', () => { if (next) { pages.push(next); p.now(); } });
    newest.addEventListener('click', () => { pages.length = 1; p.now(); });
    main.append(h('h1', null, 'Logs'),
      h('div', { class: 'toolbar' }, fields, h('div', { class: 'pager' }, newest, older)),
      status, summary, t.el);
    return () => { clearTimeout(debounce); p.stop(); };
  },
};
