package io.github.redisslidingwindow;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.function.Predicate;

/**
 * Who a request is, as a rate-limit identity: {@code key:<api key>}, else {@code user:<id>}, else
 * {@code ip:<address or IPv6 network>}, else {@code ip:unknown}. The address is the socket's peer,
 * or, when the peer is a trusted proxy, the right-most X-Forwarded-For hop that is not one.
 */
public final class Identity {
  private final TrustedProxies trusted;
  private final String apiKeyHeader;
  private final Predicate<String> apiKeyValid;
  private final int ipv6Prefix;
  private final boolean users;

  private Identity(
      TrustedProxies trusted,
      String apiKeyHeader,
      Predicate<String> apiKeyValid,
      int ipv6Prefix,
      boolean users) {
    this.trusted = Objects.requireNonNull(trusted);
    this.apiKeyHeader = apiKeyHeader;
    this.apiKeyValid = apiKeyValid;
    this.ipv6Prefix = ipv6Prefix;
    this.users = users;
  }

  /** API key, user, then address; no trusted proxy; IPv6 by /64. */
  public static Identity create() {
    return new Identity(TrustedProxies.none(), null, null, 64, true);
  }

  /** The address only, ignoring API key and user. */
  public static Identity byIp(TrustedProxies trusted) {
    return new Identity(trusted, null, null, 64, false);
  }

  public Identity trustedProxies(TrustedProxies t) {
    return new Identity(t, apiKeyHeader, apiKeyValid, ipv6Prefix, users);
  }

  /** A key header is the identity when sent once and accepted by {@code isValid}. */
  public Identity apiKey(String header, Predicate<String> isValid) {
    return new Identity(trusted, header.toLowerCase(Locale.ROOT), isValid, ipv6Prefix, users);
  }

  public Identity ipv6Prefix(int prefix) {
    return new Identity(
        trusted, apiKeyHeader, apiKeyValid, Math.max(0, Math.min(128, prefix)), users);
  }

  private static List<String> lines(Map<String, List<String>> headers, String lowerName) {
    List<String> out = new ArrayList<>();
    if (headers != null) {
      for (Map.Entry<String, List<String>> e : headers.entrySet()) {
        if (e.getKey().toLowerCase(Locale.ROOT).equals(lowerName)) {
          out.addAll(e.getValue());
        }
      }
    }
    return out;
  }

  /**
   * The identity of a request.
   *
   * @param headers header name (any case) to its lines, in order
   * @param user an authenticated user id, or null
   * @param peer the socket's address, or null
   */
  public String identify(Map<String, List<String>> headers, String user, String peer) {
    if (users && apiKeyHeader != null) {
      List<String> keys = lines(headers, apiKeyHeader);
      if (keys.size() == 1 && !keys.get(0).isEmpty() && apiKeyValid.test(keys.get(0))) {
        return "key:" + keys.get(0);
      }
    }
    if (users && user != null && !user.isEmpty()) {
      return "user:" + user;
    }
    IpAddress ip = clientIp(lines(headers, "x-forwarded-for"), peer, trusted);
    return ip == null ? "ip:unknown" : "ip:" + ipKey(ip, ipv6Prefix);
  }

  /** The client's address: the peer, or the right-most untrusted X-Forwarded-For hop. */
  public static IpAddress clientIp(List<String> forwardedFor, String peer, TrustedProxies t) {
    if (peer == null) {
      return null;
    }
    IpAddress last = IpAddress.parse(peer);
    if (last == null || !t.contains(last)) {
      return last;
    }
    List<String> hops = new ArrayList<>();
    for (String line : forwardedFor) {
      for (String h : line.split(",", -1)) {
        if (!h.strip().isEmpty()) {
          hops.add(h.strip());
        }
      }
    }
    for (int i = hops.size() - 1; i >= 0; i--) {
      IpAddress a = IpAddress.parse(hops.get(i));
      if (a == null) {
        return last;
      }
      if (!t.contains(a)) {
        return a;
      }
      last = a;
    }
    return last;
  }

  /** An IPv4 address as it is; an IPv6 address as its network of {@code ipv6Prefix} bits. */
  public static String ipKey(IpAddress a, int ipv6Prefix) {
    if (!a.isIpv4() && ipv6Prefix < 128) {
      return a.masked(ipv6Prefix) + "/" + ipv6Prefix;
    }
    return a.toString();
  }
}
