package io.github.redisslidingwindow.boot;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.springframework.boot.context.properties.ConfigurationProperties;

/**
 * The {@code spring.data.redis.*} settings the starter reads to make a Lettuce connection of its
 * own, when the application has neither a Lettuce connection factory nor a Lettuce client bean: url
 * (or host, port, database, username, password, ssl.enabled), client-name, connect-timeout,
 * cluster.nodes.
 */
@ConfigurationProperties(prefix = "spring.data.redis")
public class RedisConnectionProperties {
  private String url;
  private String host = "localhost";
  private int port = 6379;
  private int database = 0;
  private String username;
  private String password;
  private String clientName;
  private Duration connectTimeout;
  private final Ssl ssl = new Ssl();
  private final Cluster cluster = new Cluster();

  public static class Ssl {
    private Boolean enabled;

    public Boolean getEnabled() {
      return enabled;
    }

    public void setEnabled(Boolean enabled) {
      this.enabled = enabled;
    }
  }

  public static class Cluster {
    /** host:port of some nodes; set, the starter makes a cluster client. */
    private List<String> nodes = new ArrayList<>();

    public List<String> getNodes() {
      return nodes;
    }

    public void setNodes(List<String> nodes) {
      this.nodes = nodes;
    }
  }

  public String getUrl() {
    return url;
  }

  public void setUrl(String url) {
    this.url = url;
  }

  public String getHost() {
    return host;
  }

  public void setHost(String host) {
    this.host = host;
  }

  public int getPort() {
    return port;
  }

  public void setPort(int port) {
    this.port = port;
  }

  public int getDatabase() {
    return database;
  }

  public void setDatabase(int database) {
    this.database = database;
  }

  public String getUsername() {
    return username;
  }

  public void setUsername(String username) {
    this.username = username;
  }

  public String getPassword() {
    return password;
  }

  public void setPassword(String password) {
    this.password = password;
  }

  public String getClientName() {
    return clientName;
  }

  public void setClientName(String clientName) {
    this.clientName = clientName;
  }

  public Duration getConnectTimeout() {
    return connectTimeout;
  }

  public void setConnectTimeout(Duration connectTimeout) {
    this.connectTimeout = connectTimeout;
  }

  public Ssl getSsl() {
    return ssl;
  }

  public Cluster getCluster() {
    return cluster;
  }
}
