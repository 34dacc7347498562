package io.github.redisslidingwindow;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.BooleanNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.fasterxml.jackson.databind.node.TextNode;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.Function;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/**
 * Replays every conformance vector through the client's real code, each with the self-check of
 * conformance/README.md: every leaf of the expected part changed in turn must be reported as a
 * mismatch.
 */
class ConformanceTest {
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final Set<String> DRIVEN =
      Set.of(
          "commands.json",
          "replies.json",
          "headers.json",
          "identity.json",
          "rates.json",
          "deny_cache.json");

  private static Path dir() {
    return Repo.root().resolve("conformance");
  }

  private static List<JsonNode> cases(String file) {
    try {
      JsonNode root = JSON.readTree(dir().resolve(file).toFile());
      List<JsonNode> out = new ArrayList<>();
      root.get("cases").forEach(out::add);
      assertTrue(!out.isEmpty(), file + " has no case");
      return out;
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  /** A value as JSON, with the node types a file's reading gives. */
  static JsonNode tree(Object value) {
    try {
      return JSON.readTree(JSON.writeValueAsString(value));
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  /** Every expected part with one leaf changed, each in turn. */
  static List<JsonNode> mutations(JsonNode expected) {
    List<JsonNode> out = new ArrayList<>();
    mutate(expected, expected, List.of(), out);
    return out;
  }

  private static JsonNode changed(JsonNode leaf) {
    if (leaf.isBoolean()) {
      return BooleanNode.valueOf(!leaf.booleanValue());
    }
    if (leaf.isNumber()) {
      return JsonNodeFactory.instance.numberNode(leaf.longValue() + 1);
    }
    if (leaf.isTextual()) {
      return TextNode.valueOf(leaf.textValue() + "x");
    }
    if (leaf.isNull()) {
      return TextNode.valueOf("x");
    }
    if (leaf.isObject()) {
      ObjectNode o = JsonNodeFactory.instance.objectNode();
      o.put("x", "x");
      return o;
    }
    ArrayNode a = JsonNodeFactory.instance.arrayNode();
    a.add("x");
    return a;
  }

  private static void mutate(JsonNode root, JsonNode node, List<Object> path, List<JsonNode> out) {
    boolean container = node.isContainerNode() && node.size() > 0;
    if (!container) {
      JsonNode copy = root.deepCopy();
      if (path.isEmpty()) {
        out.add(changed(node));
        return;
      }
      JsonNode parent = copy;
      for (Object step : path.subList(0, path.size() - 1)) {
        parent = step instanceof Integer i ? parent.get(i) : parent.get((String) step);
      }
      Object last = path.get(path.size() - 1);
      if (last instanceof Integer i) {
        ((ArrayNode) parent).set(i, changed(node));
      } else {
        ((ObjectNode) parent).set((String) last, changed(node));
      }
      out.add(copy);
      return;
    }
    if (node.isArray()) {
      for (int i = 0; i < node.size(); i++) {
        List<Object> p = new ArrayList<>(path);
        p.add(i);
        mutate(root, node.get(i), p, out);
      }
    } else {
      for (Iterator<String> it = node.fieldNames(); it.hasNext(); ) {
        String k = it.next();
        List<Object> p = new ArrayList<>(path);
        p.add(k);
        mutate(root, node.get(k), p, out);
      }
    }
  }

  /** Deep equality, then the self-check. */
  static void compare(String file, JsonNode c, JsonNode got, JsonNode want) {
    String id = file + " " + c.get("id").asText();
    assertEquals(want, got, id);
    List<JsonNode> bad = mutations(want);
    assertTrue(!bad.isEmpty(), id + ": nothing to mutate");
    for (JsonNode m : bad) {
      assertNotEquals(m, got, id + ": self-check, a mutated expectation was not reported");
    }
  }

  private static Stream<DynamicTest> replay(
      String file, Function<JsonNode, org.junit.jupiter.api.function.Executable> driver) {
    return cases(file).stream()
        .map(c -> DynamicTest.dynamicTest(file + " " + c.get("id").asText(), driver.apply(c)));
  }

  // -- shared input readers --

  static List<Limit> limits(JsonNode c) {
    List<Limit> out = new ArrayList<>();
    if (c.has("limits")) {
      for (JsonNode l : c.get("limits")) {
        out.add(new Limit(l.get(0).asLong(), l.get(1).asLong()));
      }
    }
    return out;
  }

  static CallOptions options(JsonNode c) {
    CallOptions o = CallOptions.defaults();
    JsonNode j = c.path("options");
    if (j.has("cost")) {
      o = o.cost(j.get("cost").asLong());
    }
    if (j.path("ms").asBoolean(false)) {
      o = o.ms();
    }
    if (j.has("now") && !j.get("now").isNull()) {
      o = o.now(j.get("now").asLong());
    }
    return o;
  }

  /** Runs the case's call on a limiter and returns its result as JSON. */
  static JsonNode run(RateLimiter limiter, JsonNode c) {
    String call = c.get("call").asText();
    String id = c.get("client_id").asText();
    List<Limit> ls = limits(c);
    CallOptions o = options(c);
    return switch (call) {
      case "check" -> one(limiter.check(id, ls.get(0).limit(), ls.get(0).window(), o));
      case "peek" -> one(limiter.peek(id, ls.get(0).limit(), ls.get(0).window(), o));
      case "refund" -> one(limiter.refund(id, ls.get(0).limit(), ls.get(0).window(), o));
      case "check_limits" -> multi(limiter.checkLimits(id, ls, o));
      case "peek_limits" -> multi(limiter.peekLimits(id, ls, o));
      case "refund_limits" -> multi(limiter.refundLimits(id, ls, o));
      case "counts" -> {
        WindowCounts w = limiter.counts(id, c.get("window").asLong(), o);
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("previous", w.previous());
        m.put("current", w.current());
        m.put("elapsed", w.elapsed());
        m.put("degraded", w.degraded());
        yield tree(m);
      }
      case "is_allowed" -> {
        IsAllowedResult r = limiter.isAllowed(id, ls.get(0).limit(), ls.get(0).window(), o.now());
        yield tree(Map.of("allowed", r.allowed(), "count", r.count()));
      }
      default -> throw new IllegalArgumentException("unknown call " + call);
    };
  }

  static Map<String, Object> oneMap(LimitResult r) {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("allowed", r.allowed());
    m.put("count", r.count());
    m.put("limit", r.limit());
    m.put("remaining", r.remaining());
    m.put("retry_after", r.retryAfter());
    m.put("reset_after", r.resetAfter());
    m.put("window", r.window());
    m.put("ms", r.ms());
    m.put("degraded", r.degraded());
    m.put(
        "retry_after_seconds",
        r.retryAfterSeconds().isPresent() ? r.retryAfterSeconds().getAsLong() : null);
    m.put("reset_after_seconds", r.resetAfterSeconds());
    m.put("window_seconds", r.windowSeconds());
    return m;
  }

  static JsonNode one(LimitResult r) {
    return tree(oneMap(r));
  }

  static JsonNode multi(MultiLimitResult d) {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("summary", oneMap(d.summary()));
    m.put("limits", d.limits().stream().map(ConformanceTest::oneMap).toList());
    m.put("governing", d.governing());
    return tree(m);
  }

  static Object value(JsonNode j) {
    if (j == null || j.isNull()) {
      return null;
    }
    if (j.isArray()) {
      List<Object> l = new ArrayList<>();
      j.forEach(e -> l.add(value(e)));
      return l;
    }
    if (j.isIntegralNumber()) {
      return j.asLong();
    }
    return j.asText();
  }

  // -- commands.json --

  /** Thrown by the scripted connection once it has recorded the call's command. */
  static final class Recorded extends RuntimeException {
    final List<String> command;

    Recorded(List<String> command) {
      super(null, null, false, false);
      this.command = command;
    }
  }

  static RedisErrorReply unknown(List<String> cmd) {
    return new RedisErrorReply(
        "ERR unknown command '" + cmd.get(0) + "', with args beginning with: ");
  }

  /** A connection answering detection as the server kind would, recording the call. */
  static SendCommand scripted(String kind) {
    return cmd -> {
      String name = cmd.get(0).toUpperCase();
      switch (kind) {
        case "module" -> throw new Recorded(cmd);
        case "fcall" -> {
          if (name.startsWith("SLIDINGWINDOW.")) {
            throw unknown(cmd);
          }
          if (name.equals("FCALL_RO") && cmd.get(1).equals("slidingwindow_version")) {
            return Library.version();
          }
          if (name.equals("FUNCTION")) {
            return "OK";
          }
          throw new Recorded(cmd);
        }
        default -> {
          if (name.startsWith("SLIDINGWINDOW.")
              || name.startsWith("FCALL")
              || name.equals("FUNCTION")) {
            throw unknown(cmd);
          }
          throw new Recorded(cmd);
        }
      }
    };
  }

  static List<String> sent(String kind, JsonNode c) {
    String prefix = c.has("prefix") ? c.get("prefix").asText() : "rate:";
    RateLimiter limiter = RateLimiter.builder(scripted(kind)).prefix(prefix).build();
    Recorded r = assertThrows(Recorded.class, () -> run(limiter, c));
    List<String> out = new ArrayList<>();
    for (String s : r.command) {
      out.add(s.equals(Library.sha()) ? "$SHA" : s);
    }
    return out;
  }

  @TestFactory
  Stream<DynamicTest> commands() {
    return replay(
        "commands.json",
        c ->
            () -> {
              Map<String, Object> got = new LinkedHashMap<>();
              got.put("module", sent("module", c));
              got.put("fcall", sent("fcall", c));
              got.put("evalsha", sent("evalsha", c));
              ObjectNode want = JsonNodeFactory.instance.objectNode();
              want.set("module", c.get("module"));
              want.set("fcall", c.get("fcall"));
              want.set("evalsha", c.get("evalsha"));
              compare("commands.json", c, tree(got), want);
            });
  }

  // -- replies.json --

  @TestFactory
  Stream<DynamicTest> replies() {
    return replay(
        "replies.json",
        c ->
            () -> {
              JsonNode reply = c.get("reply");
              SendCommand send =
                  cmd -> {
                    if (reply == null || reply.isNull()) {
                      throw new RedisUnavailableException(
                          "connection refused", new java.net.ConnectException());
                    }
                    return value(reply);
                  };
              RateLimiter limiter =
                  RateLimiter.builder(send).failOpen(c.path("fail_open").asBoolean(true)).build();
              compare("replies.json", c, run(limiter, c), c.get("result"));
            });
  }

  // -- headers.json --

  static LimitResult limitResult(JsonNode j) {
    return new LimitResult(
        j.get("allowed").asBoolean(),
        j.get("count").asLong(),
        j.get("limit").asLong(),
        j.get("remaining").asLong(),
        j.get("retry_after").asLong(),
        j.get("reset_after").asLong(),
        j.get("window").asLong(),
        j.get("ms").asBoolean(),
        j.get("degraded").asBoolean());
  }

  @TestFactory
  Stream<DynamicTest> headers() {
    return replay(
        "headers.json",
        c ->
            () -> {
              JsonNode r = c.get("result");
              String policy = c.has("policy") ? c.get("policy").asText() : "default";
              Map<String, String> h;
              if (r.has("summary")) {
                List<LimitResult> each = new ArrayList<>();
                r.get("limits").forEach(l -> each.add(limitResult(l)));
                h =
                    Headers.limitsHeaders(
                        new MultiLimitResult(
                            limitResult(r.get("summary")), each, r.get("governing").asInt()),
                        policy);
              } else {
                h = Headers.rateLimitHeaders(limitResult(r), policy);
              }
              compare("headers.json", c, tree(h), c.get("headers"));
            });
  }

  // -- identity.json --

  @TestFactory
  Stream<DynamicTest> identity() {
    return replay(
        "identity.json",
        c ->
            () -> {
              Map<String, List<String>> headers = new LinkedHashMap<>();
              c.path("headers")
                  .fields()
                  .forEachRemaining(
                      e -> {
                        List<String> lines = new ArrayList<>();
                        e.getValue().forEach(l -> lines.add(l.asText()));
                        headers.put(e.getKey(), lines);
                      });
              List<String> nets = new ArrayList<>();
              c.path("trusted_proxies").forEach(n -> nets.add(n.asText()));
              TrustedProxies trusted = TrustedProxies.of(nets);
              JsonNode o = c.path("options");
              Identity id =
                  o.path("by_ip").asBoolean(false)
                      ? Identity.byIp(trusted)
                      : Identity.create().trustedProxies(trusted);
              if (o.has("ipv6_prefix")) {
                id = id.ipv6Prefix(o.get("ipv6_prefix").asInt());
              }
              if (o.has("api_key_header")) {
                Set<String> keys = new TreeSet<>();
                o.get("api_keys").forEach(k -> keys.add(k.asText()));
                id = id.apiKey(o.get("api_key_header").asText(), keys::contains);
              }
              String peer = c.path("peer").isTextual() ? c.get("peer").asText() : null;
              String user = o.path("user").isTextual() ? o.get("user").asText() : null;
              List<String> xff = new ArrayList<>();
              headers.forEach(
                  (k, v) -> {
                    if (k.equalsIgnoreCase("x-forwarded-for")) {
                      xff.addAll(v);
                    }
                  });
              IpAddress ip = Identity.clientIp(xff, peer, trusted);
              Map<String, Object> got = new LinkedHashMap<>();
              got.put("client_ip", ip == null ? null : ip.toString());
              got.put("identity", id.identify(headers, user, peer));
              ObjectNode want = JsonNodeFactory.instance.objectNode();
              want.set("client_ip", c.get("client_ip"));
              want.set("identity", c.get("identity"));
              compare("identity.json", c, tree(got), want);
            });
  }

  // -- rates.json --

  @TestFactory
  Stream<DynamicTest> rates() {
    return cases("rates.json").stream()
        .map(
            c ->
                DynamicTest.dynamicTest(
                    "rates.json " + c.get("text").asText() + (c.has("ms") ? " (ms)" : ""),
                    () -> {
                      String text = c.get("text").asText();
                      CallOptions o =
                          c.path("ms").asBoolean(false)
                              ? CallOptions.defaults().ms()
                              : CallOptions.defaults();
                      if (c.has("limits")) {
                        List<List<Long>> got = new ArrayList<>();
                        for (Limit l : RateLimiter.rates(text, o)) {
                          got.add(List.of(l.limit(), l.window()));
                        }
                        ObjectNode id = JsonNodeFactory.instance.objectNode();
                        id.put("id", text);
                        compare("rates.json", id, tree(got), c.get("limits"));
                        return;
                      }
                      RateException e =
                          assertThrows(RateException.class, () -> RateLimiter.rates(text, o));
                      String kind = c.get("error").asText();
                      String fragment = c.get("message").asText();
                      assertEquals(kind, e.kind().name().toLowerCase(), text);
                      assertTrue(
                          e.getMessage().contains(fragment),
                          text + ": " + e.getMessage() + " lacks " + fragment);
                      // self-check
                      assertNotEquals(kind + "x", e.kind().name().toLowerCase());
                      assertTrue(!e.getMessage().contains(fragment + "x"), text + ": self-check");
                    }));
  }

  // -- deny_cache.json --

  /**
   * Each timeline through a limiter with a real DenyCache on a scripted connection: the cache's
   * clock is the step's {@code at_ms} (advanced by {@code latency_ms} while the call is in flight),
   * the module's command is answered with the step's {@code redis} reply ({@code "unavailable"}: no
   * reply, an outage; absent: the call must not be sent, and sending it fails the step), TIME with
   * the server clock of {@code server_offset_ms}.
   */
  @TestFactory
  Stream<DynamicTest> denyCache() {
    return replay(
        "deny_cache.json",
        c ->
            () -> {
              double[] clockMs = {0};
              JsonNode cfg = c.path("cache");
              DenyCache cache =
                  new DenyCache(
                      cfg.path("max_entries").asInt(DenyCache.DEFAULT_MAX_ENTRIES),
                      java.time.Duration.ofMillis(cfg.path("clock_refresh_ms").asLong(0)),
                      () -> clockMs[0] / 1000);
              JsonNode offset = c.get("server_offset_ms");
              JsonNode[] step = {null};
              boolean[] sent = {false};
              SendCommand send =
                  cmd -> {
                    String name = cmd.get(0).toUpperCase();
                    if (name.equals("TIME")) {
                      if (offset == null) {
                        throw new IllegalStateException("TIME without a server clock");
                      }
                      long us = (long) ((clockMs[0] + offset.asDouble()) * 1000);
                      return List.of(Long.toString(us / 1_000_000), Long.toString(us % 1_000_000));
                    }
                    if (!name.startsWith("SLIDINGWINDOW.")) {
                      throw new IllegalStateException("unexpected command " + cmd);
                    }
                    sent[0] = true;
                    clockMs[0] += step[0].path("latency_ms").asDouble(0);
                    JsonNode reply = step[0].get("redis");
                    if (reply == null) {
                      throw new IllegalStateException("sent without a scripted reply");
                    }
                    if (reply.isTextual() && reply.asText().equals("unavailable")) {
                      throw new RedisUnavailableException(
                          "connection refused", new java.net.ConnectException());
                    }
                    return value(reply);
                  };
              List<Object> got = new ArrayList<>();
              ArrayNode want = JsonNodeFactory.instance.arrayNode();
              for (JsonNode st : c.get("steps")) {
                // A limiter per step around the one cache: the vectors are the cache's, and an
                // "unavailable" step must not leave an open circuit (whose probe runs in the
                // background) answering the next step without Redis.
                RateLimiter limiter =
                    RateLimiter.builder(send)
                        .prefix(c.has("prefix") ? c.get("prefix").asText() : "rate:")
                        .failOpen(c.path("fail_open").asBoolean(true))
                        .denyCache(cache)
                        .build();
                step[0] = st;
                sent[0] = false;
                clockMs[0] = st.get("at_ms").asDouble();
                JsonNode result;
                try {
                  result = run(limiter, st);
                } catch (RuntimeException e) {
                  result = tree(Map.of("error", String.valueOf(e.getMessage())));
                }
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("sent", sent[0]);
                m.put("result", result);
                got.add(m);
                want.add(st.get("expect"));
              }
              compare("deny_cache.json", c, tree(got), want);
            });
  }

  @Test
  void everyFileHasADriver() throws IOException {
    Set<String> files = new TreeSet<>();
    try (Stream<Path> s = Files.list(dir())) {
      s.map(p -> p.getFileName().toString()).filter(n -> n.endsWith(".json")).forEach(files::add);
    }
    for (String f : files) {
      assertTrue(DRIVEN.contains(f), f + " has no driver");
    }
  }

  @Test
  void selfCheckCatchesAChangedLeaf() {
    JsonNode want = tree(Map.of("a", List.of(1, true, "s"), "b", Map.of()));
    List<JsonNode> m = mutations(want);
    assertEquals(4, m.size());
    for (JsonNode x : m) {
      assertNotEquals(want, x);
    }
  }
}
