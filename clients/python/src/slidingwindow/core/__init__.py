"""The limiter: its calls and results, the backends that answer them (module, library,
script), the outage circuit and the deny cache. Framework-neutral."""
