//! The connection under a live stream, so that the service can end it
//! itself: a client that stopped reading is never polled again by the
//! server, and nothing else would ever close its connection.
//!
//! The server remembers each connection's socket as it accepts it
//! ([`remember`]): its descriptor and the socket's inode. A stream's
//! handler holds the two ([`Cutter`]); its `shutdown` ends the connection
//! (the server's next write fails and it drops everything the connection
//! held). No descriptor is duplicated, so a stream costs the process one
//! descriptor, not two: 10,000 streams fit a limit of 20,000 open files.
//! A cut shuts the socket down only if the descriptor still names the
//! same socket (its inode, which the kernel never hands out twice in a
//! row); and it runs on the connection's own worker thread (the stream's
//! task is spawned there), the only thread that closes that descriptor,
//! so the socket cannot change between the check and the shutdown.

use std::any::Any;
use std::os::fd::{AsRawFd, RawFd};

use actix_web::dev::Extensions;
use actix_web::HttpRequest;

/// The kernel's send buffer of a stream's socket (it doubles it): what a
/// client that stops reading can leave unread in the kernel, instead of the
/// megabytes its autotuning would grow to.
pub const STREAM_SEND_BUFFER: usize = 32 * 1024;

/// A connection's socket as the server accepted it: its descriptor and
/// the socket's inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Accepted {
    fd: RawFd,
    inode: u64,
}

/// The inode of the socket `fd` names now (none if it names none).
fn inode_of(fd: RawFd) -> Option<u64> {
    let mut stat = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes the whole struct when it succeeds, and only
    // then is it read.
    let stat = unsafe {
        if libc::fstat(fd, stat.as_mut_ptr()) != 0 {
            return None;
        }
        stat.assume_init()
    };
    (stat.st_mode & libc::S_IFMT == libc::S_IFSOCK).then_some(stat.st_ino)
}

/// Notes each accepted TCP connection's socket (`HttpServer::on_connect`).
pub fn remember(connection: &dyn Any, data: &mut Extensions) {
    if let Some(tcp) = connection.downcast_ref::<actix_web::rt::net::TcpStream>() {
        let fd = tcp.as_raw_fd();
        if let Some(inode) = inode_of(fd) {
            data.insert(Accepted { fd, inode });
        }
    }
}

/// A stream's hold on its connection.
#[derive(Debug)]
pub struct Cutter(Accepted);

impl Cutter {
    /// A hold on `req`'s connection (none if the server did not note it),
    /// its send buffer bounded to [`STREAM_SEND_BUFFER`].
    pub fn of(req: &HttpRequest) -> Option<Cutter> {
        let accepted = *req.conn_data::<Accepted>()?;
        let size = STREAM_SEND_BUFFER as libc::c_int;
        // SAFETY: a plain option on the request's own socket, open while
        // the request is served; the value is an int.
        unsafe {
            libc::setsockopt(
                accepted.fd,
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        Some(Cutter(accepted))
    }

    /// Ends the connection both ways, if it is still open: the server's
    /// pending write fails and it lets the connection go, with whatever it
    /// had not sent.
    pub fn cut(&self) {
        let Accepted { fd, inode } = self.0;
        if inode_of(fd) == Some(inode) {
            // SAFETY: shutdown of the socket this stream's connection is
            // (checked just above, on the thread that would close it).
            unsafe {
                libc::shutdown(fd, libc::SHUT_RDWR);
            }
        }
    }
}

/// How the engine cuts the connection of `req`'s stream (none if the
/// server did not note its socket).
pub fn cut_of(req: &HttpRequest) -> Option<crate::engine::stream::Cut> {
    let cutter = Cutter::of(req)?;
    Some(Box::new(move || cutter.cut()))
}
