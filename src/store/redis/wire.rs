//! A plain connection to one Redis node for reads, multiplexed: the calls
//! of one thread share it, their pipelines written together as redis-rs
//! packs them, and the replies read back with a reader that knows only
//! what RESP2 replies to reads hold.
//!
//! What it saves, against redis-rs's multiplexed connection: its general
//! parser, which costs a page's read of hundreds of list elements more than
//! the rest of the read together; and, kept to one thread's calls, the
//! wakes of a task on another thread.
//!
//! Each connection has a task that writes the calls it is handed and
//! reads their replies, in order. It ends when the connection fails, when
//! Redis does not answer a call in time, or when no [`Link`] to it is left
//! and every call made has its replies: its callers then get an error.

use std::collections::VecDeque;
use std::io;
use std::time::Duration;

use redis::{ConnectionInfo, RedisError, RedisResult, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// Bytes the read buffer grows by at least, before each read of the socket.
const READ_CHUNK: usize = 16 * 1024;

/// Nested arrays deeper than this are refused (a read's deepest reply is a
/// transaction's array of lists: 2).
const MAX_DEPTH: usize = 8;

/// Calls handed to a connection's task and not yet written; more wait.
const QUEUED: usize = 1024;

/// A call: a packed pipeline, how many replies it gets, and where they go.
struct Call {
    packed: Vec<u8>,
    replies: usize,
    answer: oneshot::Sender<RedisResult<Vec<Value>>>,
}

/// A handle on one connection's task: clones share the connection.
#[derive(Clone)]
pub(super) struct Link {
    calls: mpsc::Sender<Call>,
    timeout: Duration,
    /// The database it selected.
    db: i64,
}

impl Link {
    /// Connects to `host:port`, authenticates and selects the database as
    /// `info` says (every step bounded by `timeout`), and starts the
    /// connection's task on this thread's runtime.
    pub(super) async fn open(
        host: &str,
        port: u16,
        info: &ConnectionInfo,
        timeout: Duration,
    ) -> RedisResult<Link> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect((host, port)))
            .await
            .map_err(|_| timed_out())??;
        stream.set_nodelay(true)?;
        let mut wire = Wire {
            stream,
            buf: Vec::with_capacity(READ_CHUNK),
            timeout,
        };
        tokio::time::timeout(timeout, wire.hello(info))
            .await
            .map_err(|_| timed_out())??;
        let (calls, queue) = mpsc::channel(QUEUED);
        tokio::spawn(wire.serve(queue));
        Ok(Link {
            calls,
            timeout,
            db: info.redis_settings().db(),
        })
    }

    /// Sends `packed` (a pipeline of commands that get `replies` replies)
    /// and returns the replies, a server error among them as a
    /// [`Value::ServerError`].
    pub(super) async fn call(&self, packed: Vec<u8>, replies: usize) -> RedisResult<Vec<Value>> {
        let (answer, answered) = oneshot::channel();
        let call = Call {
            packed,
            replies,
            answer,
        };
        let exchange = async {
            let gone = |_| broken("the connection is closed");
            self.calls.send(call).await.map_err(gone)?;
            answered
                .await
                .map_err(|_| broken("the connection is closed"))?
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| timed_out())?
    }

    /// The database it selected.
    pub(super) fn db(&self) -> i64 {
        self.db
    }

    /// Whether its connection's task has ended (the next call fails).
    pub(super) fn is_closed(&self) -> bool {
        self.calls.is_closed()
    }
}

/// What a connection's task wakes up for.
enum Event {
    Read(RedisResult<()>),
    Called(Option<Call>),
}

/// The calls written and not yet answered, in order: how many replies
/// each gets, and where they go.
type Waiting = VecDeque<(usize, oneshot::Sender<RedisResult<Vec<Value>>>)>;

/// The connection, owned by its task.
struct Wire {
    stream: TcpStream,
    buf: Vec<u8>,
    timeout: Duration,
}

impl Wire {
    /// `AUTH` and `SELECT`, if `info` asks for them.
    async fn hello(&mut self, info: &ConnectionInfo) -> RedisResult<()> {
        let settings = info.redis_settings();
        let mut hello = redis::pipe();
        if let Some(password) = settings.password() {
            let auth = hello.cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            auth.arg(password);
        }
        if settings.db() != 0 {
            hello.cmd("SELECT").arg(settings.db());
        }
        if hello.is_empty() {
            return Ok(());
        }
        self.stream.write_all(&hello.get_packed_pipeline()).await?;
        let mut waiting = VecDeque::new();
        let (answer, answered) = oneshot::channel();
        waiting.push_back((hello.len(), answer));
        let mut replies = Vec::new();
        while !waiting.is_empty() {
            self.read(&mut waiting, &mut replies).await?;
        }
        for reply in answered.await.map_err(|_| broken("no reply"))?? {
            reply.extract_error()?;
        }
        Ok(())
    }

