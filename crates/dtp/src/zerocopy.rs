//! Zero-copy sends of clear file data (`sendfile`), and the header write that precedes them.
//!
//! This is the one place the DTP calls the OS directly: tokio has no `sendfile`. Each call is a
//! plain non-blocking syscall on descriptors the caller keeps alive for its duration.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use tokio::io::Interest;
use tokio::net::TcpStream;

/// Writes all of `buf` with `MSG_MORE`, so the kernel joins it with the payload that follows.
pub(crate) async fn send_more(sock: &TcpStream, buf: &[u8]) -> io::Result<()> {
    let fd = sock.as_raw_fd();
    let mut done = 0;
    while done < buf.len() {
        sock.writable().await?;
        let rest = &buf[done..];
        let r = sock.try_io(Interest::WRITABLE, || {
            // SAFETY: `rest` is a valid slice for its length; `fd` is the open socket of `sock`.
            let n = unsafe {
                libc::send(
                    fd,
                    rest.as_ptr().cast(),
                    rest.len(),
                    libc::MSG_MORE | libc::MSG_NOSIGNAL,
                )
            };
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(n as usize)
            }
        });
        match r {
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Sends `count` bytes of `file` from `offset` to `sock`; returns the bytes sent, fewer only if
/// the file ended first.
pub(crate) async fn sendfile_all(
    sock: &TcpStream,
    file: RawFd,
    offset: u64,
    count: u64,
) -> io::Result<u64> {
    let fd = sock.as_raw_fd();
    let mut off = offset as libc::off_t;
    let mut sent = 0u64;
    while sent < count {
        sock.writable().await?;
        let want = (count - sent).min(1 << 30) as usize;
        let r = sock.try_io(Interest::WRITABLE, || {
            // SAFETY: both descriptors are open for the duration of the call; `off` is a valid
            // pointer to a local the kernel advances.
            let n = unsafe { libc::sendfile(fd, file, &mut off, want) };
            if n < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(n as u64)
            }
        });
        match r {
            Ok(0) => break,
            Ok(n) => sent += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(sent)
}

/// Whether a `sendfile` error means "this descriptor cannot be spliced" rather than a failure.
pub(crate) fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::ENOSYS | libc::ESPIPE | libc::EOPNOTSUPP)
    )
}
