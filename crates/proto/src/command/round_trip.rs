//! Display and parse agree: every command `parse` can produce is written back to a line that
//! parses to the same value.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use proptest::prelude::*;
use proptest::strategy::{BoxedStrategy, Union};

use super::*;
use crate::opts::{RetrOpts, StripeLayout};

fn hp(s: &str) -> HostPort {
    HostPort(s.parse::<SocketAddr>().expect("test address"))
}

fn ok(line: &str) -> Command {
    match Command::parse(line.as_bytes()) {
        Ok(cmd) => cmd,
        Err(err) => panic!("{line:?} should parse: {err}"),
    }
}

#[test]
fn display_writes_the_canonical_wire_form() {
    let cases: Vec<(Command, &str)> = vec![
        (Command::Retr("my file".into()), "RETR my file"),
        (Command::Type(TransferType::Image), "TYPE I"),
        (Command::Rest(Restart::Ranges(RangeSet::new())), "REST 0-0"),
        (
            Command::Rest(Restart::Ranges(RangeSet::from_range(0, 10))),
            "REST 0-10",
        ),
        (Command::Epsv(Some(EpsvArg::All)), "EPSV ALL"),
        (Command::Spas(true), "SPAS 2"),
        (Command::Eprt(hp("[::1]:21")), "EPRT |2|::1|21|"),
        (Command::Port(hp("1.2.3.4:258")), "PORT 1,2,3,4,1,2"),
        (
            Command::Cksm {
                algorithm: "MD5".into(),
                offset: 0,
                length: None,
                path: "/x".into(),
            },
            "CKSM MD5 0 -1 /x",
        ),
        (
            Command::Mfmt {
                mtime: 0,
                path: "/x".into(),
            },
            "MFMT 19700101000000 /x",
        ),
        (
            Command::Dcau(Dcau::Subject("/CN=a b".into())),
            "DCAU S /CN=a b",
        ),
        (
            Command::Trev {
                event: TrevEvent::Perf,
                interval: 3,
            },
            "TREV PERF 3",
        ),
        (Command::Site(SiteCommand::Whoami), "SITE WHOAMI"),
    ];
    for (cmd, wire) in cases {
        assert_eq!(cmd.to_string(), wire);
        assert_eq!(ok(wire), cmd, "{wire} parses back");
    }
}

#[test]
fn empty_rest_range_list_round_trips() {
    let cmd = Command::Rest(Restart::Ranges(RangeSet::new()));
    assert_eq!(ok(&cmd.to_string()), cmd);
}

/// Paths: no control characters, no leading space or `-`; spaces, quotes and non-ASCII inside.
fn path() -> BoxedStrategy<String> {
    "[a-zA-Z0-9_./~=\"é日][a-zA-Z0-9_./~=\"é日 -]{0,40}".boxed()
}

/// One word without spaces.
fn word() -> BoxedStrategy<String> {
    "[a-zA-Z0-9_./=é-]{1,16}".boxed()
}

fn upper_word() -> BoxedStrategy<String> {
    "[A-Z0-9]{1,10}".boxed()
}

fn opt_path() -> BoxedStrategy<Option<String>> {
    proptest::option::of(path()).boxed()
}

fn mtime() -> impl Strategy<Value = i64> {
    -62_167_219_200i64..253_402_300_800i64
}

fn host_port() -> BoxedStrategy<HostPort> {
    prop_oneof![
        (any::<u32>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port)),
        (any::<u128>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), port)),
    ]
    .prop_map(HostPort)
    .boxed()
}

fn host_port_v4() -> BoxedStrategy<HostPort> {
    (any::<u32>(), any::<u16>())
        .prop_map(|(ip, port)| HostPort(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port)))
        .boxed()
}

fn range_set() -> BoxedStrategy<RangeSet> {
    proptest::collection::vec((any::<u64>(), any::<u64>()), 0..6)
        .prop_map(|pairs| {
            let mut set = RangeSet::new();
            for (a, b) in pairs {
                set.insert(a.min(b), a.max(b));
            }
            set
        })
        .boxed()
}

