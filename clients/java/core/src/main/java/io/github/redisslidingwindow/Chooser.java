package io.github.redisslidingwindow;

import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Logger;

/** Picks the module, the library with FCALL, or EVALSHA, and finds it again when it goes. */
final class Chooser {
  private static final Logger LOG = Logger.getLogger("slidingwindow");

  private final Backend choice;
  private final Object lock = new Object();
  private volatile Mode mode;
  private long generation;
  private CompletableFuture<Mode> detecting;
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

  // The same without blocking: each step chained on the sender's futures.

  static Throwable unwrap(Throwable t) {
    while (t instanceof CompletionException && t.getCause() != null) {
      t = t.getCause();
    }
    return t;
  }

  CompletableFuture<Object> callAsync(AsyncSendCommand sender, Wire wire) {
    long seen;
    Mode m;
    synchronized (lock) {
      seen = generation;
      m = mode;
    }
    CompletableFuture<Mode> found =
        m != null ? CompletableFuture.completedFuture(m) : findLibraryAsync(sender, seen);
    return found.thenCompose(mode -> attemptAsync(sender, wire, mode, 1));
  }

  private CompletableFuture<Object> attemptAsync(
      AsyncSendCommand sender, Wire wire, Mode m, int attempt) {
    return sender
        .sendAsync(wire.command(m))
        .handle(
            (reply, ex) -> {
              if (ex == null) {
                return CompletableFuture.completedFuture(reply);
              }
              Throwable t = unwrap(ex);
              if (!(t instanceof RedisErrorReply err)) {
                return CompletableFuture.<Object>failedFuture(t);
              }
              if (m == Mode.EVAL && err.noscript()) {
                return sender.sendAsync(wire.eval());
              }
              if (attempt == 2 || !gone(err, m)) {
                return CompletableFuture.<Object>failedFuture(err);
              }
              long seen;
              synchronized (lock) {
                seen = generation;
                mode = null;
              }
              return findLibraryAsync(sender, seen)
                  .thenCompose(again -> attemptAsync(sender, wire, again, 2));
            })
        .thenCompose(f -> f);
  }

  /** One detection at a time: a call arriving meanwhile waits for the same answer. */
  private CompletableFuture<Mode> findLibraryAsync(AsyncSendCommand sender, long seen) {
    CompletableFuture<Mode> f;
    synchronized (lock) {
      if (generation != seen && mode != null) {
        return CompletableFuture.completedFuture(mode);
      }
      if (detecting != null) {
        return detecting;
      }
      f = new CompletableFuture<>();
      detecting = f;
    }
    CompletableFuture<Mode> d;
    try {
      d = detectAsync(sender);
    } catch (RuntimeException e) {
      d = CompletableFuture.failedFuture(e);
    }
    d.whenComplete(
        (m, ex) -> {
          synchronized (lock) {
            if (ex == null) {
              mode = m;
              generation++;
            }
            if (detecting == f) {
              detecting = null;
            }
          }
          if (ex != null) {
            f.completeExceptionally(unwrap(ex));
          } else {
            f.complete(m);
          }
        });
    return f;
  }

  private CompletableFuture<Mode> detectAsync(AsyncSendCommand sender) {
    detections.incrementAndGet();
    return sender
        .sendAsync(List.of("FCALL_RO", "slidingwindow_version", "0"))
        .handle(
            (reply, ex) -> {
              if (ex == null) {
                String loaded = Replies.show(reply);
                if (!Library.isOlder(loaded)) {
                  return CompletableFuture.completedFuture(Mode.FUNCTION);
                }
                return loadAsync(sender, true, loaded);
              }
              Throwable t = unwrap(ex);
              if (t instanceof RedisErrorReply e) {
                if (e.unknownCommand("fcall_ro")) {
                  return CompletableFuture.completedFuture(Mode.EVAL);
                }
                if (e.functionMissing()) {
                  return loadAsync(sender, false, null);
                }
              }
              return CompletableFuture.<Mode>failedFuture(t);
            })
        .thenCompose(f -> f);
  }

  private CompletableFuture<Mode> loadAsync(
      AsyncSendCommand sender, boolean hadOne, String loaded) {
    return sender
        .sendAsync(List.of("FUNCTION", "LOAD", "REPLACE", Library.code()))
        .handle(
            (reply, ex) -> {
              if (ex == null) {
                loads.incrementAndGet();
                return Mode.FUNCTION;
              }
              Throwable t = unwrap(ex);
              if (!(t instanceof RedisErrorReply e)) {
                throw new CompletionException(t);
              }
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
                throw new CompletionException(
                    new LibraryNotLoadedException(
                        "the slidingwindow module is not on this server and the slidingwindow"
                            + " library "
                            + Library.version()
                            + " is not loaded, and this user may not load it ("
                            + e.getMessage()
                            + "). An operator loads it once, on every primary: "
                            + Library.LOAD_COMMAND,
                        e));
              }
              throw new CompletionException(e);
            });
  }
}
