// Certificates: status, days left, the names each serves, the serial (what a handshake shows:
// a renewal changes it); renew an ACME one; import a bundle; order one from the ACME CA.

import { call } from '../api.js';
import { h, fill, rows, table, state, field, clearErrors, showError, toast, confirmButton } from '../dom.js';
import { poll, stamp } from '../live.js';
import { daysLeft, expiryLevel, until, seg, renewalsOutcome } from '../format.js';

const now = () => Date.now() / 1000;

function certStatus(c) {
  if (c.last_error) return h('span', { class: 'badge bad', title: c.last_error }, `failing: ${c.last_error}`);
  const days = daysLeft(c.not_after, now());
  if (days < 0) return h('span', { class: 'badge bad' }, 'expired');
  return h('span', { class: `badge ${expiryLevel(days)}` }, 'valid');
}

export default {
  title: 'Certificates',
  mount(main) {
    const status = h('p', { class: 'state loading', role: 'status' }, 'Loading…');
    const t = table('Certificates', ['Name', 'Status', 'Days left', 'Serves', 'Source', 'Serial', 'Next renewal', 'Actions']);
    const p = poll('/v1/certificates', 10000, (r) => {
      status.hidden = true;
      stamp();
      rows(t.tbody, r.certificates, (c) => c.name, (c) => {
        const days = daysLeft(c.not_after, now());
        const actions = [];
        // acme-http-01 or acme-dns-01: the CA can issue it again.
        if (String(c.source).startsWith('acme-')) {
          actions.push(h('button', { type: 'button', 'aria-label': `Renew ${c.name}`, onclick: async (ev) => {
            ev.target.disabled = true;
            try { await call('POST', `/v1/certificates/${seg(c.name)}/renew`); toast(`${c.name} renewed`); } catch (e) { toast(`Not renewed: ${e.message}`); }
            ev.target.disabled = false;
            p.now();
          } }, 'Renew'));
        }
        if (c.name !== 'default') {
          actions.push(confirmButton('Delete', c.name, async () => {
            try { await call('DELETE', `/v1/certificates/${seg(c.name)}`); toast(`${c.name} deleted`); } catch (e) { toast(`Not deleted: ${e.message}`); }
            p.now();
          }));
        }
        return h('tr', null,
          h('th', { scope: 'row' }, c.name),
          h('td', null, certStatus(c)),
          h('td', { class: expiryLevel(days) }, String(days)),
          h('td', null, (c.serves && c.serves.length ? c.serves : c.names).join(', ') || '–'),
          h('td', null, c.source),
          h('td', null, h('code', { class: 'serial' }, c.serial)),
          h('td', null, c.next_renewal ? until(c.next_renewal, now()) : '–'),
          h('td', { class: 'row-actions' }, actions.length ? actions : '–'));
      }, { columns: t.columns, text: 'No certificate.' });
    }, (e) => { status.hidden = false; state(status, 'error', `Cannot list the certificates: ${e.message}`); });

    // Every ACME certificate that is due, as the renewal worker would (hapctl cert renew --all).
    const renewOutcome = h('p', { id: 'c-renew-outcome', class: 'summary', role: 'status' });
    const renewAll = h('button', { type: 'button', id: 'c-renew-due' }, 'Renew all due');
    renewAll.addEventListener('click', async () => {
      renewAll.disabled = true;
      renewOutcome.className = 'summary';
      renewOutcome.textContent = 'Renewing what is due…';
      try {
        const list = (await call('POST', '/v1/renewals')).json.renewals;
        renewOutcome.className = `summary ${list.some((r) => r.error) ? 'bad' : 'ok'}`;
        renewOutcome.textContent = renewalsOutcome(list);
      } catch (e) {
        renewOutcome.className = 'summary bad';
        renewOutcome.textContent = `Not renewed: ${e.message}`;
      } finally { renewAll.disabled = false; p.now(); }
    });

    const name = h('input', { type: 'text', required: true, autocomplete: 'off', spellcheck: 'false' });
    const pem = h('textarea', { rows: 6, spellcheck: 'false', placeholder: '-----BEGIN CERTIFICATE-----' });
    const file = h('input', { type: 'file', accept: '.pem,.crt,.key,text/plain' });
    const names = h('input', { type: 'text', autocomplete: 'off', placeholder: 'shop.example.com, www.shop.example.com' });
    const go = h('button', { type: 'submit' }, 'Import');
    file.addEventListener('change', async () => {
      const parts = await Promise.all([...file.files].map((f) => f.text()));
      pem.value = parts.join('\n');
    });
    const form = h('form', { class: 'panel', 'aria-labelledby': 'cert-form-title', novalidate: true },
      h('h2', { id: 'cert-form-title' }, 'Import a certificate'),
      field('c-name', 'Name', name),
      field('c-pem', 'PEM bundle (leaf, chain, unencrypted key)', pem),
      field('c-file', 'Or read it from files', file),
      field('c-names', 'Host names it serves', names, 'Empty: the names in the certificate'),
      h('p', { class: 'field-error form-error', role: 'alert' }),
      h('div', { class: 'actions' }, go));
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      clearErrors(form);
      const body = { pem: pem.value };
      const list = names.value.split(/[\s,]+/).filter(Boolean);
      if (list.length) body.names = list;
      go.disabled = true;
      try {
        await call('PUT', `/v1/certificates/${seg(name.value.trim())}`, body);
        toast(`${name.value.trim()} served`);
        form.reset();
        p.now();
      } catch (e) {
        const id = { pem: 'c-pem', names: 'c-names', name: 'c-name' }[String(e.field).split(/[[.]/)[0]] || (e.status === 404 ? 'c-name' : null);
        showError(form, id, e.message);
      } finally { go.disabled = false; }
    });

    // An ACME order (HTTP-01, or DNS-01 through [acme] dns_hook).
    const oName = h('input', { type: 'text', required: true, autocomplete: 'off', spellcheck: 'false' });
    const oNames = h('input', { type: 'text', autocomplete: 'off', placeholder: 'shop.example.com, www.shop.example.com' });
    const dns = h('input', { type: 'checkbox' });
    const orderGo = h('button', { type: 'submit' }, 'Order');
    const order = h('form', { class: 'panel', 'aria-labelledby': 'order-form-title', novalidate: true },
      h('h2', { id: 'order-form-title' }, 'Order from the ACME CA'),
      field('o-name', 'Name', oName),
      field('o-names', 'Host names', oNames, 'Empty: the name itself'),
      h('div', { class: 'field check' }, h('label', null, dns, ' DNS-01 (through [acme] dns_hook; needed for a wildcard)')),
      h('p', { class: 'field-error form-error', role: 'alert' }),
      h('div', { class: 'actions' }, orderGo));
    order.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      clearErrors(order);
      const body = { dns_01: dns.checked };
      const list = oNames.value.split(/[\s,]+/).filter(Boolean);
      if (list.length) body.names = list;
      orderGo.disabled = true;
      orderGo.textContent = 'Ordering…';
      try {
        await call('POST', `/v1/certificates/${seg(oName.value.trim())}/request`, body);
        toast(`${oName.value.trim()} issued and served`);
        order.reset();
        p.now();
      } catch (e) {
        showError(order, e.field && e.field.startsWith('names') ? 'o-names' : 'o-name', e.message);
      } finally { orderGo.disabled = false; orderGo.textContent = 'Order'; }
    });

    fill(main, h('h1', null, 'Certificates'), status, t.el,
      h('div', { class: 'actions' }, renewAll), renewOutcome, h('div', { class: 'forms' }, form, order));
    return () => p.stop();
  },
};
