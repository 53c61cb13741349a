//! Interoperability: the `ferry` client against plain FTP servers from Debian's packages,
//! ProFTPD 1.3.8 and Pure-FTPd 1.0.50, which speak RFC 959/2428/3659 but no GridFTP: gets and
//! puts in stream mode (anonymous and with a user, IPv4 and IPv6), `-p 4` falling back to one
//! stream with one warning or refused with `--require-parallel`, recursive copies, `ls`,
//! `mkdir`, `mv`, `stat` and `rm`, and restart after the server's session dies mid-file. Every
//! transfer is compared byte for byte. Servers that misbehave on purpose are in
//! `client_against_bad_servers.rs`.
//!
//! ```text
//! cargo test --release -p ferry-cli --test it interop_plain_ftp::
//! ```
//!
//! The servers need root (see `common/ftpd.rs`); elsewhere each test prints why and passes.
//!
//! What the servers did here that a client has to live with:
//!
//! - `MODE E` is refused (ProFTPD `501 'MODE E' unrecognized transfer mode`, Pure-FTPd
//!   `504 Please use S(tream) mode`) and FEAT does not mention modes at all.
//! - ProFTPD refuses `SIZE` in ASCII mode, so TYPE I comes first.
//! - Both send the `150` of a passive transfer only once the data connection is up.
//! - Pure-FTPd logs anonymous users in at `USER` (230) and answers the `PASS` after it with
//!   another 230.
//! - ProFTPD refuses `APPE` (and `REST` before `STOR`) with `451` unless `AllowStoreRestart on`.
//! - ProFTPD with `TLSRequired on` and Pure-FTPd with `-Y 3` refuse clear data connections, and
//!   ProFTPD also one that does not resume the control connection's TLS session, so the TLS
//!   tests prove both.

use crate::common;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::ftpd::{Ftpd, FtpdKind, FtpdOptions, FtpsMode};
use common::{make_dir, random_bytes, run_ferry, spawn_ferry, write_file, Sandbox};

/// Runs `body` once per installed server, or says why it cannot.
fn each_server(body: impl Fn(&Sandbox, &Ftpd)) {
    each_server_with(FtpdOptions::default(), body)
}