    /// The connection's task: writes the calls handed to it (all those
    /// waiting, in one write) and hands each its replies.
    async fn serve(mut self, mut queue: mpsc::Receiver<Call>) {
        let mut waiting = Waiting::new();
        let mut replies = Vec::new();
        let mut out = Vec::new();
        let mut open = true;
        loop {
            let event = tokio::select! {
                biased;
                read = self.read(&mut waiting, &mut replies), if !waiting.is_empty() => Event::Read(read),
                call = queue.recv(), if open => Event::Called(call),
                else => return,
            };
            match event {
                Event::Read(Ok(())) => {}
                Event::Read(Err(_)) => return,
                Event::Called(None) => open = false,
                Event::Called(Some(call)) => {
                    out.clear();
                    let more = std::iter::from_fn(|| queue.try_recv().ok());
                    for call in std::iter::once(call).chain(more) {
                        out.extend_from_slice(&call.packed);
                        waiting.push_back((call.replies, call.answer));
                    }
                    if self.stream.write_all(&out).await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// Reads the socket once (within the timeout) and hands every call
    /// whose replies are all in its replies, in order; `replies` holds
    /// those of the first call still waiting.
    async fn read(&mut self, waiting: &mut Waiting, replies: &mut Vec<Value>) -> RedisResult<()> {
        self.buf.reserve(READ_CHUNK);
        let read = tokio::time::timeout(self.timeout, self.stream.read_buf(&mut self.buf))
            .await
            .map_err(|_| timed_out())??;
        if read == 0 {
            return Err(broken("the node closed the connection"));
        }
        let mut at = 0;
        while let Some((value, used)) = parse(&self.buf[at..], 0)? {
            at += used;
            replies.push(value);
            let Some(&(wanted, _)) = waiting.front() else {
                return Err(broken("a reply no call asked for"));
            };
            if replies.len() == wanted {
                let (_, answer) = waiting.pop_front().expect("looked at above");
                let _ = answer.send(Ok(std::mem::take(replies)));
            }
        }
        self.buf.drain(..at);
        Ok(())
    }
}

/// A reply parsed from the front of `buf`, and the bytes it took; `None`
/// if `buf` does not hold all of it yet.
type Parsed = Option<(Value, usize)>;

/// The reply at the front of `buf` (RESP2: what a read is answered with).
fn parse(buf: &[u8], depth: usize) -> RedisResult<Parsed> {
    let Some((line, mut used)) = line(buf) else {
        return Ok(None);
    };
    let Some((&kind, rest)) = line.split_first() else {
        return Err(broken("an empty reply line"));
    };
    let value = match kind {
        b'$' => match number(rest)? {
            -1 => Value::Nil,
            len => {
                let len = usize::try_from(len).map_err(|_| broken("a negative length"))?;
                if buf.len() < used + len + 2 {
                    return Ok(None);
                }
                if &buf[used + len..used + len + 2] != b"\r\n" {
                    return Err(broken("a bulk string without its end"));
                }
                let bytes = buf[used..used + len].to_vec();
                used += len + 2;
                Value::BulkString(bytes)
            }
        },
        b'*' => match number(rest)? {
            -1 => Value::Nil,
            len => {
                if depth == MAX_DEPTH {
                    return Err(broken("arrays nested too deep"));
                }
                let len = usize::try_from(len).map_err(|_| broken("a negative length"))?;
                // Each element takes at least 3 bytes: no allocation beyond
                // what the buffer could hold.
                let mut items = Vec::with_capacity(len.min((buf.len() - used) / 3));
                for _ in 0..len {
                    let Some((item, took)) = parse(&buf[used..], depth + 1)? else {
                        return Ok(None);
                    };
                    items.push(item);
                    used += took;
                }
                Value::Array(items)
            }
        },
        b':' => Value::Int(number(rest)?),
        b'+' if rest == b"OK" => Value::Okay,
        b'+' => Value::SimpleString(String::from_utf8_lossy(rest).into_owned()),
        // An error reply, rare: redis-rs's own parser makes its value.
        b'-' => redis::parse_redis_value(&buf[..used])?,
        _ => return Err(broken("a reply of an unknown kind")),
    };
    Ok(Some((value, used)))
}

/// The first line of `buf` without its `\r\n`, and its length with it.
fn line(buf: &[u8]) -> Option<(&[u8], usize)> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    Some((&buf[..end], end + 2))
}

/// A decimal integer, as RESP writes lengths and integers.
fn number(text: &[u8]) -> RedisResult<i64> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| broken("a number that is not one"))
}

fn broken(what: &str) -> RedisError {
    io::Error::new(io::ErrorKind::InvalidData, format!("Redis reply: {what}")).into()
}

fn timed_out() -> RedisError {
    io::Error::new(io::ErrorKind::TimedOut, "Redis did not answer in time").into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(bytes: &[u8]) -> Value {
        let (value, used) = parse(bytes, 0).unwrap().unwrap();
        assert_eq!(used, bytes.len());
        value
    }

    #[test]
    fn replies_read_as_redis_rs_reads_them() {
        let replies: [&[u8]; 9] = [
            b"$5\r\nhello\r\n",
            b"$0\r\n\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b":-42\r\n",
            b"+OK\r\n",
            b"+QUEUED\r\n",
            b"*2\r\n*2\r\n$1\r\na\r\n$-1\r\n$3\r\n\r\n\n\r\n",
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
        ];
        for reply in replies {
            assert_eq!(whole(reply), redis::parse_redis_value(reply).unwrap());
        }
    }

    #[test]
    fn a_reply_cut_anywhere_waits_for_the_rest() {
        let reply = b"*3\r\n$4\r\nabcd\r\n:7\r\n*1\r\n$2\r\nxy\r\n";
        for cut in 0..reply.len() {
            assert!(parse(&reply[..cut], 0).unwrap().is_none(), "cut at {cut}");
        }
        assert!(parse(reply, 0).unwrap().is_some());
    }

    #[test]
    fn garbage_is_an_error_not_a_wait() {
        for bad in [
            &b"?1\r\n"[..],
            b"$x\r\n",
            b"$3\r\nabcde\r\n",
            b"*-2\r\n",
            b"\r\n",
        ] {
            assert!(parse(bad, 0).is_err(), "{bad:?}");
        }
        let deep = "*1\r\n".repeat(MAX_DEPTH + 1) + ":1\r\n";
        assert!(parse(deep.as_bytes(), 0).is_err());
    }
}