fn opts() -> BoxedStrategy<Opts> {
    let retr = (
        proptest::option::of(1u32..=64),
        proptest::option::of(prop_oneof![
            Just(StripeLayout::Blocked),
            Just(StripeLayout::Partitioned)
        ]),
        proptest::option::of(1u64..=u64::MAX),
        proptest::option::of(any::<u32>()),
    )
        .prop_filter("at least one item", |(p, l, b, m)| {
            p.is_some() || l.is_some() || b.is_some() || m.is_some()
        })
        .prop_map(|(parallelism, layout, block_size, markers)| {
            Opts::Retr(RetrOpts {
                parallelism,
                layout,
                block_size,
                markers,
            })
        });
    prop_oneof![
        retr,
        any::<u32>().prop_map(|n| Opts::Cksm { markers: Some(n) }),
        (
            prop_oneof![Just("PASV"), Just("EPSV"), Just("SPAS")],
            any::<bool>()
        )
            .prop_map(|(c, allow)| Opts::AllowDelayed {
                command: c.to_owned(),
                allow
            }),
        proptest::collection::vec("[a-z][a-z.]{0,10}", 0..5).prop_map(Opts::Mlst),
        any::<bool>().prop_map(Opts::Utf8),
        ("[A-Z]{1,3}Z", path()).prop_map(|(command, params)| Opts::Other { command, params }),
    ]
    .boxed()
}

fn site() -> BoxedStrategy<SiteCommand> {
    Union::new(vec![
        Just(SiteCommand::Help).boxed(),
        (any::<u32>(), path())
            .prop_map(|(mode, path)| SiteCommand::Chmod { mode, path })
            .boxed(),
        (mtime(), path())
            .prop_map(|(mtime, path)| SiteCommand::Utime { mtime, path })
            .boxed(),
        (word(), path())
            .prop_map(|(target, link)| SiteCommand::Symlink { target, link })
            .boxed(),
        path().prop_map(SiteCommand::SymlinkFrom).boxed(),
        path().prop_map(SiteCommand::SymlinkTo).boxed(),
        path().prop_map(SiteCommand::Rdel).boxed(),
        any::<u64>().prop_map(SiteCommand::BufSize).boxed(),
        any::<u64>().prop_map(SiteCommand::RetrBufSize).boxed(),
        any::<u64>().prop_map(SiteCommand::StorBufSize).boxed(),
        any::<u64>().prop_map(SiteCommand::BlockSize).boxed(),
        path().prop_map(SiteCommand::ClientInfo).boxed(),
        path().prop_map(SiteCommand::TaskId).boxed(),
        Just(SiteCommand::Whoami).boxed(),
        Just(SiteCommand::Version).boxed(),
        Just(SiteCommand::Status).boxed(),
        path().prop_map(SiteCommand::SetNetStack).boxed(),
        path().prop_map(SiteCommand::SetDiskStack).boxed(),
        ("X[A-Z]{0,8}", prop_oneof![Just(String::new()), path()])
            .prop_map(|(name, args)| SiteCommand::Other { name, args })
            .boxed(),
    ])
    .boxed()
}

