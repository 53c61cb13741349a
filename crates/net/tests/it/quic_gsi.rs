//! QUIC data connections carrying DCAU A/S in their own TLS 1.3 handshake: proxy chains
//! verified by the GSI chain check, the identity DCAU asks for enforced on both sides, no
//! second TLS inside the stream, and every refusal (another user, a wrong DCAU S subject, a
//! credential from an untrusted CA, a DCAU N peer where DCAU A is asked) an error that names
//! the reason and moves no byte.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use ferry_gsi::{
    CertificateAuthority, Credential, DataSecurity, IssueSpec, PeerCheck, ProxyOptions, TrustStore,
};
use ferry_net::{DataConn, DataListener, DataProtection, NetError, SocketTuning, Transports};
use ferry_proto::stack::StackSpec;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BASE: &str = "/O=Grid/OU=Ferry QUIC Test";

struct Pki {
    _dir: tempfile::TempDir,
    trust: Arc<TrustStore>,
    alice: Credential,
    bob: Credential,
    /// Alice's name, issued by a CA nobody here trusts.
    forged_alice: Credential,
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
    let rogue = CertificateAuthority::create(&format!("{BASE}/CN=CA"), 2, 2048).unwrap();
    Pki {
        trust: Arc::new(TrustStore::load(&dir.path().join("certificates")).unwrap()),
        alice: issue("Alice"),
        bob: issue("Bob"),
        forged_alice: rogue
            .issue(&IssueSpec::user(&format!("{BASE}/CN=Alice"), 2))
            .unwrap(),
        _dir: dir,
    }
}

fn protection(pki: &Pki, cred: Credential, check: PeerCheck, protected: bool) -> DataProtection {
    DataProtection {
        security: Arc::new(DataSecurity::new(cred, Arc::clone(&pki.trust)).unwrap()),
        check,
        protected,
    }
}

fn quic() -> StackSpec {
    StackSpec::parse("quic,gsi").unwrap()
}

fn listener() -> DataListener {
    Transports::standard()
        .listen(
            &quic(),
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            None,
            SocketTuning::default(),
        )
        .unwrap()
}

