package io.github.redisslidingwindow;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.security.MessageDigest;
import java.util.HexFormat;
import org.junit.jupiter.api.Test;

class LibraryTest {
  @Test
  void theJarCarriesTheRepositorysLibrary() throws Exception {
    String file = Files.readString(Repo.root().resolve("lua/slidingwindow.lua"));
    assertEquals(file, Library.code(), "one source: lua/slidingwindow.lua copied at build time");
    assertTrue(Library.code().startsWith("#!lua name=slidingwindow\n"));
    String body = file.substring(file.indexOf('\n') + 1);
    assertEquals(body, Library.body());
    String sha =
        HexFormat.of().formatHex(MessageDigest.getInstance("SHA-1").digest(body.getBytes("UTF-8")));
    assertEquals(sha, Library.sha());
    assertTrue(Library.version().matches("\\d+\\.\\d+\\.\\d+"), Library.version());
  }

  @Test
  void versionsCompareByNumber() {
    String v = Library.version();
    assertFalse(Library.isOlder(v));
    assertTrue(Library.isOlder("0.0.1"));
    assertFalse(Library.isOlder("999.0.0"));
    assertTrue(Library.isOlder("garbage"), "an unreadable version is replaced");
  }
}
