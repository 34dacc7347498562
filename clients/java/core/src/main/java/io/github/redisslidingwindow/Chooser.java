package io.github.redisslidingwindow;

import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Logger;

/** Picks the module, the library with FCALL, or EVALSHA, and finds it again when it goes. */
final class Chooser {
  private static final Logger LOG = Logger.getLogger("slidingwindow");

  private final Backend choice;
  private final Object lock = new Object();
  private volatile Mode mode;
  private long generation;
  final AtomicLong detections = new AtomicLong();
  final AtomicLong loads = new AtomicLong();

  Chooser(Backend choice) {
    this.choice = choice;
    this.mode = choice == Backend.LIBRARY ? null : Mode.MODULE;
  }

  Mode mode() {
    return mode;
  }

  Object call(SendCommand sender, Wire wire) {
    long seen;
    Mode m;
    synchronized (lock) {
      seen = generation;
      m = mode;
    }
    if (m == null) {
      m = findLibrary(sender, seen);
    }
    for (int attempt = 1; ; attempt++) {
      RedisErrorReply err;
      try {
        return sender.send(wire.command(m));
      } catch (RedisErrorReply e) {
        err = e;
      }
      if (m == Mode.EVAL && err.noscript()) {
        return sender.send(wire.eval());
      }
      if (attempt == 2 || !gone(err, m)) {
        throw err;
      }
      synchronized (lock) {
        seen = generation;
        mode = null;
      }
      m = findLibrary(sender, seen);
    }
  }

  private boolean gone(RedisErrorReply e, Mode m) {
    return switch (m) {
      case MODULE -> choice == Backend.AUTO && e.unknownCommand("slidingwindow.");
      case FUNCTION -> e.functionMissing() || e.unknownCommand("fcall");
      case EVAL -> false;
    };
  }

  private Mode findLibrary(SendCommand sender, long seen) {
    synchronized (lock) {
      if (generation != seen && mode != null) {
        return mode;
      }
      Mode m = detect(sender);
      mode = m;
      generation++;
      return m;
    }
  }

  private Mode detect(SendCommand sender) {
    detections.incrementAndGet();
    boolean load = false;
    boolean hadOne = true;
    String loaded = null;
    try {
      loaded = Replies.show(sender.send(List.of("FCALL_RO", "slidingwindow_version", "0")));
      load = Library.isOlder(loaded);
    } catch (RedisErrorReply e) {
      if (e.unknownCommand("fcall_ro")) {
        return Mode.EVAL;
      }
      if (!e.functionMissing()) {
        throw e;
      }
      load = true;
      hadOne = false;
    }
    if (!load) {
      return Mode.FUNCTION;
    }
    try {
      sender.send(List.of("FUNCTION", "LOAD", "REPLACE", Library.code()));
      loads.incrementAndGet();
      return Mode.FUNCTION;
    } catch (RedisErrorReply e) {
      if (e.unknownCommand("function")) {
        return Mode.EVAL;
      }
      if (e.noperm() && hadOne) {
        LOG.warning(
            "the loaded slidingwindow library "
                + loaded
                + " is older than this client's "
                + Library.version()
                + " and this user may not replace it ("
                + e.getMessage()
                + "); using it as it is. An operator replaces it: "
                + Library.LOAD_COMMAND);
        return Mode.FUNCTION;
      }
      if (e.noperm()) {
        throw new LibraryNotLoadedException(
            "the slidingwindow module is not on this server and the slidingwindow library "
                + Library.version()
                + " is not loaded, and this user may not load it ("
                + e.getMessage()
                + "). An operator loads it once, on every primary: "
                + Library.LOAD_COMMAND,
            e);
      }
      throw e;
    }
  }
}