fn data(n: usize) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// Both ends of one connection, established with their own protection (`None`: DCAU N).
async fn establish(
    active: Option<DataProtection>,
    passive: Option<DataProtection>,
) -> (Result<DataConn, NetError>, Result<DataConn, NetError>) {
    let l = listener();
    let addr = l.local_addr().unwrap();
    let a = async {
        Transports::standard()
            .connect(&quic(), addr, SocketTuning::default())
            .await?
            .establish(true, active.as_ref())
            .await
    };
    let b = async { l.accept().await?.establish(false, passive.as_ref()).await };
    tokio::join!(a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dcau_a_with_proxy_chains_authenticates_in_quic_tls_and_adds_no_second_tls() {
    let pki = pki();
    for protected in [false, true] {
        // Two different proxies of Alice, as a client's and the server's delegated one.
        let active = protection(
            &pki,
            proxy_of(&proxy_of(&pki.alice)),
            PeerCheck::SameIdentity,
            protected,
        );
        let passive = protection(
            &pki,
            proxy_of(&pki.alice),
            PeerCheck::SameIdentity,
            protected,
        );
        let (a, b) = establish(Some(active), Some(passive)).await;
        let (mut a, mut b) = (a.unwrap(), b.unwrap());
        // QUIC's TLS is the protection: no GSI records inside the stream.
        assert!(!a.is_protected() && !b.is_protected());
        let payload = data(3 << 20);
        let sent = payload.clone();
        let writer = tokio::spawn(async move {
            a.write_all(&sent).await.unwrap();
            a.shutdown().await.unwrap();
            let mut back = Vec::new();
            a.read_to_end(&mut back).await.unwrap();
            back
        });
        let mut got = vec![0u8; payload.len()];
        b.read_exact(&mut got).await.unwrap();
        assert!(got == payload, "PROT {protected}: bytes differ");
        b.write_all(b"the other way").await.unwrap();
        drop(b);
        assert_eq!(writer.await.unwrap(), b"the other way");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dcau_s_names_the_peer_and_a_wrong_subject_is_refused_by_name() {
    let pki = pki();
    // Bob's client expects Alice's server; Alice's server runs DCAU S with Bob's subject.
    let active = protection(
        &pki,
        proxy_of(&pki.bob),
        PeerCheck::Subject(format!("{BASE}/CN=Alice")),
        true,
    );
    let passive = protection(
        &pki,
        pki.alice.clone(),
        PeerCheck::Subject(format!("{BASE}/CN=Bob")),
        true,
    );
    let (a, b) = establish(Some(active), Some(passive)).await;
    assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");

    let active = protection(
        &pki,
        proxy_of(&pki.bob),
        PeerCheck::Subject(format!("{BASE}/CN=Carol")),
        true,
    );
    let passive = protection(
        &pki,
        pki.alice.clone(),
        PeerCheck::Subject(format!("{BASE}/CN=Bob")),
        true,
    );
    let (a, b) = establish(Some(active), Some(passive)).await;
    let err = a.expect_err("the client expected Carol").to_string();
    assert!(
        err.contains("CN=Carol") && err.contains("CN=Alice"),
        "{err}"
    );
    assert!(b.is_err(), "the server went on with a refused handshake");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_user_an_untrusted_ca_and_an_anonymous_peer_are_refused_under_dcau_a() {
    let pki = pki();
    let alice = || protection(&pki, proxy_of(&pki.alice), PeerCheck::SameIdentity, true);

    // Bob connects to Alice's DCAU A listener. TLS 1.3 checks the server first: Bob's side
    // refuses Alice by name (DCAU A wants Bob himself), and Alice's side hears the refusal.
    let bob = protection(&pki, proxy_of(&pki.bob), PeerCheck::SameIdentity, true);
    let (a, b) = establish(Some(bob), Some(alice())).await;
    let err = a.expect_err("Bob's side took Alice").to_string();
    assert!(
        err.contains("its credential is refused") && err.contains("CN=Alice"),
        "{err}"
    );
    let err = b.expect_err("Alice's side went on").to_string();
    assert!(err.contains("refused our credential"), "{err}");
    // Bob's client names Alice as the subject it expects (DCAU S): now Alice's side refuses
    // Bob by name.
    let bob = protection(
        &pki,
        proxy_of(&pki.bob),
        PeerCheck::Subject(format!("{BASE}/CN=Alice")),
        true,
    );
    let (a, b) = establish(Some(bob), Some(alice())).await;
    let err = b.expect_err("Alice's side took Bob").to_string();
    assert!(
        err.contains("its credential is refused") && err.contains("CN=Bob"),
        "{err}"
    );
    assert!(a.is_err(), "Bob's side went on");

    // Alice's name from a CA nobody trusts, on either side.
    let forged = || {
        protection(
            &pki,
            pki.forged_alice.clone(),
            PeerCheck::SameIdentity,
            true,
        )
    };
    let (a, b) = establish(Some(forged()), Some(alice())).await;
    let err = b.expect_err("a forged client was taken").to_string();
    assert!(
        err.contains("chain of") && err.contains("rejected"),
        "{err}"
    );
    assert!(a.is_err());
    let (a, b) = establish(Some(alice()), Some(forged())).await;
    let err = a.expect_err("a forged server was taken").to_string();
    assert!(err.contains("its credential is refused"), "{err}");
    assert!(b.is_err());

    // A DCAU N peer (the ephemeral certificate, no client certificate) where DCAU A is asked.
    let (a, b) = establish(None, Some(alice())).await;
    let err = b
        .expect_err("an anonymous client was taken under DCAU A")
        .to_string();
    assert!(err.contains("TLS handshake failed"), "{err}");
    let err = a.expect_err("the anonymous client went on").to_string();
    assert!(
        err.contains("refused the handshake") && err.contains("DCAU N"),
        "{err}"
    );
    let (a, b) = establish(Some(alice()), None).await;
    let err = a
        .expect_err("an anonymous server was taken under DCAU A")
        .to_string();
    assert!(err.contains("its credential is refused"), "{err}");
    assert!(b.is_err());
}
