package io.github.redisslidingwindow;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;

/**
 * The Functions library ({@code lua/slidingwindow.lua}, shipped in this jar as {@code
 * io/github/redisslidingwindow/slidingwindow.lua}).
 */
public final class Library {
  /** The command an operator runs to load the library. */
  public static final String LOAD_COMMAND =
      "redis-cli FUNCTION LOAD REPLACE \"$(cat lua/slidingwindow.lua)\"";

  private static final String CODE = read();
  private static final String BODY = CODE.substring(CODE.indexOf('\n') + 1);
  private static final String SHA = sha1(BODY);
  private static final String VERSION = findVersion();

  private Library() {}

  private static String read() {
    try (InputStream in = Library.class.getResourceAsStream("slidingwindow.lua")) {
      if (in == null) {
        throw new IllegalStateException("slidingwindow.lua is not in the jar");
      }
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new IllegalStateException("cannot read slidingwindow.lua", e);
    }
  }

  private static String sha1(String text) {
    try {
      MessageDigest d = MessageDigest.getInstance("SHA-1");
      return HexFormat.of().formatHex(d.digest(text.getBytes(StandardCharsets.UTF_8)));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }

  private static String findVersion() {
    for (String line : CODE.split("\n")) {
      String l = line.strip();
      if (l.startsWith("local VERSION = '") && l.endsWith("'")) {
        return l.substring("local VERSION = '".length(), l.length() - 1);
      }
    }
    throw new IllegalStateException("slidingwindow.lua has no `local VERSION = '...'` line");
  }

  /** The whole file, what FUNCTION LOAD takes. */
  public static String code() {
    return CODE;
  }

  /** The file without its {@code #!lua} line, what EVAL and EVALSHA take. */
  public static String body() {
    return BODY;
  }

  /** The sha1 (lower-case hex) of {@link #body()}. */
  public static String sha() {
    return SHA;
  }

  /** The library's VERSION. */
  public static String version() {
    return VERSION;
  }

  static List<Long> versionParts(String v) {
    List<Long> parts = new ArrayList<>();
    try {
      for (String p : v.split("\\.")) {
        parts.add(Long.parseLong(p));
      }
    } catch (NumberFormatException e) {
      return List.of();
    }
    return parts;
  }

  /** Whether a loaded library's version is older than this jar's. */
  static boolean isOlder(String v) {
    List<Long> a = versionParts(v);
    List<Long> b = versionParts(VERSION);
    for (int i = 0; i < Math.min(a.size(), b.size()); i++) {
      int c = Long.compare(a.get(i), b.get(i));
      if (c != 0) {
        return c < 0;
      }
    }
    return a.size() < b.size();
  }
}
