// Unit tests of the lines the dashboard shows for an action's outcome (recovery on the
// Overview) and of the Logs page's query: `node --test hapctl/ui/tests/`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { applyOutcome, applyRefusal, reloadOutcome, stopOutcome, logsPath, logTime, renewalsOutcome } from '../js/format.js';

test('an apply says its outcome, message, checks, reloads and their reasons', () => {
  const apply = { outcome: 'applied', message: 'HAProxy reloaded', checks: 1, reloads: 1,
    reload_reasons: [{ kind: 'config', detail: 'haproxy.cfg changed' }] };
  assert.equal(applyOutcome(apply), 'applied: HAProxy reloaded · 1 check(s), 1 reload(s) · reason: config: haproxy.cfg changed');
  assert.equal(applyOutcome({ outcome: 'unchanged', message: 'nothing to do', checks: 0, reloads: 0, reload_reasons: [] }),
    'unchanged: nothing to do · 0 check(s), 0 reload(s)');
});

test('a refused apply shows HAProxy\'s own lines after the message', () => {
  assert.equal(applyRefusal('HAProxy rejected it', { haproxy_messages: ['[ALERT] line 3: bad'] }), 'HAProxy rejected it · [ALERT] line 3: bad');
  assert.equal(applyRefusal('HAProxy is already running', undefined), 'HAProxy is already running');
});

test('a reload names the master, its workers and the reason', () => {
  const r = { master_pid: 7, new_workers: [9], old_workers: [], duration_ms: 412.5,
    reason: { kind: 'requested', detail: 'asked for by POST /v1/haproxy/reload' } };
  assert.equal(reloadOutcome(r), 'master PID 7 reloaded in 413 ms: new worker(s) 9, old worker(s) none · reason: requested: asked for by POST /v1/haproxy/reload');
});

test('a stop says it stays stopped', () => {
  assert.equal(stopOutcome({ outcome: 'stopped', master_pid: 7 }), 'master PID 7 stopped; it stays stopped until Start.');
  assert.equal(stopOutcome({ outcome: 'killed', master_pid: 7 }), 'master PID 7 killed (it did not exit in time); it stays stopped until Start.');
  assert.equal(stopOutcome({ outcome: 'not-running', master_pid: null }), 'HAProxy was not running; it stays stopped until Start.');
});

test('the logs query keeps the typed filters, trimmed, and the page to start from', () => {
  assert.equal(logsPath({}, null), '/v1/logs?limit=50');
  assert.equal(logsPath({ domain: ' *.example.com ', status: '4xx', client: '' }, null),
    '/v1/logs?limit=50&domain=*.example.com&status=4xx');
  assert.equal(logsPath({ client: '2001:db8::7' }, '0000000a-0000-4000-8000-00000000000a', 20),
    '/v1/logs?limit=20&client=2001%3Adb8%3A%3A7&before=0000000a-0000-4000-8000-00000000000a');
  // Typed text goes as a value, never as more parameters.
  assert.equal(logsPath({ domain: 'a&limit=9' }, null), '/v1/logs?limit=50&domain=a%26limit%3D9');
});

test('a log time keeps its milliseconds', () => {
  assert.match(logTime(1764700000.007, 'en-GB'), / \d{2}:\d{2}:\d{2}\.007$/);
  assert.match(logTime(1764700000.5, 'en-GB'), /\.500$/);
});

test('a renewal of what is due names the renewed and the failed ones', () => {
  assert.equal(renewalsOutcome([]), 'No certificate is due for renewal.');
  assert.equal(renewalsOutcome([{ name: 'a', report: {}, error: null }, { name: 'b', report: null, error: 'the CA said no' }]),
    'Renewed: a · Not renewed (the current certificate keeps serving): b: the CA said no');
  assert.equal(renewalsOutcome([{ name: 'a', report: {}, error: null }]), 'Renewed: a');
});
