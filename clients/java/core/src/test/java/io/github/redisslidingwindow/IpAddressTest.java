package io.github.redisslidingwindow;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import org.junit.jupiter.api.Test;

class IpAddressTest {
  private static String text(String s) {
    IpAddress a = IpAddress.parse(s);
    return a == null ? null : a.toString();
  }

  @Test
  void literalsOnlyNeverANameLookup() {
    assertNull(text("localhost"));
    assertNull(text("example.com"));
    assertNull(text("1.2.3"));
    assertNull(text("1.2.3.256"));
    assertNull(text("01.2.3.4"), "a leading zero is refused, as the other clients do");
    assertNull(text("[::1"));
    assertNull(text(""));
  }

  @Test
  void normalisedForms() {
    assertEquals("1.2.3.4", text(" \"1.2.3.4:8080\" "));
    assertEquals("2001:db8::1", text("[2001:DB8:0:0:0:0:0:1]:443"));
    assertEquals("::1", text("::1"));
    assertEquals("1::", text("1:0:0:0:0:0:0:0"));
    assertEquals("::", text("::"));
    assertEquals("1:0:0:1::1", text("1:0:0:1:0:0:0:1"), "the longer zero run is compressed");
    assertEquals("1::1:0:0:1", text("1:0:0:0:1:0:0:1"), "the first of equal runs");
    assertEquals("1:2:3:4:5:6:7:0", text("1:2:3:4:5:6:7:0"), "one zero group stays");
    assertEquals("1.2.3.4", text("0:0:0:0:0:ffff:1.2.3.4"));
    assertEquals("fe80::1", text("fe80::1%eth0"));
  }

  @Test
  void networksAndKeys() {
    TrustedProxies t = TrustedProxies.of("10.0.0.0/8", "fd00::/8", "192.0.2.1");
    assertEquals(true, t.contains(IpAddress.parse("10.255.0.1")));
    assertEquals(false, t.contains(IpAddress.parse("11.0.0.1")));
    assertEquals(true, t.contains(IpAddress.parse("fdff::1")));
    assertEquals(true, t.contains(IpAddress.parse("192.0.2.1")));
    assertEquals(false, t.contains(IpAddress.parse("192.0.2.2")));
    assertEquals("2001:db8::/32", Identity.ipKey(IpAddress.parse("2001:db8:1::1"), 32));
    assertEquals("::/0", Identity.ipKey(IpAddress.parse("2001:db8:1::1"), 0));
  }
}
