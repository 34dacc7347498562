//! Calls into the module API, with the "is it there?" question answered once, at load.

/// The module API function `RedisModule_<name>`, as a function pointer. Every function
/// the module calls after loading is checked present at load (`commands::missing_api`;
/// the module refuses to load otherwise), so the `None` arm cannot be reached from any
/// input. Inside a command handler, `guarded` would still turn it into an ERR reply.
macro_rules! api {
    ($name:ident) => {{
        // Reading the pointer is the unsafe part; many call sites are in unsafe
        // blocks already.
        #[allow(unused_unsafe)]
        let f = unsafe { ::redis_module::raw::$name };
        match f {
            Some(f) => f,
            None => unreachable!(concat!(stringify!($name), " is checked at load")),
        }
    }};
}
