// Unit tests of the WAF trial form's pure logic: `node --test hapctl/ui/tests/`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { headerLines, trialSummary, trialControl } from '../js/pages/protect-waf-trial.js';

test('header lines become names and values, blank lines skipped, the first bad line named', () => {
  assert.deepEqual(headerLines('User-Agent: Mozilla/5.0\n\n  Accept:text/html  \nX-A: b: c'), {
    headers: [{ name: 'User-Agent', value: 'Mozilla/5.0' }, { name: 'Accept', value: 'text/html' }, { name: 'X-A', value: 'b: c' }],
    bad: null,
  });
  assert.equal(headerLines('A: b\nno colon\n').bad, 2);
  assert.equal(headerLines(': empty name').bad, 1);
  assert.deepEqual(headerLines(''), { headers: [], bad: null });
});

test('the verdict line says what the edge would do, the score and the policy', () => {
  const t = { verdict: 'block', score: 10, threshold: 5, counted: [942100, 942190], policy: 'block:open:1:5:8192:', policy_from: "shop.example.com's" };
  assert.equal(trialSummary(t), "Blocked: score 10 of threshold 5 · counted: 942100, 942190 · policy shop.example.com's (block:open:1:5:8192:)");
  assert.equal(trialSummary({ ...t, verdict: 'pass', score: 0, counted: [] }), "Passed: score 0 of threshold 5 · policy shop.example.com's (block:open:1:5:8192:)");
  assert.match(trialSummary({ ...t, verdict: 'detect' }), /^Detected \(logged, not blocked\)/);
});

test('an API error lands at its control', () => {
  assert.equal(trialControl('url'), 'pwt-url');
  assert.equal(trialControl('headers[0]'), 'pwt-headers');
  assert.equal(trialControl('header'), 'pwt-headers');
  assert.equal(trialControl('policy.paranoia'), null);
  assert.equal(trialControl(''), null);
});
