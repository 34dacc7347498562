package slidingwindow

import (
	"net/http"
	"net/netip"
	"strings"
)

// TrustedProxies is a set of networks whose X-Forwarded-For is believed.
type TrustedProxies struct{ nets []netip.Prefix }

// NewTrustedProxies parses networks ("10.0.0.0/8", "fd00::/8", or a single address).
func NewTrustedProxies(networks ...string) (*TrustedProxies, error) {
	t := &TrustedProxies{}
	for _, n := range networks {
		if !strings.Contains(n, "/") {
			a, err := netip.ParseAddr(n)
			if err != nil {
				return nil, invalid("trusted proxy %q: %v", n, err)
			}
			a = a.Unmap()
			t.nets = append(t.nets, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(n)
		if err != nil {
			return nil, invalid("trusted proxy %q: %v", n, err)
		}
		t.nets = append(t.nets, p.Masked())
	}
	return t, nil
}

// Contains reports whether a is in one of the networks.
func (t *TrustedProxies) Contains(a netip.Addr) bool {
	if t == nil {
		return false
	}
	for _, p := range t.nets {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ParseIP reads an address as a socket or a proxy writes it: "1.2.3.4", "1.2.3.4:80",
// "2001:db8::1", "[2001:db8::1]:443"; IPv4-mapped IPv6 is the IPv4 address. ok is false
// for anything else.
func ParseIP(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		return a.WithZone("").Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().WithZone("").Unmap(), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.WithZone("").Unmap(), true
		}
	}
	return netip.Addr{}, false
}

// ClientIP is the client's address: the peer, or, when the peer is a trusted proxy, the
// right-most X-Forwarded-For hop that is not trusted (all trusted: the left-most; a hop
// that is no address stops the walk at the last hop vouched for). ok is false without
// a usable peer.
func ClientIP(header http.Header, peer string, trusted *TrustedProxies) (netip.Addr, bool) {
	cur, ok := ParseIP(peer)
	if !ok {
		return netip.Addr{}, false
	}
	if !trusted.Contains(cur) {
		return cur, true
	}
	var hops []string
	for _, line := range header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(line, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		if !trusted.Contains(cur) {
			return cur, true
		}
		a, ok := ParseIP(hops[i])
		if !ok {
			return cur, true
		}
		cur = a
	}
	return cur, true
}

// DefaultIPv6Prefix is the network an IPv6 client is counted by.
const DefaultIPv6Prefix = 64

// IPKey is "ip:<address>" for IPv4, "ip:<network>/<prefix>" for IPv6 (the address alone
// at prefix 128 or more), "ip:unknown" for no address.
func IPKey(a netip.Addr, ipv6Prefix int) string {
	if !a.IsValid() {
		return "ip:unknown"
	}
	if a.Is4() || ipv6Prefix >= 128 {
		return "ip:" + a.String()
	}
	if ipv6Prefix <= 0 {
		ipv6Prefix = DefaultIPv6Prefix
	}
	p, _ := a.Prefix(ipv6Prefix)
	return "ip:" + p.String()
}

// IdentityOptions says what identifies a client besides its address.
type IdentityOptions struct {
	// APIKeyHeader names a header carrying an API key; it identifies the client only
	// when sent once and accepted by APIKeys.
	APIKeyHeader string
	// APIKeys accepts a key; nil accepts none.
	APIKeys func(key string) bool
	// User is an authenticated user id ("" none).
	User string
	// IPv6Prefix is the network an IPv6 client is counted by (0: 64).
	IPv6Prefix int
	// ByIP counts by address only, ignoring key and user.
	ByIP bool
}

// AcceptKeys accepts exactly the keys given.
func AcceptKeys(keys ...string) func(string) bool {
	set := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		set[k] = struct{}{}
	}
	return func(k string) bool { _, ok := set[k]; return ok }
}

// ClientIdentity is the identity key: "key:<key>", else "user:<id>", else IPKey of
// ClientIP. clientIP is the address alone (ok false: none).
func ClientIdentity(header http.Header, peer string, trusted *TrustedProxies, o IdentityOptions) (identity string, clientIP netip.Addr, ok bool) {
	clientIP, ok = ClientIP(header, peer, trusted)
	if !o.ByIP {
		if o.APIKeyHeader != "" && o.APIKeys != nil {
			if v := header.Values(o.APIKeyHeader); len(v) == 1 && v[0] != "" && o.APIKeys(v[0]) {
				return "key:" + v[0], clientIP, ok
			}
		}
		if o.User != "" {
			return "user:" + o.User, clientIP, ok
		}
	}
	return IPKey(clientIP, o.IPv6Prefix), clientIP, ok
}

// RequestIdentity is ClientIdentity for an *http.Request (its RemoteAddr the peer).
func RequestIdentity(r *http.Request, trusted *TrustedProxies, o IdentityOptions) string {
	id, _, _ := ClientIdentity(r.Header, r.RemoteAddr, trusted, o)
	return id
}
