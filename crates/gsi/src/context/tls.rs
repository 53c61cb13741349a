//! The TLS session under a context: the in-memory transport it reads and writes, OpenSSL's
//! context set up for GSI (old-format proxies, key log), and its errors as `GsiError`s.

use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex};

use openssl::ssl::{
    SslContext, SslContextBuilder, SslMethod, SslOptions, SslSessionCacheMode, SslStream,
    SslVerifyMode, SslVersion,
};

use super::ContextConfig;
use crate::error::{GsiError, Result};
use crate::proxy;

/// Bytes in from the peer's tokens, bytes out to ours: the transport under the TLS session.
/// The input is one buffer with a consumed prefix, so a data channel can read its socket
/// straight into it (no copy through a token) and keep the buffer for the whole transfer.
#[derive(Debug, Default)]
pub(super) struct MemIo {
    pub(super) input: Vec<u8>,
    /// Consumed bytes at the front of `input`.
    pub(super) start: usize,
    /// Filled bytes of `input` (the rest is spare room).
    pub(super) end: usize,
    pub(super) output: Vec<u8>,
    /// Bytes at the front of `output` already handed to the transport.
    pub(super) sent: usize,
}

impl MemIo {
    /// Makes room for `n` more input bytes after `end`.
    pub(super) fn room(&mut self, n: usize) {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        if self.input.len() - self.end < n {
            if self.start > 0 {
                self.input.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.input.len() - self.end < n {
                self.input.resize(self.end + n, 0);
            }
        }
    }

    pub(super) fn push(&mut self, data: &[u8]) {
        self.room(data.len());
        self.input[self.end..self.end + data.len()].copy_from_slice(data);
        self.end += data.len();
    }

    pub(super) fn unsent(&self) -> &[u8] {
        &self.output[self.sent..]
    }
}

impl Read for MemIo {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = &self.input[self.start..self.end];
        if left.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = left.len().min(buf.len());
        buf[..n].copy_from_slice(&left[..n]);
        self.start += n;
        Ok(n)
    }
}

impl Write for MemIo {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.sent == self.output.len() {
            self.output.clear();
            self.sent = 0;
        }
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

type Keylog = Option<Arc<Mutex<Vec<String>>>>;

/// Whether OpenSSL's complaint comes from a legacy or draft proxy in the chain.
fn old_format_proxy_error(store: &mut openssl::x509::X509StoreContextRef) -> bool {
    // invalid CA, path length, purpose, no certsign, critical extension, non-CA, proxy path
    // length, invalid extension, proxy subject name.
    const OLD_PROXY_ERRORS: [i32; 9] = [79, 25, 26, 32, 34, 37, 38, 41, 72];
    if !OLD_PROXY_ERRORS.contains(&store.error().as_raw()) {
        return false;
    }
    let Some(chain) = store.chain() else {
        return false;
    };
    let certs: Vec<&openssl::x509::X509Ref> = chain.iter().collect();
    certs.windows(2).any(|w| {
        matches!(
            proxy::classify(w[0], Some(w[1])),
            Ok(crate::proxy::CertKind::Proxy {
                format: crate::proxy::ProxyFormat::Legacy | crate::proxy::ProxyFormat::Gt3,
                ..
            })
        )
    })
}

pub(super) fn tls_context(config: &ContextConfig, initiator: bool) -> Result<(SslContext, Keylog)> {
    let mut b = SslContextBuilder::new(SslMethod::tls())?;
    b.set_min_proto_version(Some(SslVersion::TLS1_2))?;
    b.set_max_proto_version(config.max_version)?;
    let cred = &config.credential;
    b.set_certificate(&cred.cert)?;
    b.set_private_key(&cred.key)?;
    for c in &cred.chain {
        b.add_extra_chain_cert(c.clone())?;
    }
    b.check_private_key()?;
    b.set_cert_store(config.trust.x509_store()?);
    // OpenSSL refuses legacy (GT2) and draft (GT3) proxies, which Globus tools still make
    // (grid-proxy-init -old / -draft): let those particular errors pass the handshake when
    // such a proxy is in the chain. `TrustStore::verify` then judges the whole chain before
    // the context is used (`verify_peer`).
    b.set_verify_callback(
        SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT,
        |ok, store| ok || old_format_proxy_error(store),
    );
    b.set_options(SslOptions::NO_TICKET);
    b.set_session_cache_mode(SslSessionCacheMode::OFF);
    if !initiator {
        b.set_num_tickets(0)?;
        b.set_cipher_list("HIGH")?;
    }
    let keylog = config.ssl_compatible.then(|| {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        b.set_keylog_callback(move |_, line| {
            if line.starts_with("CLIENT_TRAFFIC_SECRET_0 ")
                || line.starts_with("SERVER_TRAFFIC_SECRET_0 ")
            {
                if let Ok(mut l) = sink.lock() {
                    l.push(line.to_owned());
                }
            }
        });
        lines
    });
    Ok((b.build(), keylog))
}

pub(super) fn tls_error(tls: &SslStream<MemIo>, e: openssl::ssl::Error) -> GsiError {
    let verify = tls.ssl().verify_result();
    // A verify error the callback let pass (an old-format proxy) stays recorded; report it
    // only when verification is what failed.
    if verify.as_raw() != 0 && e.to_string().contains("certificate verify failed") {
        return GsiError::Untrusted {
            subject: tls
                .ssl()
                .peer_certificate()
                .map(|c| crate::dn::one_line(c.subject_name()))
                .unwrap_or_else(|| "the peer".into()),
            reason: verify.error_string().to_string(),
        };
    }
    GsiError::Tls(e.to_string())
}
