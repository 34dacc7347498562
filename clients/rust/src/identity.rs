//! Who is asking: the identity a request is counted against. The rules of the Python
//! client's `identity.py`.
//!
//! An authenticated caller is counted by API key or user id; anyone else by IP address.
//! The address comes from X-Forwarded-For only as far as trusted proxies vouch for it: the
//! header is read from the RIGHT (the hops our own proxies appended), skipping addresses
//! inside the trusted networks, and the first address outside them is the client.
//! Anything further left was written by the client and is ignored. IPv6 clients count as
//! their /64 by default.

use std::net::{IpAddr, Ipv6Addr};

/// One network: an address and a prefix length (`10.0.0.0/8`, `fd00::/8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Network {
    addr: IpAddr,
    prefix: u8,
}

fn mask_v6(a: Ipv6Addr, prefix: u8) -> Ipv6Addr {
    let bits = u128::from(a);
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(prefix.min(128)))
    };
    Ipv6Addr::from(bits & mask)
}

impl Network {
    /// Parses `"10.0.0.0/8"`, `"192.0.2.1"` (a /32), `"fd00::/8"`; host bits are ignored.
    pub fn parse(text: &str) -> Option<Network> {
        let (a, p) = match text.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text.trim(), None),
        };
        let addr: IpAddr = a.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max)?,
            None => max,
        };
        Some(Network { addr, prefix })
    }

    /// Whether `ip` is inside (same family only).
    pub fn contains(&self, ip: &IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = if self.prefix == 0 {
                    0
                } else {
                    u32::MAX << (32 - u32::from(self.prefix))
                };
                u32::from(n) & mask == u32::from(*a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => mask_v6(n, self.prefix) == mask_v6(*a, self.prefix),
            _ => false,
        }
    }
}

/// The networks of the proxies in front of the app (load balancer, ingress...).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    networks: Vec<Network>,
}

impl TrustedProxies {
    /// From network strings; panics on one that is no network (a configuration typo
    /// should fail at start-up, not trust nobody silently). See [`TrustedProxies::try_new`].
    pub fn new<I: IntoIterator<Item = T>, T: AsRef<str>>(networks: I) -> TrustedProxies {
        TrustedProxies::try_new(networks).unwrap_or_else(|bad| panic!("not a network: {bad:?}"))
    }

    /// From network strings; `Err` names the first that is no network.
    pub fn try_new<I: IntoIterator<Item = T>, T: AsRef<str>>(
        networks: I,
    ) -> Result<TrustedProxies, String> {
        let networks = networks
            .into_iter()
            .map(|n| Network::parse(n.as_ref()).ok_or_else(|| n.as_ref().to_string()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TrustedProxies { networks })
    }

    /// Whether `ip` is one of ours.
    pub fn contains(&self, ip: &IpAddr) -> bool {
        self.networks.iter().any(|n| n.contains(ip))
    }
}

/// The address in `text`, normalised, or `None` if it is none. Accepts what shows up in
/// headers and sockets: spaces, quotes, `[v6]`, `[v6]:port`, `v4:port`, zone ids
/// (`fe80::1%eth0`). IPv4-mapped IPv6 (`::ffff:192.0.2.1`) becomes the IPv4 address.
pub fn parse_ip(text: &str) -> Option<IpAddr> {
    let s = text.trim().trim_matches('"');
    let s = if let Some(rest) = s.strip_prefix('[') {
        &rest[..rest.find(']')?]
    } else if s.matches(':').count() == 1 {
        s.split(':').next().unwrap_or(s) // IPv4 with a port; IPv6 has at least two colons
    } else {
        s
    };
    let s = s.split('%').next().unwrap_or(s);
    let addr: IpAddr = s.parse().ok()?;
    Some(match addr {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    })
}

fn hops<'a>(forwarded_for: &[&'a str]) -> Vec<&'a str> {
    forwarded_for
        .iter()
        .flat_map(|line| line.split(','))
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect()
}

/// The client's address: the socket peer, unless the peer is a trusted proxy; then the
/// right-most X-Forwarded-For hop outside the trusted networks. `forwarded_for` holds the
/// header's lines in order.
///
/// A hop that is no address stops the walk at the last hop vouched for (a trusted proxy:
/// its clients share one limit rather than escape it). When every hop is trusted, the
/// left-most one is the client (the request came from inside).
pub fn client_ip(
    forwarded_for: &[&str],
    peer: Option<&str>,
    trusted: &TrustedProxies,
) -> Option<IpAddr> {
    let mut last = parse_ip(peer?)?;
    if !trusted.contains(&last) {
        return Some(last);
    }
    for hop in hops(forwarded_for).into_iter().rev() {
        let Some(addr) = parse_ip(hop) else {
            return Some(last);
        };
        if !trusted.contains(&addr) {
            return Some(addr);
        }
        last = addr;
    }
    Some(last)
}

