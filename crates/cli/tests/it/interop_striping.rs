//! Striping with the real Globus tools: a striped globus-gridftp-server (a frontend with three
//! data nodes on 127.0.0.2-4, as the Globus docs set it up) and a single-node ferry server,
//! third party both ways with globus-url-copy `-stripe`, blocked (1 MiB, 4 MiB) and partitioned.
//! ferry, sending to three receiving stripes (SPOR), must give each stripe exactly the bytes the
//! layout assigns it, with its own EOF: the Globus data nodes' range markers show which bytes
//! each stripe received, and the file is compared byte for byte.

use std::net::TcpListener;

use ferry_proto::stripe::Layout;
use ferry_proto::RangeSet;

use crate::common;

use common::striping::{ferry, ferry_server, globus_striped, guc, source_dir, tool};

#[test]
fn third_party_striped_between_ferry_and_a_striped_globus_server() {
    if tool("globus-url-copy").is_none() {
        eprintln!("skipping: needs globus-url-copy and globus-gridftp-server");
        return;
    }
    if tool("globus-gridftp-server").is_none() {
        eprintln!("skipping: needs globus-gridftp-server");
        return;
    }
    if TcpListener::bind("127.0.0.2:0").is_err() {
        eprintln!("skipping: 127.0.0.2 is not a local address here");
        return;
    }
    let len = 23 * (1 << 20) + 12_345;
    let (dir, data, bytes) = source_dir(len);
    let (_globus, gport) = globus_striped(dir.path());
    let (_ferry, fport) = ferry_server(&data);

    for (sbs, layout) in [
        ("1048576", Layout::Blocked { block: 1 << 20 }),
        ("4194304", Layout::Blocked { block: 4 << 20 }),
        ("0", Layout::partitioned(len as u64, 3)),
    ] {
        // ferry (one node) → Globus (three stripes): ferry gets SPOR with three addresses.
        let dst = data.join(format!("to-globus-{sbs}.bin"));
        // A stripe that never gets its EOF hangs the receiver: fail after two minutes instead.
        let out = guc(&[
            "-dbg",
            "-stripe",
            "-sbs",
            sbs,
            &format!("ftp://127.0.0.1:{fport}/src.bin"),
            &format!("ftp://127.0.0.1:{gport}{}", dst.display()),
        ]);
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "ferry → striped Globus, -sbs {sbs}: {log}"
        );
        assert!(
            std::fs::read(&dst).unwrap() == bytes,
            "-sbs {sbs}: bytes differ"
        );
        // Each receiving stripe's range markers hold only bytes the layout gives one stripe.
        // (The Globus frontend passes on the markers its stripes have sent by the time the
        // transfer ends, so a short transfer may show only some of them.)
        let mut markers = 0;
        for line in log.lines() {
            let Some(ranges) = line.trim().strip_prefix("111 Range Marker ") else {
                continue;
            };
            let set = RangeSet::parse(ranges.trim()).unwrap();
            let first = set.iter().next().unwrap().0;
            let stripe = layout.stripe_of(first, 3);
            for (a, b) in set.iter() {
                assert_eq!(layout.stripe_of(a, 3), stripe, "-sbs {sbs}: {line}");
                assert_eq!(layout.stripe_of(b - 1, 3), stripe, "-sbs {sbs}: {line}");
            }
            markers += 1;
        }
        assert!(markers >= 1, "-sbs {sbs}: no range marker: {log}");

        // Globus (three stripes) → ferry (one node).
        let name = format!("from-globus-{sbs}.bin");
        let out = guc(&[
            "-stripe",
            "-sbs",
            sbs,
            &format!("ftp://127.0.0.1:{gport}{}", data.join("src.bin").display()),
            &format!("ftp://127.0.0.1:{fport}/{name}"),
        ]);
        assert!(
            out.status.success(),
            "striped Globus → ferry, -sbs {sbs}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            std::fs::read(data.join(&name)).unwrap() == bytes,
            "-sbs {sbs}: bytes differ"
        );
    }
}

#[test]
fn ferry_copy_stripe_drives_striped_third_party_transfers() {
    if tool("globus-gridftp-server").is_none() {
        eprintln!("skipping: needs globus-gridftp-server");
        return;
    }
    if TcpListener::bind("127.0.0.2:0").is_err() {
        eprintln!("skipping: 127.0.0.2 is not a local address here");
        return;
    }
    let (dir, data, bytes) = source_dir(9 * (1 << 20) + 777);
    let (_globus, gport) = globus_striped(dir.path());
    let (_ferry, fport) = ferry_server(&data);
    let runs: [(&str, Vec<String>); 3] = [
        (
            "copy-blocked",
            vec![
                "copy".into(),
                "-q".into(),
                "--stripe".into(),
                "-p".into(),
                "2".into(),
            ],
        ),
        (
            "copy-partitioned",
            vec![
                "copy".into(),
                "-q".into(),
                "--stripe".into(),
                "--stripe-block-size".into(),
                "0".into(),
            ],
        ),
        (
            "url-copy",
            vec![
                "url-copy".into(),
                "-stripe".into(),
                "-sbs".into(),
                "2M".into(),
            ],
        ),
    ];
    for (tag, args) in runs {
        let to_globus = data.join(format!("{tag}-to-globus.bin"));
        let mut a = args.clone();
        a.push(format!("ftp://127.0.0.1:{fport}/src.bin"));
        a.push(format!("ftp://127.0.0.1:{gport}{}", to_globus.display()));
        let out = ferry(&a);
        assert!(
            out.status.success(),
            "{tag} ferry → striped Globus: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            std::fs::read(&to_globus).unwrap() == bytes,
            "{tag}: bytes differ"
        );
        let name = format!("{tag}-from-globus.bin");
        let mut a = args.clone();
        a.push(format!(
            "ftp://127.0.0.1:{gport}{}",
            data.join("src.bin").display()
        ));
        a.push(format!("ftp://127.0.0.1:{fport}/{name}"));
        let out = ferry(&a);
        assert!(
            out.status.success(),
            "{tag} striped Globus → ferry: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            std::fs::read(data.join(&name)).unwrap() == bytes,
            "{tag}: bytes differ"
        );
    }
}
