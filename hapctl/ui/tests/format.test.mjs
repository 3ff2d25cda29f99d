// Unit tests of the dashboard's pure logic: `node --test hapctl/ui/tests/` (run by
// tests/dashboard.rs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  duration, ago, until, daysLeft, expiryLevel, parseBulk, splitField, parseServers, serversText, seg,
  diffLines, size, numberOrText, domainBody, parseExclusions, exclusionsText, wafField, wafSummary,
  withoutPosition, wafAgent, wafRules,
} from '../js/format.js';

test('durations are short and readable', () => {
  assert.equal(duration(528), '528 ms');
  assert.equal(duration(1008), '1.0 s');
  assert.equal(duration(125_000), '2 min');
  assert.equal(duration(7_200_000), '2.0 h');
  assert.equal(duration(undefined), '–');
});

test('times are relative to now', () => {
  assert.equal(ago(1000, 1003), 'just now');
  assert.equal(ago(1000, 1000 + 125), '2 min ago');
  assert.equal(ago(0, 3 * 86400 + 5), '3 d ago');
  assert.equal(until(null, 0), 'never');
  assert.equal(until(100, 200), 'expired');
  assert.equal(until(3599, 0), 'in 1 h');
  assert.equal(until(90, 0), 'in 2 min');
});

test('days left and their level', () => {
  assert.equal(daysLeft(10 * 86400 + 5, 0), 10);
  assert.equal(daysLeft(0, 86400), -1);
  assert.equal(expiryLevel(3), 'bad');
  assert.equal(expiryLevel(14), 'warn');
  assert.equal(expiryLevel(60), 'ok');
});

test('a pasted list keeps the line of each entry', () => {
  const { entries, lines } = parseBulk('198.51.100.7 scanner\n\n# note\n203.0.113.0/24, abuse here\r\n  2001:db8::1\tbad bot', '1h');
  assert.deepEqual(entries, [
    { ip: '198.51.100.7', reason: 'scanner', ttl: '1h' },
    { ip: '203.0.113.0/24', reason: 'abuse here', ttl: '1h' },
    { ip: '2001:db8::1', reason: 'bad bot', ttl: '1h' },
  ]);
  assert.deepEqual(lines, [1, 4, 5]);
  assert.deepEqual(parseBulk('x', '').entries, [{ ip: 'x', reason: '' }]);
  assert.deepEqual(parseBulk(' \n#only\n', ''), { entries: [], lines: [] });
});

test('API error fields name the control and the item', () => {
  assert.deepEqual(splitField('servers[2].address'), { top: 'servers', index: 2, rest: 'address' });
  assert.deepEqual(splitField('[3].ip'), { top: 'ip', index: 3, rest: '' });
  assert.deepEqual(splitField('domain'), { top: 'domain', index: null, rest: '' });
  assert.equal(splitField(null).top, '');
});

test('servers round-trip between the form and the API', () => {
  const servers = parseServers('10.0.0.1:80 weight=5\n\n web:8080 backup no-check ');
  assert.deepEqual(servers, [
    { address: '10.0.0.1:80', weight: 5 },
    { address: 'web:8080', backup: true, check: false },
  ]);
  const shown = serversText([
    { name: 's1', addr: '10.0.0.1:80', options: { weight: 5, check: true } },
    { name: 's2', addr: 'web:8080', options: { backup: true, check: false } },
  ]);
  assert.equal(shown, '10.0.0.1:80 weight=5\nweb:8080 backup no-check');
  // Every option the API shows comes back as the API takes it: an edit keeps them all.
  const full = [
    { name: 'api', addr: '10.0.0.2:443', options: { weight: 0, maxconn: 500, check: true, inter: '2s', fall: 3, rise: 2, send_proxy: 'v2', tls: { verify: 'system', sni: 'host' } } },
    { name: 's2', addr: '10.0.0.3:80', options: { check: true, tls: { verify: 'none' } } },
  ];
  const text = serversText(full);
  assert.equal(text, '10.0.0.2:443 name=api weight=0 maxconn=500 inter=2s fall=3 rise=2 send-proxy=v2 tls=system sni=host\n10.0.0.3:80 tls');
  assert.deepEqual(parseServers(text), [
    { address: '10.0.0.2:443', name: 'api', weight: 0, maxconn: 500, inter: '2s', fall: 3, rise: 2, send_proxy: 'v2', tls: { verify: 'system', sni: 'host' } },
    { address: '10.0.0.3:80', tls: {} },
  ]);
  // What the page does not know goes to the API as typed, for its error to name it.
  assert.deepEqual(parseServers('10.0.0.4:80 bakup weight=heavy'), [{ address: '10.0.0.4:80', bakup: true, weight: 'heavy' }]);
  assert.equal(seg('203.0.113.0/24'), '203.0.113.0%2F24');
});

