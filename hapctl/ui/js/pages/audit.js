// The audit trail (admin): who changed what, from where, with what result; filtered by token,
// object and time, newest first (GET /v1/audit, docs/access.md).

import { h, fill, rows, table, state, field } from '../dom.js';
import { poll, stamp } from '../live.js';

export default {
  title: 'Audit',
  mount(main) {
    const filters = { who: '', object: '', since: '' };
    const who = h('input', { type: 'search', placeholder: 'token name or uid:N', autocomplete: 'off' });
    const object = h('input', { type: 'search', placeholder: 'shop.example.com, 203.0.113.7…', autocomplete: 'off' });
    const since = h('select', null,
      [['', 'any time'], ['1h', 'last hour'], ['1d', 'last day'], ['7d', 'last 7 days']]
        .map(([v, t]) => h('option', { value: v }, t)));
    const filterError = h('p', { class: 'field-error', role: 'alert' });
    const status = h('p', { class: 'state loading', role: 'status' }, 'Loading…');
    const t = table('Audit trail (newest first)', ['When', 'Who', 'Via', 'From', 'What', 'Objects', 'Asked', 'Result']);
    const path = () => {
      const p = new URLSearchParams({ limit: '200' });
      for (const [k, v] of Object.entries(filters)) if (v) p.set(k, v);
      return `/v1/audit?${p}`;
    };
    const result = (r) => {
      if (!r) return h('span', { class: 'bad' }, 'no result (stopped during the change)');
      const ok = r.status < 400;
      return h('span', { class: ok ? 'ok' : 'bad' }, String(r.status), r.outcome ? ` ${r.outcome}` : '');
    };
    const p = poll(path, 5000, (page) => {
      status.hidden = true;
      filterError.textContent = '';
      stamp();
      rows(t.tbody, page.records, (r) => r.id, (r) => h('tr', null,
        h('td', null, new Date(r.at_ms).toLocaleString()),
        h('th', { scope: 'row' }, r.who),
        h('td', null, r.via),
        h('td', null, r.forwarded ? `${r.peer} (for ${r.forwarded})` : r.peer),
        h('td', { class: 'path' }, r.action),
        h('td', { class: 'path' }, r.objects.join(', ') || '–'),
        h('td', { class: 'path' }, r.summary || '–'),
        h('td', null, result(r.result))),
      { columns: t.columns, text: 'No record matches.' });
    }, (e) => {
      if (e.status === 400) { filterError.textContent = e.message; return; }
      status.hidden = false;
      state(status, 'error', `Cannot read the audit trail: ${e.message}`);
    });
    let debounce = null;
    const refilter = () => {
      clearTimeout(debounce);
      debounce = setTimeout(() => {
        filters.who = who.value.trim();
        filters.object = object.value.trim();
        filters.since = since.value;
        p.now();
      }, 250);
    };
    for (const el of [who, object, since]) el.addEventListener('input', refilter);
    fill(main, h('h1', null, 'Audit'),
      h('div', { class: 'toolbar' },
        field('a-who', 'Who', who),
        field('a-object', 'Object', object),
        field('a-since', 'Since', since)),
      filterError, status, t.el);
    return () => p.stop();
  },
};
