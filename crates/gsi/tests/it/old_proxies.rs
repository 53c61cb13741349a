//! Legacy (GT2) and draft (GT3) proxies, which grid-proxy-init still makes with `-old` and
//! `-draft`: they verify to the user's identity, their delegations keep their format, and GSS
//! contexts (control and data) complete with them; broken ones are refused.

use crate::common;

use common::{proxy_of, Pki};
use ferry_gsi::{
    CertKind, ContextConfig, Delegation, ProxyFormat, ProxyOptions, SecurityContext, Step,
    VerifyOptions,
};

fn of(format: ProxyFormat) -> ProxyOptions {
    ProxyOptions {
        format: Some(format),
        ..ProxyOptions::default()
    }
}

#[test]
fn old_format_proxies_and_their_children_verify_to_the_user() {
    let pki = Pki::new();
    for format in [ProxyFormat::Legacy, ProxyFormat::Gt3] {
        let p = proxy_of(&pki.user, &of(format));
        let kind = ferry_gsi::proxy::classify(&p.cert, Some(&pki.user.cert)).unwrap();
        assert!(
            matches!(kind, CertKind::Proxy { format: f, .. } if f == format),
            "{kind:?}"
        );
        // A proxy of that proxy inherits the format, as Globus requires of a chain.
        let child = proxy_of(&p, &ProxyOptions::default());
        let kind = ferry_gsi::proxy::classify(&child.cert, Some(&p.cert)).unwrap();
        assert!(
            matches!(kind, CertKind::Proxy { format: f, .. } if f == format),
            "{kind:?}"
        );
        for c in [&p, &child] {
            let v = pki
                .trust()
                .verify(&c.cert, &c.chain, VerifyOptions::default())
                .unwrap_or_else(|e| panic!("{format:?}: {e}"));
            assert_eq!(v.identity(), pki.user.identity().unwrap());
        }
    }
}

#[test]
fn mixed_formats_and_expired_links_are_refused() {
    let pki = Pki::new();
    let legacy = proxy_of(&pki.user, &of(ProxyFormat::Legacy));
    let rfc_below = proxy_of(&legacy, &of(ProxyFormat::Rfc3820));
    assert!(pki
        .trust()
        .verify(&rfc_below.cert, &rfc_below.chain, VerifyOptions::default())
        .is_err());
    let short = proxy_of(
        &pki.user,
        &ProxyOptions {
            lifetime: std::time::Duration::from_secs(1),
            ..of(ProxyFormat::Legacy)
        },
    );
    // Its end is within the second: wait for the clock to pass it, not for a fixed time.
    while short.seconds_left().unwrap() >= 0 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let err = pki
        .trust()
        .verify(&short.cert, &short.chain, VerifyOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("expired"), "{err}");
}

/// A full context between two old-format credentials of the same user (what a DCAU data
/// connection between two sessions of that user does), with and without the GSI tail.
#[test]
fn contexts_complete_between_old_format_credentials() {
    let pki = Pki::new();
    for format in [ProxyFormat::Legacy, ProxyFormat::Gt3] {
        for ssl_compatible in [false, true] {
            let client = proxy_of(&pki.user, &of(format));
            let server = proxy_of(&client, &ProxyOptions::default());
            let mut init = ContextConfig::new(client, pki.trust());
            init.ssl_compatible = ssl_compatible;
            let mut acc = ContextConfig::new(server, pki.trust());
            acc.ssl_compatible = ssl_compatible;
            let (mut i, mut token) = SecurityContext::initiator(init).unwrap();
            let mut a = SecurityContext::acceptor(acc).unwrap();
            loop {
                match a
                    .step(&token)
                    .unwrap_or_else(|e| panic!("{format:?} acceptor: {e}"))
                {
                    Step::Continue(t) => token = t,
                    Step::Done(last) => {
                        if let Some(t) = last {
                            i.step(&t).unwrap();
                        }
                        break;
                    }
                    Step::NeedMore => panic!("need more"),
                }
                match i
                    .step(&token)
                    .unwrap_or_else(|e| panic!("{format:?} initiator: {e}"))
                {
                    Step::Continue(t) | Step::Done(Some(t)) => token = t,
                    other => panic!("{other:?}"),
                }
            }
            assert!(i.is_established() && a.is_established());
        }
    }
}

#[test]
fn delegation_from_a_legacy_proxy_gives_a_legacy_proxy() {
    let pki = Pki::new();
    let client = proxy_of(&pki.user, &of(ProxyFormat::Legacy));
    let mut init = ContextConfig::new(client, pki.trust());
    init.delegation = Delegation::Full;
    let acc = ContextConfig::new(pki.host.clone(), pki.trust());
    let (mut i, mut token) = SecurityContext::initiator(init).unwrap();
    let mut a = SecurityContext::acceptor(acc).unwrap();
    loop {
        match a.step(&token).unwrap() {
            Step::Continue(t) => token = t,
            Step::Done(_) => break,
            Step::NeedMore => panic!(),
        }
        match i.step(&token).unwrap() {
            Step::Continue(t) | Step::Done(Some(t)) => token = t,
            other => panic!("{other:?}"),
        }
    }
    let delegated = a.take_delegated().expect("a delegated credential");
    let kind =
        ferry_gsi::proxy::classify(&delegated.cert, delegated.chain.first().map(|c| &**c)).unwrap();
    assert!(
        matches!(
            kind,
            CertKind::Proxy {
                format: ProxyFormat::Legacy,
                ..
            }
        ),
        "{kind:?}"
    );
}
