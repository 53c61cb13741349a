//! Our TLS 1.3 record layer against OpenSSL's, after a real handshake between two contexts in
//! SSL-compatible mode (PROT S/P data channels): each side's records open on the other, key
//! updates included, and a TLS 1.2 session offers no secrets (OpenSSL keeps its records).

use crate::common;

use common::Pki;
use ferry_gsi::{ContextConfig, RecordLayer, SecurityContext, Step};
use openssl::ssl::SslVersion;

fn establish(pki: &Pki, version: Option<SslVersion>) -> (SecurityContext, SecurityContext) {
    let mut init = ContextConfig::new(pki.proxy(), pki.trust());
    init.ssl_compatible = true;
    init.max_version = version;
    let mut acc = ContextConfig::new(pki.proxy(), pki.trust());
    acc.ssl_compatible = true;
    acc.max_version = version;
    let (mut i, mut token) = SecurityContext::initiator(init).unwrap();
    let mut a = SecurityContext::acceptor(acc).unwrap();
    loop {
        match a.step(&token).unwrap() {
            Step::Continue(t) => token = t,
            Step::Done(last) => {
                if let Some(t) = last {
                    assert!(matches!(i.step(&t).unwrap(), Step::Done(None)));
                }
                break;
            }
            Step::NeedMore => panic!("acceptor wants more"),
        }
        match i.step(&token).unwrap() {
            Step::Continue(t) | Step::Done(Some(t)) => token = t,
            other => panic!("initiator: {other:?}"),
        }
    }
    assert!(i.is_established() && a.is_established());
    (i, a)
}

fn data(n: usize) -> Vec<u8> {
    (0..n as u32).map(|i| (i ^ (i >> 9)) as u8).collect()
}

/// Opens everything `bytes` holds with OpenSSL's side.
fn openssl_reads(ctx: &mut SecurityContext, bytes: &[u8]) -> Vec<u8> {
    ctx.receive_with::<()>(bytes.len(), |b| {
        b[..bytes.len()].copy_from_slice(bytes);
        Ok(bytes.len())
    })
    .unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 40_000];
    while let Some(n) = ctx.open(&mut buf).unwrap() {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    got
}

#[test]
fn ring_records_open_in_openssl_and_openssl_records_open_in_ours() {
    let pki = Pki::new();
    let (i, mut a) = establish(&pki, None);
    let secrets = i.traffic_secrets().expect("TLS 1.3 gives secrets");
    let mut ours = RecordLayer::new(&secrets).unwrap();
    // Three records per key: OpenSSL must follow our KeyUpdates.
    ours.set_key_lifetime(3);
    let payload = data(300_000);
    ours.seal(&payload).unwrap();
    let wire = ours.unsent().to_vec();
    ours.mark_sent(wire.len());
    assert!(
        openssl_reads(&mut a, &wire) == payload,
        "OpenSSL opened our records"
    );

    // And back: OpenSSL seals, we open; then its close_notify ends our stream.
    let back = data(100_000);
    a.seal(&back).unwrap();
    a.close().unwrap();
    let wire = a.unsent().to_vec();
    ours.receive_with::<()>(wire.len(), |b| {
        b[..wire.len()].copy_from_slice(&wire);
        Ok(wire.len())
    })
    .unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 20_000];
    loop {
        match ours.open(&mut buf).unwrap() {
            Some(0) => break,
            Some(n) => got.extend_from_slice(&buf[..n]),
            None => panic!("a whole stream was given"),
        }
    }
    assert!(got == back, "we opened OpenSSL's records");
}

#[test]
fn tls_1_2_keeps_the_records_with_openssl() {
    let pki = Pki::new();
    let (i, a) = establish(&pki, Some(SslVersion::TLS1_2));
    assert!(i.traffic_secrets().is_none() && a.traffic_secrets().is_none());
}
