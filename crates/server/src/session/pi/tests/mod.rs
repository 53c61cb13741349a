//! Protocol tests in memory: the client PI (`ferry_proto::ClientPi`) talks to the server PI
//! through byte buffers, and a fake driver (`pair.rs`) answers the server PI's requests —
//! logins from a fixed table, listeners at fixed addresses, storage calls on a temporary root,
//! transfers as the test scripts them. No sockets and no clock: each test runs in milliseconds.
//! The GSI login, with its test CA, is in `gsi.rs`.

mod gsi;
mod pair;

use ferry_dtp::{ChannelSetup, Direction, DtpError, DtpEvent};
use ferry_proto::command::TransferMode;
use ferry_proto::RangeSet;
use ferry_storage::StorageError;

use pair::{Pair, Script};

#[test]
fn a_password_login_an_anonymous_login_and_a_wrong_password() {
    let mut p = Pair::new();
    p.expect("PWD", 530);
    p.expect("USER alice", 331);
    p.expect("PASS wrong", 530);
    p.expect("PASS right", 503);
    p.expect("USER alice", 331);
    let r = p.expect("PASS right", 230);
    assert_eq!(r.text(), "User alice logged in.");
    p.expect("USER bob", 503);

    let mut anon = Pair::new();
    let r = anon.expect("USER anonymous", 331);
    assert!(r.text().contains("Guest login ok"), "{r:?}");
    anon.expect("PASS me@example.org", 230);
    anon.expect("TYPE I", 200);
    anon.expect("PASV", 227);
    anon.expect("STOR up.bin", 550);
    assert!(
        anon.transfers.is_empty(),
        "a read-only login stores nothing"
    );
}

#[test]
fn feat_names_the_gridftp_extensions_and_opts_set_what_the_next_transfer_uses() {
    let mut p = Pair::new();
    let feat = p.line("FEAT");
    let feat = feat.last().unwrap();
    assert_eq!(feat.code, 211);
    for ext in [
        " PARALLEL",
        " ERET",
        " ESTO",
        " SPAS",
        " SPOR",
        " DCAU",
        " MLST ",
    ] {
        assert!(
            feat.lines.iter().any(|l| l.starts_with(ext)),
            "FEAT lacks {ext}: {feat:?}"
        );
    }
    p.expect("OPTS UTF8 ON", 200);
    p.expect("USER alice", 331);
    p.expect("PASS right", 230);
    p.expect("OPTS RETR Parallelism=8,8,8;", 200);
    p.expect("OPTS RETR StripeLayout=Blocked;BlockSize=1048576;", 200);
    p.expect("OPTS MLST Type;Size;", 200);
    p.expect("OPTS RETR Bogus", 501);
    p.expect("PASV", 227);
    p.expect("RETR f", 226);
    let d = p.last_transfer();
    assert_eq!(d.parallelism, 8);
    assert_eq!(d.layout, ferry_dtp::LayoutSpec::Blocked(1 << 20));
}

#[test]
fn a_mode_e_get_is_described_from_the_session_settings() {
    let mut p = Pair::logged_in();
    p.expect("TYPE I", 200);
    p.expect("MODE E", 200);
    p.expect("OPTS RETR Parallelism=4,4,4;", 200);
    p.expect("SITE BLOCKSIZE 1048576", 200);
    p.expect("SBUF 4194304", 200);
    let pasv = p.expect("PASV", 227);
    assert_eq!(pasv.text(), "Entering Passive Mode (192,0,2,1,195,80)");
    p.script = Script::Complete(vec![DtpEvent::Perf {
        stripe_index: 0,
        stripe_count: 1,
        bytes: 500,
        timestamp_tenths: 17_000_000_000,
        news: Vec::new(),
        data_rtt_us: None,
    }]);
    let replies = p.line("RETR data/big.bin");
    let codes: Vec<u16> = replies.iter().map(|r| r.code).collect();
    assert_eq!(codes, [150, 112, 226]);
    let d = p.last_transfer();
    assert_eq!(d.direction, Direction::Send);
    assert_eq!(d.mode, TransferMode::Extended);
    assert!(!d.ascii);
    assert_eq!(d.path.as_str(), "/data/big.bin");
    assert_eq!(d.parallelism, 4);
    assert_eq!(d.block_size, Some(1 << 20));
    assert_eq!(d.tuning.send_buffer, Some(4 << 20));
    assert_eq!(d.channel, ChannelSetup::Passive);
    assert!(d.restart.is_empty());
    assert!(
        p.forgot >= 1,
        "a buffer change drops cached data connections"
    );
}

