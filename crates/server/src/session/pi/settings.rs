//! Commands that only change session settings: TYPE, MODE, STRU, REST, ALLO, SBUF, OPTS, DCAU,
//! PBSZ, PROT, TREV and an idle ABOR.

use ferry_dtp::ChannelSetup;
use ferry_net::SocketTuning;
use ferry_proto::command::{
    Dcau, Protection, Restart, Structure, TransferMode, TransferType, TrevEvent,
};
use ferry_proto::opts::{Opts, StripeLayout};
use ferry_proto::stack::StackSpec;
use ferry_proto::Command;
use ferry_storage::VirtualPath;

use super::{clamp_buffer, Pi};

/// Session settings: they apply to the next transfer whenever they are sent (RFC 959).
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) cwd: VirtualPath,
    pub(crate) transfer_type: TransferType,
    pub(crate) mode: TransferMode,
    pub(crate) parallelism: u32,
    pub(crate) tuning: SocketTuning,
    /// MODE E block size the client asked for (`SITE BLOCKSIZE`); `None`: the configured one.
    pub(crate) block_size: Option<u32>,
    pub(crate) restart: Option<Restart>,
    pub(crate) channel: Option<ChannelSetup>,
    pub(crate) restart_interval_s: u32,
    pub(crate) perf_interval_s: u32,
    pub(crate) retr_markers_s: Option<u32>,
    /// Stripe layout for sends to several receiving stripes (`OPTS RETR StripeLayout=`).
    pub(crate) layout: ferry_dtp::LayoutSpec,
    pub(crate) dcau: Dcau,
    pub(crate) prot: Protection,
    pub(crate) allo: Option<u64>,
    /// `SITE SETNETSTACK`: the data channel's drivers.
    pub(crate) net_stack: StackSpec,
    /// `SITE SETDISKSTACK`: the drivers between the DTP and storage.
    pub(crate) disk_stack: StackSpec,
    pub(crate) mlst_facts: Vec<String>,
    /// `EPSV ALL` was sent: other data-connection setup commands are refused (RFC 2428).
    pub(crate) epsv_all: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            cwd: VirtualPath::root(),
            transfer_type: TransferType::Ascii,
            mode: TransferMode::Stream,
            parallelism: 1,
            tuning: SocketTuning::default(),
            block_size: None,
            restart: None,
            channel: None,
            restart_interval_s: 5,
            perf_interval_s: 5,
            retr_markers_s: None,
            layout: ferry_dtp::LayoutSpec::default(),
            dcau: Dcau::None,
            prot: Protection::Clear,
            allo: None,
            net_stack: StackSpec::default_net(),
            disk_stack: StackSpec::default_disk(),
            mlst_facts: Vec::new(),
            epsv_all: false,
        }
    }
}

