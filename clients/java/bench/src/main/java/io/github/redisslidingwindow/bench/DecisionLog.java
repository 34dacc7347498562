package io.github.redisslidingwindow.bench;

import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import org.springframework.boot.autoconfigure.condition.ConditionalOnProperty;
import org.springframework.context.annotation.Bean;
import org.springframework.context.annotation.Configuration;
import org.springframework.core.Ordered;
import org.springframework.core.annotation.Order;
import org.springframework.http.HttpHeaders;
import org.springframework.http.MediaType;
import org.springframework.web.reactive.function.server.RouterFunction;
import org.springframework.web.reactive.function.server.RouterFunctions;
import org.springframework.web.reactive.function.server.ServerResponse;
import org.springframework.web.server.WebFilter;
import reactor.core.publisher.Mono;

/**
 * With the {@code log} argument: every decision (the time the request arrived, allowed or not, the
 * Retry-After seconds or -1), served as JSON at {@code GET /__decisions} in the Go bench apps'
 * format ({@code [{"t":unix ns,"a":bool,"r":seconds}]}), for the overshoot judge.
 */
@Configuration(proxyBeanMethods = false)
@ConditionalOnProperty(name = "bench.log", havingValue = "true")
class DecisionLog {
  static final String PATH = "/__decisions";

  private final List<long[]> log = new ArrayList<>(); // {t, allowed 0/1, retry-after or -1}

  @Bean
  @Order(Ordered.HIGHEST_PRECEDENCE)
  WebFilter decisionRecorder() {
    return (exchange, chain) -> {
      if (exchange.getRequest().getPath().value().equals(PATH)) {
        return chain.filter(exchange);
      }
      Instant now = Instant.now();
      long t = now.getEpochSecond() * 1_000_000_000L + now.getNano();
      exchange
          .getResponse()
          .beforeCommit(
              () -> {
                var status = exchange.getResponse().getStatusCode();
                boolean allowed = status == null || status.value() < 400;
                long retry = -1;
                String h = exchange.getResponse().getHeaders().getFirst(HttpHeaders.RETRY_AFTER);
                if (h != null) {
                  try {
                    retry = Long.parseLong(h.trim());
                  } catch (NumberFormatException e) {
                    retry = -1;
                  }
                }
                synchronized (log) {
                  log.add(new long[] {t, allowed ? 1 : 0, retry});
                }
                return Mono.empty();
              });
      return chain.filter(exchange);
    };
  }

  /** Before the gateway's routes (functional endpoints are mapped first). */
  @Bean
  RouterFunction<ServerResponse> decisions() {
    return RouterFunctions.route()
        .GET(
            PATH,
            req -> {
              StringBuilder b = new StringBuilder("[");
              synchronized (log) {
                for (int i = 0; i < log.size(); i++) {
                  long[] d = log.get(i);
                  if (i > 0) {
                    b.append(',');
                  }
                  b.append("{\"t\":")
                      .append(d[0])
                      .append(",\"a\":")
                      .append(d[1] == 1)
                      .append(",\"r\":")
                      .append(d[2])
                      .append('}');
                }
              }
              b.append("]\n");
              return ServerResponse.ok()
                  .contentType(MediaType.APPLICATION_JSON)
                  .bodyValue(b.toString());
            })
        .build();
  }
}