fn each_server_with(opts: FtpdOptions, body: impl Fn(&Sandbox, &Ftpd)) {
    for kind in FtpdKind::ALL {
        if let Some(reason) = kind.missing() {
            eprintln!("{reason}");
            continue;
        }
        let sandbox = Sandbox::new();
        let server = Ftpd::start(kind, &sandbox, opts);
        body(&sandbox, &server);
    }
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn gets_and_puts_in_stream_mode_anonymous_and_with_a_user_on_ipv4_and_ipv6() {
    each_server(|sandbox, server| {
        let local = sandbox.local_dir("local");
        let data = random_bytes(3 << 20, 7);
        server.put_file(&server.anon, "pub/f.bin", &data);

        let got = local.join("anon.bin");
        run_ferry(&["copy", &server.anon_url("/pub/f.bin"), path_str(&got)])
            .assert_bytes(&data, &got);

        let src = local.join("src.bin");
        write_file(&src, &data);
        run_ferry(&["copy", path_str(&src), &server.user_url("/up.bin")])
            .assert_bytes(&data, &server.home.join("up.bin"));
        let back = local.join("back-v6.bin");
        run_ferry(&["copy", &server.user_url_v6("/up.bin"), path_str(&back)])
            .assert_bytes(&data, &back);
        run_ferry(&["copy", path_str(&src), &server.user_url_v6("/up-v6.bin")])
            .assert_bytes(&data, &server.home.join("up-v6.bin"));

        // Overwriting a longer file leaves exactly the new bytes.
        let short = random_bytes(1000, 8);
        write_file(&src, &short);
        run_ferry(&["copy", path_str(&src), &server.user_url("/up.bin")])
            .assert_bytes(&short, &server.home.join("up.bin"));
        run_ferry(&["copy", path_str(&src), &server.anon_url("/pub/in.bin")])
            .assert_bytes(&short, &server.anon.join("pub/in.bin"));
    });
}

#[test]
fn parallel_streams_fall_back_to_one_with_one_warning_or_fail_with_require_parallel() {
    each_server(|sandbox, server| {
        let local = sandbox.local_dir("local");
        let tree = local.join("two");
        make_dir(&tree);
        write_file(&tree.join("a.bin"), &random_bytes(1 << 20, 1));
        write_file(&tree.join("b.bin"), &random_bytes(300_000, 2));
        let out = run_ferry(&[
            "copy",
            "-r",
            "-p",
            "4",
            path_str(&tree),
            &server.user_url("/"),
        ]);
        out.assert_same_tree(&tree, &server.home.join("two"));
        let warnings = out.stderr.matches("does not offer MODE E").count();
        if warnings != 1 {
            out.fail(&format!("{warnings} fallback warnings, not 1"));
        }
        if !out.stderr.contains("1 stream in stream mode, not 4") {
            out.fail("the warning does not say what the copy does instead");
        }
        // Plain FTP has no CKSM: the default verification says once that it cannot check.
        let unverified = out.stderr.matches("does not answer CKSM ADLER32").count();
        if unverified != 1 || !out.stderr.contains("not verified") {
            out.fail(&format!("{unverified} 'not verified' warnings, not 1"));
        }

        let dst = local.join("strict.bin");
        let out = run_ferry(&[
            "copy",
            "-p",
            "4",
            "--require-parallel",
            &server.user_url("/two/a.bin"),
            path_str(&dst),
        ]);
        if out.code() == Some(0) || !out.stderr.contains("--require-parallel") {
            out.fail("--require-parallel should refuse a server without MODE E, saying why");
        }
        if dst.exists() {
            out.fail("a refused copy left a destination file");
        }
        // Without -p the stream count is the client's choice: no warning about it.
        let quiet = run_ferry(&["copy", &server.user_url("/two/a.bin"), path_str(&dst)]);
        quiet.assert_same_file(&tree.join("a.bin"), &dst);
        if quiet.stderr.contains("does not offer MODE E") {
            quiet.fail("a copy without -p warned about streams");
        }
        // Asked for by name, a checksum the server cannot give fails the copy.
        let strict = run_ferry(&[
            "copy",
            "--checksum",
            "ADLER32",
            &server.user_url("/two/a.bin"),
            path_str(&local.join("strict2.bin")),
        ]);
        if strict.code() == Some(0) || !strict.stderr.contains("CKSM") {
            strict.fail("--checksum should fail where the server has no CKSM, saying so");
        }
    });
}

#[test]
fn recursive_copies_and_file_management_work_without_gridftp() {
    each_server(|sandbox, server| {
        let local = sandbox.local_dir("local");
        let tree = local.join("tree");
        make_dir(&tree.join("sub/deeper"));
        make_dir(&tree.join("empty"));
        write_file(&tree.join("top.bin"), &random_bytes(200_000, 3));
        write_file(&tree.join("sub/with space.txt"), b"hello\n");
        write_file(&tree.join("sub/deeper/d.bin"), &random_bytes(70_000, 4));
        run_ferry(&["copy", "-r", path_str(&tree), &server.user_url("/")])
            .assert_same_tree(&tree, &server.home.join("tree"));
        let back = local.join("back");
        run_ferry(&["copy", "-r", &server.user_url("/tree/"), path_str(&back)])
            .assert_same_tree(&tree, &back);

        let ls = run_ferry(&["ls", "--json", &server.user_url("/tree/")]);
        ls.assert_success();
        let names: Vec<String> = ls
            .json()
            .as_array()
            .unwrap_or_else(|| ls.fail("ls --json is not an array"))
            .iter()
            .map(|e| format!("{}:{}", e["name"].as_str().unwrap_or("?"), e["kind"]))
            .collect();
        assert_eq!(
            names,
            ["empty:\"dir\"", "sub:\"dir\"", "top.bin:\"file\""],
            "{:?}",
            server.kind
        );
        let stat = run_ferry(&["stat", "--json", &server.user_url("/tree/top.bin")]);
        stat.assert_success();
        assert_eq!(stat.json()["size"], 200_000, "{:?}", server.kind);

        run_ferry(&["mkdir", "-p", &server.user_url("/made/x/y")]).assert_success();
        assert!(server.home.join("made/x/y").is_dir());
        run_ferry(&[
            "mv",
            &server.user_url("/tree/top.bin"),
            &server.user_url("/made/moved.bin"),
        ])
        .assert_success();
        assert!(server.home.join("made/moved.bin").is_file());
        run_ferry(&["rm", "-r", &server.user_url("/tree")]).assert_success();
        assert!(!server.home.join("tree").exists(), "{:?}", server.kind);
        let missing = run_ferry(&["stat", &server.user_url("/tree")]);
        if missing.code() != Some(4) {
            missing.fail("stat of a removed directory should exit 4 (not found)");
        }
    });
}

/// Waits until `path` holds at least `bytes`, then kills the server's sessions.
fn kill_sessions_after(server: &Ftpd, path: &Path, bytes: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while fs::metadata(path).map(|m| m.len()).unwrap_or(0) < bytes {
        assert!(
            Instant::now() < deadline,
            "{} never reached {bytes} bytes",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(server.kill_sessions() > 0, "no session to kill");
}

/// `ferry copy --json --retries 3 [--ca-file F] SRC DST`, not waited for.
fn spawn_resumable_copy(server: &Ftpd, src: &str, dst: &str) -> common::FerryProcess {
    let ca = server.ca_args();
    let mut args = vec!["copy", "--json", "--retries", "3"];
    args.extend(ca.iter().map(String::as_str));
    args.extend([src, dst]);
    spawn_ferry(&args)
}

#[test]
fn copies_resume_after_the_servers_session_dies_mid_file() {
    // In clear and over TLS (explicit, which both servers have).
    for tls in [None, Some(FtpsMode::Explicit)] {
        let opts = FtpdOptions {
            rate_kib: Some(512),
            tls,
            ..FtpdOptions::default()
        };
        each_server_with(opts, resume_get_and_put);
    }
}

fn resume_get_and_put(sandbox: &Sandbox, server: &Ftpd) {
    let local = sandbox.local_dir("local");
    let data = random_bytes(3 << 20, 9);
    server.put_file(&server.home, "big.bin", &data);

    let got = local.join("got.bin");
    let run = spawn_resumable_copy(server, &server.user_url("/big.bin"), path_str(&got));
    kill_sessions_after(server, &got, 1 << 20);
    let out = run.wait(Duration::from_secs(120));
    out.assert_bytes(&data, &got);
    if !out.stderr.contains("> REST ") {
        out.fail("the retried get did not ask the server to skip what had arrived");
    }
    let retry = out.events_named("retry");
    let resumed = retry.first().and_then(|r| r["resumed_bytes"].as_u64());
    if resumed.unwrap_or(0) == 0 {
        out.fail("the get was not resumed from the bytes it had");
    }

    let src = local.join("src.bin");
    write_file(&src, &data);
    let run = spawn_resumable_copy(server, path_str(&src), &server.user_url("/put.bin"));
    kill_sessions_after(server, &server.home.join("put.bin"), 1 << 20);
    let out = run.wait(Duration::from_secs(120));
    out.assert_bytes(&data, &server.home.join("put.bin"));
    if !out.stderr.contains("> APPE /put.bin") {
        out.fail("the retried put did not append to what the server held");
    }
    let retry = out.events_named("retry");
    let resumed = retry.first().and_then(|r| r["resumed_bytes"].as_u64());
    if resumed.unwrap_or(0) == 0 {
        out.fail("the put was not resumed from what the server held");
    }
}

#[test]
fn an_interrupted_put_to_a_server_that_refuses_to_append_is_sent_again_whole() {
    let kind = FtpdKind::ProFtpd;
    if let Some(reason) = kind.missing() {
        eprintln!("{reason}");
        return;
    }
    let sandbox = Sandbox::new();
    let opts = FtpdOptions {
        rate_kib: Some(512),
        refuse_store_restart: true,
        ..FtpdOptions::default()
    };
    let server = Ftpd::start(kind, &sandbox, opts);
    let local = sandbox.local_dir("local");
    let data = random_bytes(2 << 20, 10);
    let src = local.join("src.bin");
    write_file(&src, &data);
    let run = spawn_ferry(&[
        "copy",
        "--json",
        path_str(&src),
        &server.user_url("/put.bin"),
    ]);
    kill_sessions_after(&server, &server.home.join("put.bin"), 512 << 10);
    let out = run.wait(Duration::from_secs(120));
    out.assert_bytes(&data, &server.home.join("put.bin"));
    let appe = out.stderr.find("> APPE /put.bin");
    let stor_after = appe.and_then(|at| out.stderr[at..].find("> STOR /put.bin"));
    if out.events_named("retry").is_empty()
        || stor_after.is_none()
        || !out.stderr.contains("Append/Restart not permitted")
    {
        out.fail("expected a retry whose APPE was refused (451), then a whole STOR");
    }
}

/// `ferry ARGS` with the server's `--ca-file` after the subcommand.
fn run_ferry_tls(server: &Ftpd, args: &[&str]) -> common::FerryOutput {
    let ca = server.ca_args();
    let mut all: Vec<&str> = vec![args[0]];
    all.extend(ca.iter().map(String::as_str));
    all.extend_from_slice(&args[1..]);
    run_ferry(&all)
}

#[test]
fn ftp_over_tls_explicit_and_implicit_gets_puts_lists_and_trees() {
    for mode in [FtpsMode::Explicit, FtpsMode::Implicit] {
        for kind in FtpdKind::ALL {
            if let Some(reason) = kind.missing_tls(mode) {
                eprintln!("{reason}");
                continue;
            }
            let sandbox = Sandbox::new();
            let opts = FtpdOptions {
                tls: Some(mode),
                ..FtpdOptions::default()
            };
            let server = Ftpd::start(kind, &sandbox, opts);
            let local = sandbox.local_dir("local");
            let data = random_bytes(2 << 20, 11);
            server.put_file(&server.anon, "pub/f.bin", &data);

            let got = local.join("anon.bin");
            run_ferry_tls(
                &server,
                &["copy", &server.anon_url("/pub/f.bin"), path_str(&got)],
            )
            .assert_bytes(&data, &got);
            let src = local.join("src.bin");
            write_file(&src, &data);
            run_ferry_tls(
                &server,
                &["copy", path_str(&src), &server.user_url_v6("/up.bin")],
            )
            .assert_bytes(&data, &server.home.join("up.bin"));

            let tree = local.join("tree");
            make_dir(&tree.join("sub"));
            write_file(&tree.join("a.bin"), &random_bytes(100_000, 12));
            write_file(&tree.join("sub/b.bin"), &random_bytes(5_000, 13));
            run_ferry_tls(
                &server,
                &["copy", "-r", path_str(&tree), &server.user_url("/")],
            )
            .assert_same_tree(&tree, &server.home.join("tree"));
            let back = local.join("back");
            run_ferry_tls(
                &server,
                &["copy", "-r", &server.user_url("/tree/"), path_str(&back)],
            )
            .assert_same_tree(&tree, &back);
            let ls = run_ferry_tls(&server, &["ls", &server.user_url("/tree/")]);
            ls.assert_success();
            if !ls.stdout.contains("a.bin") || !ls.stdout.contains("sub/") {
                ls.fail("ls over TLS does not show the tree");
            }
        }
    }
}

#[test]
fn ftp_over_tls_refuses_an_untrusted_certificate_and_a_clear_login_clearly() {
    for kind in FtpdKind::ALL {
        if let Some(reason) = kind.missing_tls(FtpsMode::Explicit) {
            eprintln!("{reason}");
            continue;
        }
        let sandbox = Sandbox::new();
        let opts = FtpdOptions {
            tls: Some(FtpsMode::Explicit),
            ..FtpdOptions::default()
        };
        let server = Ftpd::start(kind, &sandbox, opts);
        let local = sandbox.local_dir("local");
        server.put_file(&server.anon, "pub/f.bin", b"secret bytes");
        let dst = local.join("f.bin");

        // The system's CAs do not know the test CA.
        let out = run_ferry(&["copy", &server.anon_url("/pub/f.bin"), path_str(&dst)]);
        if out.code() != Some(3) || !out.stderr.contains("not trusted") {
            out.fail("an untrusted certificate should fail the login (exit 3) saying so");
        }
        // A trusted certificate that does not name the host the URL names.
        let other = server
            .anon_url("/pub/f.bin")
            .replacen("localhost", "127.0.0.2", 1);
        let out = run_ferry_tls(&server, &["copy", &other, path_str(&dst)]);
        if out.code() != Some(3) || !out.stderr.contains("not trusted for 127.0.0.2") {
            out.fail("a certificate for another name should fail the login (exit 3) saying so");
        }
        // A clear login where TLS is required.
        let clear = server
            .anon_url("/pub/f.bin")
            .replacen("ftpes://", "ftp://", 1);
        let out = run_ferry(&["copy", &clear, path_str(&dst)]);
        if out.code() == Some(0) {
            out.fail("a clear login to a TLS-only server succeeded");
        }
        assert!(!dst.exists(), "{kind:?}: a refused copy left a file");
    }
}
