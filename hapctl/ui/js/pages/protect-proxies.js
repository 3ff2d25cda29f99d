// Trusted proxies on the Protections page (GET, POST, DELETE /v1/trusted-proxies): the
// networks whose forwarding headers name the real client, which blocks and limits then apply
// to. One added with the API's refusal at the field, or a preset's ranges (shipped, or a newer
// list pasted: a refused line is named); removed after asking once more, a preset whole.

import { call } from '../api.js';
import { h, rows, table, state, field, clearErrors, showError, toast, confirmButton } from '../dom.js';
import { poll } from '../live.js';
import { seg, parseBulk, splitField } from '../format.js';

export function proxiesSection() {
  const status = h('p', { class: 'state loading', role: 'status' }, 'Loading…');
  const t = table('Networks whose forwarding headers are believed', ['Network', 'From', 'Actions']);
  const list = poll('/v1/trusted-proxies', 10000, (r) => {
    status.hidden = true;
    rows(t.tbody, r.proxies, (p) => p.net, (p) => h('tr', null,
      h('th', { scope: 'row' }, p.net),
      h('td', null, p.preset ? `preset ${p.preset}` : 'added by hand'),
      h('td', { class: 'row-actions' }, confirmButton('Remove', `trusted proxy ${p.net}`, async () => {
        try { await call('DELETE', `/v1/trusted-proxies/${seg(p.net)}`); toast(`${p.net} no longer trusted`); } catch (e) { toast(`Not removed: ${e.message}`); }
        list.now();
      }))), { columns: t.columns, text: 'No trusted proxy: forwarding headers are removed, the client is the TCP peer.' });
  }, (e) => { status.hidden = false; state(status, 'error', `Cannot list the trusted proxies: ${e.message}`); });

  const net = h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', placeholder: '203.0.113.0/24' });
  const form = h('form', { class: 'panel', 'aria-labelledby': 'tp-title', novalidate: true },
    h('h3', { id: 'tp-title' }, 'Trust a proxy'),
    field('tp-net', 'IP or CIDR of the proxy', net, 'Its CF-Connecting-IP, X-Real-IP or X-Forwarded-For then names the client. One apply.'),
    h('p', { class: 'field-error form-error', role: 'alert' }),
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Trust')));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearErrors(form);
    const typed = net.value.trim();
    try {
      await call('POST', '/v1/trusted-proxies', { net: typed });
      toast(`${typed} trusted`);
      form.reset();
      list.now();
    } catch (e) { showError(form, 'tp-net', e.message); }
  });
  // A preset: the list shipped with hapctl, or a newer one (`proxy add --preset … --from`).
  const ranges = h('textarea', { rows: 3, spellcheck: 'false', placeholder: 'empty: the list shipped with hapctl' });
  const presetForm = h('form', { class: 'panel', 'aria-labelledby': 'tpp-title', novalidate: true },
    h('h3', { id: 'tpp-title' }, 'Trust Cloudflare'),
    field('tpp-nets', 'Its current ranges', ranges, 'One CIDR per line (# comments), from cloudflare.com/ips; ranges it no longer has are dropped'),
    h('p', { class: 'field-error form-error', role: 'alert' }),
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Trust Cloudflare'),
      confirmButton('Remove', 'the cloudflare preset', async () => {
        try { await call('DELETE', '/v1/trusted-proxies/presets/cloudflare'); toast('cloudflare no longer trusted'); } catch (e) { toast(`Not removed: ${e.message}`); }
        list.now();
      })));
  presetForm.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearErrors(presetForm);
    // A line with more than a range goes as typed, for the API to name it.
    const { entries, lines } = parseBulk(ranges.value);
    const body = { preset: 'cloudflare' };
    if (entries.length) body.nets = entries.map((e) => (e.reason ? `${e.ip} ${e.reason}` : e.ip));
    try {
      await call('POST', '/v1/trusted-proxies', body);
      toast('cloudflare trusted');
      presetForm.reset();
      list.now();
    } catch (e) {
      const { index } = splitField(e.field);
      showError(presetForm, 'tpp-nets', (index !== null ? `line ${lines[index]}: ` : '') + e.message);
    }
  });
  const el = h('section', { 'aria-labelledby': 'ptp' }, h('h2', { id: 'ptp' }, 'Trusted proxies'),
    status, t.el, h('div', { class: 'forms' }, form, presetForm));
  return { el, stop: () => list.stop() };
}
