//! Fault injection for tests, compiled in only with the `fault-injection` cargo feature
//! (`make build` never enables it). A CHECK or PEEK on the key `PANIC_KEY` panics inside
//! the handler, so a test can show that the panic becomes an ERR reply and the server
//! keeps running. The key `NO_IN_PLACE_KEY` is never written in place, so a test can
//! show that the fallback (a fresh string) leaves the key, its replicas and the AOF
//! alike.

pub const PANIC_KEY: &[u8] = b"slidingwindow:test:panic";

pub fn maybe_panic(key: &[u8]) {
    if key == PANIC_KEY {
        panic!("fault injection: a command on {PANIC_KEY:?}");
    }
}

pub const NO_IN_PLACE_KEY: &[u8] = b"slidingwindow:test:no-in-place";

pub fn refuses_in_place(key: &[u8]) -> bool {
    key == NO_IN_PLACE_KEY
}
