//! Calls into the module API, with the "is it there?" question answered once, at load.

/// The module API function `RedisModule_<name>`, as a function pointer. Every function
/// the module calls after loading is checked present at load (`missing`; the module
/// refuses to load otherwise), so the `None` arm cannot be reached from any input.
/// Inside a command handler, `guarded` would still turn it into an ERR reply.
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

/// The first API function the commands call that this server does not export, if any.
/// Checked once at load, so `api!` and the crate's `raw::` wrappers, which unwrap these
/// pointers, cannot fail afterwards. Every function called through `api!` or a `raw::`
/// wrapper after load is in the list.
pub fn missing() -> Option<&'static str> {
    macro_rules! first_missing {
        ($($name:ident),* $(,)?) => {
            $(
                if unsafe { ::redis_module::raw::$name }.is_none() {
                    return Some(stringify!($name));
                }
            )*
        };
    }
    first_missing!(
        RedisModule_StringPtrLen,
        RedisModule_Milliseconds,
        RedisModule_OpenKey,
        RedisModule_CloseKey,
        RedisModule_KeyType,
        RedisModule_ValueLength,
        RedisModule_StringDMA,
        RedisModule_StringTruncate,
        RedisModule_DeleteKey,
        RedisModule_GetLFU,
        RedisModule_SetLFU,
        RedisModule_CreateString,
        RedisModule_StringSet,
        RedisModule_FreeString,
        RedisModule_SetAbsExpire,
        RedisModule_GetAbsExpire,
        RedisModule_SignalModifiedKey,
        RedisModule_NotifyKeyspaceEvent,
        RedisModule_Replicate,
        RedisModule_ReplyWithArray,
        RedisModule_ReplyWithLongLong,
        RedisModule_ReplyWithError,
    );
    None
}
