/**
 * Identity: normalised addresses, X-Forwarded-For read from the right, namespaces (the
 * Python client's test_identity.py, case for case), the request helpers, a real
 * node:http request with X-Forwarded-For sent twice, and the same answers as the Python
 * client's identity.py on a few thousand generated inputs. No Redis. (Through the example
 * gateways over HTTP: examples.test.ts.)
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createServer, type IncomingMessage } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import {
  TrustedProxies, byIp, clientIdentity, clientIp, headerApiKey, ipKey, parseIp, requestIdentity, type RequestLike,
} from '../src';
import { REPO } from './helpers/servers';
import { prng } from './helpers/prng';

const PROXY = '10.0.0.5';
const TRUSTED = ['10.0.0.0/8', 'fd00::/8'];

test('parseIp: the forms headers and sockets carry, normalised', () => {
  const cases: Array<[string, string | null]> = [
    ['192.0.2.1', '192.0.2.1'],
    [' 192.0.2.1 ', '192.0.2.1'],
    ['192.0.2.1:5678', '192.0.2.1'],
    ['::ffff:192.0.2.1', '192.0.2.1'], // IPv4-mapped: what a dual-stack socket reports
    ['[::ffff:c000:201]:443', '192.0.2.1'],
    ['2001:DB8:0:0::1', '2001:db8::1'],
    ['[2001:db8::1]', '2001:db8::1'],
    ['"[2001:db8::1]:8080"', '2001:db8::1'],
    ['fe80::1%eth0', 'fe80::1'],
    ['unknown', null],
    ['', null],
    ['[2001:db8::1', null],
    ['1.2.3', null],
    // and a few more than the Python table: Python's ipaddress rules, RFC 5952 output
    ['010.0.0.1', null], // leading zeros refused, as Python (and glibc's inet_pton) do
    ['256.0.0.1', null],
    ['1::2::3', null],
    ['1:2:3:4:5:6:7:8:9', null],
    [':1:2:3:4:5:6:7', null],
    ['::1.2.3.4', '::102:304'],
    ['1:0:0:2:0:0:0:3', '1:0:0:2::3'], // the longest run of zeros
    ['1:0:0:2:0:0:3:4', '1::2:0:0:3:4'], // the first of two equal runs
    ['1:0:2:3:4:5:6:7', '1:0:2:3:4:5:6:7'], // one zero group stays
    ['0:0:0:0:0:0:0:0', '::'],
  ];
  for (const [text, expected] of cases) assert.equal(parseIp(text), expected, JSON.stringify(text));
});

test('an untrusted peer: X-Forwarded-For is ignored', () => {
  assert.equal(clientIp('1.1.1.1', '203.0.113.7', TRUSTED), '203.0.113.7');
  assert.equal(clientIp('1.1.1.1', '203.0.113.7'), '203.0.113.7'); // none trusted
});

test('X-Forwarded-For is read from the right, skipping trusted hops', () => {
  // client-supplied junk, the real client, then two of our proxies
  const header = '6.6.6.6, 198.51.100.9, 10.1.1.1, 10.2.2.2';
  assert.equal(clientIp(header, PROXY, TRUSTED), '198.51.100.9');
  // the same hops split over several header lines, in order
  assert.equal(clientIp(['6.6.6.6, 198.51.100.9', '10.1.1.1', '10.2.2.2'], PROXY, TRUSTED), '198.51.100.9');
  // IPv6 trusted proxies and a mapped client address
  assert.equal(clientIp('::ffff:198.51.100.9, fd00::2', 'fd00::1', TRUSTED), '198.51.100.9');
});

test('odd chains', () => {
  // Garbage right of the trusted hops: stop at the last hop we can vouch for.
  assert.equal(clientIp('198.51.100.9, garbage', PROXY, TRUSTED), PROXY);
  // Every hop trusted: the request came from inside; the left-most one.
  assert.equal(clientIp('10.9.9.9, 10.1.1.1', PROXY, TRUSTED), '10.9.9.9');
  // No header behind a trusted proxy: the proxy itself.
  assert.equal(clientIp(null, PROXY, TRUSTED), PROXY);
  assert.equal(clientIp('1.1.1.1', null, TRUSTED), null); // no peer (e.g. a unix socket)
});

test('namespaces never collide', () => {
  assert.equal(clientIdentity({ apiKey: 'k1', peer: '203.0.113.7' }), 'key:k1');
  assert.equal(clientIdentity({ userId: 42, peer: '203.0.113.7' }), 'user:42');
  assert.equal(clientIdentity({ peer: '203.0.113.7' }), 'ip:203.0.113.7');
  assert.equal(clientIdentity({ peer: '::ffff:203.0.113.7' }), 'ip:203.0.113.7');
  // An API key that looks like an address still lives in another namespace.
  assert.notEqual(clientIdentity({ apiKey: '203.0.113.7' }), clientIdentity({ peer: '203.0.113.7' }));
  assert.equal(clientIdentity({ apiKey: '', userId: '', peer: null }), 'ip:unknown');
  assert.equal(clientIdentity({ userId: 0 }), 'user:0'); // 0 is an id (as in Python)
});

test('IPv6 is counted by its /64 (ipv6Prefix)', () => {
  const a = clientIdentity({ peer: '2001:db8:1:2:aaaa::1' });
  const b = clientIdentity({ peer: '2001:db8:1:2:bbbb::9' });
  assert.equal(a, 'ip:2001:db8:1:2::/64');
  assert.equal(b, a);
  assert.equal(clientIdentity({ peer: '2001:db8:1:2:aaaa::1', ipv6Prefix: 128 }), 'ip:2001:db8:1:2:aaaa::1');
  assert.equal(ipKey('2001:db8:1:2:aaaa::1', 48), '2001:db8:1::/48');
  assert.equal(ipKey('192.0.2.1', 48), '192.0.2.1'); // IPv4 as is
  assert.throws(() => ipKey('nope'), RangeError);
  assert.throws(() => requestIdentity({ ipv6Prefix: 129 }), RangeError);
});

test('TrustedProxies: networks normalised (host bits dropped, one address a /32 or /128), bad ones refused', () => {
  const t = new TrustedProxies(['10.1.2.3/8', '127.0.0.1', 'FD00::1/8', '::1']);
  assert.deepEqual(t.networks, ['10.0.0.0/8', '127.0.0.1/32', 'fd00::/8', '::1/128']);
  assert.ok(t.has('10.200.0.1') && t.has('::ffff:10.0.0.1') && t.has('[fd12::3]:80') && t.has('127.0.0.1'));
  assert.ok(!t.has('11.0.0.1') && !t.has('127.0.0.2') && !t.has('::2') && !t.has('garbage') && !t.has(null));
  for (const bad of ['10.0.0.0/33', 'fd00::/129', '10.0.0.0/255.0.0.0', 'example.com', '10.0.0.0/', '']) {
    assert.throws(() => new TrustedProxies([bad]), RangeError, bad);
  }
});

function request(peer: string | undefined, headers: Record<string, string | string[]> = {}): RequestLike {
  return { headers, socket: { remoteAddress: peer } };
}

test('requestIdentity: a direct client cannot pose as proxied (spoofed X-Forwarded-For refused)', () => {
  const identity = requestIdentity({ trustedProxies: ['10.0.0.5/32'] });
  for (let i = 0; i < 3; i++) {
    assert.equal(identity(request('203.0.113.7', { 'x-forwarded-for': `198.18.1.${i}` })), 'ip:203.0.113.7');
  }
  // No proxy trusted at all (the default): the same.
  assert.equal(requestIdentity()(request('::ffff:127.0.0.1', { 'x-forwarded-for': '198.18.0.1' })), 'ip:127.0.0.1');
});

test('requestIdentity: behind a trusted proxy the right-most untrusted hop, whatever the client wrote left of it', () => {
  const identity = requestIdentity({ trustedProxies: ['127.0.0.1/32'] });
  for (let i = 0; i < 5; i++) {
    const xff = `198.18.0.${i}, 203.0.113.7`; // forged, then what our proxy appended
    assert.equal(identity(request('127.0.0.1', { 'x-forwarded-for': xff })), 'ip:203.0.113.7');
  }
  // several header lines (node's headersDistinct, or an array)
  assert.equal(identity(request('127.0.0.1', { 'x-forwarded-for': ['198.18.0.9', '203.0.113.8'] })), 'ip:203.0.113.8');
  // a Fetch Headers object
  const fetchHeaders = new Headers({ 'X-Forwarded-For': '198.18.0.9, 203.0.113.9' });
  assert.equal(identity({ headers: fetchHeaders, socket: { remoteAddress: '127.0.0.1' } }), 'ip:203.0.113.9');
  assert.equal(identity({ headers: {}, socket: null }), 'ip:unknown');
});

test('requestIdentity: a valid API key, else the user, else the address; invented and doubled keys are no identity', () => {
  const keys = new Set(['k-alice', 'k-bob']);
  const identity = requestIdentity({
    apiKey: headerApiKey('X-API-Key', keys),
    userId: (req: RequestLike & { user?: { id: number } }) => req.user?.id,
  });
  assert.equal(identity(request('203.0.113.7', { 'x-api-key': 'k-alice' })), 'key:k-alice');
  assert.equal(identity(request('203.0.113.7', { 'x-api-key': 'nope' })), 'ip:203.0.113.7');
  assert.equal(identity(request('203.0.113.7', { 'x-api-key': ['k-alice', 'k-bob'] })), 'ip:203.0.113.7');
  assert.equal(identity(request('203.0.113.7', { 'x-api-key': 'k-alice, k-bob' })), 'ip:203.0.113.7'); // node joins repeated lines
  assert.equal(identity({ ...request('203.0.113.7', { 'x-api-key': 'nope' }), user: { id: 7 } }), 'user:7');
  assert.equal(identity({ ...request('203.0.113.7', { 'x-api-key': 'k-bob' }), user: { id: 7 } }), 'key:k-bob');
  // a function works as well as a Set
  const byFn = requestIdentity({ apiKey: headerApiKey('x-api-key', (k) => k.startsWith('k-')) });
  assert.equal(byFn(request('203.0.113.7', { 'x-api-key': 'k-zed' })), 'key:k-zed');
  // byIp: the address whatever key is sent (a login route)
  assert.equal(byIp()(request('203.0.113.7', { 'x-api-key': 'k-alice' })), 'ip:203.0.113.7');
  assert.equal(byIp(['127.0.0.1'])(request('127.0.0.1', { 'x-forwarded-for': '203.0.113.5' })), 'ip:203.0.113.5');
});

test('over node:http: X-Forwarded-For sent on two lines is read in order; an untrusted peer is counted by its socket', async () => {
  const proxied = requestIdentity({ trustedProxies: ['127.0.0.1', '10.0.0.0/8'] });
  const direct = requestIdentity({ apiKey: headerApiKey('x-api-key', new Set(['k1'])) });
  // Read while the request is served: once its socket is closed, remoteAddress is gone.
  const seen: Array<{ xff: unknown; proxied: string; direct: string }> = [];
  const server = createServer((req: IncomingMessage, res) => {
    seen.push({ xff: req.headers['x-forwarded-for'], proxied: proxied(req), direct: direct(req) });
    res.end('ok');
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  const { port } = server.address() as AddressInfo;
  const raw = (lines: string[]): Promise<void> => new Promise((ok, fail) => {
    const sock = connect(port, '127.0.0.1', () => {
      sock.end(['GET / HTTP/1.1', 'Host: x', 'Connection: close', ...lines, '', ''].join('\r\n'));
    });
    sock.on('data', () => undefined);
    sock.on('close', () => ok());
    sock.on('error', fail);
  });
  try {
    await raw(['X-Forwarded-For: 198.18.0.1, 203.0.113.7', 'X-Forwarded-For: 10.1.1.1']);
    await raw(['X-Forwarded-For: 198.18.0.2', 'X-API-Key: k1', 'X-API-Key: k1']);
    await raw(['X-API-Key: k1']);
  } finally {
    await new Promise((ok) => server.close(ok));
  }
  assert.deepEqual(seen, [
    // node joins the lines in order; behind trusted proxies, the right-most untrusted hop
    { xff: '198.18.0.1, 203.0.113.7, 10.1.1.1', proxied: 'ip:203.0.113.7', direct: 'ip:127.0.0.1' },
    // the same key twice is no key (node joins the lines: "k1, k1"); the peer itself is trusted and the hop outside
    { xff: '198.18.0.2', proxied: 'ip:198.18.0.2', direct: 'ip:127.0.0.1' },
    { xff: undefined, proxied: 'ip:127.0.0.1', direct: 'key:k1' },
  ]);
});

const PY_IDENTITY = join(REPO, 'clients', 'python', 'src', 'slidingwindow', 'identity.py');

const PY_SCRIPT = `
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("sw_identity", sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
cases = json.load(sys.stdin)
out = {"parse": [], "client": []}
for text in cases["parse"]:
    got = m.parse_ip(text)
    out["parse"].append(str(got) if got is not None else None)
for c in cases["client"]:
    got = m.client_ip(c["xff"], c["peer"], c["trusted"])
    ident = m.client_identity(forwarded_for=c["xff"], peer=c["peer"], trusted_proxies=c["trusted"], ipv6_prefix=c["prefix"])
    out["client"].append([str(got) if got is not None else None, ident])
print(json.dumps(out))
`;

function generated(seed: number): { parse: string[]; client: Array<{ xff: string | string[] | null; peer: string | null; trusted: string[]; prefix: number }> } {
  const rnd = prng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const hex = (): string => {
    const v = rnd() < 0.5 ? 0 : Math.floor(rnd() * 0x10000);
    let s = v.toString(16);
    if (rnd() < 0.2) s = s.padStart(4, '0');
    return rnd() < 0.3 ? s.toUpperCase() : s;
  };
  const v4 = (): string => Array.from({ length: 4 }, () => String(pick([0, 1, 10, 127, 192, 203, 255, Math.floor(rnd() * 256)]))).join('.');
  const v6 = (): string => {
    const groups = Array.from({ length: 8 }, hex);
    if (rnd() < 0.2) return `${groups.slice(0, 6).join(':')}:${v4()}`;
    if (rnd() < 0.3) { // compressed by hand somewhere
      const at = Math.floor(rnd() * 8);
      const len = 1 + Math.floor(rnd() * (8 - at));
      return `${groups.slice(0, at).join(':')}::${groups.slice(at + len).join(':')}`;
    }
    return groups.join(':');
  };
  const fixed = ['::', '::1', '::ffff:10.0.0.1', '::ffff:c000:201', 'fe80::1%eth0', 'fe80::1%', '[2001:db8::1]:443',
    '[::1', '1.2.3.4:80', '1.2.3.4:', '"1.2.3.4"', ' 1.2.3.4 ', '\u00a01.2.3.4', '\u00851.2.3.4', '\ufeff1.2.3.4',
    '\u001f1.2.3.4', '010.1.2.3', '1.2.3.04', '0.0.0.0', '1.2.3', '1.2.3.4.5', '1:2:3:4:5:6:7:8', '1:2:3:4:5:6:7:8:9',
    '1::2::3', ':1:2:3:4:5:6:7', '1:2:3:4:5:6:7:', '1:2:3:4:5:6:7::', '::1:2:3:4:5:6:7', '::1.2.3.4', '::1.2.3',
    '1:2:3:4:5:6:1.2.3.4', '12345::', 'g::1', '::ffff:1.2.3.256', '1.2.3.4%x', 'unknown', '', '[', '[]', '""',
    '١.2.3.4', '1.2.3.4 5', '[1.2.3.4]', '[1.2.3.4]:80', 'fd00::5', '10.0.0.5', '127.0.0.1', '::ffff:127.0.0.1'];
  const alphabet = '0123456789abcdefABCDEF:.[]%" ,';
  const garbage = (): string => Array.from({ length: Math.floor(rnd() * 16) }, () => pick([...alphabet])).join('');
  const address = (): string => {
    const r = rnd();
    if (r < 0.25) return v4();
    if (r < 0.55) return v6();
    if (r < 0.75) return pick(fixed);
    if (r < 0.85) return `[${v6()}]${rnd() < 0.5 ? ':8080' : ''}`;
    return garbage();
  };
  const parse = [...fixed, ...Array.from({ length: 1500 }, address)];
  const pool = ['10.0.0.5', '10.1.1.1', 'fd00::2', '127.0.0.1', '::ffff:10.2.2.2', '203.0.113.7', '198.51.100.9',
    '2001:db8:1:2::9', 'garbage', '', ' ', '192.0.2.1:5678', '[fd00::3]:80'];
  const trustedChoices = [[], ['10.0.0.0/8', 'fd00::/8'], ['127.0.0.1/32'], ['10.0.0.5'], ['0.0.0.0/0'], ['::/0'],
    ['192.0.2.0/24', '2001:db8::/32', '10.0.0.0/8']];
  const client = Array.from({ length: 1500 }, () => {
    const hop = (): string => (rnd() < 0.7 ? pick(pool) : address());
    const hopsList = Array.from({ length: Math.floor(rnd() * 5) }, hop);
    const r = rnd();
    const xff = r < 0.1 ? null : r < 0.3 ? hopsList.map((h) => h) : hopsList.join(pick([', ', ',', ' , ']));
    return { xff, peer: rnd() < 0.05 ? null : hop(), trusted: pick(trustedChoices), prefix: pick([0, 48, 64, 127, 128]) };
  });
  return { parse, client };
}

function python(): string | false {
  if (!existsSync(PY_IDENTITY)) return `${PY_IDENTITY} is missing`;
  try {
    execFileSync(process.env.PYTHON ?? 'python3', ['-c', 'import ipaddress, sys; assert sys.version_info >= (3, 9, 5)']);
    return false;
  } catch {
    return 'no python3 >= 3.9.5 (leading zeros in IPv4 refused since then)';
  }
}

test('the same answers as the Python client (identity.py, Python ipaddress) on 3,000 generated inputs', { skip: python() }, () => {
  const cases = generated(20261201);
  const out = JSON.parse(execFileSync(process.env.PYTHON ?? 'python3', ['-c', PY_SCRIPT, PY_IDENTITY],
    { input: JSON.stringify(cases), encoding: 'utf8', maxBuffer: 64 << 20 })) as
    { parse: Array<string | null>; client: Array<[string | null, string]> };
  let valid = 0;
  cases.parse.forEach((text, i) => {
    if (out.parse[i] !== null) valid++;
    assert.equal(parseIp(text), out.parse[i], `parseIp(${JSON.stringify(text)})`);
  });
  assert.ok(valid > 800 && valid < cases.parse.length - 200, `${valid} of ${cases.parse.length} valid: a corpus of both kinds`);
  const answers = new Set<string>();
  cases.client.forEach((c, i) => {
    const [ip, identity] = out.client[i]!;
    const what = JSON.stringify(c);
    assert.equal(clientIp(c.xff, c.peer, c.trusted), ip, `clientIp ${what}`);
    assert.equal(clientIdentity({ forwardedFor: c.xff, peer: c.peer, trustedProxies: c.trusted, ipv6Prefix: c.prefix }),
      identity, `clientIdentity ${what}`);
    answers.add(identity);
  });
  assert.ok(answers.size > 50, `${answers.size} distinct identities`);
});
