//! The data channels a session sets up and keeps for the next file: the client listening
//! (PORT/EPRT) for gets, the server listening (PASV/EPSV, SPAS when striped) for puts and
//! stream mode, and the peer pairs of third-party copies.

use ferry_proto::data_address::{check_server_data_address, DataAddressError};
use std::net::SocketAddr;

use ferry_dtp::{DataMover, Dtp};
use ferry_net::SocketTuning;
use ferry_proto::hostport::HostPort;
use ferry_proto::Command;

use crate::session::{DataSetup, RemoteSession};
use crate::ClientError;

impl RemoteSession {
    /// Sets up a local listener and tells the server to connect to it (for gets).
    pub(crate) async fn listen_for_server(
        &mut self,
        tuning: SocketTuning,
    ) -> Result<(), ClientError> {
        if self.data == DataSetup::Listening && self.dtp.is_listening() {
            return Ok(());
        }
        let ip = self.ctl.local_addr()?.ip();
        let cmd = listen_locally(&mut self.dtp, ip, tuning, self.data_stack.clone()).await?;
        // Its reply is read before the transfer command's, which leaves with it.
        self.ctl.defer(&cmd, false);
        self.data = DataSetup::Listening;
        Ok(())
    }

    /// Asks the server to listen and returns where, or where it listens already for the
    /// cached channel.
    pub(crate) async fn server_listen(&mut self) -> Result<SocketAddr, ClientError> {
        if let DataSetup::ServerPassive(a) = self.data {
            return Ok(a);
        }
        let addr = self.passive().await?;
        self.data = DataSetup::ServerPassive(addr);
        Ok(addr)
    }

    /// One passive listener: `PASV` to GridFTP servers on IPv4 (as globus-url-copy does),
    /// `EPSV` first to plain FTP servers (RFC 2428: the address is the control channel's, so
    /// it survives NAT) and on IPv6; on IPv4 a refusal of either tries the other.
    pub(crate) async fn passive(&mut self) -> Result<SocketAddr, ClientError> {
        let peer = self.ctl.peer();
        let plain = self.mode_e_offered == Some(false);
        let epsv_first = !peer.is_ipv4() || plain;
        let order: &[Command] = match (peer.is_ipv4(), epsv_first) {
            (false, _) => &[Command::Epsv(None)],
            (true, true) => &[Command::Epsv(None), Command::Pasv],
            (true, false) => &[Command::Pasv, Command::Epsv(None)],
        };
        let mut refused = None;
        for cmd in order {
            let r = self.ctl.command(cmd).await?;
            if r.code >= 400 {
                refused = Some(ClientError::Refused {
                    command: cmd.to_string(),
                    reply: r,
                });
                continue;
            }
            let addr = match cmd {
                Command::Pasv => HostPort::from_pasv_reply(&r.text())
                    // GridFTP servers' addresses stand as given, as Globus' client takes them
                    // (a striped server may name data nodes on a private network).
                    .map(|h| {
                        if plain {
                            fix_pasv_address(h.0, peer)
                        } else {
                            h.0
                        }
                    })
                    .map_err(|e| ClientError::Address(e.to_string()))?,
                _ => HostPort::port_from_epsv_reply(&r.text())
                    .map(|port| SocketAddr::new(peer.ip(), port))
                    .map_err(|e| ClientError::Address(e.to_string()))?,
            };
            self.check_data_address(addr)?;
            return Ok(addr);
        }
        Err(refused.unwrap_or(ClientError::Closed))
    }

    /// Has a striped server listen on every data node (`SPAS`) and returns the addresses, or
    /// those it gave before for the cached channel.
    pub(crate) async fn server_listen_striped(&mut self) -> Result<Vec<SocketAddr>, ClientError> {
        if let DataSetup::ServerStriped(a) = &self.data {
            return Ok(a.clone());
        }
        let spas = Command::Spas(!self.ctl.peer().is_ipv4());
        let r = self.expect_ok(&spas).await?;
        let addrs: Vec<SocketAddr> = HostPort::from_spas_reply(&r.lines)
            .map_err(|e| ClientError::Address(format!("{spas} reply: {e}")))?
            .into_iter()
            .map(|h| h.0)
            .collect();
        for a in &addrs {
            self.check_data_address(*a)?;
        }
        self.data = DataSetup::ServerStriped(addrs.clone());
        Ok(addrs)
    }

    /// Refuses a data address this server cannot mean, or (for a forwarder's child) one that
    /// is not the server itself.
    fn check_data_address(&self, named: SocketAddr) -> Result<(), ClientError> {
        let server = self.ctl.peer().ip();
        check_server_data_address(server, named)?;
        if self.data_at_peer_only && named.ip().to_canonical() != server.to_canonical() {
            return Err(DataAddressError::NotTheServer { server, named }.into());
        }
        Ok(())
    }

    /// Forgets every data channel (after an error, or when a transfer could not reuse it).
    pub(crate) fn reset_data(&mut self) {
        self.data = DataSetup::None;
        DataMover::forget(&mut self.dtp);
    }
}

/// Opens a listener on the client's own DTP over `stack` and returns the PORT or EPRT command
/// that names it to a server.
pub(crate) async fn listen_locally(
    dtp: &mut Dtp,
    ip: std::net::IpAddr,
    tuning: SocketTuning,
    stack: ferry_proto::stack::StackSpec,
) -> Result<Command, ClientError> {
    let req = ferry_dtp::PassiveRequest {
        ip,
        ports: None,
        tuning,
        striped: false,
        stack,
        // The client's listener takes what the server it named sends; a server may send from
        // another of its addresses (a data interface, a data node).
        admit_only: None,
    };
    let addrs = DataMover::open_passive(dtp, req).await?;
    let addr = addrs
        .first()
        .copied()
        .ok_or(ferry_dtp::DtpError::NoDataChannel)?;
    Ok(Command::port_or_eprt(HostPort(addr)))
}

/// The address a PASV reply names, unless it cannot be the server's: an unspecified address,
/// or a private or loopback one from a server reached at a public address (a server behind
/// NAT that names its inside address), where the control channel's address is used instead.
fn fix_pasv_address(named: SocketAddr, control: SocketAddr) -> SocketAddr {
    let inside = |ip: std::net::IpAddr| match ip {
        std::net::IpAddr::V4(v4) => v4.is_private() || v4.is_loopback() || v4.is_link_local(),
        std::net::IpAddr::V6(_) => false,
    };
    let unusable = named.ip().is_unspecified() || (inside(named.ip()) && !inside(control.ip()));
    if unusable {
        SocketAddr::new(control.ip(), named.port())
    } else {
        named
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pasv_addresses_from_behind_nat_or_unspecified_become_the_control_address() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        let public = a("192.0.2.7:21");
        assert_eq!(
            fix_pasv_address(a("10.1.2.3:50000"), public),
            a("192.0.2.7:50000")
        );
        assert_eq!(
            fix_pasv_address(a("0.0.0.0:50000"), public),
            a("192.0.2.7:50000")
        );
        assert_eq!(
            fix_pasv_address(a("198.51.100.9:50000"), public),
            a("198.51.100.9:50000")
        );
        let lan = a("10.0.0.5:21");
        assert_eq!(
            fix_pasv_address(a("10.0.0.6:50000"), lan),
            a("10.0.0.6:50000")
        );
        assert_eq!(
            fix_pasv_address(a("127.0.0.1:50000"), a("127.0.0.1:21")),
            a("127.0.0.1:50000")
        );
    }
}
