// The protections of one domain, edited: its HTTPS policy (redirect, HSTS), its own rate-limit
// policy, the wordpress profile with its thresholds and its WAF policy; and the edge-wide
// limits (default policy, windows, tarpit, local exemption). Each part is its own API call, so each form shows
// its own refusal, at the field the API names.

import { call, get } from '../api.js';
import { h, field, clearErrors, showError, toast } from '../dom.js';
import { seg, numberOrText, domainBody, parseExclusions, exclusionsText, wafField, withoutPosition } from '../format.js';

const SLOTS = [
  ['req_rate', 'Requests per window'],
  ['req_rate_soft', 'Requests per window (soft)'],
  ['conn_rate', 'New connections per window'],
  ['conn_cur', 'Open connections'],
  ['err_rate', 'Errors per window'],
];

function text(id, label, value, hint) {
  const input = h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', value: value ?? '' });
  return { input, el: field(id, label, input, hint) };
}

function check(id, label, checked) {
  const input = h('input', { type: 'checkbox', id, name: id, checked });
  return { input, el: h('div', { class: 'field check' }, h('label', null, input, label), h('p', { class: 'field-error', id: `${id}-error` })) };
}

function choice(id, label, options, value, hint) {
  const select = h('select', null, options.map(([v, t]) => h('option', { value: v, selected: value === v }, t)));
  return { input: select, el: field(id, label, select, hint) };
}

const fieldId = (prefix) => (f) => `${prefix}-${f.replace(/\W.*$/, '')}`;
/** Where a refusal `e` is shown: `[control id or null (the form's own line), message]`. */
const atField = (where) => (e) => [e.field ? where(e.field) : null, e.message];

/** A form whose submit sends what `body()` gives (or resolves to) with `method` to `path`;
 * the API's refusal is shown where `place(e)` says (by default at `pe-<field>`). */
function form(title, id, controls, method, path, body, saved, place = atField(fieldId('pe'))) {
  const submit = h('button', { type: 'submit' }, 'Save');
  const f = h('form', { class: 'panel', 'aria-labelledby': id, novalidate: true },
    h('h3', { id }, title), controls, h('p', { class: 'field-error form-error', role: 'alert' }), h('div', { class: 'actions' }, submit));
  f.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clearErrors(f);
    submit.disabled = true;
    try {
      await call(method, path, await body());
      toast(saved);
      f.dispatchEvent(new CustomEvent('saved', { bubbles: true }));
    } catch (e) {
      showError(f, ...place(e));
    } finally {
      submit.disabled = false;
    }
  });
  return f;
}

/** The editor of domain `d` (an entry of GET /v1/domains?limit…), its current limits `policy`. */
export function editor(d, policy) {
  const name = seg(d.domain);
  const https = d.https || { redirect: 'off' };
  const redirect = choice('pe-redirect', 'HTTP to HTTPS', [['off', 'served on both'], ['301', '301 redirect'], ['308', '308 redirect']], https.redirect);
  const age = text('pe-hsts_max_age', 'HSTS max-age (seconds)', https.hsts_max_age, 'empty: no Strict-Transport-Security header; 31536000 is a year');
  const subs = check('pe-hsts_include_subdomains', 'HSTS includeSubDomains', !!https.hsts_include_subdomains);
  const httpsForm = form('HTTPS', 'pe-https-title', [redirect.el, age.el, subs.el],
    'PUT', `/v1/domains/${name}/https`,
    () => ({ redirect: redirect.input.value, hsts_max_age: numberOrText(age.input.value), hsts_include_subdomains: subs.input.checked }),
    `${d.domain}: HTTPS policy saved`);

  const rules = SLOTS.map(([slot, label]) => [slot, text(`pe-${slot}`, label, policy[slot])]);
  // A preset replaces every rule (`hapctl domain limits --preset`); else the rules as typed.
  const preset = choice('pe-preset', 'Policy', [['rules', 'the rules below'], ['standard', 'standard (the shipped thresholds)'], ['off', 'off (no limit)']], 'rules');
  const limitsForm = form(`Rate limits (${d.own_limits ? 'its own' : 'the default, until saved'})`, 'pe-limits-title',
    [preset.el, h('p', { class: 'hint' }, 'Each: off, or THRESHOLD:ACTION — log, deny (403; deny-429, deny-503) or tarpit.'), rules.map(([, r]) => r.el)],
    'PUT', `/v1/domains/${name}/limits`,
    () => (preset.input.value === 'rules'
      ? { rules: Object.fromEntries(rules.map(([slot, r]) => [slot, r.input.value.trim()])) }
      : { preset: preset.input.value }),
    `${d.domain}: its own rate limits saved`);

  const p = d.protections || { profiles: [], wp_admin_gate: true, wp_login_posts: 30, wp_xmlrpc_posts: 60 };
  const wp = check('pe-profiles', 'WordPress profile (login challenge, POST limits, wp-admin gate)', p.profiles.includes('wordpress'));
  const gate = check('pe-wp_admin_gate', 'wp-admin gate for anonymous visitors', p.wp_admin_gate);
  const login = text('pe-wp_login_posts', 'Login POSTs per client per 60 s', p.wp_login_posts);
  const xmlrpc = text('pe-wp_xmlrpc_posts', 'xmlrpc POSTs per client per 60 s', p.wp_xmlrpc_posts);
  const wpForm = form('WordPress', 'pe-wp-title', [wp.el, gate.el, login.el, xmlrpc.el],
    'PUT', `/v1/domains/${name}/profiles`,
    () => ({
      profiles: wp.input.checked ? ['wordpress'] : [],
      wp_admin_gate: gate.input.checked,
      wp_login_posts: numberOrText(login.input.value) ?? undefined,
      wp_xmlrpc_posts: numberOrText(xmlrpc.input.value) ?? undefined,
    }),
    `${d.domain}: wordpress profile saved`);

  return h('section', { class: 'editor', 'aria-labelledby': 'pe-title' },
    h('h2', { id: 'pe-title', tabindex: '-1' }, `Protections of ${d.domain}`),
    h('div', { class: 'forms' }, httpsForm, limitsForm, wpForm, wafForm(d)));
}

