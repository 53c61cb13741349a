use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use proptest::prelude::*;

use super::*;

fn hp(s: &str) -> HostPort {
    HostPort(s.parse::<SocketAddr>().expect("test address"))
}

#[test]
fn port_form_is_six_bytes() {
    assert_eq!(
        HostPort::parse_port("127,0,0,8,205,125"),
        Ok(hp("127.0.0.8:52605"))
    );
    assert_eq!(
        HostPort::parse_port(" 10,0,0,1,0,21 "),
        Ok(hp("10.0.0.1:21"))
    );
    assert_eq!(
        hp("127.0.0.6:53729").to_port_form().as_deref(),
        Some("127,0,0,6,209,225")
    );
}

#[test]
fn bad_port_forms_are_refused() {
    for bad in [
        "1,2,3,4,5",
        "1,2,3,4,5,6,7",
        "256,0,0,1,1,1",
        "1,2,3,4,5,-1",
        "a,b,c,d,e,f",
        "",
        "1,,3,4,5,6",
        "0001,2,3,4,5,6",
    ] {
        assert_eq!(
            HostPort::parse_port(bad),
            Err(HostPortError::MalformedPort),
            "{bad}"
        );
    }
}

#[test]
fn eprt_accepts_any_printable_delimiter() {
    assert_eq!(
        HostPort::parse_eprt("|1|132.235.1.2|6275|"),
        Ok(hp("132.235.1.2:6275"))
    );
    assert_eq!(HostPort::parse_eprt("!2!::1!21!"), Ok(hp("[::1]:21")));
    assert_eq!(
        HostPort::parse_eprt("~2~2001:db8::7~65535~"),
        Ok(hp("[2001:db8::7]:65535"))
    );
}

#[test]
fn eprt_with_an_unknown_protocol_is_unsupported() {
    assert_eq!(
        HostPort::parse_eprt("|3|1.2.3.4|5|"),
        Err(HostPortError::UnsupportedProtocol)
    );
    assert_eq!(
        HostPort::parse_eprt("|x|1.2.3.4|5|"),
        Err(HostPortError::MalformedEprt)
    );
}

#[test]
fn malformed_eprt_is_refused() {
    for bad in [
        "|1|1.2.3.4|5",
        "1|1.2.3.4|5|",
        "|1|::1|5|",
        "|2|1.2.3.4|5|",
        "|1|1.2.3.4|65536|",
        "|1|1.2.3.4||",
        "|1|1.2.3.4|5|6|",
        " 1 1.2.3.4 5 ",
        "",
        "\u{7f}1\u{7f}1.2.3.4\u{7f}5\u{7f}",
    ] {
        assert_eq!(
            HostPort::parse_eprt(bad),
            Err(HostPortError::MalformedEprt),
            "{bad:?}"
        );
    }
}

#[test]
fn parse_any_takes_both_forms() {
    assert_eq!(HostPort::parse_any("1,2,3,4,0,80"), Ok(hp("1.2.3.4:80")));
    assert_eq!(HostPort::parse_any("|1|1.2.3.4|80|"), Ok(hp("1.2.3.4:80")));
}

#[test]
fn pasv_and_epsv_reply_texts() {
    let a = hp("192.168.1.2:50000");
    assert_eq!(
        a.pasv_reply_text().as_deref(),
        Some("Entering Passive Mode (192,168,1,2,195,80)")
    );
    assert_eq!(hp("[::1]:5").pasv_reply_text(), None);
    assert_eq!(
        HostPort::epsv_reply_text(50000),
        "Entering Extended Passive Mode (|||50000|)"
    );
}

#[test]
fn pasv_reply_is_found_with_or_without_parentheses() {
    assert_eq!(
        HostPort::from_pasv_reply("Entering Passive Mode (192,168,1,2,195,80)"),
        Ok(hp("192.168.1.2:50000"))
    );
    assert_eq!(
        HostPort::from_pasv_reply("Entering Passive Mode 192,168,1,2,195,80."),
        Ok(hp("192.168.1.2:50000"))
    );
    assert_eq!(
        HostPort::from_pasv_reply("=1,2,3,4,5,6"),
        Ok(hp("1.2.3.4:1286"))
    );
    assert!(HostPort::from_pasv_reply("Entering Passive Mode (1,2,3)").is_err());
    assert!(HostPort::from_pasv_reply("no numbers").is_err());
}

