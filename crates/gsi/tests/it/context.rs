//! The GSS token exchange between two in-memory contexts: handshake, keep-going byte,
//! delegation, wrapping; in TLS 1.3 and 1.2; and refusals.

use crate::common;

use common::{Pki, BASE};
use ferry_gsi::{ContextConfig, Delegation, GsiError, SecurityContext, Step, Target};
use openssl::ssl::SslVersion;

/// Runs the exchange to the end; returns both sides and the number of tokens each way.
fn establish(
    init: ContextConfig,
    acc: ContextConfig,
) -> Result<(SecurityContext, SecurityContext, usize), GsiError> {
    let (mut i, mut token) = SecurityContext::initiator(init)?;
    let mut a = SecurityContext::acceptor(acc)?;
    let mut tokens = 1;
    loop {
        match a.step(&token)? {
            Step::Continue(t) => token = t,
            Step::Done(None) => break,
            other => panic!("acceptor: {other:?}"),
        }
        tokens += 1;
        match i.step(&token)? {
            Step::Continue(t) => token = t,
            Step::Done(Some(t)) => token = t,
            other => panic!("initiator: {other:?}"),
        }
        tokens += 1;
    }
    assert!(i.is_established() && a.is_established());
    Ok((i, a, tokens))
}

fn configs(
    pki: &Pki,
    delegation: Delegation,
    version: Option<SslVersion>,
) -> (ContextConfig, ContextConfig) {
    let mut init = ContextConfig::new(pki.proxy(), pki.trust());
    init.delegation = delegation;
    init.sni = Some("localhost".into());
    init.max_version = version;
    let mut acc = ContextConfig::new(pki.host.clone(), pki.trust());
    acc.max_version = version;
    (init, acc)
}

#[test]
fn tls13_with_limited_delegation_gives_the_server_a_limited_proxy_of_the_user() {
    let pki = Pki::new();
    let (init, acc) = configs(&pki, Delegation::Limited, None);
    let (i, mut a, tokens) = establish(init, acc).unwrap();
    // ClientHello, server flight, client Finished, 0x00, D, request, proxy: as Globus does.
    assert_eq!(tokens, 7);
    assert_eq!(a.peer().unwrap().identity(), format!("{BASE}/CN=Test User"));
    Target::Host {
        name: "localhost".into(),
        ip: None,
    }
    .check(i.peer().unwrap())
    .unwrap();
    let delegated = a.take_delegated().expect("a delegated credential");
    assert!(delegated.is_limited().unwrap());
    assert_eq!(
        delegated.identity().unwrap(),
        format!("{BASE}/CN=Test User")
    );
    assert_eq!(
        delegated.chain.len(),
        2,
        "the user's proxy and certificate above it"
    );
    assert!(i.describe().starts_with("TLSv1.3"), "{}", i.describe());
    assert!(i.confidential());
}

#[test]
fn tls12_without_delegation_takes_fewer_tokens_and_no_keep_going_byte() {
    let pki = Pki::new();
    let (init, acc) = configs(&pki, Delegation::None, Some(SslVersion::TLS1_2));
    let (i, mut a, tokens) = establish(init, acc).unwrap();
    // ClientHello, server flight, client flight, server Finished, 0.
    assert_eq!(tokens, 5);
    assert!(a.take_delegated().is_none());
    assert!(i.describe().starts_with("TLSv1.2"), "{}", i.describe());
}

#[test]
fn tls12_with_full_delegation() {
    let pki = Pki::new();
    let (init, acc) = configs(&pki, Delegation::Full, Some(SslVersion::TLS1_2));
    let (_, mut a, _) = establish(init, acc).unwrap();
    assert!(!a.take_delegated().unwrap().is_limited().unwrap());
}

#[test]
fn wrapped_messages_open_on_the_other_side_and_nowhere_else() {
    let pki = Pki::new();
    let (init, acc) = configs(&pki, Delegation::None, None);
    let (mut i, mut a, _) = establish(init, acc).unwrap();
    let line = b"USER :globus-mapping:\r\n";
    let token = i.wrap(line).unwrap();
    assert!(
        !token.windows(4).any(|w| w == b"USER"),
        "encrypted on the wire"
    );
    assert_eq!(a.unwrap(&token).unwrap(), line);
    let reply = a.wrap(b"331 Password required\r\n").unwrap();
    assert_eq!(i.unwrap(&reply).unwrap(), b"331 Password required\r\n");
    let mut tampered = i.wrap(b"PASS x\r\n").unwrap();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    assert!(a.unwrap(&tampered).is_err(), "a modified record is refused");
}

#[test]
fn bytes_may_arrive_in_pieces_as_from_a_socket() {
    let pki = Pki::new();
    let (init, acc) = configs(&pki, Delegation::None, None);
    let (mut i, first) = SecurityContext::initiator(init).unwrap();
    let mut a = SecurityContext::acceptor(acc).unwrap();
    let (head, tail) = first.split_at(7);
    assert_eq!(a.step(head).unwrap(), Step::NeedMore);
    let Step::Continue(flight) = a.step(tail).unwrap() else {
        panic!()
    };
    let Step::Continue(fin) = i.step(&flight).unwrap() else {
        panic!()
    };
    let Step::Continue(nul) = a.step(&fin).unwrap() else {
        panic!()
    };
    let Step::Done(Some(flag)) = i.step(&nul).unwrap() else {
        panic!()
    };
    assert_eq!(a.step(&flag).unwrap(), Step::Done(None));
}

