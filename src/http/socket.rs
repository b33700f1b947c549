//! The connection under a live stream, so that the service can end it
//! itself: a client that stopped reading is never polled again by the
//! server, and nothing else would ever close its connection.
//!
//! The server remembers each connection's socket as it accepts it
//! ([`remember`]); a stream's handler takes a duplicate of it ([`Cutter`]),
//! whose `shutdown` ends the connection (the server's next write fails and
//! it drops everything the connection held). The duplicate is the
//! stream's own descriptor, closed with it: it can never name another
//! connection's socket.

use std::any::Any;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use actix_web::dev::Extensions;
use actix_web::HttpRequest;

/// The kernel's send buffer of a stream's socket (it doubles it): what a
/// client that stops reading can leave unread in the kernel, instead of the
/// megabytes its autotuning would grow to.
pub const STREAM_SEND_BUFFER: usize = 32 * 1024;

/// A connection's socket as the server accepted it.
#[derive(Debug, Clone, Copy)]
struct Accepted(RawFd);

/// Notes each accepted TCP connection's socket (`HttpServer::on_connect`).
pub fn remember(connection: &dyn Any, data: &mut Extensions) {
    if let Some(tcp) = connection.downcast_ref::<actix_web::rt::net::TcpStream>() {
        data.insert(Accepted(tcp.as_raw_fd()));
    }
}

/// A stream's hold on its connection.
#[derive(Debug)]
pub struct Cutter(OwnedFd);

impl Cutter {
    /// A hold on `req`'s connection (none if the server did not note it),
    /// its send buffer bounded to [`STREAM_SEND_BUFFER`].
    pub fn of(req: &HttpRequest) -> Option<Cutter> {
        let Accepted(fd) = *req.conn_data::<Accepted>()?;
        // SAFETY: the request is being served, so its connection (and the
        // descriptor the server holds) is open; `F_DUPFD_CLOEXEC` makes a
        // new descriptor of the same socket, owned here alone.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            return None;
        }
        // SAFETY: `dup` is a descriptor just made, owned by nothing else.
        let owned = unsafe { OwnedFd::from_raw_fd(dup) };
        let size = STREAM_SEND_BUFFER as libc::c_int;
        // SAFETY: a plain option on a socket this holds; the value is an int.
        unsafe {
            libc::setsockopt(
                owned.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        Some(Cutter(owned))
    }

    /// Ends the connection both ways: the server's pending write fails and
    /// it lets the connection go, with whatever it had not sent.
    pub fn cut(&self) {
        // SAFETY: shutdown on a descriptor this owns.
        unsafe {
            libc::shutdown(self.0.as_raw_fd(), libc::SHUT_RDWR);
        }
    }
}

/// How the engine cuts the connection of `req`'s stream (none if the
/// server did not note its socket).
pub fn cut_of(req: &HttpRequest) -> Option<crate::engine::stream::Cut> {
    let cutter = Cutter::of(req)?;
    Some(Box::new(move || cutter.cut()))
}
