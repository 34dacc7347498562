//! "Send this command, get a `redis::Value`": the one thing the limiter needs from a
//! client, implemented for redis-rs's async connections and open to any other client.

use std::future::Future;
use std::pin::Pin;

use redis::{Cmd, RedisResult, Value};

/// A boxed, `Send`, `'static` future: what [`SendCommand`] methods return.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What the limiter needs from a Redis client: send one command, get its reply.
///
/// Implemented here for redis-rs's [`MultiplexedConnection`](redis::aio::MultiplexedConnection),
/// [`ConnectionManager`](redis::aio::ConnectionManager) (reconnects by itself: the one to
/// use for a single node) and the async cluster connection
/// [`ClusterConnection`](redis::cluster_async::ClusterConnection). Implement it for
/// another client (a pool, a proxy, a client with its own routing) with a clone of the
/// client moved into the future:
///
/// ```
/// use slidingwindow_client::{BoxFuture, SendCommand};
/// use redis::{Cmd, RedisResult, Value};
///
/// #[derive(Clone)]
/// struct Logged(redis::aio::ConnectionManager);
///
/// impl SendCommand for Logged {
///     fn send(&self, cmd: Cmd) -> BoxFuture<RedisResult<Value>> {
///         let mut con = self.0.clone();
///         Box::pin(async move {
///             log::debug!("sending {:?}", cmd.args_iter().next());
///             cmd.query_async(&mut con).await
///         })
///     }
/// }
/// ```
///
/// An error reply may come back either as `Err` or as `Ok(Value::ServerError)`: the
/// limiter reads both.
pub trait SendCommand: Clone + Send + Sync + 'static {
    /// Sends `cmd` (routed by its key in a cluster) and returns the reply.
    fn send(&self, cmd: Cmd) -> BoxFuture<RedisResult<Value>>;

    /// Sends `cmd` to every primary (`FUNCTION LOAD`, the library's version) and returns
    /// one reply per node. A single node: its one reply (the default).
    fn send_to_primaries(&self, cmd: Cmd) -> BoxFuture<RedisResult<Vec<RedisResult<Value>>>> {
        let reply = self.send(cmd);
        Box::pin(async move { Ok(vec![reply.await]) })
    }

    /// Whether commands without a key may reach different servers (a cluster): the deny
    /// cache then does not measure the server's clock with `TIME`.
    fn is_cluster(&self) -> bool {
        false
    }
}

fn send_on<C>(con: &C, cmd: Cmd) -> BoxFuture<RedisResult<Value>>
where
    C: redis::aio::ConnectionLike + Clone + Send + 'static,
{
    let mut con = con.clone();
    Box::pin(async move { con.req_packed_command(&cmd).await })
}

impl SendCommand for redis::aio::MultiplexedConnection {
    fn send(&self, cmd: Cmd) -> BoxFuture<RedisResult<Value>> {
        send_on(self, cmd)
    }
}

impl SendCommand for redis::aio::ConnectionManager {
    fn send(&self, cmd: Cmd) -> BoxFuture<RedisResult<Value>> {
        send_on(self, cmd)
    }
}

impl SendCommand for redis::cluster_async::ClusterConnection {
    fn send(&self, cmd: Cmd) -> BoxFuture<RedisResult<Value>> {
        send_on(self, cmd)
    }

    fn send_to_primaries(&self, cmd: Cmd) -> BoxFuture<RedisResult<Vec<RedisResult<Value>>>> {
        use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
        let mut con = self.clone();
        Box::pin(async move {
            // No response policy: one (address, reply) pair per primary.
            let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
            let reply = con.route_command(cmd, routing).await?;
            match reply {
                Value::Map(pairs) => {
                    Ok(pairs.into_iter().map(|(_, v)| v.extract_error()).collect())
                }
                other => Ok(vec![other.extract_error()]),
            }
        })
    }

    fn is_cluster(&self) -> bool {
        true
    }
}
