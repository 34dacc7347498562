#!/usr/bin/env node
// Copies an upstream test file, marking the named tests skipped (it( / test( -> .skip) and,
// with --real-waits, turning jest's fake-time waits into real ones. Used by host-suites.sh.
//
//   node skip-tests.cjs IN OUT [--real-waits] [--drop REGEX]... ['Suite::test title' | 'test title']...
//
// A title is the test's own string; 'Suite::title' names the top-level describe() it is in
// (for titles that repeat in two suites). --drop removes every line matching REGEX (used for
// lines that assert the host store's own key layout). Every title must be found, or it fails.
'use strict';
const fs = require('node:fs');

const [input, output, ...rest] = process.argv.slice(2);
let realWaits = false;
const drops = [];
const wanted = new Map();
for (let i = 0; i < rest.length; i += 1) {
  if (rest[i] === '--real-waits') realWaits = true;
  else if (rest[i] === '--drop') drops.push(new RegExp(rest[(i += 1)]));
  else wanted.set(rest[i], 0);
}

let suite = '';
const out = [];
for (let line of fs.readFileSync(input, 'utf8').split('\n')) {
  if (drops.some((re) => re.test(line))) continue;
  const d = /^describe\((['"`])(.*?)\1/.exec(line);
  if (d) suite = d[2];
  const t = /^(\s*)(it|test)\((['"`])(.*?)\3/.exec(line);
  if (t) {
    for (const name of [`${suite}::${t[4]}`, t[4]]) {
      if (wanted.has(name)) {
        wanted.set(name, wanted.get(name) + 1);
        line = line.replace(`${t[2]}(`, `${t[2]}.skip(`);
        break;
      }
    }
  }
  if (realWaits) {
    // The store's clock is the server's: a fake-time advance does not move it. Wait for real,
    // twice as long (+20 ms): a sliding window forgets a request after two windows, not one.
    line = line.replace(/^(\s*)jest\.useFakeTimers\(\)$/, '$1// (real timers: the store is on a real server)');
    line = line.replace(/jest\.advanceTimersByTime\((.*?)\)/,
      'await new Promise((resolve) => setTimeout(resolve, 2 * ($1) + 20))');
  }
  out.push(line);
}
const missing = [...wanted].filter(([, n]) => n === 0).map(([k]) => k);
if (missing.length > 0) {
  console.error(`skip-tests: not found in ${input}: ${missing.join(' | ')}`);
  process.exit(1);
}
fs.writeFileSync(output, out.join('\n'));
