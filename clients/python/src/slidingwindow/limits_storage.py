"""`limits` storages on the module: import this module once, then use the URIs.

    import slidingwindow.limits_storage  # registers the schemes below with limits

    Limiter(..., storage_uri="slidingwindow+redis://127.0.0.1:6379/0",
            strategy="sliding-window-counter")        # flask-limiter, slowapi

limits finds a storage by the scheme of its URI in a registry that a storage class joins
when it is defined (limits/_storage_scheme.py); it has no entry points. So the import
must run before `storage_from_string` (i.e. before the Limiter is created):

| scheme | class |
|---|---|
| `slidingwindow+redis`, `+rediss`, `+redis+unix` | `SlidingWindowRedisStorage` |
| `slidingwindow+redis+cluster` | `SlidingWindowRedisClusterStorage` |
| `async+slidingwindow+redis`, `+rediss`, `+redis+unix` | `AsyncSlidingWindowRedisStorage` |
| `async+slidingwindow+redis+cluster` | `AsyncSlidingWindowRedisClusterStorage` |

They extend limits' own Redis storages: the fixed and moving window strategies run
limits' code unchanged; the sliding window counter runs on the module.
"""

from .storage.aio import AsyncSlidingWindowRedisClusterStorage, AsyncSlidingWindowRedisStorage
from .storage.sync import SlidingWindowRedisClusterStorage, SlidingWindowRedisStorage

__all__ = [
    "AsyncSlidingWindowRedisClusterStorage",
    "AsyncSlidingWindowRedisStorage",
    "SlidingWindowRedisClusterStorage",
    "SlidingWindowRedisStorage",
]
