package io.github.redisslidingwindow.boot;

import io.github.redisslidingwindow.Backend;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.springframework.boot.context.properties.ConfigurationProperties;

/**
 * {@code slidingwindow.*}: the limiter's options, the policies the servlet filter applies, and who
 * a request is.
 *
 * <pre>
 * slidingwindow:
 *   fail-open: true              # Redis down: allow (true) or deny
 *   timeout: 500ms               # a call without a reply by then is an outage
 *   trusted-proxies: [10.0.0.0/8]
 *   key-source: identity         # identity (api key, user, address), ip, or header
 *   policies:
 *     - name: api
 *       rates: 10/second;1000/hour
 *       paths: [/api/**]
 * </pre>
 */
@ConfigurationProperties(prefix = "slidingwindow")
public class SlidingWindowProperties {
  /** Whether the starter builds anything at all. */
  private boolean enabled = true;

  /** The key prefix (key = prefix + policy + ":" + identity). */
  private String prefix = "rate:";

  /** During an outage allow (true) or deny. */
  private boolean failOpen = true;

  /** Module, library, or the first that answers. */
  private Backend backend = Backend.AUTO;

  /**
   * A call without a reply within this time is an outage (the Lettuce connection's command timeout;
   * a standalone connection the starter makes also refuses commands while disconnected).
   */
  private Duration timeout = Duration.ofMillis(500);

  /** While Redis is unavailable, one probe per interval; the rest answered without it. */
  private Duration probeInterval = Duration.ofSeconds(1);

  /** Networks whose X-Forwarded-For is believed ("10.0.0.0/8", "fd00::/8"). */
  private List<String> trustedProxies = new ArrayList<>();

  /**
   * Who a request is: {@code identity} ({@code key:<api key>} when {@code key-header} is set and
   * sent once, else {@code user:<principal>}, else {@code ip:<address>}), {@code ip} (the address
   * only), or {@code header} ({@code header:<key-header>:<value>}; a request without it is not
   * limited).
   */
  private KeySource keySource = KeySource.IDENTITY;

  /** The API key header for {@code identity}, the header for {@code header}. */
  private String keyHeader;

  /** IPv6 clients are counted by their network of this many bits. */
  private int ipv6Prefix = 64;

  private final Filter filter = new Filter();

  private final DenyCache denyCache = new DenyCache();

  /** The policies the servlet filter applies, each to the requests it matches. */
  private List<Policy> policies = new ArrayList<>();

  public enum KeySource {
    IDENTITY,
    IP,
    HEADER
  }

  /**
   * The exact deny cache of the limiter, the filter and the gateway's limiter: a refusal is
   * answered without Redis until the instant Redis could first allow the same request (never
   * early); concurrent calls on one refused key share one call. Never used in shadow mode.
   */
  public static class DenyCache {
    /** Whether refusals are answered from the cache (false: every request goes to Redis). */
    private boolean enabled = true;

    /** Redis keys held at the most, the least recently used dropped first. */
    private int maxEntries = 10_000; // DenyCache.DEFAULT_MAX_ENTRIES (a literal for the metadata)

    /**
     * The interval between two measurements of the server clock's offset (TIME), which lets a
     * refusal in seconds last its whole interval (0: never measured; never on a cluster).
     */
    private Duration clockRefresh = Duration.ofSeconds(10); // DenyCache.DEFAULT_CLOCK_REFRESH

    public boolean isEnabled() {
      return enabled;
    }

    public void setEnabled(boolean enabled) {
      this.enabled = enabled;
    }

    public int getMaxEntries() {
      return maxEntries;
    }

    public void setMaxEntries(int maxEntries) {
      this.maxEntries = maxEntries;
    }

    public Duration getClockRefresh() {
      return clockRefresh;
    }

    public void setClockRefresh(Duration clockRefresh) {
      this.clockRefresh = clockRefresh;
    }
  }

  /** The servlet filter. */
  public static class Filter {
    /** Whether the filter is registered (in a servlet web application). */
    private boolean enabled = true;

