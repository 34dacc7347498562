"""The seed's Python class, as the article has it (the reference the client must match).

Only the time source is reachable from tests: they set `seed_client.time` to a fake.
"""

import time

import redis


class SlidingWindowRateLimiter:
    def __init__(self, redis_client: redis.Redis, lua_script_text: str):
        self.redis = redis_client
        self.lua_script = self.redis.register_script(lua_script_text)

    def is_allowed(self, client_id: str, limit: int = 100, window_seconds: int = 60) -> tuple[bool, int]:
        now = int(time.time())
        current_window = now // window_seconds
        prev_window = current_window - 1

        current_key = f"rate:{client_id}:{current_window}"
        prev_key = f"rate:{client_id}:{prev_window}"

        result = self.lua_script(
            keys=[current_key, prev_key],
            args=[limit, window_seconds, now]
        )

        allowed = bool(result[0] == 1)
        current_usage = int(result[1])
        return allowed, current_usage
