// Protections: per domain (suspension, the wordpress profile, the WAF policy shown; the editor
// of protect-edit.js for HTTPS, own limits, wordpress thresholds and the WAF policy), the
// WAF agent (protect-waf.js), the edge-wide rate limits and exemptions, the trusted proxies
// (protect-proxies.js), and the busiest clients of the rate-limit table.

import { call } from '../api.js';
import { h, fill, rows, table, state, field, clearErrors, showError, toast, confirmButton } from '../dom.js';
import { poll, stamp } from '../live.js';
import { seg, wafSummary } from '../format.js';
import { editor, edgeLimitsEditor } from './protect-edit.js';
import { wafSection } from './protect-waf.js';
import { proxiesSection } from './protect-proxies.js';

export default {
  title: 'Protections',
  mount(main) {
    // Per domain.
    let q = '';
    const search = h('input', { type: 'search', placeholder: 'part of a name', autocomplete: 'off' });
    const dStatus = h('p', { class: 'state loading', role: 'status' }, 'Loading…');
    const dt = table('Domains (first 50 matching)', ['Name', 'Serving', 'HTTP to HTTPS', 'Profiles', 'Rate limits', 'WAF', 'Actions']);
    const act = async (button, method, path, body, done) => {
      button.disabled = true;
      try { await call(method, path, body); toast(done); } catch (e) { toast(`Refused: ${e.message}`); }
      button.disabled = false;
    };
    // The editor of one domain, opened from its row; the limits as last read.
    const edit = h('div', { class: 'editor-slot' });
    let lastLimits = null;
    const openEditor = (d) => {
      const policy = (lastLimits && (lastLimits.domains[d.domain] || lastLimits.default)) || {};
      fill(edit, editor(d, policy));
      edit.querySelector('h2').focus();
    };
    edit.addEventListener('saved', () => { domains.now(); limits.now(); });
    const domains = poll(() => `/v1/domains?limit=50${q ? `&q=${encodeURIComponent(q)}` : ''}`, 5000, (page) => {
      dStatus.hidden = true;
      stamp();
      rows(dt.tbody, page.domains, (d) => d.domain, (d) => {
        const wp = !!(d.protections && d.protections.profiles.includes('wordpress'));
        const name = seg(d.domain);
        const suspend = h('button', { type: 'button', 'aria-label': `${d.suspended ? 'Resume' : 'Suspend'} ${d.domain}` }, d.suspended ? 'Resume' : 'Suspend');
        suspend.addEventListener('click', async () => {
          await act(suspend, 'POST', `/v1/domains/${name}/${d.suspended ? 'resume' : 'suspend'}`, undefined, `${d.domain} ${d.suspended ? 'resumed' : 'suspended'}`);
          domains.now();
        });
        const profile = h('button', { type: 'button', 'aria-label': `${wp ? 'Remove' : 'Add'} the wordpress profile on ${d.domain}` }, wp ? 'WordPress off' : 'WordPress on');
        profile.addEventListener('click', async () => {
          await act(profile, 'PUT', `/v1/domains/${name}/profiles`, { ...d.protections, profiles: wp ? [] : ['wordpress'] }, `${d.domain}: wordpress ${wp ? 'off' : 'on'}`);
          domains.now();
        });
        const https = d.https || { redirect: 'off' };
        const redirect = h('select', { 'aria-label': `HTTP to HTTPS for ${d.domain}` },
          [['off', 'served on both'], ['301', '301 redirect'], ['308', '308 redirect']]
            .map(([v, t]) => h('option', { value: v, selected: https.redirect === v }, t)));
        redirect.addEventListener('change', async () => {
          await act(redirect, 'PUT', `/v1/domains/${name}/https`, { ...https, redirect: redirect.value }, `${d.domain}: HTTP ${redirect.value === 'off' ? 'served' : `redirected (${redirect.value})`}`);
          domains.now();
        });
        const ownLimits = d.own_limits
          ? h('button', { type: 'button', class: 'quiet', 'aria-label': `${d.domain}: follow the default rate limits`, onclick: async (ev) => {
            await act(ev.target, 'DELETE', `/v1/domains/${name}/limits`, undefined, `${d.domain} follows the default limits`);
            domains.now();
            limits.now();
          } }, 'own · use default')
          : 'default';
        return h('tr', null,
          h('th', { scope: 'row' }, d.domain),
          h('td', null, d.suspended ? h('span', { class: 'badge warn' }, 'suspended') : 'yes'),
          h('td', null, redirect, https.hsts_max_age ? h('span', { class: 'hint' }, ` HSTS ${https.hsts_max_age} s`) : null),
          h('td', null, wp ? 'wordpress' : 'none'),
          h('td', null, ownLimits),
          h('td', null, wafSummary(d.waf)),
          h('td', { class: 'row-actions' }, suspend, profile,
            h('button', { type: 'button', class: 'quiet', 'aria-label': `Edit the protections of ${d.domain}`, onclick: () => openEditor(d) }, 'Edit')));
      }, { columns: dt.columns, text: q ? `No domain matches “${q}”.` : 'No domain yet.' });
    }, (e) => { dStatus.hidden = false; state(dStatus, 'error', `Cannot list the domains: ${e.message}`); });
    let debounce = null;
    search.addEventListener('input', () => {
      clearTimeout(debounce);
      debounce = setTimeout(() => { q = search.value.trim(); domains.now(); }, 250);
    });

    // Limits and exemptions.
    const lStatus = h('p', { class: 'state loading', role: 'status' }, 'Loading…');
    const lt = table('Default rate-limit policy', ['Rule', 'Threshold:action']);
    const et = table('Exempt from every limit', ['Network', 'Actions']);
    const windows = h('p', { class: 'summary' });
    // The edge-wide editor: made from the first answer and again after its save, never by a
    // poll (that would drop what is being typed).
    const edgeEdit = h('div', { class: 'editor-slot' });
    let remake = true;
    edgeEdit.addEventListener('saved', () => { remake = true; limits.now(); domains.now(); });
    const limits = poll('/v1/limits', 10000, (l) => {
      lStatus.hidden = true;
      lastLimits = l;
      if (remake) { remake = false; fill(edgeEdit, edgeLimitsEditor(l)); }
      windows.textContent = `Windows: requests ${l.windows.req} s, connections ${l.windows.conn} s, errors ${l.windows.err} s · tarpit ${l.tarpit_secs} s · local clients ${l.local_exempt ? 'exempt' : 'limited'} · ${Object.keys(l.domains).length} domain(s) with their own policy`;
      rows(lt.tbody, Object.entries(l.default), ([k]) => k, ([k, v]) => h('tr', null, h('th', { scope: 'row' }, k), h('td', null, v)),
        { columns: 2, text: 'No rule.' });
      rows(et.tbody, l.exempt, (n) => n, (n) => h('tr', null, h('th', { scope: 'row' }, n), h('td', { class: 'row-actions' },
        confirmButton('Remove', n, async () => {
          try { await call('DELETE', `/v1/limits/exempt/${seg(n)}`); toast(`${n} no longer exempt`); } catch (e) { toast(e.message); }
          limits.now();
        }))), { columns: 2, text: 'No exempt network.' });
    }, (e) => { lStatus.hidden = false; state(lStatus, 'error', `Cannot read the limits: ${e.message}`); });
    const net = h('input', { type: 'text', autocomplete: 'off', placeholder: '192.0.2.0/24' });
    const exempt = h('form', { class: 'panel', 'aria-labelledby': 'exempt-title', novalidate: true },
      h('h2', { id: 'exempt-title' }, 'Exempt a network'), field('p-net', 'IP or CIDR', net),
      h('p', { class: 'field-error form-error', role: 'alert' }), h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Exempt')));
    exempt.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      clearErrors(exempt);
      try { await call('POST', '/v1/limits/exempt', { net: net.value.trim() }); exempt.reset(); limits.now(); } catch (e) { showError(exempt, 'p-net', e.message); }
    });

    // Security top.
    const sStatus = h('p', { class: 'state loading', role: 'status' }, 'Loading…');
    const st = table('Busiest clients now', ['Client', 'Requests/window', 'Errors/window', 'Connections', 'Actions']);
    const stats = poll('/v1/security/stats?limit=20', 5000, (s) => {
      sStatus.hidden = true;
      rows(st.tbody, s.sources, (c) => c.ip, (c) => h('tr', null,
        h('th', { scope: 'row' }, c.ip),
        h('td', null, String(c.http_req_rate ?? '–')),
        h('td', null, String(c.http_err_rate ?? '–')),
        h('td', null, String(c.conn_cur ?? '–')),
        h('td', { class: 'row-actions' }, h('button', { type: 'button', 'aria-label': `Forget the counters of ${c.ip}`, onclick: async () => {
          try { await call('POST', '/v1/security/clear', { ip: c.ip }); } catch (e) { toast(e.message); }
          stats.now();
        } }, 'Forget'))), { columns: st.columns, text: 'No client is active.' });
    }, (e) => { sStatus.hidden = false; state(sStatus, 'error', `Cannot read HAProxy's table: ${e.message}`); });

    const agent = wafSection();
    const proxies = proxiesSection();
    fill(main, h('h1', null, 'Protections'),
      h('section', { 'aria-labelledby': 'pd' }, h('h2', { id: 'pd' }, 'Per domain'),
        h('div', { class: 'toolbar' }, field('p-search', 'Search domains', search)), dStatus, dt.el, edit),
      agent.el,
      h('section', { 'aria-labelledby': 'pl' }, h('h2', { id: 'pl' }, 'Rate limits'), lStatus, windows, lt.el, et.el, h('div', { class: 'forms' }, edgeEdit, exempt)),
      proxies.el,
      h('section', { 'aria-labelledby': 'ps' }, h('h2', { id: 'ps' }, 'Security top'), sStatus, st.el));
    return () => { domains.stop(); limits.stop(); stats.stop(); agent.stop(); proxies.stop(); };
  },
};