    /** The filter's order (0: after Spring Security's chain, so the principal is known). */
    private int order = 0;

    /** X-RateLimit-*, Retry-After and the draft's RateLimit-Policy / RateLimit on answers. */
    private boolean includeHeaders = true;

    /** Counts and sets headers but never refuses. */
    private boolean shadow = false;

    /** The status of a refusal. */
    private int statusCode = 429;

    public boolean isEnabled() {
      return enabled;
    }

    public void setEnabled(boolean enabled) {
      this.enabled = enabled;
    }

    public int getOrder() {
      return order;
    }

    public void setOrder(int order) {
      this.order = order;
    }

    public boolean isIncludeHeaders() {
      return includeHeaders;
    }

    public void setIncludeHeaders(boolean includeHeaders) {
      this.includeHeaders = includeHeaders;
    }

    public boolean isShadow() {
      return shadow;
    }

    public void setShadow(boolean shadow) {
      this.shadow = shadow;
    }

    public int getStatusCode() {
      return statusCode;
    }

    public void setStatusCode(int statusCode) {
      this.statusCode = statusCode;
    }
  }

  /** One policy: its limits (a rate string), the requests it applies to, and its cost. */
  public static class Policy {
    /** The policy's name: in the counted key and the draft-11 headers. */
    private String name = "default";

    /** The limits, all of which must allow: "10/second;1000/hour". */
    private String rates;

    /** Path patterns (Spring's PathPattern syntax: /api/**); none: every path. */
    private List<String> paths = new ArrayList<>();

    /** HTTP methods; none: every method. */
    private List<String> methods = new ArrayList<>();

    /** What one request costs. */
    private long cost = 1;

    public String getName() {
      return name;
    }

    public void setName(String name) {
      this.name = name;
    }

    public String getRates() {
      return rates;
    }

    public void setRates(String rates) {
      this.rates = rates;
    }

    public List<String> getPaths() {
      return paths;
    }

    public void setPaths(List<String> paths) {
      this.paths = paths;
    }

    public List<String> getMethods() {
      return methods;
    }

    public void setMethods(List<String> methods) {
      this.methods = methods;
    }

    public long getCost() {
      return cost;
    }

    public void setCost(long cost) {
      this.cost = cost;
    }
  }

  public boolean isEnabled() {
    return enabled;
  }

  public void setEnabled(boolean enabled) {
    this.enabled = enabled;
  }

  public String getPrefix() {
    return prefix;
  }

  public void setPrefix(String prefix) {
    this.prefix = prefix;
  }

  public boolean isFailOpen() {
    return failOpen;
  }

  public void setFailOpen(boolean failOpen) {
    this.failOpen = failOpen;
  }

  public Backend getBackend() {
    return backend;
  }

  public void setBackend(Backend backend) {
    this.backend = backend;
  }

  public Duration getTimeout() {
    return timeout;
  }

  public void setTimeout(Duration timeout) {
    this.timeout = timeout;
  }

  public Duration getProbeInterval() {
    return probeInterval;
  }

  public void setProbeInterval(Duration probeInterval) {
    this.probeInterval = probeInterval;
  }

  public List<String> getTrustedProxies() {
    return trustedProxies;
  }

  public void setTrustedProxies(List<String> trustedProxies) {
    this.trustedProxies = trustedProxies;
  }

  public KeySource getKeySource() {
    return keySource;
  }

  public void setKeySource(KeySource keySource) {
    this.keySource = keySource;
  }

  public String getKeyHeader() {
    return keyHeader;
  }

  public void setKeyHeader(String keyHeader) {
    this.keyHeader = keyHeader;
  }

  public int getIpv6Prefix() {
    return ipv6Prefix;
  }

  public void setIpv6Prefix(int ipv6Prefix) {
    this.ipv6Prefix = ipv6Prefix;
  }

  public DenyCache getDenyCache() {
    return denyCache;
  }

  public Filter getFilter() {
    return filter;
  }

  public List<Policy> getPolicies() {
    return policies;
  }

  public void setPolicies(List<Policy> policies) {
    this.policies = policies;
  }
}