#[test]
fn a_client_from_another_ca_is_refused_by_the_acceptor() {
    let pki = Pki::new();
    let other = Pki::new();
    let (mut init, acc) = configs(&pki, Delegation::None, None);
    init.credential = other.proxy();
    init.trust = pki.trust();
    let e = establish(init, acc).unwrap_err();
    assert!(
        matches!(e, GsiError::Untrusted { .. } | GsiError::Tls(_)),
        "{e}"
    );
}

#[test]
fn the_wrong_server_subject_is_caught_by_the_target_check() {
    let pki = Pki::new();
    let (init, acc) = configs(&pki, Delegation::None, None);
    let (i, _, _) = establish(init, acc).unwrap();
    let peer = i.peer().unwrap();
    let e = Target::Host {
        name: "dtn.example.org".into(),
        ip: None,
    }
    .check(peer)
    .unwrap_err();
    assert!(e.to_string().contains("do not match"), "{e}");
    let e = Target::Subject(format!("{BASE}/CN=someone-else"))
        .check(peer)
        .unwrap_err();
    assert!(e.to_string().contains("do not match"), "{e}");
    Target::Subject(format!("{BASE}/CN=localhost"))
        .check(peer)
        .unwrap();
    Target::Host {
        name: "127.0.0.1".into(),
        ip: None,
    }
    .check(peer)
    .unwrap_err();
}

#[test]
fn garbage_tokens_are_errors() {
    let pki = Pki::new();
    let (_, acc) = configs(&pki, Delegation::None, None);
    let mut a = SecurityContext::acceptor(acc).unwrap();
    assert!(a.step(b"GET / HTTP/1.1\r\n\r\n").is_err());
}

#[test]
fn the_control_channel_codec_wraps_commands_and_multi_line_replies_both_ways() {
    use ferry_gsi::protect::{
        is_protected_reply, unwrap_command, unwrap_reply_line, wrap_command, wrap_reply,
    };
    let pki = Pki::new();
    for version in [None, Some(SslVersion::TLS1_2)] {
        let (init, acc) = configs(&pki, Delegation::None, version);
        let (mut client, mut server, _) = establish(init, acc).unwrap();
        // Client → server: one ENC line, which opens to the command and its CRLF.
        let wire = wrap_command(&mut client, b"RETR /data/f").unwrap();
        assert!(wire.starts_with(b"ENC ") && wire.ends_with(b"\r\n"));
        let line = &wire[..wire.len() - 2];
        assert_eq!(
            unwrap_command(&mut server, line).unwrap(),
            b"RETR /data/f\r\n"
        );
        assert!(unwrap_command(&mut server, b"RETR /data/f").is_none());
        assert!(unwrap_command(&mut server, b"ENC not-base64!").is_none());
        // Server → client: a three-line reply becomes 632-, 632-, 632 lines.
        let reply = b"211-Features:\r\n MODE E\r\n211 End.\r\n";
        let wire = String::from_utf8(wrap_reply(&mut server, reply).unwrap()).unwrap();
        let lines: Vec<&str> = wire.split_terminator("\r\n").collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("632-") && lines[1].starts_with("632-"));
        assert!(lines[2].starts_with("632 "));
        assert!(is_protected_reply(632) && !is_protected_reply(230));
        let mut plain = Vec::new();
        for l in lines {
            plain.extend(unwrap_reply_line(&mut client, &l[4..]).unwrap());
        }
        assert_eq!(plain, reply);
        assert!(unwrap_reply_line(&mut client, "%%%").is_err());
    }
}

/// A server whose certificate is not the target's gets nothing of the user's: the initiator
/// refuses right after verifying the server's chain, before the delegation flag, so the
/// acceptor never signs a request or receives a proxy (it used to get the proxy, and the
/// client refused the name only after the whole exchange).
#[test]
fn a_peer_that_fails_the_name_check_never_receives_the_delegation() {
    let pki = Pki::new();
    for version in [None, Some(SslVersion::TLS1_2)] {
        for target in [
            Target::Host {
                name: "impostor.example".into(),
                ip: None,
            },
            Target::Subject(format!("{BASE}/CN=someone else")),
        ] {
            let (mut init, acc) = configs(&pki, Delegation::Full, version);
            init.target = Some(target.clone());
            let (mut i, mut token) = SecurityContext::initiator(init).unwrap();
            let mut a = SecurityContext::acceptor(acc).unwrap();
            let mut sent = 1;
            let refused = loop {
                match a.step(&token).unwrap() {
                    Step::Continue(t) => token = t,
                    other => panic!("acceptor finished early: {other:?}"),
                }
                match i.step(&token) {
                    Ok(Step::Continue(t)) | Ok(Step::Done(Some(t))) => {
                        token = t;
                        sent += 1;
                    }
                    Ok(other) => panic!("initiator: {other:?}"),
                    Err(e) => break e,
                }
                assert!(sent < 10, "the exchange did not stop for {target:?}");
            };
            assert!(
                matches!(refused, GsiError::WrongPeer { .. }),
                "{target:?}: {refused}"
            );
            // Only handshake flights went out: the hello (TLS 1.3), or the hello and the
            // key exchange (TLS 1.2, where the acceptor's Finished comes last).
            let flights = if version.is_some() { 2 } else { 1 };
            assert_eq!(
                sent, flights,
                "{target:?}: the initiator sent more than its handshake"
            );
            assert!(a.take_delegated().is_none());
            assert!(!a.is_established());
        }
    }
}