/// The address as counted: IPv4 as is; IPv6 as its `/ipv6_prefix` network (`/64` by
/// default: one host usually holds a whole /64), e.g. `2001:db8:1:2::/64`.
pub fn ip_key(addr: IpAddr, ipv6_prefix: u8) -> String {
    match addr {
        IpAddr::V6(v6) if ipv6_prefix < 128 => {
            format!("{}/{ipv6_prefix}", mask_v6(v6, ipv6_prefix))
        }
        other => other.to_string(),
    }
}

/// `key:<api_key>`, else `user:<user_id>`, else `ip:<address>` (`ip:unknown` without a
/// usable peer). Pass `api_key` and `user_id` only once they are verified.
pub fn client_identity(
    api_key: Option<&str>,
    user_id: Option<&str>,
    forwarded_for: &[&str],
    peer: Option<&str>,
    trusted: &TrustedProxies,
    ipv6_prefix: u8,
) -> String {
    if let Some(k) = api_key.filter(|k| !k.is_empty()) {
        return format!("key:{k}");
    }
    if let Some(u) = user_id.filter(|u| !u.is_empty()) {
        return format!("user:{u}");
    }
    match client_ip(forwarded_for, peer, trusted) {
        Some(a) => format!("ip:{}", ip_key(a, ipv6_prefix)),
        None => "ip:unknown".into(),
    }
}

type ApiKeyCheck = std::sync::Arc<dyn Fn(&str) -> bool + Send + Sync>;
type PeerFn =
    std::sync::Arc<dyn Fn(&http::Extensions) -> Option<std::net::SocketAddr> + Send + Sync>;

/// The layer's default key extractor: `key:<api key>` when the API key header holds a key
/// the app accepts, `user:<id>` when an auth layer put a [`UserId`] in the
/// request's extensions (unless `users(false)`), else `ip:<client address>`.
///
/// The peer address is read from the request's extensions: a `std::net::SocketAddr`, or
/// what [`Identity::peer_with`] reads (axum: `ConnectInfo<SocketAddr>`; tonic:
/// `TcpConnectInfo`).
#[derive(Clone)]
pub struct Identity {
    pub(crate) trusted: TrustedProxies,
    pub(crate) api_key_header: Option<(http::HeaderName, ApiKeyCheck)>,
    pub(crate) ipv6_prefix: u8,
    pub(crate) users: bool,
    pub(crate) peer: Option<PeerFn>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("trusted", &self.trusted)
            .field(
                "api_key_header",
                &self.api_key_header.as_ref().map(|h| h.0.clone()),
            )
            .field("ipv6_prefix", &self.ipv6_prefix)
            .field("users", &self.users)
            .finish()
    }
}

impl Default for Identity {
    fn default() -> Identity {
        Identity {
            trusted: TrustedProxies::default(),
            api_key_header: None,
            ipv6_prefix: 64,
            users: true,
            peer: None,
        }
    }
}

impl Identity {
    /// By user, else by address; no proxies trusted.
    pub fn new() -> Identity {
        Identity::default()
    }

    /// By client address only, ignoring API keys and users (e.g. for a login route).
    pub fn by_ip(trusted: TrustedProxies) -> Identity {
        Identity {
            trusted,
            users: false,
            ..Identity::default()
        }
    }

    /// The proxies whose X-Forwarded-For hops are believed.
    pub fn trusted_proxies(mut self, trusted: TrustedProxies) -> Identity {
        self.trusted = trusted;
        self
    }

    /// Count by the API key in `header` when `is_valid` accepts it (a single value only);
    /// an unknown key is counted by address, so a client cannot dodge its limit by
    /// inventing keys.
    /// Panics on a name that is no header name.
    pub fn api_key(
        mut self,
        header: &str,
        is_valid: impl Fn(&str) -> bool + Send + Sync + 'static,
    ) -> Identity {
        let name = http::HeaderName::from_bytes(header.to_ascii_lowercase().as_bytes())
            .unwrap_or_else(|_| panic!("not a header name: {header:?}"));
        self.api_key_header = Some((name, std::sync::Arc::new(is_valid)));
        self
    }

    /// IPv6 clients count as their `/prefix` (default 64; 128: each address).
    pub fn ipv6_prefix(mut self, prefix: u8) -> Identity {
        self.ipv6_prefix = prefix.min(128);
        self
    }

