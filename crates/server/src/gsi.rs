//! GSI on the control channel: the host credential, trusted CAs and grid-mapfile the server
//! loads once, and the wrapping of a protected session (RFC 2228 as GSI does it: every command
//! arrives as `ENC|MIC|CONF <base64>`, every reply line leaves as `632|631 <base64>`).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use ferry_gsi::credential::process_env;
use ferry_gsi::{
    Authorizer, ContextConfig, Credential, GridMap, GsiError, SecurityContext, TrustStore,
};
use ferry_proto::line::{LineEvent, LineFramer};

use crate::config::ServerConfig;

/// Stands in for a command that arrived unprotected on a protected session: the dispatcher
/// answers it with 533. (A NUL cannot start a command a client means.)
pub(crate) const UNPROTECTED: &[u8] = b"\0unprotected";

/// What GSI sessions share: loaded at start, so a bad credential stops the server there.
pub(crate) struct GsiServer {
    credential: Credential,
    trust: Arc<TrustStore>,
    pub(crate) authorizer: Arc<dyn Authorizer>,
}

impl std::fmt::Debug for GsiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GsiServer")
            .field("credential", &self.credential)
            .field("trust", &self.trust)
            .finish_non_exhaustive()
    }
}

impl GsiServer {
    /// Loads the host credential, the trusted CAs and the grid-mapfile named by `config`
    /// (or the GSI environment and default paths).
    pub(crate) fn load(config: &ServerConfig) -> Result<GsiServer, GsiError> {
        let (credential, trust) = load_host(config)?;
        let dir = trust.dir().to_path_buf();
        let gridmap = config
            .gridmap
            .clone()
            .or_else(|| process_env("GRIDMAP").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("/etc/grid-security/grid-mapfile"));
        let authorizer: Arc<dyn Authorizer> = Arc::new(GridMap::load(&gridmap)?);
        tracing::info!(
            host = %credential.subject(),
            cert_dir = %dir.display(),
            gridmap = %gridmap.display(),
            "GSI enabled"
        );
        Ok(GsiServer {
            credential,
            trust,
            authorizer,
        })
    }

    /// The host credential.
    pub(crate) fn credential(&self) -> &Credential {
        &self.credential
    }

    /// The trusted CAs.
    pub(crate) fn trust(&self) -> Arc<TrustStore> {
        Arc::clone(&self.trust)
    }

    /// A fresh acceptor for one AUTH GSSAPI.
    pub(crate) fn acceptor(&self) -> Result<SecurityContext, GsiError> {
        SecurityContext::acceptor(ContextConfig::new(
            self.credential.clone(),
            Arc::clone(&self.trust),
        ))
    }
}

/// The host credential (checked for expiry) and the trusted CAs `config` names: all a data
/// node needs of GSI (it authorizes no users).
pub(crate) fn load_host(config: &ServerConfig) -> Result<(Credential, Arc<TrustStore>), GsiError> {
    let credential = load_host_credential(config)?;
    let dir = config
        .cert_dir
        .clone()
        .unwrap_or_else(|| TrustStore::default_dir(&process_env));
    Ok((credential, Arc::new(TrustStore::load(&dir)?)))
}

/// The host credential `config` names (or the GSI environment's), checked for expiry.
pub(crate) fn load_host_credential(config: &ServerConfig) -> Result<Credential, GsiError> {
    let credential = match (&config.host_cert, &config.host_key) {
        (Some(c), Some(k)) => Credential::load_cert_key(c, k, None)?,
        (Some(c), None) => Credential::load_cert_key(c, c, None)?,
        (None, _) => Credential::find_host(&process_env)?.0,
    };
    if credential.seconds_left()? <= 0 {
        return Err(GsiError::Validity(format!(
            "the host credential {} has expired",
            credential.subject()
        )));
    }
    Ok(credential)
}

/// An established security context, shared by the session's reading and writing halves.
pub(crate) type Shared = Arc<Mutex<SecurityContext>>;

/// Turns one protected command line into the plain bytes it carries, or `None` when the line
/// is not a protected command (or does not unwrap).
pub(crate) fn unwrap_command(shared: &Shared, line: &[u8]) -> Option<Vec<u8>> {
    let mut ctx = shared.lock().ok()?;
    ferry_gsi::protect::unwrap_command(&mut ctx, line)
}

/// The next plain line of a protected session: unwraps lines from `outer` into `plain` as
/// needed. A line that is not protected comes back as [`UNPROTECTED`].
pub(crate) fn next_plain(
    shared: &Shared,
    outer: &mut dyn FnMut() -> Option<LineEvent>,
    plain: &mut LineFramer,
) -> Option<LineEvent> {
    loop {
        if let Some(ev) = plain.next_event() {
            return Some(ev);
        }
        match outer()? {
            LineEvent::TooLong => return Some(LineEvent::TooLong),
            LineEvent::Line(line) => match unwrap_command(shared, &line) {
                Some(bytes) => plain.feed(&bytes),
                None => return Some(LineEvent::Line(UNPROTECTED.to_vec())),
            },
        }
    }
}

/// Wraps reply bytes line by line: `632-<b64>` for every line but the last, `632 <b64>` for
/// the last (631 when the context only protects integrity).
pub(crate) fn wrap_reply(shared: &Shared, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut ctx = shared
        .lock()
        .map_err(|_| std::io::Error::other("security context poisoned"))?;
    ferry_gsi::protect::wrap_reply(&mut ctx, bytes).map_err(std::io::Error::other)
}
