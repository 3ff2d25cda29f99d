// Blocks: the API's pages (limit/after) filtered by prefix, reason and expiry; add one with a
// reason and an expiry, paste many, remove; rebuild the maps from the database (a repair).

import { call } from '../api.js';
import { h, fill, rows, table, state, field, clearErrors, showError, toast, confirmButton } from '../dom.js';
import { poll, stamp } from '../live.js';
import { ago, until, parseBulk, splitField, seg } from '../format.js';

const PAGE = 100;
const now = () => Date.now() / 1000;

export default {
  title: 'Blocks',
  mount(main) {
    const filters = { prefix: '', reason: '', expiring: '' };
    let after = null;
    const back = [];
    const prefix = h('input', { type: 'search', placeholder: '203.0.113.0/24', autocomplete: 'off' });
    const reasonQ = h('input', { type: 'search', placeholder: 'text in the reason', autocomplete: 'off' });
    const expiring = h('select', null,
      [['', 'any time or never'], ['1h', 'within 1 hour'], ['1d', 'within 1 day'], ['7d', 'within 7 days']]
        .map(([v, t]) => h('option', { value: v }, t)));
    const filterError = h('p', { class: 'field-error', role: 'alert' });
    const prev = h('button', { type: 'button', disabled: true }, 'Previous page');
    const next = h('button', { type: 'button', disabled: true }, 'Next page');
    const status = h('p', { class: 'state loading', role: 'status' }, 'Loading…');
    const t = table('Blocks in force', ['Address or network', 'Reason', 'By', 'Since', 'Expires', 'Actions']);

    const path = () => {
      const p = new URLSearchParams({ limit: String(PAGE) });
      for (const [k, v] of Object.entries(filters)) if (v) p.set(k, v);
      if (after) p.set('after', after);
      return `/v1/blocked-ips?${p}`;
    };

    const p = poll(path, 3000, (page) => {
      status.hidden = true;
      filterError.textContent = '';
      stamp();
      prev.disabled = back.length === 0;
      next.disabled = !page.next;
      next.dataset.after = page.next || '';
      rows(t.tbody, page.blocks, (b) => b.key, (b) => h('tr', null,
        h('th', { scope: 'row' }, b.key),
        h('td', null, b.reason || '–'),
        h('td', null, b.author),
        h('td', null, ago(b.created_at, now())),
        h('td', null, until(b.expires_at, now())),
        h('td', { class: 'row-actions' }, confirmButton('Unblock', b.key, async () => {
          try {
            await call('DELETE', `/v1/blocked-ips/${seg(b.key)}`);
            toast(`${b.key} unblocked`);
          } catch (e) { toast(`Not unblocked: ${e.message}`); }
          p.now();
        }))),
      { columns: t.columns, text: Object.values(filters).some(Boolean) ? 'No block matches these filters.' : 'Nobody is blocked.' });
    }, (e) => {
      if (e.status === 400) { filterError.textContent = e.message; return; }
      status.hidden = false;
      state(status, 'error', `Cannot list the blocks: ${e.message}`);
    });

    let debounce = null;
    const refilter = () => {
      clearTimeout(debounce);
      debounce = setTimeout(() => {
        filters.prefix = prefix.value.trim();
        filters.reason = reasonQ.value.trim();
        filters.expiring = expiring.value;
        after = null;
        back.length = 0;
        p.now();
      }, 250);
    };
    for (const el of [prefix, reasonQ, expiring]) el.addEventListener('input', refilter);
    next.addEventListener('click', () => { back.push(after); after = next.dataset.after; p.now(); });
    prev.addEventListener('click', () => { after = back.pop() || null; p.now(); });

    // One block.
    const ip = h('input', { type: 'text', required: true, autocomplete: 'off', spellcheck: 'false' });
    const reason = h('input', { type: 'text', autocomplete: 'off' });
    const ttl = h('input', { type: 'text', autocomplete: 'off', placeholder: '30m, 24h, 7d' });
    const add = h('button', { type: 'submit' }, 'Block');
    const one = h('form', { class: 'panel', 'aria-labelledby': 'block-form-title', novalidate: true },
      h('h2', { id: 'block-form-title' }, 'Block an address'),
      field('b-ip', 'IP or CIDR', ip),
      field('b-reason', 'Reason', reason),
      field('b-ttl', 'Expires after', ttl, 'Empty: until unblocked'),
      h('p', { class: 'field-error form-error', role: 'alert' }),
      h('div', { class: 'actions' }, add));
    one.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      clearErrors(one);
      const body = { ip: ip.value.trim(), reason: reason.value.trim(), author: 'dashboard' };
      if (ttl.value.trim()) body.ttl = ttl.value.trim();
      add.disabled = true;
      try {
        const r = await call('POST', '/v1/blocked-ips', body);
        toast(`${body.ip} ${r.json.results[0]} (${r.json.enforcement}, ${Math.round(r.json.duration_ms)} ms)`);
        one.reset();
        p.now();
      } catch (e) {
        const id = { ip: 'b-ip', reason: 'b-reason', ttl: 'b-ttl', author: 'b-reason' }[splitField(e.field).top];
        showError(one, id, e.message);
      } finally { add.disabled = false; }
    });

    // Many at once.
    const bulk = h('textarea', { rows: 5, spellcheck: 'false', placeholder: '198.51.100.7 scanner\n203.0.113.0/24 abuse' });
    const bulkTtl = h('input', { type: 'text', autocomplete: 'off', placeholder: 'empty: until unblocked' });
    const bulkGo = h('button', { type: 'submit' }, 'Block all');
    const many = h('form', { class: 'panel', 'aria-labelledby': 'bulk-form-title', novalidate: true },
      h('h2', { id: 'bulk-form-title' }, 'Paste many'),
      field('b-bulk', 'Addresses, one per line, then an optional reason', bulk),
      field('b-bulk-ttl', 'Expires after', bulkTtl),
      h('p', { class: 'field-error form-error', role: 'alert' }),
      h('div', { class: 'actions' }, bulkGo));
    many.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      clearErrors(many);
      const { entries, lines } = parseBulk(bulk.value, bulkTtl.value.trim());
      if (!entries.length) { showError(many, 'b-bulk', 'Nothing to block: paste one address per line.'); return; }
      for (const e of entries) e.author = 'dashboard';
      bulkGo.disabled = true;
      try {
        const r = await call('POST', '/v1/blocked-ips', entries);
        const created = r.json.results.filter((x) => x === 'created').length;
        toast(`${created} blocked, ${entries.length - created} already were (${r.json.enforcement})`);
        many.reset();
        p.now();
      } catch (e) {
        const { top, index } = splitField(e.field);
        const where = index !== null ? `line ${lines[index]}: ` : '';
        showError(many, top === 'ttl' ? 'b-bulk-ttl' : 'b-bulk', where + e.message);
      } finally { bulkGo.disabled = false; }
    });

    // `hapctl block sync`: the map files and the worker's maps rebuilt from the database.
    const syncOutcome = h('p', { id: 'b-sync-outcome', class: 'summary', role: 'status' });
    const sync = h('button', { type: 'button', id: 'b-sync', class: 'quiet' }, 'Rebuild the blocked maps');
    sync.addEventListener('click', async () => {
      sync.disabled = true;
      try {
        await call('POST', '/v1/blocked-ips/sync');
        syncOutcome.className = 'summary ok';
        syncOutcome.textContent = 'Rebuilt: the map files and HAProxy\'s maps hold exactly the blocks listed.';
      } catch (e) {
        syncOutcome.className = 'summary bad';
        syncOutcome.textContent = `Not rebuilt: ${e.message}`;
      } finally { sync.disabled = false; p.now(); }
    });

    fill(main, h('h1', null, 'Blocks'),
      h('div', { class: 'toolbar' },
        field('b-prefix', 'Inside network', prefix),
        field('b-reason-q', 'Reason contains', reasonQ),
        field('b-expiring', 'Expiring', expiring),
        h('div', { class: 'pager' }, prev, next)),
      filterError, status, t.el, h('div', { class: 'forms' }, one, many),
      h('section', { class: 'panel', 'aria-labelledby': 'b-repair' }, h('h2', { id: 'b-repair' }, 'Repair'),
        h('p', { class: 'hint' }, 'When HAProxy may not hold what is listed here (after a restore by hand): rebuild its maps from the database, atomically.'),
        h('div', { class: 'actions' }, sync), syncOutcome));
    return () => p.stop();
  },
};
