//! Data-channel GSI (DCAU/PROT) between two `DataConn`s over loopback: every protection level
//! under TLS 1.3 and 1.2, bytes compared, and the refusals (another user's credential under
//! DCAU A, a wrong DCAU S subject, a peer speaking no TLS) moving no data.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use ferry_gsi::{
    CertificateAuthority, Credential, DataSecurity, IssueSpec, PeerCheck, ProxyOptions, TrustStore,
};
use ferry_net::{bind_listener, connect, DataConn, DataProtection, NetError, SocketTuning};
use openssl::ssl::SslVersion;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BASE: &str = "/O=Grid/OU=Ferry Net Test";

struct Pki {
    _dir: tempfile::TempDir,
    trust: Arc<TrustStore>,
    alice: Credential,
    bob: Credential,
}

fn proxy_of(issuer: &Credential) -> Credential {
    let key = openssl::pkey::PKey::from_rsa(openssl::rsa::Rsa::generate(2048).unwrap()).unwrap();
    let cert = ferry_gsi::proxy::sign_proxy(issuer, &key, &ProxyOptions::default()).unwrap();
    let mut chain = vec![issuer.cert.clone()];
    chain.extend(issuer.chain.iter().cloned());
    Credential::new(cert, key, chain).unwrap()
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let ca = CertificateAuthority::create(&format!("{BASE}/CN=CA"), 2, 2048).unwrap();
    ca.install(&dir.path().join("certificates")).unwrap();
    let issue = |cn: &str| {
        ca.issue(&IssueSpec::user(&format!("{BASE}/CN={cn}"), 2))
            .unwrap()
    };
    let (alice, bob) = (issue("Alice"), issue("Bob"));
    Pki {
        trust: Arc::new(TrustStore::load(&dir.path().join("certificates")).unwrap()),
        _dir: dir,
        alice,
        bob,
    }
}

fn protection(
    pki: &Pki,
    cred: Credential,
    check: PeerCheck,
    protected: bool,
    tls12: bool,
) -> DataProtection {
    let mut security = DataSecurity::new(cred, Arc::clone(&pki.trust)).unwrap();
    if tls12 {
        security.max_version = Some(SslVersion::TLS1_2);
    }
    DataProtection {
        security: Arc::new(security),
        check,
        protected,
    }
}

/// A connected pair: (the side that connected, the side that accepted), before any handshake.
async fn pair() -> (DataConn, DataConn) {
    let l = bind_listener(
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        None,
        SocketTuning::default(),
    )
    .unwrap();
    let addr = l.local_addr().unwrap();
    let (a, b) = tokio::join!(connect(addr, SocketTuning::default()), l.accept());
    (a.unwrap(), b.unwrap())
}

fn data(n: usize) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// Handshakes both ends, sends `payload` from the connecting side (written in odd pieces and
/// vectored, as the DTP does), closes, and returns what the accepting side read.
async fn transfer(
    active: DataProtection,
    passive: DataProtection,
    payload: Vec<u8>,
) -> (Result<Vec<u8>, NetError>, Result<(), NetError>) {
    transfer_on(pair().await, active, passive, payload).await
}

/// [`transfer`] over a given pair of connections.
async fn transfer_on(
    (a, b): (DataConn, DataConn),
    active: DataProtection,
    passive: DataProtection,
    payload: Vec<u8>,
) -> (Result<Vec<u8>, NetError>, Result<(), NetError>) {
    let sender = tokio::spawn(async move {
        let mut a = a.secure(true, &active).await?;
        let mut off = 0;
        let mut piece = 17;
        while off < payload.len() {
            let end = (off + piece).min(payload.len());
            let mid = off + (end - off) / 3;
            let bufs = [
                std::io::IoSlice::new(&payload[off..mid]),
                std::io::IoSlice::new(&payload[mid..end]),
            ];
            let n = a.write_vectored(&bufs).await?;
            off += n;
            piece = (piece * 7 + 1) % (600 * 1024) + 1;
        }
        a.shutdown().await?;
        Ok::<(), NetError>(())
    });
    let receiver = async move {
        let mut b = b.secure(false, &passive).await?;
        let mut got = Vec::new();
        b.read_to_end(&mut got).await?;
        Ok::<Vec<u8>, NetError>(got)
    };
    let got = receiver.await;
    let sent = sender.await.unwrap();
    (got, sent)
}

/// A transport that is not TCP: an in-memory pipe, as a registered transport's stream.
#[derive(Debug)]
struct Pipe(tokio::io::DuplexStream);

impl ferry_net::TransportStream for Pipe {
    fn peer_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        Ok(([127, 0, 0, 1], 1).into())
    }
    fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        Ok(([127, 0, 0, 1], 2).into())
    }
}

impl tokio::io::AsyncRead for Pipe {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Pipe {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_flush(cx)
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
    }
}