#[test]
fn a_mode_e_put_with_rest_ranges_keeps_them_and_asks_for_restart_markers() {
    let mut p = Pair::logged_in();
    p.expect("TYPE I", 200);
    p.expect("MODE E", 200);
    p.expect("TREV RESTART 1", 200);
    // The client's own host (192.0.2.7): a password session may not name another.
    p.expect("PORT 192,0,2,7,4,1", 200);
    assert_eq!(p.active, [vec!["192.0.2.7:1025".parse().unwrap()]]);
    p.expect("REST 0-1000,2000-3000", 350);
    let mut ranges = RangeSet::new();
    ranges.insert(0, 1000);
    ranges.insert(2000, 3000);
    p.script = Script::Complete(vec![DtpEvent::Restart(ranges.clone())]);
    assert_eq!(p.codes("STOR up.bin"), [150, 111, 226]);
    let d = p.last_transfer().clone();
    assert_eq!(d.direction, Direction::Receive);
    assert_eq!(d.restart, ranges);
    assert_eq!(d.markers.restart_ms, Some(1000));
    assert!(matches!(d.channel, ChannelSetup::Active(ref a) if a.len() == 1));
    // REST applies to one transfer only.
    p.expect("STOR again.bin", 226);
    assert!(p.last_transfer().restart.is_empty());
}

#[test]
fn eret_and_esto_describe_sections_and_bad_modules_are_refused() {
    let mut p = Pair::logged_in();
    p.expect("MODE E", 200);
    p.expect("PASV", 227);
    p.expect("ERET P 100 50 f", 226);
    let s = p.last_transfer().section;
    assert_eq!((s.file_offset, s.length), (100, Some(50)));
    p.expect("ESTO A 4096 g", 226);
    let d = p.last_transfer();
    assert_eq!(
        (d.direction, d.section.file_offset),
        (Direction::Receive, 4096)
    );
    p.expect("ERET X=\"1\" f", 504);
    p.expect("ERET P 1 f", 501);
}

#[test]
fn spas_lists_every_stripe_and_spor_takes_every_endpoint() {
    let mut p = Pair::logged_in_with(|c| c.allow_third_party = vec!["password".into()]);
    p.passive = vec![
        "192.0.2.21:50000".parse().unwrap(),
        "192.0.2.22:50001".parse().unwrap(),
    ];
    let spas = p.expect("SPAS", 229);
    assert_eq!(
        spas.lines,
        [
            "Entering Striped Passive Mode.",
            " 192,0,2,21,195,80",
            " 192,0,2,22,195,81",
            "End"
        ]
    );
    p.expect("SPOR 192,0,2,31,4,1 192,0,2,32,4,2", 200);
    assert_eq!(p.active.last().map(Vec::len), Some(2));
    p.expect("SPOR", 501);
}

#[test]
fn dcau_and_prot_need_gsi_beyond_none_and_clear() {
    let mut p = Pair::logged_in();
    p.expect("DCAU A", 504);
    p.expect("DCAU N", 200);
    p.expect("PBSZ 1048576", 200);
    let r = p.expect("PROT P", 536);
    assert_eq!(r.text(), "P protection level not supported without GSI.");
    p.expect("PROT S", 536);
    p.expect("PROT C", 200);
    p.expect("PASV", 227);
    p.expect("RETR f", 226);
    let sec = &p.last_transfer().security;
    assert_eq!(sec.dcau, ferry_proto::command::Dcau::None);
    assert_eq!(sec.prot, ferry_proto::command::Protection::Clear);
}

#[test]
fn a_retr_of_a_missing_file_gets_one_550_and_no_150() {
    let mut p = Pair::logged_in();
    p.expect("PASV", 227);
    p.script = Script::FailsBeforeBegin(|| {
        DtpError::Storage(StorageError::NotFound("/missing.bin".into()))
    });
    let replies = p.line("RETR missing.bin");
    assert_eq!(
        replies.iter().map(|r| r.code).collect::<Vec<_>>(),
        [550],
        "{replies:?}"
    );
    // The session goes on in step: the next reply answers the next command.
    p.expect("NOOP", 200);
    p.script = Script::Complete(Vec::new());
    assert_eq!(p.codes("RETR present.bin"), [150, 226]);
}

#[test]
fn abor_during_a_transfer_is_426_then_226_and_drops_cached_connections() {
    let mut p = Pair::logged_in();
    p.expect("PASV", 227);
    p.script = Script::AbortedByClient;
    let before = p.forgot;
    p.client.send_line("RETR f");
    assert_eq!(p.codes("ABOR"), [150, 426]);
    let abor = p.pump_until_final();
    assert_eq!(abor.iter().map(|r| r.code).collect::<Vec<_>>(), [226]);
    assert_eq!(abor[0].text(), "Abort successful.");
    assert_eq!(p.forgot, before + 1);
    // With nothing running, ABOR still answers.
    assert_eq!(p.codes("ABOR"), [226]);
}

