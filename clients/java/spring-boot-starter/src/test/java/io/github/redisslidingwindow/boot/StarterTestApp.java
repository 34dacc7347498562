package io.github.redisslidingwindow.boot;

import org.springframework.boot.SpringBootConfiguration;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

/** A web app with the starter on its classpath and nothing declared: all from properties. */
@SpringBootConfiguration
@EnableAutoConfiguration
public class StarterTestApp {
  @RestController
  static class Hello {
    @GetMapping("/api/hello")
    String hello() {
      return "hello";
    }

    @PostMapping("/api/upload")
    String upload() {
      return "uploaded";
    }

    @GetMapping("/open")
    String open() {
      return "open";
    }
  }
}