impl Pi {
    /// Runs `cmd` if it is a settings command; hands it back otherwise.
    pub(super) fn cmd_setting(&mut self, cmd: Command) -> Result<(), Command> {
        let s = &mut self.settings;
        match cmd {
            Command::Acct(_) => self.reply(202, "ACCT not needed."),
            Command::Type(t) => {
                s.transfer_type = t;
                let c = if t == TransferType::Ascii { 'A' } else { 'I' };
                self.reply(200, format!("Type set to {c}."));
            }
            Command::Mode(m) => {
                s.mode = m;
                let c = if m == TransferMode::Extended {
                    'E'
                } else {
                    'S'
                };
                self.reply(200, format!("Mode set to {c}."));
            }
            Command::Stru(Structure::File) => self.reply(200, "STRU F ok."),
            Command::Stru(_) => self.reply(504, "Only STRU F is supported."),
            Command::Rest(r) => {
                s.restart = Some(r);
                self.reply(
                    350,
                    "Restart Marker OK. Send STORE or RETR to initiate transfer.",
                );
            }
            Command::Allo(n) => {
                s.allo = Some(n);
                self.reply(200, "ALLO command successful.");
            }
            Command::Sbuf(n) => {
                let n = clamp_buffer(n);
                s.tuning.send_buffer = Some(n);
                s.tuning.recv_buffer = Some(n);
                self.forget_cached_channel();
                self.reply(200, "SBUF Command Successful.");
            }
            Command::Opts(o) => self.cmd_opts(o),
            Command::Dcau(Dcau::None) => {
                let could = self.may_be_third_party();
                if self.settings.dcau != Dcau::None {
                    self.forget_cached_channel();
                }
                self.settings.dcau = Dcau::None;
                if could && !self.may_be_third_party() {
                    // A listener opened under DCAU A takes any host; unauthenticated, it must
                    // take only this client's: the next transfer needs a new PASV.
                    if matches!(
                        self.settings.channel,
                        Some(ferry_dtp::ChannelSetup::Passive)
                    ) {
                        self.settings.channel = None;
                    }
                }
                self.reply(200, "DCAU N.");
            }
            Command::Dcau(d) if self.gsi_identity.is_some() => {
                if s.dcau != d {
                    self.forget_cached_channel();
                }
                let text = match &d {
                    Dcau::Subject(s) => format!("DCAU S {s}."),
                    _ => "DCAU A.".to_string(),
                };
                self.settings.dcau = d;
                self.reply(200, text);
            }
            Command::Dcau(_) => self.reply(504, "Bad DCAU mode: only DCAU N without GSI."),
            Command::Pbsz(n) => {
                self.forget_cached_channel();
                self.reply(200, format!("PBSZ={n}"));
            }
            Command::Prot(Protection::Clear) => {
                if s.prot != Protection::Clear {
                    self.forget_cached_channel();
                }
                self.settings.prot = Protection::Clear;
                self.reply(200, "Protection level set to C.");
            }
            Command::Prot(p @ (Protection::Safe | Protection::Private))
                if self.gsi_identity.is_some() =>
            {
                if s.prot != p {
                    self.forget_cached_channel();
                }
                self.settings.prot = p;
                let c = if p == Protection::Safe { 'S' } else { 'P' };
                self.reply(200, format!("Protection level set to {c}."));
            }
            Command::Prot(p) => self.reply(
                536,
                format!("{p} protection level not supported without GSI."),
            ),
            Command::Trev { event, interval } => {
                match event {
                    TrevEvent::Restart => s.restart_interval_s = interval,
                    TrevEvent::Perf => s.perf_interval_s = interval,
                }
                self.reply(200, "Command Successful.");
            }
            Command::Abor => self.reply(226, "Abort successful; no transfer in progress."),
            other => return Err(other),
        }
        Ok(())
    }

    fn cmd_opts(&mut self, opts: Opts) {
        let s = &mut self.settings;
        match opts {
            Opts::Retr(r) => {
                if let Some(p) = r.parallelism {
                    s.parallelism = p.clamp(1, 64);
                }
                if let Some(m) = r.markers {
                    s.retr_markers_s = Some(m);
                }
                match (r.layout, r.block_size) {
                    (Some(StripeLayout::Partitioned), _) => {
                        s.layout = ferry_dtp::LayoutSpec::Partitioned;
                    }
                    (Some(StripeLayout::Blocked), size) => {
                        s.layout = ferry_dtp::LayoutSpec::Blocked(
                            size.unwrap_or(ferry_proto::stripe::DEFAULT_STRIPE_BLOCK)
                                .max(1),
                        );
                    }
                    (None, Some(size)) => {
                        if let ferry_dtp::LayoutSpec::Blocked(_) = s.layout {
                            s.layout = ferry_dtp::LayoutSpec::Blocked(size.max(1));
                        }
                    }
                    (None, None) => {}
                }
                self.reply(200, "OPTS Command Successful.");
            }
            Opts::Cksm { .. } => self.reply(200, "OPTS Command Successful."),
            Opts::Mlst(facts) => {
                s.mlst_facts = facts;
                let shown = if s.mlst_facts.is_empty() {
                    String::new()
                } else {
                    s.mlst_facts.join(";") + ";"
                };
                self.reply(200, format!("MLST OPTS {shown}"));
            }
            Opts::AllowDelayed { allow: false, .. } => self.reply(200, "OPTS Command Successful."),
            _ => self.reply(500, "OPTS failed."),
        }
    }
}