#[test]
fn transfers_without_a_data_channel_or_login_and_bad_lines_get_their_errors() {
    let mut p = Pair::new();
    p.expect("RETR f", 530);
    p.expect("USER alice", 331);
    p.expect("PASS right", 230);
    p.expect("RETR f", 425);
    p.expect("FROB", 500);
    p.expect("TYPE Q", 501);
    p.expect("MODE X", 501);
    p.expect("PORT 1,2,3", 501);
    p.expect("EPSV ALL", 200);
    p.expect("PASV", 501);
    p.expect("EPSV 3", 501);
    p.expect("SITE SETNETSTACK udt", 500);
    p.expect("SITE SETDISKSTACK nope", 500);
    p.expect("SITE SETNETSTACK tcp", 250);
    assert!(p.transfers.is_empty());
}

/// A chosen disk stack goes to the mover at once, with the session's DCAU and PROT, so its
/// drivers can start before the transfer (a forwarder logs in to its children); the default
/// stack and refused ones do not.
#[test]
fn a_chosen_disk_stack_is_prepared_at_setdiskstack_and_the_default_or_a_refused_one_is_not() {
    let mut p = Pair::with(|c| {
        c.fs_whitelist = vec!["file".into(), "gridftp_multicast".into()];
        c.multicast_allow_to = vec!["192.0.2.0/24".into()];
    });
    p.expect("USER alice", 331);
    p.expect("PASS right", 230);
    p.expect("DCAU N", 200);
    let forward = "file,gridftp_multicast:urls=#ftp%253A//h%253A2811/x";
    p.expect(&format!("SITE SETDISKSTACK {forward}"), 250);
    assert_eq!(p.prepared.len(), 1);
    let (stack, security) = &p.prepared[0];
    assert_eq!(stack.drivers.len(), 2);
    assert_eq!(stack.drivers[1].name, "gridftp_multicast");
    assert_eq!(security.dcau, ferry_proto::command::Dcau::None);
    p.expect("SITE SETDISKSTACK file", 250);
    p.expect("SITE SETDISKSTACK file,gridftp_multicast:bogus=1", 500);
    p.expect("SITE SETDISKSTACK default", 250);
    assert_eq!(p.prepared.len(), 1, "only the forwarding stack is prepared");
    assert!(p.transfers.is_empty());
}

#[test]
fn site_status_reports_the_drivers_figures_after_login_only() {
    let mut p = Pair::new();
    p.expect("SITE STATUS", 530);
    let mut p = Pair::logged_in();
    let r = p.expect("SITE STATUS", 200);
    let text = r.text();
    for line in [
        "uptime 42 s",
        "sessions 3 of 100",
        "transfers 1 running",
        "transfers 7 started",
    ] {
        assert!(text.contains(line), "{line:?} not in {text}");
    }
    assert!(p.expect("SITE HELP", 214).text().contains("SITE STATUS"));
}

#[test]
fn file_commands_run_on_storage_through_the_driver() {
    let mut p = Pair::logged_in();
    let r = p.expect("MKD d", 257);
    assert_eq!(r.text(), "Directory \"/d\" created successfully.");
    p.expect("CWD d", 250);
    assert_eq!(p.expect("PWD", 257).text(), "\"/d\" is current directory.");
    std::fs::write(p.root.path().join("d/f.txt"), b"hello").unwrap();
    assert_eq!(p.expect("SIZE f.txt", 213).text(), "5");
    p.expect("SIZE nothing", 550);
    p.expect("RNTO g.txt", 503);
    p.expect("RNFR f.txt", 350);
    p.expect("RNTO g.txt", 250);
    assert!(p.root.path().join("d/g.txt").exists());
    p.expect("CWD g.txt", 550);
    p.expect("CDUP", 250);
    p.expect("CKSM ADLER32 0 -1 d/g.txt", 213);
    p.expect("DELE d/g.txt", 250);
    p.expect("RMD d", 250);
    // APPE starts where the file ends.
    std::fs::write(p.root.path().join("log"), b"0123456789").unwrap();
    p.expect("PASV", 227);
    p.expect("APPE log", 226);
    assert_eq!(p.last_transfer().section.file_offset, 10);
}

#[test]
fn thirty_two_bad_lines_in_a_row_close_the_session_after_their_replies() {
    let mut p = Pair::new();
    for _ in 0..31 {
        p.expect("NOT-A-COMMAND", 500);
    }
    assert_eq!(p.codes("NOT-A-COMMAND"), [500]);
    let rest = p.pump_until_final();
    assert_eq!(rest.iter().map(|r| r.code).collect::<Vec<_>>(), [421]);
    assert!(p.closed);
}
