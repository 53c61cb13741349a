//! GSI for `gsiftp://` sessions: the user's credential and trusted CAs (loaded once per copy),
//! who each server must be, and how data channels are authenticated and protected.

use std::sync::{Arc, OnceLock};

use ferry_dtp::ChannelSecurity;
use ferry_gsi::credential::process_env;
use ferry_gsi::{Credential, DataSecurity, Delegation, Target, TrustStore};
use ferry_proto::command::{Dcau, Protection};

use crate::url::RemoteUrl;
use crate::ClientError;

/// What a copy asks of its GSI sessions.
#[derive(Debug, Clone)]
pub struct GsiOptions {
    /// Authenticate data connections (DCAU A, the default); `false` sends `DCAU N`.
    pub dcau: bool,
    /// Data protection: `Clear` (PROT C, default), `Safe` (`--dcsafe`) or `Private` (`--dcpriv`).
    pub prot: Protection,
    /// The server subject expected everywhere (`-s`); `None`: a host certificate for the
    /// URL's host.
    pub subject: Option<String>,
    /// Subjects for particular servers (`-ss`, `-ds`), before `subject`.
    pub subjects: Vec<(RemoteUrl, String)>,
    /// What the client delegates to each server (used for third-party data channels).
    pub delegation: Delegation,
    /// CA certificates (PEM) trusted for `ftps://` and `ftpes://` servers besides the
    /// system's (`--ca-file`).
    pub ca_file: Option<std::path::PathBuf>,
}

impl Default for GsiOptions {
    fn default() -> Self {
        GsiOptions {
            dcau: true,
            prot: Protection::Clear,
            subject: None,
            subjects: Vec::new(),
            // As globus-url-copy: a limited proxy is enough for data channels and cannot
            // start jobs.
            delegation: Delegation::Limited,
            ca_file: None,
        }
    }
}

impl GsiOptions {
    /// The options a command line asks for: no DCAU, integrity or privacy, and a server
    /// subject. Protection without authentication is refused (there is no PROT without DCAU).
    pub fn from_flags(
        no_dcau: bool,
        safe: bool,
        private: bool,
        subject: Option<String>,
    ) -> Result<GsiOptions, String> {
        if no_dcau && (safe || private) {
            return Err("integrity or privacy (dcsafe, dcpriv) needs data channel authentication: drop the no-dcau option".into());
        }
        Ok(GsiOptions {
            dcau: !no_dcau,
            prot: if private {
                Protection::Private
            } else if safe {
                Protection::Safe
            } else {
                Protection::Clear
            },
            subject,
            ..GsiOptions::default()
        })
    }
}

/// The user's credential and CAs, ready for control and data channels.
#[derive(Debug)]
pub(crate) struct Loaded {
    pub(crate) credential: Credential,
    pub(crate) trust: Arc<TrustStore>,
    pub(crate) data: Arc<DataSecurity>,
}

/// Options plus what they need from disk, loaded at the first `gsiftp://` login and shared by
/// every session of a copy.
#[derive(Debug, Default)]
pub struct GsiSetup {
    options: GsiOptions,
    loaded: OnceLock<Result<Arc<Loaded>, String>>,
}

impl GsiSetup {
    /// A setup with these options; nothing is read until a GSI session starts.
    pub fn new(options: GsiOptions) -> GsiSetup {
        GsiSetup {
            options,
            loaded: OnceLock::new(),
        }
    }

    /// A setup that acts with `credential` and trusts the CAs in `trust`, whatever the
    /// process's environment says: a service acting for several users, each with the proxy
    /// they delegated to it.
    pub fn with_credential(
        options: GsiOptions,
        credential: Credential,
        trust: Arc<TrustStore>,
    ) -> Result<GsiSetup, ClientError> {
        let data = DataSecurity::new(credential.clone(), Arc::clone(&trust))
            .map_err(|e| ClientError::Auth(format!("GSI: {e}")))?;
        let loaded = OnceLock::new();
        let _ = loaded.set(Ok(Arc::new(Loaded {
            credential,
            trust,
            data: Arc::new(data),
        })));
        Ok(GsiSetup { options, loaded })
    }

    /// The options.
    pub fn options(&self) -> &GsiOptions {
        &self.options
    }

    /// The credential (proxy first, as GSI tools look for it) and the trusted CAs.
    pub(crate) fn load(&self) -> Result<Arc<Loaded>, ClientError> {
        self.loaded
            .get_or_init(|| {
                let load = || -> Result<Loaded, ferry_gsi::GsiError> {
                    let (credential, _) = Credential::find_user(&process_env, None)?;
                    if credential.seconds_left()? <= 0 {
                        return Err(ferry_gsi::GsiError::Validity(format!(
                            "the credential of {} has expired; run `ferry proxy init`",
                            credential.identity()?
                        )));
                    }
                    let trust = Arc::new(TrustStore::load(&TrustStore::default_dir(&process_env))?);
                    let data = Arc::new(DataSecurity::new(credential.clone(), Arc::clone(&trust))?);
                    Ok(Loaded {
                        credential,
                        trust,
                        data,
                    })
                };
                load().map(Arc::new).map_err(|e| e.to_string())
            })
            .clone()
            .map_err(|e| ClientError::Auth(format!("GSI: {e}")))
    }

    /// Who the server at `url` must be.
    pub(crate) fn target(&self, url: &RemoteUrl, ip: std::net::IpAddr) -> Target {
        let named = self
            .options
            .subjects
            .iter()
            .find(|(u, _)| u.same_server(url))
            .map(|(_, s)| s.as_str())
            .or(self.options.subject.as_deref());
        match named {
            Some(s) => Target::from_subject(s),
            None => Target::Host {
                name: url.host.clone(),
                ip: Some(ip),
            },
        }
    }

    /// DCAU and PROT for data channels of GSI sessions.
    pub(crate) fn channel_security(&self) -> ChannelSecurity {
        ChannelSecurity {
            dcau: if self.options.dcau {
                Dcau::Self_
            } else {
                Dcau::None
            },
            prot: if self.options.dcau {
                self.options.prot
            } else {
                Protection::Clear
            },
        }
    }
}
