//! The TCP side of a session's data channels that the client asks the server for: socket
//! buffers, the congestion control of the connections it sends on, and what its kernel knew of
//! the last transfer's connections.

use ferry_proto::site::SiteCommand;
use ferry_proto::Command;

use crate::session::RemoteSession;
use crate::ClientError;

impl RemoteSession {
    /// What a ferry server's kernel knew of its last transfer's data connections (`SITE
    /// TCPINFO`, asked only where FEAT lists it); `None` from other servers or on any refusal.
    pub(crate) async fn last_tcp_info(&mut self) -> Option<ferry_net::TcpStats> {
        if !self.has_feature("SITE TCPINFO") {
            return None;
        }
        let r = self
            .ctl
            .command(&Command::Site(SiteCommand::TcpInfo))
            .await
            .ok()?;
        (r.code == 200)
            .then(|| ferry_net::TcpStats::from_facts(r.text().trim()).ok())
            .flatten()
    }

    /// The TCP congestion controls the server offers its data connections (its FEAT's
    /// `TCP-CONGESTION` line, a ferry extension), lower case; empty for other servers.
    pub fn congestion_offered(&self) -> Vec<String> {
        self.features
            .iter()
            .find_map(|f| f.strip_prefix("TCP-CONGESTION "))
            .map(|list| {
                list.split(';')
                    .map(|n| n.trim().to_ascii_lowercase())
                    .filter(|n| !n.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The most the server's TCP autotuning lets one data socket buffer, receiving and sending
    /// (its FEAT's `TCP-AUTOTUNE-MAX rmem=N;wmem=N;`, a ferry extension); `None` for others.
    pub fn autotune_max_offered(&self) -> (Option<u64>, Option<u64>) {
        let Some(list) = self
            .features
            .iter()
            .find_map(|f| f.strip_prefix("TCP-AUTOTUNE-MAX "))
        else {
            return (None, None);
        };
        let value = |key: &str| {
            list.split(';').find_map(|kv| {
                let (k, v) = kv.trim().split_once('=')?;
                k.eq_ignore_ascii_case(key).then(|| v.trim().parse().ok())?
            })
        };
        (value("rmem"), value("wmem"))
    }

    /// Asks a server that will send for this congestion control on its data connections
    /// (`SITE SETNETSTACK tcp:congestion=NAME`), or for its default again (`None`). Asked only
    /// of a server whose FEAT offers the name, and only on TCP data channels: returns whether
    /// the server's connections will have it. The command leaves with the next one (no round
    /// trip of its own): a server whose FEAT lists the name takes it, and the rare refusal
    /// (the host's kernel changed since FEAT) is logged and leaves the server's data
    /// connections on its default congestion control, as a refusal always did.
    pub(crate) async fn sender_congestion(
        &mut self,
        cc: Option<ferry_net::Congestion>,
    ) -> Result<bool, ClientError> {
        if self.congestion == cc {
            return Ok(true);
        }
        let offered = self.data_stack.bottom() == "tcp"
            && cc.is_none_or(|c| self.congestion_offered().iter().any(|n| n == c.as_str()));
        if !offered {
            return Ok(false);
        }
        let stack = match cc {
            Some(c) => format!("tcp:congestion={c}"),
            None => "default".to_string(),
        };
        self.ctl
            .defer(&Command::Site(SiteCommand::SetNetStack(stack)), true);
        // Connections the server holds were made under the old stack.
        self.reset_data();
        self.congestion = cc;
        Ok(true)
    }

    /// Asks the server for socket buffers of `bytes` for sending (`retr`) or receiving, trying
    /// the commands Globus servers know; buffers are a hint, so refusals are not errors.
    pub(crate) async fn buffers(
        &mut self,
        bytes: Option<u32>,
        retr: bool,
    ) -> Result<(), ClientError> {
        let Some(n) = bytes else { return Ok(()) };
        let size = u64::from(n);
        let (cached, commands) = if retr {
            let site = Command::Site(SiteCommand::RetrBufSize(size));
            (&mut self.retr_buf, [site, Command::Sbuf(size)])
        } else {
            let site = Command::Site(SiteCommand::StorBufSize(size));
            (&mut self.stor_buf, [site, Command::Sbuf(size)])
        };
        if *cached == Some(n) {
            return Ok(());
        }
        *cached = Some(n);
        for cmd in &commands {
            let r = self.ctl.command(cmd).await?;
            if r.is_success() {
                // A buffer change invalidates cached data connections on the server.
                self.reset_data();
                break;
            }
        }
        Ok(())
    }
}
