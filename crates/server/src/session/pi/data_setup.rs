//! Data-channel setup: passive (`PASV`, `EPSV`, `SPAS`) and active (`PORT`, `EPRT`, `SPOR`).
//! The mover opens the listeners or takes the endpoints; the PI words the replies.

use std::net::{IpAddr, SocketAddr};

use ferry_dtp::{ChannelSetup, DtpError, PassiveRequest};
use ferry_proto::command::EpsvArg;
use ferry_proto::hostport::HostPort;
use ferry_proto::{Command, Reply};

use super::{Pending, Pi, Request};

/// Which passive command asked for a listener.
#[derive(Debug, Clone, Copy)]
pub(super) enum PassiveKind {
    Pasv,
    Epsv,
    Spas { v6: bool },
}

/// An IPv4 address carried as IPv6 (`::ffff:a.b.c.d`) as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

impl Pi {
    /// Whether this session may be one end of a third-party copy: name another host for its
    /// data, or take data connections from one. GSI sessions with data-channel authentication
    /// may (the data channel proves who is at the other end); others only as the admin allows.
    pub(super) fn may_be_third_party(&self) -> bool {
        let allowed = |kind: &str| self.ctx.config.allow_third_party.iter().any(|k| k == kind);
        if self.is_gsi() {
            return self.settings.dcau != ferry_proto::command::Dcau::None || allowed("dcau-none");
        }
        if self.is_anonymous() {
            return allowed("anonymous");
        }
        allowed("password")
    }

    pub(super) fn cmd_data_setup(&mut self, cmd: Command) {
        if self.settings.epsv_all && !matches!(cmd, Command::Epsv(_)) {
            return self.reply(
                501,
                "EPSV ALL was sent: only EPSV may set up data connections.",
            );
        }
        match cmd {
            Command::Pasv => self.cmd_passive(PassiveKind::Pasv),
            Command::Epsv(Some(EpsvArg::All)) => {
                self.settings.epsv_all = true;
                self.reply(200, "EPSV ALL ok.");
            }
            Command::Epsv(Some(EpsvArg::Protocol(p))) if p != 1 && p != 2 => {
                self.reply(522, "Network protocol not supported, use (1,2).")
            }
            Command::Epsv(_) => self.cmd_passive(PassiveKind::Epsv),
            Command::Spas(v6) => self.cmd_passive(PassiveKind::Spas { v6 }),
            Command::Port(hp) | Command::Eprt(hp) => self.cmd_active(vec![hp]),
            Command::Spor(list) => self.cmd_active(list),
            _ => {}
        }
    }

    /// `PASV`, `EPSV` or `SPAS`: asks the mover for listeners.
    fn cmd_passive(&mut self, kind: PassiveKind) {
        let ip = match self.local.ip() {
            IpAddr::V6(v6) => v6
                .to_ipv4_mapped()
                .map(IpAddr::V4)
                .unwrap_or(self.local.ip()),
            v4 => v4,
        };
        let ip = self.ctx.config.data_interface.unwrap_or(ip);
        if matches!(kind, PassiveKind::Pasv) && ip.is_ipv6() {
            return self.reply(522, "Network protocol not supported; use EPSV.");
        }
        let req = PassiveRequest {
            ip,
            ports: self.ctx.config.port_range,
            tuning: self.data_tuning(),
            striped: matches!(kind, PassiveKind::Spas { .. }),
            stack: self.settings.net_stack.clone(),
            admit_only: (!self.may_be_third_party()).then(|| self.peer.ip()),
        };
        self.pending = Some(Pending::Passive(kind, ip));
        self.request(Request::OpenPassive(req));
    }

    /// The driver's answer to [`Request::OpenPassive`]: the listeners' addresses.
    pub(crate) fn passive_done(&mut self, result: Result<Vec<SocketAddr>, DtpError>) {
        let Some(Pending::Passive(kind, ip)) = self.pending.take() else {
            return;
        };
        let addrs = match result {
            Ok(a) if !a.is_empty() => a,
            Ok(_) => {
                self.settings.channel = None;
                return self.reply(425, "Cannot open passive listener.");
            }
            Err(e) => {
                self.settings.channel = None;
                return self.reply(425, e.to_string());
            }
        };
        let addr = addrs[0];
        if matches!(kind, PassiveKind::Pasv) && addr.is_ipv6() {
            return self.reply(522, "Network protocol not supported; use EPSV.");
        }
        self.settings.channel = Some(ChannelSetup::Passive);
        let hp = HostPort(addr);
        match kind {
            PassiveKind::Pasv => {
                let text = hp.pasv_reply_text().unwrap_or_default();
                self.reply(227, text);
            }
            PassiveKind::Epsv if addr.ip() != ip => {
                // EPSV names only a port: the client would dial this host, not the node.
                self.settings.channel = None;
                self.reply(
                    425,
                    format!("EPSV cannot name data node {addr}; use SPAS, PASV or PORT."),
                );
            }
            PassiveKind::Epsv => self.reply(229, HostPort::epsv_reply_text(addr.port())),
            PassiveKind::Spas { v6 } => {
                let mut lines = vec!["Entering Striped Passive Mode.".to_string()];
                for a in &addrs {
                    let hp = HostPort(*a);
                    let line = if v6 || a.is_ipv6() {
                        hp.to_eprt_form()
                    } else {
                        hp.to_port_form().unwrap_or_else(|| hp.to_eprt_form())
                    };
                    lines.push(format!(" {line}"));
                }
                lines.push("End".into());
                self.send(Reply::multi(229, lines));
            }
        }
    }

    /// `PORT`, `EPRT` or `SPOR`: the mover connects to these for the next transfer.
    fn cmd_active(&mut self, list: Vec<HostPort>) {
        if list.is_empty() {
            return self.reply(501, "Illegal PORT command.");
        }
        let endpoints: Vec<SocketAddr> = list.iter().map(|h| h.0).collect();
        // FTP bounce (RFC 2577): no data connection to a service port, and none to another
        // host unless this session may be one end of a third-party copy.
        if let Some(a) = endpoints.iter().find(|a| a.port() < 1024) {
            return self.reply(
                504,
                format!("PORT to {a} refused: ports below 1024 are never data ports."),
            );
        }
        let own = canonical(self.peer.ip());
        if !self.may_be_third_party() {
            if let Some(a) = endpoints.iter().find(|a| canonical(a.ip()) != own) {
                return self.reply(
                    504,
                    format!(
                        "PORT to {a} refused: this session may only name its own address {own} \
                         (the server's --allow-third-party admits third-party copies)."
                    ),
                );
            }
        }
        self.pending = Some(Pending::Active(endpoints.clone()));
        self.request(Request::SetActive(endpoints));
    }

    /// The driver's answer to [`Request::SetActive`].
    pub(crate) fn active_done(&mut self, result: Result<(), DtpError>) {
        let Some(Pending::Active(endpoints)) = self.pending.take() else {
            return;
        };
        match result {
            Ok(()) => {
                self.settings.channel = Some(ChannelSetup::Active(endpoints));
                self.reply(200, "PORT Command successful.");
            }
            Err(e) => {
                self.settings.channel = None;
                self.dtp_error(&e);
            }
        }
    }
}
