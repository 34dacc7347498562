package io.github.redisslidingwindow;

import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.Arrays;

/**
 * An IPv4 or IPv6 address parsed from a literal only (never a name lookup). IPv4-mapped IPv6
 * addresses become IPv4.
 */
public final class IpAddress {
  private final byte[] bytes;

  private IpAddress(byte[] bytes) {
    this.bytes = bytes;
  }

  public boolean isIpv4() {
    return bytes.length == 4;
  }

  byte[] bytes() {
    return bytes.clone();
  }

  /**
   * Parses an address as headers and sockets carry it: quotes, {@code [v6]:port}, {@code v4:port}
   * and a {@code %zone} allowed. Null when it is not an address.
   */
  public static IpAddress parse(String text) {
    if (text == null) {
      return null;
    }
    String s = text.strip();
    if (s.length() >= 1 && s.startsWith("\"")) {
      s = s.substring(1);
    }
    if (s.endsWith("\"")) {
      s = s.substring(0, s.length() - 1);
    }
    if (s.startsWith("[")) {
      int end = s.indexOf(']');
      if (end < 0) {
        return null;
      }
      s = s.substring(1, end);
    } else if (s.chars().filter(c -> c == ':').count() == 1) {
      s = s.substring(0, s.indexOf(':'));
    }
    int zone = s.indexOf('%');
    if (zone >= 0) {
      s = s.substring(0, zone);
    }
    return literal(s);
  }

  /** An address literal exactly, or null. */
  static IpAddress literal(String s) {
    if (s.isEmpty()) {
      return null;
    }
    if (s.indexOf(':') < 0) {
      return v4(s);
    }
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      boolean ok =
          (c >= '0' && c <= '9')
              || (c >= 'a' && c <= 'f')
              || (c >= 'A' && c <= 'F')
              || c == ':'
              || c == '.';
      if (!ok) {
        return null;
      }
    }
    try {
      // A literal with ':' and only hex digits, colons and dots: parsed, never looked up.
      // An Inet4Address here was an IPv4-mapped IPv6 address: it is the IPv4 one.
      return new IpAddress(InetAddress.getByName(s).getAddress());
    } catch (UnknownHostException e) {
      return null;
    }
  }

  private static IpAddress v4(String s) {
    String[] parts = s.split("\\.", -1);
    if (parts.length != 4) {
      return null;
    }
    byte[] b = new byte[4];
    for (int i = 0; i < 4; i++) {
      String p = parts[i];
      if (p.isEmpty() || p.length() > 3 || (p.length() > 1 && p.charAt(0) == '0')) {
        return null;
      }
      int v = 0;
      for (int j = 0; j < p.length(); j++) {
        char c = p.charAt(j);
        if (c < '0' || c > '9') {
          return null;
        }
        v = v * 10 + (c - '0');
      }
      if (v > 255) {
        return null;
      }
      b[i] = (byte) v;
    }
    return new IpAddress(b);
  }

  /** The first {@code prefix} bits kept, the rest zero. */
  IpAddress masked(int prefix) {
    byte[] b = bytes.clone();
    for (int i = 0; i < b.length; i++) {
      int keep = Math.max(0, Math.min(8, prefix - i * 8));
      int mask = keep == 0 ? 0 : (0xff << (8 - keep)) & 0xff;
      b[i] = (byte) (b[i] & mask);
    }
    return new IpAddress(b);
  }

  @Override
  public String toString() {
    if (isIpv4()) {
      return (bytes[0] & 0xff)
          + "."
          + (bytes[1] & 0xff)
          + "."
          + (bytes[2] & 0xff)
          + "."
          + (bytes[3] & 0xff);
    }
    int[] g = new int[8];
    for (int i = 0; i < 8; i++) {
      g[i] = ((bytes[2 * i] & 0xff) << 8) | (bytes[2 * i + 1] & 0xff);
    }
    // RFC 5952: the longest run of two or more zero groups (the first of equals) becomes "::".
    int bestStart = -1;
    int bestLen = 1;
    for (int i = 0; i < 8; ) {
      if (g[i] != 0) {
        i++;
        continue;
      }
      int j = i;
      while (j < 8 && g[j] == 0) {
        j++;
      }
      if (j - i > bestLen) {
        bestStart = i;
        bestLen = j - i;
      }
      i = j;
    }
    StringBuilder out = new StringBuilder();
    for (int i = 0; i < 8; i++) {
      if (i == bestStart) {
        out.append("::");
        i += bestLen - 1;
        continue;
      }
      if (out.length() > 0 && out.charAt(out.length() - 1) != ':') {
        out.append(':');
      }
      out.append(Integer.toHexString(g[i]));
    }
    return out.toString();
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof IpAddress other && Arrays.equals(bytes, other.bytes);
  }

  @Override
  public int hashCode() {
    return Arrays.hashCode(bytes);
  }
}
