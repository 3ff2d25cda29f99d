// Domains: search and paging over the API's pages (fit for 10,000), add / edit / remove, the
// API's validation errors shown at the field they name.

import { call } from '../api.js';
import { h, fill, rows, table, state, field, clearErrors, showError, toast, confirmButton } from '../dom.js';
import { poll, stamp } from '../live.js';
import { parseServers, serversText, splitField, seg } from '../format.js';

const PAGE = 50;
// Suggestions only: the field takes any profile the API does (http-check:/any/path), so an edit
// keeps the one the domain has.
const PROFILES = ['default', 'websocket', 'sse', 'long-lived', 'http-check:/health'];

/** Where the API's error field is shown in the form. */
function controlFor(apiField) {
  const { top } = splitField(apiField);
  return { domain: 'd-name', servers: 'd-servers', profile: 'd-profile', app: 'd-app', sse_routing: 'd-sse' }[top] || null;
}

function target(d) {
  if (d.app) return `app ${d.app}`;
  return (d.servers || []).map((s) => s.addr).join(', ');
}

export default {
  title: 'Domains',
  mount(main) {
    let q = '';
    let after = null;
    const back = [];
    const search = h('input', { type: 'search', placeholder: 'part of a name', autocomplete: 'off' });
    const summary = h('p', { class: 'summary', 'aria-live': 'polite' }, '');
    const prev = h('button', { type: 'button', disabled: true }, 'Previous page');
    const next = h('button', { type: 'button', disabled: true }, 'Next page');
    const status = h('p', { class: 'state loading', role: 'status' }, 'Loading…');
    const t = table('Domains', ['Name', 'Routed to', 'Profile', 'State', 'Actions']);

    const name = h('input', { type: 'text', required: true, autocomplete: 'off', spellcheck: 'false' });
    const servers = h('textarea', { rows: 3, spellcheck: 'false' });
    const profile = h('input', { type: 'text', list: 'd-profiles', autocomplete: 'off', spellcheck: 'false' });
    profile.defaultValue = 'default';
    const profiles = h('datalist', { id: 'd-profiles' }, PROFILES.map((p) => h('option', { value: p })));
    const sse = h('input', { type: 'checkbox', id: 'd-sse', name: 'd-sse' });
    const app = h('input', { type: 'text', autocomplete: 'off' });
    const submit = h('button', { type: 'submit' }, 'Save domain');
    const cancel = h('button', { type: 'button', class: 'quiet', hidden: true }, 'Cancel edit');
    const form = h('form', { class: 'panel', 'aria-labelledby': 'domain-form-title', novalidate: true },
      h('h2', { id: 'domain-form-title' }, 'Add a domain'),
      field('d-name', 'Domain name', name, 'e.g. shop.example.com or *.example.com'),
      field('d-servers', 'Servers', servers, 'One HOST:PORT per line, then any of: name=N weight=N maxconn=N inter=2s fall=N rise=N backup no-check send-proxy=v1|v2 tls[=system] sni=host|NAME'),
      field('d-profile', 'Profile', profile, 'default, websocket, sse, long-lived or http-check:/path'), profiles,
      h('div', { class: 'field check' }, h('label', null, sse, ' Event streams to a long-lived twin of the backend (SSE routing)'),
        h('p', { class: 'field-error', id: 'd-sse-error' })),
      field('d-app', 'Or a delivered app', app, 'Leave the servers empty to route to an [[app]]'),
      h('p', { class: 'field-error form-error', role: 'alert' }),
      h('div', { class: 'actions' }, submit, cancel));

    const path = () => {
      const p = new URLSearchParams({ limit: String(PAGE) });
      if (q) p.set('q', q);
      if (after) p.set('after', after);
      return `/v1/domains?${p}`;
    };

    function edit(d) {
      form.querySelector('h2').textContent = `Edit ${d.domain}`;
      name.value = d.domain;
      name.readOnly = true;
      servers.value = serversText(d.servers);
      profile.value = d.profile || 'default';
      sse.checked = !!d.sse_routing;
      app.value = d.app || '';
      cancel.hidden = false;
      clearErrors(form);
      servers.focus();
    }

    function reset() {
      form.reset();
      form.querySelector('h2').textContent = 'Add a domain';
      name.readOnly = false;
      cancel.hidden = true;
      clearErrors(form);
    }
    cancel.addEventListener('click', reset);

    const p = poll(path, 5000, (page) => {
      status.hidden = true;
      stamp();
      const first = back.length * PAGE;
      summary.textContent = page.total
        ? `${first + 1}–${first + page.domains.length} of ${page.total}${q ? ` matching “${q}”` : ''}`
        : '';
      prev.disabled = back.length === 0;
      next.disabled = !page.next;
      next.dataset.after = page.next || '';
      rows(t.tbody, page.domains, (d) => d.domain, (d) => h('tr', null,
        h('th', { scope: 'row' }, d.domain),
        h('td', null, target(d)),
        h('td', null, d.profile ? `${d.profile}${d.sse_routing ? ' · SSE routing' : ''}` : '–'),
        h('td', null, d.suspended ? h('span', { class: 'badge warn' }, 'suspended') : 'serving'),
        h('td', { class: 'row-actions' },
          h('button', { type: 'button', 'aria-label': `Edit ${d.domain}`, onclick: () => edit(d) }, 'Edit'),
          confirmButton('Remove', d.domain, async () => {
            try {
              await call('DELETE', `/v1/domains/${seg(d.domain)}`);
              toast(`${d.domain} removed`);
            } catch (e) { toast(`Not removed: ${e.message}`); }
            p.now();
          }))),
      { columns: t.columns, text: q ? `No domain matches “${q}”.` : 'No domain yet: add one below.' });
    }, (e) => { status.hidden = false; state(status, 'error', `Cannot list the domains: ${e.message}`); });

    let debounce = null;
    search.addEventListener('input', () => {
      clearTimeout(debounce);
      debounce = setTimeout(() => { q = search.value.trim(); after = null; back.length = 0; p.now(); }, 250);
    });
    next.addEventListener('click', () => { back.push(after); after = next.dataset.after; p.now(); });
    prev.addEventListener('click', () => { after = back.pop() || null; p.now(); });

    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      clearErrors(form);
      const domain = name.value.trim();
      if (!domain) { showError(form, 'd-name', 'A domain name is needed.'); return; }
      const body = app.value.trim() && !servers.value.trim()
        ? { app: app.value.trim() }
        : { servers: parseServers(servers.value), profile: profile.value.trim() || undefined, sse_routing: sse.checked };
      submit.disabled = true;
      submit.textContent = 'Applying…';
      try {
        const r = await call('PUT', `/v1/domains/${seg(domain)}`, body);
        const a = r.json.apply || {};
        toast(`${domain} ${r.json.result || 'saved'}: ${a.outcome || ''} in ${a.duration_ms ?? '?'} ms`);
        // Not when the next one is being typed already.
        if (name.value.trim() === domain) reset();
        p.now();
      } catch (e) {
        const { top, index } = splitField(e.field);
        const where = top === 'servers' && index !== null ? `line ${index + 1}: ` : '';
        showError(form, controlFor(e.field), where + e.message);
      } finally {
        submit.disabled = false;
        submit.textContent = 'Save domain';
      }
    });

    fill(main, h('h1', null, 'Domains'),
      h('div', { class: 'toolbar' },
        field('d-search', 'Search domains', search), summary,
        h('div', { class: 'pager' }, prev, next)),
      status, t.el, form);
    return () => p.stop();
  },
};
