/**
 * Who is asking: the identity a request is counted against, as the Python client decides it.
 *
 * An authenticated caller is counted by API key or user id; anyone else by IP address.
 * The address comes from X-Forwarded-For only as far as trusted proxies vouch for it: the
 * header is read from the RIGHT (the hops our own proxies appended), skipping addresses
 * inside the trusted networks, and the first address outside them is the client. Anything
 * further left was written by the client and is ignored, so a client cannot pick its own
 * identity by sending the header itself; and a peer that is no trusted proxy is the
 * client, whatever header it sends.
 *
 * Framework-neutral: `clientIdentity` takes the peer address and the header's values;
 * `requestIdentity` reads them from anything with Node's `headers` and `socket` (an
 * `http.IncomingMessage`, an Express request, a Fastify request).
 */

/** An address, parsed: IPv4 (32 bits) or IPv6 (128 bits). */
interface Ip {
  readonly version: 4 | 6;
  readonly value: bigint;
}

const V4_OCTET = /^[0-9]{1,3}$/;
const HEXTET = /^[0-9a-fA-F]{1,4}$/;

/** Dotted-quad IPv4 as Python's ipaddress takes it: four decimal octets, no leading zeros. */
function parseV4(s: string): bigint | null {
  const parts = s.split('.');
  if (parts.length !== 4) return null;
  let value = 0n;
  for (const part of parts) {
    if (!V4_OCTET.test(part) || (part.length > 1 && part[0] === '0')) return null;
    const n = Number(part);
    if (n > 255) return null;
    value = (value << 8n) | BigInt(n);
  }
  return value;
}

/** IPv6 as Python's ipaddress takes it: at most one `::`, an IPv4 tail allowed. */
function parseV6(s: string): bigint | null {
  const parts = s.split(':');
  if (parts.length < 3) return null;
  const tail = parts[parts.length - 1]!;
  if (tail.includes('.')) {
    const v4 = parseV4(tail);
    if (v4 === null) return null;
    parts.splice(parts.length - 1, 1, ((v4 >> 16n) & 0xffffn).toString(16), (v4 & 0xffffn).toString(16));
  }
  if (parts.length > 9) return null;
  let skip = -1;
  for (let i = 1; i < parts.length - 1; i++) {
    if (parts[i] === '') {
      if (skip >= 0) return null; // two '::'
      skip = i;
    }
  }
  let hi: number;
  let lo: number;
  if (skip >= 0) {
    hi = skip;
    lo = parts.length - skip - 1;
    if (parts[0] === '') { hi -= 1; if (hi !== 0) return null; } // a leading ':' only as part of '::'
    if (parts[parts.length - 1] === '') { lo -= 1; if (lo !== 0) return null; }
    if (8 - (hi + lo) < 1) return null;
  } else {
    if (parts.length !== 8 || parts[0] === '' || parts[7] === '') return null;
    hi = 8;
    lo = 0;
  }
  const groups: string[] = [...parts.slice(0, hi), ...Array<string>(8 - hi - lo).fill('0'),
    ...(lo > 0 ? parts.slice(parts.length - lo) : [])];
  let value = 0n;
  for (const g of groups) {
    if (!HEXTET.test(g)) return null;
    value = (value << 16n) | BigInt(parseInt(g, 16));
  }
  return value;
}

const MAPPED = 0xffffn << 32n;

function parseAddress(s: string): Ip | null {
  const v4 = parseV4(s);
  if (v4 !== null) return { version: 4, value: v4 };
  const v6 = parseV6(s);
  if (v6 === null) return null;
  // IPv4-mapped IPv6 (::ffff:192.0.2.1, what a dual-stack socket reports) is the IPv4 address.
  if (v6 >> 32n === 0xffffn) return { version: 4, value: v6 ^ MAPPED };
  return { version: 6, value: v6 };
}

/** The address's text as Python's ipaddress writes it (RFC 5952 for IPv6). */
function format(ip: Ip): string {
  if (ip.version === 4) {
    return [24n, 16n, 8n, 0n].map((shift) => String((ip.value >> shift) & 0xffn)).join('.');
  }
  const groups = Array.from({ length: 8 }, (_, i) => Number((ip.value >> BigInt(112 - 16 * i)) & 0xffffn));
  // The longest run of zero groups (the first of equal ones) becomes '::', if longer than one.
  let best = -1;
  let bestLen = 0;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) { i++; continue; }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) { best = i; bestLen = j - i; }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestLen < 2) return hex.join(':');
  return `${hex.slice(0, best).join(':')}::${hex.slice(best + bestLen).join(':')}`;
}