fn command() -> impl Strategy<Value = Command> {
    let unit = |c: Command| Just(c).boxed();
    Union::new(vec![
        word().prop_map(Command::User).boxed(),
        prop_oneof![Just(String::new()), path()]
            .prop_map(Command::Pass)
            .boxed(),
        path().prop_map(Command::Acct).boxed(),
        word().prop_map(Command::Auth).boxed(),
        "[A-Za-z0-9+/=]{1,60}".prop_map(Command::Adat).boxed(),
        any::<u64>().prop_map(Command::Pbsz).boxed(),
        prop_oneof![
            Just(Protection::Clear),
            Just(Protection::Safe),
            Just(Protection::Confidential),
            Just(Protection::Private)
        ]
        .prop_map(Command::Prot)
        .boxed(),
        unit(Command::Feat),
        opts().prop_map(Command::Opts).boxed(),
        opt_path().prop_map(Command::Help).boxed(),
        unit(Command::Syst),
        unit(Command::Noop),
        unit(Command::Quit),
        opt_path().prop_map(Command::Stat).boxed(),
        prop_oneof![Just(TransferType::Ascii), Just(TransferType::Image)]
            .prop_map(Command::Type)
            .boxed(),
        prop_oneof![Just(TransferMode::Stream), Just(TransferMode::Extended)]
            .prop_map(Command::Mode)
            .boxed(),
        prop_oneof![
            Just(Structure::File),
            Just(Structure::Record),
            Just(Structure::Page)
        ]
        .prop_map(Command::Stru)
        .boxed(),
        unit(Command::Pasv),
        proptest::option::of(prop_oneof![
            Just(EpsvArg::Protocol(1)),
            Just(EpsvArg::Protocol(2)),
            Just(EpsvArg::All)
        ])
        .prop_map(Command::Epsv)
        .boxed(),
        any::<bool>().prop_map(Command::Spas).boxed(),
        host_port_v4().prop_map(Command::Port).boxed(),
        host_port().prop_map(Command::Eprt).boxed(),
        proptest::collection::vec(host_port(), 1..5)
            .prop_map(Command::Spor)
            .boxed(),
        prop_oneof![
            any::<u64>().prop_map(Restart::Stream),
            range_set().prop_map(Restart::Ranges)
        ]
        .prop_map(Command::Rest)
        .boxed(),
        path().prop_map(Command::Retr).boxed(),
        path().prop_map(Command::Stor).boxed(),
        opt_path().prop_map(Command::Stou).boxed(),
        path().prop_map(Command::Appe).boxed(),
        prop_oneof![
            (any::<u64>(), any::<u64>(), path()).prop_map(|(offset, length, path)| Eret::Partial {
                offset,
                length,
                path
            }),
            ("[a-zA-Z0-9_]{1,8}", "[a-zA-Z0-9 =;,]{0,20}", path())
                .prop_map(|(name, params, path)| Eret::Module { name, params, path }),
        ]
        .prop_map(Command::Eret)
        .boxed(),
        prop_oneof![
            (any::<u64>(), path()).prop_map(|(offset, path)| Esto::Adjusted { offset, path }),
            ("[a-zA-Z0-9_]{1,8}", "[a-zA-Z0-9 =;,]{0,20}", path())
                .prop_map(|(name, params, path)| Esto::Module { name, params, path }),
        ]
        .prop_map(Command::Esto)
        .boxed(),
        opt_path().prop_map(Command::List).boxed(),
        opt_path().prop_map(Command::Nlst).boxed(),
        opt_path().prop_map(Command::Mlst).boxed(),
        opt_path().prop_map(Command::Mlsd).boxed(),
        opt_path().prop_map(Command::Mlsr).boxed(),
        opt_path().prop_map(Command::Mlsc).boxed(),
        path().prop_map(Command::Size).boxed(),
        path().prop_map(Command::Mdtm).boxed(),
        (mtime(), path())
            .prop_map(|(mtime, path)| Command::Mfmt { mtime, path })
            .boxed(),
        path().prop_map(Command::Cwd).boxed(),
        unit(Command::Cdup),
        unit(Command::Pwd),
        path().prop_map(Command::Mkd).boxed(),
        path().prop_map(Command::Rmd).boxed(),
        path().prop_map(Command::Dele).boxed(),
        path().prop_map(Command::Rnfr).boxed(),
        path().prop_map(Command::Rnto).boxed(),
        any::<u64>().prop_map(Command::Allo).boxed(),
        unit(Command::Abor),
        any::<u64>().prop_map(Command::Sbuf).boxed(),
        (
            upper_word(),
            any::<u64>(),
            proptest::option::of(any::<u64>()),
            path(),
        )
            .prop_map(|(algorithm, offset, length, path)| Command::Cksm {
                algorithm,
                offset,
                length,
                path,
            })
            .boxed(),
        (upper_word(), "[0-9a-f]{1,64}")
            .prop_map(|(algorithm, value)| Command::Scks { algorithm, value })
            .boxed(),
        prop_oneof![
            Just(Dcau::None),
            Just(Dcau::Self_),
            path().prop_map(Dcau::Subject)
        ]
        .prop_map(Command::Dcau)
        .boxed(),
        (
            prop_oneof![Just(TrevEvent::Restart), Just(TrevEvent::Perf)],
            any::<u32>(),
        )
            .prop_map(|(event, interval)| Command::Trev { event, interval })
            .boxed(),
        proptest::option::of("[A-Za-z-]{1,8}")
            .prop_map(Command::Lang)
            .boxed(),
        site().prop_map(Command::Site).boxed(),
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn display_then_parse_gives_the_same_command(cmd in command()) {
        let line = cmd.to_string();
        prop_assert_eq!(Command::parse(line.as_bytes()), Ok(cmd.clone()), "line {:?}", line);
        let crlf = format!("{line}\r\n");
        prop_assert_eq!(Command::parse(crlf.as_bytes()), Ok(cmd.clone()));
        prop_assert_eq!(
            Command::parse(line.as_bytes()).map(|c| c.verb()),
            Ok(cmd.verb())
        );
    }

    #[test]
    fn parsed_lines_display_to_lines_that_parse_the_same(line in "[A-Za-z]{3,4}( [ -~é]{0,30}){0,3}") {
        if let Ok(cmd) = Command::parse(line.as_bytes()) {
            prop_assert_eq!(Command::parse(cmd.to_string().as_bytes()), Ok(cmd));
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = Command::parse(&bytes);
    }
}