#[test]
fn epsv_reply_port_is_found() {
    assert_eq!(
        HostPort::port_from_epsv_reply("Entering Extended Passive Mode (|||6446|)"),
        Ok(6446)
    );
    assert_eq!(
        HostPort::port_from_epsv_reply("Extended (|2|::1|7000|)"),
        Ok(7000)
    );
    assert!(HostPort::port_from_epsv_reply("Entering Extended Passive Mode (||6446|)").is_err());
    assert!(HostPort::port_from_epsv_reply("no parentheses").is_err());
}

#[test]
fn spas_reply_lines_give_every_stripe() {
    let lines: Vec<String> = [
        "Entering Striped Passive Mode.",
        " 127,0,0,1,4,1",
        " |2|::1|1026|",
        "End",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(
        HostPort::from_spas_reply(&lines),
        Ok(vec![hp("127.0.0.1:1025"), hp("[::1]:1026")])
    );
    assert!(HostPort::from_spas_reply(&lines[..1]).is_err());
    assert!(HostPort::from_spas_reply(&[lines[0].clone(), lines[3].clone()]).is_err());
}

#[test]
fn display_uses_port_form_for_v4_and_eprt_for_v6() {
    assert_eq!(hp("1.2.3.4:258").to_string(), "1,2,3,4,1,2");
    assert_eq!(hp("[fe80::1]:21").to_string(), "|2|fe80::1|21|");
    assert_eq!(hp("1.2.3.4:258").to_eprt_form(), "|1|1.2.3.4|258|");
}

fn any_v4() -> impl Strategy<Value = HostPort> {
    (any::<u32>(), any::<u16>())
        .prop_map(|(ip, port)| HostPort(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port)))
}

fn any_v6() -> impl Strategy<Value = HostPort> {
    (any::<u128>(), any::<u16>())
        .prop_map(|(ip, port)| HostPort(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), port)))
}

proptest! {
    #[test]
    fn v4_round_trips_through_every_form(a in any_v4()) {
        let port_form = a.to_port_form().expect("v4");
        prop_assert_eq!(HostPort::parse_port(&port_form), Ok(a));
        prop_assert_eq!(HostPort::parse_eprt(&a.to_eprt_form()), Ok(a));
        prop_assert_eq!(HostPort::parse_any(&a.to_string()), Ok(a));
        let text = a.pasv_reply_text().expect("v4");
        prop_assert_eq!(HostPort::from_pasv_reply(&text), Ok(a));
        prop_assert_eq!(
            HostPort::port_from_epsv_reply(&HostPort::epsv_reply_text(a.0.port())),
            Ok(a.0.port())
        );
    }

    #[test]
    fn v6_round_trips_through_eprt(a in any_v6(), delim in 33u8..=126) {
        prop_assert_eq!(a.to_port_form(), None);
        prop_assert_eq!(HostPort::parse_eprt(&a.to_eprt_form()), Ok(a));
        prop_assert_eq!(HostPort::parse_any(&a.to_string()), Ok(a));
        let d = char::from(delim);
        // A delimiter that occurs inside the fields cannot delimit them.
        let (ip, port) = (a.0.ip().to_string(), a.0.port().to_string());
        prop_assume!(!ip.contains(d) && !port.contains(d) && d != '2');
        let custom = format!("{d}2{d}{}{d}{}{d}", a.0.ip(), a.0.port());
        prop_assert_eq!(HostPort::parse_eprt(&custom), Ok(a));
    }

    #[test]
    fn spas_lines_round_trip(list in proptest::collection::vec(prop_oneof![any_v4(), any_v6()], 1..6)) {
        let mut lines = vec!["Entering Striped Passive Mode.".to_owned()];
        lines.extend(list.iter().map(|a| format!(" {a}")));
        lines.push("End".to_owned());
        prop_assert_eq!(HostPort::from_spas_reply(&lines), Ok(list));
    }

    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,40}") {
        let _ = HostPort::parse_any(&s);
        let _ = HostPort::from_pasv_reply(&s);
        let _ = HostPort::port_from_epsv_reply(&s);
    }
}