fn pipe_pair() -> (DataConn, DataConn) {
    // A small pipe, so records are cut and writes wait for the reader.
    let (a, b) = tokio::io::duplex(7 * 1024);
    (
        DataConn::from_transport(Box::new(Pipe(a))),
        DataConn::from_transport(Box::new(Pipe(b))),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gsi_protection_composes_above_a_transport_other_than_tcp() {
    let pki = pki();
    let payload = data(3 << 20);
    for tls12 in [false, true] {
        for protected in [false, true] {
            let side = |cred| protection(&pki, cred, PeerCheck::SameIdentity, protected, tls12);
            let (got, sent) = transfer_on(
                pipe_pair(),
                side(proxy_of(&pki.alice)),
                side(proxy_of(&proxy_of(&pki.alice))),
                payload.clone(),
            )
            .await;
            sent.unwrap_or_else(|e| panic!("tls12={tls12} protected={protected}: {e}"));
            assert!(
                got.unwrap() == payload,
                "tls12={tls12} protected={protected}: other bytes arrived"
            );
        }
    }
    // A stranger is still refused over it.
    let (got, _) = transfer_on(
        pipe_pair(),
        protection(
            &pki,
            proxy_of(&pki.bob),
            PeerCheck::SameIdentity,
            true,
            false,
        ),
        protection(
            &pki,
            proxy_of(&pki.alice),
            PeerCheck::SameIdentity,
            true,
            false,
        ),
        payload,
    )
    .await;
    assert!(matches!(got, Err(NetError::Security(_))), "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_protection_level_carries_the_bytes_under_tls_1_3_and_1_2() {
    let pki = pki();
    let payload = data(5 << 20);
    for tls12 in [false, true] {
        for protected in [false, true] {
            // The client's own proxy against the server's delegated one: the same identity.
            let active = protection(
                &pki,
                proxy_of(&pki.alice),
                PeerCheck::SameIdentity,
                protected,
                tls12,
            );
            let passive = protection(
                &pki,
                proxy_of(&proxy_of(&pki.alice)),
                PeerCheck::SameIdentity,
                protected,
                tls12,
            );
            let (got, sent) = transfer(active, passive, payload.clone()).await;
            sent.unwrap_or_else(|e| panic!("send (protected {protected}, tls12 {tls12}): {e}"));
            let got = got
                .unwrap_or_else(|e| panic!("receive (protected {protected}, tls12 {tls12}): {e}"));
            assert!(
                got == payload,
                "bytes differ (protected {protected}, tls12 {tls12}): {} vs {}",
                got.len(),
                payload.len()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dcau_s_accepts_the_named_subject() {
    let pki = pki();
    let payload = data(300_000);
    let active = protection(
        &pki,
        proxy_of(&pki.alice),
        PeerCheck::Subject(format!("{BASE}/CN=Bob")),
        true,
        false,
    );
    let passive = protection(
        &pki,
        pki.bob.clone(),
        PeerCheck::Subject(format!("{BASE}/CN=Alice")),
        true,
        false,
    );
    let (got, sent) = transfer(active, passive, payload.clone()).await;
    sent.unwrap();
    assert!(got.unwrap() == payload);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_users_credential_is_refused_under_dcau_a_and_moves_nothing() {
    let pki = pki();
    for protected in [false, true] {
        let active = protection(
            &pki,
            proxy_of(&pki.bob),
            PeerCheck::SameIdentity,
            protected,
            false,
        );
        let passive = protection(
            &pki,
            proxy_of(&pki.alice),
            PeerCheck::SameIdentity,
            protected,
            false,
        );
        let (got, sent) = transfer(active, passive, data(100_000)).await;
        // The first side to see the other's chain refuses it by name (in TLS 1.3 the
        // connecting side, before it even finishes the handshake); the other sees a closed
        // connection. No byte arrives either way.
        let got_err = got.as_ref().err().map(ToString::to_string);
        let sent_err = sent.as_ref().err().map(ToString::to_string);
        assert!(got.is_err(), "Bob's data connection must be refused");
        let named = [got_err, sent_err]
            .into_iter()
            .flatten()
            .any(|e| e.contains("CN=Bob") && e.contains("CN=Alice"));
        assert!(named, "an error names both: {got:?} / {sent:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_dcau_s_subject_is_refused_by_the_connecting_side() {
    let pki = pki();
    let active = protection(
        &pki,
        proxy_of(&pki.alice),
        PeerCheck::Subject(format!("{BASE}/CN=Carol")),
        true,
        false,
    );
    let passive = protection(
        &pki,
        pki.bob.clone(),
        PeerCheck::Subject(format!("{BASE}/CN=Alice")),
        true,
        false,
    );
    let (got, sent) = transfer(active, passive, data(100_000)).await;
    let err = sent.expect_err("the sender expected Carol").to_string();
    assert!(err.contains("CN=Carol"), "{err}");
    // The receiver got no file bytes: either its handshake failed or the stream was empty.
    if let Ok(bytes) = got {
        assert!(bytes.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_without_tls_is_refused_with_a_hint() {
    let pki = pki();
    let (mut a, b) = pair().await;
    let passive = protection(
        &pki,
        pki.alice.clone(),
        PeerCheck::SameIdentity,
        false,
        false,
    );
    // A MODE E header in clear, as a DCAU N sender would start.
    a.write_all(&[0u8; 17]).await.unwrap();
    let err = b.secure(false, &passive).await.unwrap_err().to_string();
    assert!(err.contains("DCAU N"), "{err}");
}
