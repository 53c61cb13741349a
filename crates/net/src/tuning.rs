//! Socket options applied to data connections before they connect or listen.

use std::io;

use tokio::net::TcpSocket;

/// TCP buffer sizes and options for data connections; `None` leaves the kernel's autotuning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SocketTuning {
    /// `SO_SNDBUF` in bytes.
    pub send_buffer: Option<u32>,
    /// `SO_RCVBUF` in bytes.
    pub recv_buffer: Option<u32>,
}

impl SocketTuning {
    /// Applies the buffer sizes; must run before `connect`/`listen` so window scaling follows.
    pub fn apply(&self, socket: &TcpSocket) -> io::Result<()> {
        if let Some(n) = self.send_buffer {
            socket.set_send_buffer_size(n)?;
        }
        if let Some(n) = self.recv_buffer {
            socket.set_recv_buffer_size(n)?;
        }
        Ok(())
    }
}