// What Python's str.strip() strips (str.isspace), which String.prototype.trim() differs from.
const PY_SPACE = /^[\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+|[\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+$/g;

function pyStrip(s: string): string {
  return s.replace(PY_SPACE, '');
}

/** The address in `text` as a bare IP, or null. Accepts what headers and sockets carry. */
function parseIpValue(text: string): Ip | null {
  let s = pyStrip(text).replace(/^"+|"+$/g, '');
  if (s.startsWith('[')) {
    const end = s.indexOf(']');
    if (end < 0) return null;
    s = s.slice(1, end);
  } else if (s.split(':').length === 2) {
    s = s.slice(0, s.indexOf(':')); // IPv4 with a port; IPv6 has at least two colons
  }
  const zone = s.indexOf('%');
  if (zone >= 0) s = s.slice(0, zone);
  return parseAddress(s);
}

/**
 * The address in `text`, normalised, or null if it is none. Accepts what shows up in
 * headers and sockets: spaces, quotes, `[v6]`, `[v6]:port`, `v4:port`, zone ids
 * (`fe80::1%eth0`). IPv4-mapped IPv6 (`::ffff:192.0.2.1`, what a dual-stack socket
 * reports) becomes the IPv4 address, so both forms count as one. IPv6 is written as RFC
 * 5952 says (lower case, the longest run of zeros as `::`).
 */
export function parseIp(text: string): string | null {
  const ip = parseIpValue(text);
  return ip === null ? null : format(ip);
}

interface Network { readonly version: 4 | 6; readonly base: bigint; readonly prefix: number }

function width(version: 4 | 6): number {
  return version === 4 ? 32 : 128;
}

function mask(version: 4 | 6, prefix: number): bigint {
  const bits = BigInt(width(version));
  return ((1n << BigInt(prefix)) - 1n) << (bits - BigInt(prefix));
}

/** `10.0.0.0/8`, `fd00::/8`, or one address (a /32 or /128). Host bits are dropped. */
function parseNetwork(text: string): Network {
  const slash = text.indexOf('/');
  const addrText = (slash < 0 ? text : text.slice(0, slash)).trim();
  const v4 = parseV4(addrText);
  const v6 = v4 === null ? parseV6(addrText) : null;
  const ip: Ip | null = v4 !== null ? { version: 4, value: v4 } : v6 !== null ? { version: 6, value: v6 } : null;
  if (ip === null) throw new RangeError(`not a network: ${JSON.stringify(text)} (write e.g. "10.0.0.0/8" or "fd00::/8")`);
  const prefixText = slash < 0 ? String(width(ip.version)) : text.slice(slash + 1).trim();
  const prefix = /^[0-9]{1,3}$/.test(prefixText) ? Number(prefixText) : NaN;
  if (!(prefix >= 0 && prefix <= width(ip.version))) {
    throw new RangeError(`bad prefix length in ${JSON.stringify(text)}: 0 to ${width(ip.version)}`);
  }
  return { version: ip.version, base: ip.value & mask(ip.version, prefix), prefix };
}

const NETWORKS = new WeakMap<TrustedProxies, readonly Network[]>();

function inside(trusted: TrustedProxies, ip: Ip): boolean {
  return NETWORKS.get(trusted)!.some((n) => n.version === ip.version && (ip.value & mask(n.version, n.prefix)) === n.base);
}

/** The networks of the proxies in front of the app (load balancer, ingress...). */
export class TrustedProxies {
  /** `networks`: `"10.0.0.0/8"`, `"fd00::/8"`, `"127.0.0.1"` (one address). Throws a RangeError on a bad one. */
  constructor(networks: Iterable<string> = []) {
    NETWORKS.set(this, [...networks].map(parseNetwork));
  }

  /** The networks, normalised: `["10.0.0.0/8", "fd00::/8"]`. */
  get networks(): string[] {
    return NETWORKS.get(this)!.map((n) => `${format({ version: n.version, value: n.base })}/${n.prefix}`);
  }

  /** Whether `addr` (any form parseIp takes) is inside one of the networks. */
  has(addr: string | null | undefined): boolean {
    const ip = addr === null || addr === undefined ? null : parseIpValue(addr);
    return ip !== null && inside(this, ip);
  }

  toString(): string {
    return `TrustedProxies(${JSON.stringify(this.networks)})`;
  }
}

/** A list of networks or a TrustedProxies. */
export type TrustedProxiesLike = TrustedProxies | Iterable<string>;

function proxies(trusted: TrustedProxiesLike): TrustedProxies {
  return trusted instanceof TrustedProxies ? trusted : new TrustedProxies(trusted);
}

/** X-Forwarded-For's values: one header line, or every line in order. */
export type ForwardedFor = string | readonly string[] | null | undefined;

/** The X-Forwarded-For hops, left to right, over all header lines in order. */
function hops(forwardedFor: ForwardedFor): string[] {
  if (forwardedFor === null || forwardedFor === undefined) return [];
  const lines = typeof forwardedFor === 'string' ? [forwardedFor] : forwardedFor;
  return lines.flatMap((line) => line.split(',')).map(pyStrip).filter((hop) => hop !== '');
}

/**
 * The client's address: the socket peer, unless the peer is a trusted proxy; then the
 * right-most X-Forwarded-For hop outside the trusted networks. Null without a usable peer.
 *
 * A hop that is no address stops the walk at the last hop vouched for (a trusted proxy:
 * its clients share one limit rather than escape it). When every hop is trusted, the
 * left-most one is the client (the request came from inside).
 */
export function clientIp(forwardedFor: ForwardedFor, peer: string | null | undefined,
  trustedProxies: TrustedProxiesLike = []): string | null {
  const trusted = proxies(trustedProxies);
  let last = peer ? parseIpValue(peer) : null;
  if (last === null || !inside(trusted, last)) return last === null ? null : format(last);
  for (const hop of hops(forwardedFor).reverse()) {
    const ip = parseIpValue(hop);
    if (ip === null) return format(last);
    if (!inside(trusted, ip)) return format(ip);
    last = ip;
  }
  return format(last);
}

function checkPrefix(ipv6Prefix: number): void {
  if (!Number.isInteger(ipv6Prefix) || ipv6Prefix < 0 || ipv6Prefix > 128) {
    throw new RangeError(`ipv6Prefix must be an integer from 0 to 128, got ${ipv6Prefix}`);
  }
}

/**
 * The address as counted: IPv4 as is; IPv6 as its /64 by default (`2001:db8:1:2::/64`),
 * since one host usually holds a whole /64 and could otherwise rotate through 2^64
 * identities. Throws a RangeError if `addr` is no address.
 */
export function ipKey(addr: string, ipv6Prefix = 64): string {
  checkPrefix(ipv6Prefix);
  const ip = parseIpValue(addr);
  if (ip === null) throw new RangeError(`not an IP address: ${JSON.stringify(addr)}`);
  if (ip.version === 6 && ipv6Prefix < 128) {
    return `${format({ version: 6, value: ip.value & mask(6, ipv6Prefix) })}/${ipv6Prefix}`;
  }
  return format(ip);
}

export interface ClientIdentityOptions {
  /** A verified API key: `key:<apiKey>`. */
  apiKey?: string | null;
  /** A verified user id: `user:<userId>` (when there is no API key). */
  userId?: string | number | null;
  /** X-Forwarded-For's value, or its lines in order. */
  forwardedFor?: ForwardedFor;
  /** The socket peer's address (`req.socket.remoteAddress`). */
  peer?: string | null;
  /** The networks whose X-Forwarded-For is believed. Default none. */
  trustedProxies?: TrustedProxiesLike;
  /** IPv6 clients are counted by this prefix. Default 64. */
  ipv6Prefix?: number;
}

/**
 * `key:<apiKey>`, else `user:<userId>`, else `ip:<address>` (`ip:unknown` without a usable
 * peer). The namespaces keep an API key from ever colliding with an address.
 *
 * Pass `apiKey` / `userId` only once they are verified: an unchecked API key header would
 * let a client mint a fresh identity per request.
 */
export function clientIdentity(options: ClientIdentityOptions = {}): string {
  const { apiKey, userId, forwardedFor, peer, trustedProxies = [], ipv6Prefix = 64 } = options;
  if (apiKey) return `key:${apiKey}`;
  if (userId !== null && userId !== undefined && userId !== '') return `user:${userId}`;
  const addr = clientIp(forwardedFor, peer, trustedProxies);
  return addr === null ? 'ip:unknown' : `ip:${ipKey(addr, ipv6Prefix)}`;
}

/** Node's headers (lower-case names; a repeated line as an array or joined with ", "), or a Fetch `Headers`. */
export type HeadersLike =
  | Readonly<Record<string, string | readonly string[] | number | undefined>>
  | { get(name: string): string | null };

/** What `requestIdentity` reads: an `http.IncomingMessage`, an Express or a Fastify request. */
export interface RequestLike {
  readonly headers: HeadersLike;
  readonly socket?: { readonly remoteAddress?: string | undefined } | null;
}

/** Every value of header `name`, in order (Node joins most repeated lines with ", "). */
export function headerValues(headers: HeadersLike, name: string): string[] {
  const lower = name.toLowerCase();
  if (typeof (headers as { get?: unknown }).get === 'function') {
    const value = (headers as { get(name: string): string | null }).get(lower);
    return value === null ? [] : [value];
  }
  const value = (headers as Readonly<Record<string, string | readonly string[] | number | undefined>>)[lower];
  if (value === undefined) return [];
  return Array.isArray(value) ? [...value as readonly string[]] : [String(value)];
}

/** Reads a verified API key from a request, or nothing. */
export type ApiKeyFn<R = RequestLike> = (req: R) => string | null | undefined;

/**
 * An API-key reader for requestIdentity: the header's value if `isValid` accepts it (a
 * function, or anything with `has`: a Set or Map of your keys). Only a key the app accepts
 * becomes an identity; an unknown key is counted by address, so a client cannot dodge its
 * limit by inventing keys. A header sent twice is no key.
 */
export function headerApiKey(header: string,
  isValid: ((key: string) => boolean) | { has(key: string): boolean }): ApiKeyFn {
  const valid = typeof isValid === 'function' ? isValid : (key: string) => isValid.has(key);
  return (req: RequestLike) => {
    const values = headerValues(req.headers, header);
    return values.length === 1 && valid(values[0]!) ? values[0]! : undefined;
  };
}

export interface IdentityOptions<R extends RequestLike = RequestLike> {
  /** The networks of your proxies, whose X-Forwarded-For is believed. Default none: the peer is the client. */
  trustedProxies?: TrustedProxiesLike;
  /** A verified API key, if the request carries one (see headerApiKey). */
  apiKey?: ApiKeyFn<R>;
  /** The authenticated user's id, if any (e.g. `(req) => req.user?.id` with Passport). */
  userId?: (req: R) => string | number | null | undefined;
  /** IPv6 clients are counted by this prefix. Default 64. */
  ipv6Prefix?: number;
}

/**
 * The default identity of a request: `key:<api key>` when `apiKey` returns one,
 * `user:<id>` when `userId` does, else `ip:<client address>` (see clientIp for how
 * X-Forwarded-For and `trustedProxies` are used). For express-rate-limit's and
 * @fastify/rate-limit's `keyGenerator`, or a middleware of your own.
 */
export function requestIdentity<R extends RequestLike = RequestLike>(options: IdentityOptions<R> = {}): (req: R) => string {
  const trusted = proxies(options.trustedProxies ?? []);
  const ipv6Prefix = options.ipv6Prefix ?? 64;
  checkPrefix(ipv6Prefix);
  const { apiKey, userId } = options;
  return (req: R) => clientIdentity({
    apiKey: apiKey?.(req),
    userId: userId?.(req),
    forwardedFor: headerValues(req.headers, 'x-forwarded-for'),
    peer: req.socket?.remoteAddress,
    trustedProxies: trusted,
    ipv6Prefix,
  });
}

/** An identity by client address only, ignoring API keys and users (for a login route). */
export function byIp(trustedProxies: TrustedProxiesLike = [], ipv6Prefix = 64): (req: RequestLike) => string {
  return requestIdentity({ trustedProxies, ipv6Prefix });
}
