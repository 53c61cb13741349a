//! `SITE SETNETSTACK` (alias `SETDCSTACK`) and `SITE SETDISKSTACK`: the session's driver stacks,
//! parsed in Globus' syntax and admitted by the admin's `--dc-whitelist` / `--fs-whitelist`.
//!
//! As in Globus, the check is made at the SITE command, a refusal is a multi-line 500 naming
//! the driver, and a refused command leaves the session on the default stack (Globus drops the
//! old stack before it checks the new one).

use ferry_proto::stack::{StackChoice, StackError, StackSpec, Whitelist};
use ferry_proto::Reply;

use super::Pi;

/// Which stack a command sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StackKind {
    /// The data channel's (`SETNETSTACK`).
    Net,
    /// Storage's (`SETDISKSTACK`).
    Disk,
}

/// The net stack of a session that sets none: the admin's `dc_default` when it parses and
/// every driver is whitelisted and exists, else TCP (the start-up report says why).
pub(crate) fn default_net_stack(
    config: &crate::ServerConfig,
    transports: &ferry_net::Transports,
) -> Result<StackSpec, String> {
    let Some(text) = &config.dc_default else {
        return Ok(StackSpec::default_net());
    };
    let stack = StackSpec::parse(text).map_err(|e| e.to_string())?;
    Whitelist::new(config.dc_whitelist.iter().cloned())
        .admit(&stack, |name| transports.has_driver(name))
        .map_err(|e| e.to_string())?;
    transports.transport_of(&stack).map_err(|e| e.to_string())?;
    Ok(stack)
}

impl StackKind {
    /// The first line of Globus' refusal.
    fn what(self) -> &'static str {
        match self {
            StackKind::Net => "Setting data channel driver stack failed.",
            StackKind::Disk => "Setting filesystem driver stack failed.",
        }
    }
}

impl Pi {
    /// The stack `SITE SETNET/DISKSTACK default` restores, and a refusal leaves.
    pub(super) fn default_stack(&self, kind: StackKind) -> StackSpec {
        match kind {
            StackKind::Net => default_net_stack(&self.ctx.config, &self.ctx.transports)
                .unwrap_or_else(|_| StackSpec::default_net()),
            StackKind::Disk => StackSpec::default_disk(),
        }
    }

    /// The socket tuning of this session's data connections: its buffers (SBUF, SITE
    /// RETRBUFSIZE...), the configured congestion control, and above both what the net stack's
    /// transport options say (`tcp:congestion=bbr`).
    pub(super) fn data_tuning(&self) -> ferry_net::SocketTuning {
        ferry_net::SocketTuning {
            congestion: self
                .settings
                .tuning
                .congestion
                .or(self.ctx.config.data_congestion),
            ..self.settings.tuning
        }
    }

    /// The stack `arg` chooses and the reply: `250 OK.`, or the refusal with the default stack.
    pub(super) fn choose_stack(&self, arg: &str, kind: StackKind) -> (StackSpec, Reply) {
        match self.admit_stack(arg, kind) {
            Ok(stack) => (stack, Reply::new(250, "OK.")),
            Err(why) => (
                self.default_stack(kind),
                Reply::multi(500, vec![kind.what().to_string(), why, "End.".into()]),
            ),
        }
    }

    fn admit_stack(&self, arg: &str, kind: StackKind) -> Result<StackSpec, String> {
        let stack = match StackChoice::parse(arg).map_err(|e| e.to_string())? {
            StackChoice::Default => return Ok(self.default_stack(kind)),
            StackChoice::Stack(s) => s,
        };
        let config = &self.ctx.config;
        match kind {
            StackKind::Net => {
                let whitelist = Whitelist::new(config.dc_whitelist.iter().cloned());
                let transports = &self.ctx.transports;
                whitelist
                    .admit(&stack, |name| transports.has_driver(name))
                    .map_err(|e| e.to_string())?;
                transports.transport_of(&stack).map_err(|e| e.to_string())?;
            }
            StackKind::Disk => {
                let whitelist = Whitelist::new(config.fs_whitelist.iter().cloned());
                let stacks = &self.ctx.disk_stacks;
                whitelist
                    .admit(&stack, |name| stacks.exists(name))
                    .map_err(|e: StackError| e.to_string())?;
                stacks.resolve(&stack).map_err(|e| e.to_string())?;
            }
        }
        Ok(stack)
    }
}
