package io.github.redisslidingwindow;

import java.nio.file.Files;
import java.nio.file.Path;

/** The repository root: SLIDINGWINDOW_REPO, else the build's property, else relative paths. */
public final class Repo {
  private Repo() {}

  public static Path root() {
    String env = System.getenv("SLIDINGWINDOW_REPO");
    if (env != null && !env.isEmpty()) {
      return Path.of(env).toAbsolutePath().normalize();
    }
    String prop = System.getProperty("slidingwindow.repo");
    if (prop != null && !prop.isEmpty()) {
      return Path.of(prop).toAbsolutePath().normalize();
    }
    Path p = Path.of("").toAbsolutePath();
    while (p != null && !Files.isDirectory(p.resolve("conformance"))) {
      p = p.getParent();
    }
    if (p == null) {
      throw new IllegalStateException("no repository root: set SLIDINGWINDOW_REPO");
    }
    return p;
  }
}
