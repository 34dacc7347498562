package io.github.redisslidingwindow;

import java.util.List;
import java.util.Locale;

/** How a cluster adapter routes the commands the limiter sends. */
public final class Routing {
  private Routing() {}

  /**
   * The key a command is routed by, or null for a keyless one (sent to every primary): after
   * numkeys for FCALL, FCALL_RO, EVAL and EVALSHA; none for FUNCTION, SCRIPT and the other server
   * commands below; else the first argument (DEL, the module's commands).
   */
  public static String key(List<String> command) {
    int i = keyIndex(command);
    return i < 0 ? null : command.get(i);
  }

  /** The index of the routing key in the command (see {@link #key}), or -1. */
  public static int keyIndex(List<String> command) {
    String name = command.get(0).toUpperCase(Locale.ROOT);
    switch (name) {
      case "FCALL", "FCALL_RO", "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO" -> {
        return command.size() > 3 && !"0".equals(command.get(2)) ? 3 : -1;
      }
      case "FUNCTION", "SCRIPT", "PING", "TIME", "INFO", "MODULE", "COMMAND", "ACL", "CONFIG" -> {
        return -1;
      }
      default -> {
        return command.size() > 1 ? 1 : -1;
      }
    }
  }
}