    /// Whether API keys and a [`UserId`] extension count (default true; false: by
    /// address only).
    pub fn users(mut self, users: bool) -> Identity {
        self.users = users;
        self
    }

    /// Where the peer address is in the request's extensions, e.g. for axum
    /// `|e| e.get::<ConnectInfo<SocketAddr>>().map(|c| c.0)`.
    pub fn peer_with(
        mut self,
        f: impl Fn(&http::Extensions) -> Option<std::net::SocketAddr> + Send + Sync + 'static,
    ) -> Identity {
        self.peer = Some(std::sync::Arc::new(f));
        self
    }

    /// The identity of a request.
    pub fn of<B>(&self, req: &http::Request<B>) -> String {
        self.of_head(req.headers(), req.extensions())
    }

    /// The identity of a request from its headers and extensions (the peer: what
    /// [`peer_with`](Identity::peer_with) reads, else a `SocketAddr` or `IpAddr` extension).
    pub fn of_head(&self, headers: &http::HeaderMap, extensions: &http::Extensions) -> String {
        let peer = self
            .peer
            .as_ref()
            .and_then(|f| f(extensions))
            .or_else(|| extensions.get::<std::net::SocketAddr>().copied())
            .map(|a| a.to_string())
            .or_else(|| extensions.get::<IpAddr>().map(|a| a.to_string()));
        self.identify(headers, extensions, peer.as_deref())
    }

    /// The identity from the headers, the extensions (for a [`UserId`]) and the socket
    /// peer as text.
    pub fn identify(
        &self,
        headers: &http::HeaderMap,
        extensions: &http::Extensions,
        peer: Option<&str>,
    ) -> String {
        let api_key = self.api_key_header.as_ref().and_then(|(name, ok)| {
            let mut values = headers.get_all(name).iter();
            match (values.next(), values.next()) {
                (Some(v), None) => v.to_str().ok().filter(|v| ok(v)),
                _ => None,
            }
        });
        let user = if self.users {
            extensions.get::<UserId>().map(|u| u.0.as_str())
        } else {
            None
        };
        let api_key = if self.users { api_key } else { None };
        let xff: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        client_identity(api_key, user, &xff, peer, &self.trusted, self.ipv6_prefix)
    }
}

/// The authenticated user, put in a request's extensions by the app's auth layer; the
/// [`Identity`] counts such a request as `user:<id>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct UserId(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn right_most_untrusted_hop() {
        let t = TrustedProxies::new(["10.0.0.0/8"]);
        let ip = |xff: &[&str], peer| client_ip(xff, Some(peer), &t).map(|a| a.to_string());
        assert_eq!(
            ip(&["1.2.3.4, 5.6.7.8"], "10.0.0.1").as_deref(),
            Some("5.6.7.8")
        );
        assert_eq!(
            ip(&["1.2.3.4, 10.1.1.1"], "10.0.0.1").as_deref(),
            Some("1.2.3.4")
        );
        assert_eq!(ip(&["1.2.3.4"], "9.9.9.9").as_deref(), Some("9.9.9.9"));
        assert_eq!(
            ip(&["bogus, 10.1.1.1"], "10.0.0.1").as_deref(),
            Some("10.1.1.1")
        );
        assert_eq!(
            ip(&["10.2.2.2", "10.1.1.1"], "10.0.0.1").as_deref(),
            Some("10.2.2.2")
        );
        assert_eq!(
            ip(&[], "[::ffff:192.0.2.1]:80").as_deref(),
            Some("192.0.2.1")
        );
    }

    #[test]
    fn keys() {
        let t = TrustedProxies::default();
        assert_eq!(
            client_identity(Some("k"), Some("u"), &[], Some("1.2.3.4"), &t, 64),
            "key:k"
        );
        assert_eq!(
            client_identity(None, Some("u"), &[], Some("1.2.3.4"), &t, 64),
            "user:u"
        );
        assert_eq!(
            client_identity(None, None, &[], Some("1.2.3.4:5"), &t, 64),
            "ip:1.2.3.4"
        );
        assert_eq!(
            client_identity(None, None, &[], Some("[2001:db8:1:2:3:4:5:6]:443"), &t, 64),
            "ip:2001:db8:1:2::/64"
        );
        assert_eq!(
            client_identity(None, None, &[], Some("fe80::1%eth0"), &t, 128),
            "ip:fe80::1"
        );
        assert_eq!(client_identity(None, None, &[], None, &t, 64), "ip:unknown");
        assert_eq!(
            client_identity(None, None, &[], Some("nonsense"), &t, 64),
            "ip:unknown"
        );
    }
}
