package io.github.redisslidingwindow;

import java.util.ArrayList;
import java.util.List;

/** The networks whose X-Forwarded-For is believed ({@code "10.0.0.0/8"}, {@code "fd00::/8"}). */
public final class TrustedProxies {
  private record Network(IpAddress addr, int prefix) {
    boolean contains(IpAddress ip) {
      return addr.isIpv4() == ip.isIpv4() && addr.masked(prefix).equals(ip.masked(prefix));
    }
  }

  private final List<Network> networks;

  private TrustedProxies(List<Network> networks) {
    this.networks = List.copyOf(networks);
  }

  /** No trusted proxy: the socket's peer is the client. */
  public static TrustedProxies none() {
    return new TrustedProxies(List.of());
  }

  /** Parses networks; an entry that is not one throws IllegalArgumentException. */
  public static TrustedProxies of(Iterable<String> networks) {
    List<Network> out = new ArrayList<>();
    for (String n : networks) {
      String t = n.strip();
      int slash = t.indexOf('/');
      IpAddress a = IpAddress.literal(slash < 0 ? t : t.substring(0, slash));
      if (a == null) {
        throw new IllegalArgumentException("not a network: " + n);
      }
      int max = a.isIpv4() ? 32 : 128;
      int prefix = max;
      if (slash >= 0) {
        try {
          prefix = Integer.parseInt(t.substring(slash + 1));
        } catch (NumberFormatException e) {
          throw new IllegalArgumentException("not a network: " + n);
        }
        if (prefix < 0 || prefix > max) {
          throw new IllegalArgumentException("not a network: " + n);
        }
      }
      out.add(new Network(a, prefix));
    }
    return new TrustedProxies(out);
  }

  public static TrustedProxies of(String... networks) {
    return of(List.of(networks));
  }

  public boolean contains(IpAddress ip) {
    for (Network n : networks) {
      if (n.contains(ip)) {
        return true;
      }
    }
    return false;
  }
}
