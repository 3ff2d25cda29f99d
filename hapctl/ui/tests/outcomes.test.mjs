// Unit tests of the lines the dashboard shows for an action's outcome (recovery on the
// Overview): `node --test hapctl/ui/tests/`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { applyOutcome, applyRefusal, reloadOutcome, stopOutcome } from '../js/format.js';

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