test('a diff is split into kinds of lines, and sizes read as bytes', () => {
  const d = '--- a (before)\n+++ a (this apply)\n@@ -1,2 +1,2 @@\n same\n-old\n+new\n';
  assert.deepEqual(diffLines(d).map(([k]) => k), ['head', 'head', 'hunk', 'ctx', 'del', 'add']);
  assert.deepEqual(diffLines(''), []);
  assert.equal(size(900), '900 B');
  assert.equal(size(12_600), '12.3 KiB');
  assert.equal(size(3 * 1024 * 1024), '3.0 MiB');
});

test('number fields: empty is null, digits a number, the rest as typed', () => {
  assert.equal(numberOrText('  '), null);
  assert.equal(numberOrText(' 31536000 '), 31536000);
  assert.equal(numberOrText('1y'), '1y');
  assert.equal(numberOrText('-5'), '-5');
});

test('a change of one part of a domain sends the rest as the API shows it', () => {
  const d = {
    domain: 'shop.example.com', backend: 'be_shop', profile: 'http-check:/health', sse_routing: true,
    servers: [{ name: 'api', addr: '10.0.0.2:443', options: { maxconn: 500, check: false, inter: '2s', tls: { verify: 'system' } } }],
    waf: { mode: 'off' }, suspended: false, https: { redirect: '301' },
  };
  assert.deepEqual(domainBody(d), {
    servers: [{ address: '10.0.0.2:443', name: 'api', maxconn: 500, inter: '2s', check: false, tls: { verify: 'system' } }],
    profile: 'http-check:/health',
    sse_routing: true,
  });
  // A delivered app's domain: only its app (servers and SSE routing would be refused).
  assert.deepEqual(domainBody({ domain: 'app.example.com', app: 'shop', waf: { mode: 'off' } }), { app: 'shop' });
});

test('WAF exclusions keep their lines; API fields name the part of the policy', () => {
  const { exclusions, lines } = parseExclusions('942100@/search\n\n  920350 \r\nabc@/x@y\n941100@');
  assert.deepEqual(exclusions, [
    { rule: 942100, path: '/search' },
    { rule: 920350 },
    // As typed: the API's refusal names the line's rule or path.
    { rule: 'abc', path: '/x@y' },
    { rule: 941100, path: '' },
  ]);
  assert.deepEqual(lines, [1, 3, 4, 5]);
  assert.equal(exclusionsText([{ rule: 942100, path: '/search' }, { rule: 920350 }]), '942100@/search\n920350');
  assert.deepEqual(parseExclusions(exclusionsText([{ rule: 942100, path: '/search' }, { rule: 920350 }])).exclusions,
    [{ rule: 942100, path: '/search' }, { rule: 920350 }]);
  assert.deepEqual(parseExclusions(''), { exclusions: [], lines: [] });
  assert.deepEqual(wafField('waf.paranoia'), { name: 'paranoia', index: null });
  assert.deepEqual(wafField('waf.exclusions[2].path'), { name: 'exclusions', index: 2 });
  assert.deepEqual(wafField('waf.exclusions'), { name: 'exclusions', index: null });
  assert.equal(wafField('servers[0].address'), null);
  assert.equal(wafField(''), null);
  assert.equal(withoutPosition('waf.exclusions[1].path: invalid path "search": must start with \'/\' at line 1 column 282'),
    'waf.exclusions[1].path: invalid path "search": must start with \'/\'');
  assert.equal(withoutPosition('invalid paranoia "9": must be a whole number from 1 to 4'), 'invalid paranoia "9": must be a whole number from 1 to 4');
  assert.equal(wafSummary({ mode: 'off', paranoia: 3 }), 'off');
  assert.equal(wafSummary(undefined), 'off');
  assert.equal(wafSummary({ mode: 'block', fail: 'closed', paranoia: 2, threshold: 5, exclusions: [{ rule: 1 }] }),
    'block · PL 2 · threshold 5 · fail closed · 1 exclusion');
  assert.equal(wafSummary({ mode: 'detect', fail: 'open', paranoia: 1, threshold: 7, exclusions: [] }),
    'detect · PL 1 · threshold 7 · fail open');
});

test('the WAF agent is up, DOWN with why, or not set up', () => {
  assert.deepEqual(wafAgent({ configured: false }), { level: '', word: 'Not set up', detail: 'the [waf] section of hapctl.toml runs it (docs/waf.md)' });
  assert.deepEqual(wafAgent({ configured: true, up: true, pid: 42 }), { level: 'ok', word: 'Up', detail: 'PID 42' });
  assert.equal(wafAgent({ configured: true, up: false, down_reason: 'its process (pid 42) is gone' }).detail, 'its process (pid 42) is gone');
  assert.equal(wafAgent({ configured: true, up: false }).word, 'DOWN');
  assert.equal(wafRules({ rules: 917, crs: 'OWASP_CRS/3.3.4', rules_loaded_at: 1 }), '917 rules · OWASP_CRS/3.3.4');
  assert.equal(wafRules({ rules: null, crs: null, rules_loaded_at: 1 }), 'CRS version unknown');
  assert.equal(wafRules({ configured: true, up: false }), 'none loaded');
});
