//! TUN devices. Creating one is a single `TUNSETIFF` ioctl on `/dev/net/tun`; it is written
//! here rather than taken from a crate because the TUN crates bring an async runtime and
//! per-platform layers for what is, on Linux, twenty lines, and the emulator wants plain
//! blocking reads and writes of whole packets on dedicated threads.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

/// `struct ifreq` as TUNSETIFF reads it: the name, then the flags in the union (40 bytes).
#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _union_rest: [u8; 22],
}

/// Creates the layer-3 TUN device `name` (no packet-information header: every read and write
/// is one IP packet) and returns its descriptor. The device lives as long as the descriptor,
/// including after it is moved into another network namespace.
pub fn create(name: &str) -> io::Result<File> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name '{name}' must be 1-15 bytes"),
        ));
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")?;
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: IFF_TUN | IFF_NO_PI,
        _union_rest: [0; 22],
    };
    for (d, s) in req.name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: `req` is a live, correctly sized `struct ifreq` for the duration of the call and
    // the descriptor is open; TUNSETIFF reads the name and flags and writes back the name.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF as _, &mut req as *mut IfReq) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}
