"""The `limits` storages built on the limiter's commands (public entry point:
slidingwindow.limits_storage)."""