/** The WAF policy of `d` (docs/waf.md). It has no route of its own: it goes in `waf` of
 * `PUT /v1/domains/{name}` with the rest of the domain as the API shows it just then, so the
 * servers, profile and app stay as they are. An edge without `[waf]` refuses any mode but
 * off at `waf.mode`, which is shown there. */
function wafForm(d) {
  const w = d.waf || { mode: 'off', fail: 'open', paranoia: 1, threshold: 5, body_limit: 8192, exclusions: [] };
  const mode = choice('pw-mode', 'WAF mode', [['off', 'off (not inspected)'], ['detect', 'detect (logged, never blocked)'], ['block', 'block (403 over the threshold)']],
    w.mode, 'detect and block need the [waf] section in hapctl.toml and its agent');
  const fail = choice('pw-fail', 'When the agent is down or slow', [['open', 'open (passes, logged)'], ['closed', 'closed (503)']], w.fail);
  const paranoia = text('pw-paranoia', 'CRS paranoia level (1–4)', w.paranoia);
  const threshold = text('pw-threshold', 'Anomaly score that blocks (1–1000)', w.threshold, 'the CRS default is 5');
  const body = text('pw-body_limit', 'Request-body bytes inspected', w.body_limit);
  const exclusions = h('textarea', { rows: 3, spellcheck: 'false' });
  exclusions.value = exclusionsText(w.exclusions);
  let lines = [];
  const place = (e) => {
    const at = wafField(e.field);
    if (!at) return [null, e.message];
    const line = at.name === 'exclusions' && at.index !== null ? `line ${lines[at.index] ?? at.index + 1}: ` : '';
    return [`pw-${at.name}`, line + withoutPosition(e.message)];
  };
  return form('Web application firewall', 'pe-waf-title',
    [mode.el, fail.el, paranoia.el, threshold.el, body.el,
      field('pw-exclusions', 'Rules that do not count', exclusions, 'One per line: RULE, or RULE@/path-prefix (hapctl waf rules lists them)')],
    'PUT', `/v1/domains/${seg(d.domain)}`,
    async () => {
      const typed = parseExclusions(exclusions.value);
      lines = typed.lines;
      const current = (await get(`/v1/domains/${seg(d.domain)}`)).json;
      return {
        ...domainBody(current),
        waf: {
          mode: mode.input.value,
          fail: fail.input.value,
          paranoia: numberOrText(paranoia.input.value) ?? undefined,
          threshold: numberOrText(threshold.input.value) ?? undefined,
          body_limit: numberOrText(body.input.value) ?? undefined,
          exclusions: typed.exclusions,
        },
      };
    },
    `${d.domain}: WAF policy saved`, place);
}

/** The edge-wide limits `l` (GET /v1/limits), edited: the default policy every domain without
 * its own follows, the counting windows and the tarpit (a reload), the local exemption. */
export function edgeLimitsEditor(l) {
  const rules = SLOTS.map(([slot, label]) => [slot, text(`pl-${slot}`, label, l.default[slot])]);
  const windows = ['req', 'conn', 'err'].map((w) => [w, text(`pl-${w}_window`, `${{ req: 'Request', conn: 'Connection', err: 'Error' }[w]} window (seconds)`, l.windows[w])]);
  const tarpit = text('pl-tarpit_secs', 'Tarpit (seconds)', l.tarpit_secs);
  const local = check('pl-local_exempt', 'Local clients (loopback) exempt from every limit', l.local_exempt);
  // A window typed as text is refused by the JSON reader at `windows.req`.
  const where = atField((f) => {
    const w = f.match(/^windows\.(req|conn|err)$/);
    return w ? `pl-${w[1]}_window` : fieldId('pl')(f);
  });
  return form('Edge-wide limits', 'pl-edit-title',
    [h('p', { class: 'hint' }, 'The default policy: off, or THRESHOLD:ACTION for each. A window or tarpit change reloads HAProxy.'),
      rules.map(([, r]) => r.el), windows.map(([, w]) => w.el), tarpit.el, local.el],
    'PUT', '/v1/limits',
    () => ({
      rules: Object.fromEntries(rules.map(([slot, r]) => [slot, r.input.value.trim()])),
      windows: Object.fromEntries(windows.map(([w, t]) => [w, numberOrText(t.input.value) ?? undefined])),
      tarpit_secs: numberOrText(tarpit.input.value) ?? undefined,
      local_exempt: local.input.checked,
    }),
    'edge-wide limits saved', where);
}
