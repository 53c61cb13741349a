//! The `ferry` client against FTP servers that misbehave on purpose, each a few lines of
//! script on a socket: garbage instead of a reply, a server that dies in the middle of one, a
//! stream-mode file cut short before a `226`, a session that dies before `STOR` while an old
//! destination file is in place, and `ftpes://` to a server without TLS. Nothing may be
//! reported done that is not, and each failure must say what happened.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::Duration;

use common::{random_bytes, run_ferry, spawn_ferry, write_file, Sandbox};

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A passive listener that sends `bytes` to whoever connects first and closes; its port.
fn send_once(bytes: usize) -> u16 {
    let data = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = data.local_addr().unwrap().port();
    std::thread::spawn(move || {
        if let Ok((mut d, _)) = data.accept() {
            let _ = d.write_all(&vec![7u8; bytes]);
        }
    });
    port
}

/// A fake FTP server: answers the banner, then `script` for each command line; `false` from
/// the script closes the connection. It takes connection after connection (retries).
fn fake_server(script: fn(&str, &mut TcpStream) -> bool) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let _ = conn.write_all(b"220 fake\r\n");
            let mut lines = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            while lines.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                let cmd = line.trim_end().to_string();
                line.clear();
                if !script(&cmd, &mut conn) {
                    break;
                }
            }
        }
    });
    port
}

/// The part every fake server shares: login and the settings a get sends.
fn login_reply(cmd: &str) -> Option<&'static [u8]> {
    let verb = cmd.split(' ').next().unwrap_or("");
    Some(match verb {
        "USER" => b"331 password\r\n",
        "PASS" => b"230 in\r\n",
        "FEAT" => b"211-Features:\r\n SIZE\r\n211 End\r\n",
        "TYPE" => b"200 ok\r\n",
        "MODE" => b"504 stream only\r\n",
        _ => return None,
    })
}

/// State of the fake server below: the bytes its STOR received, and whether one completed.
static STORED_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static STOR_DONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static FIRST_EPSV: std::sync::Once = std::sync::Once::new();
static DATA_LISTENER: std::sync::Mutex<Option<TcpListener>> = std::sync::Mutex::new(None);

#[test]
fn a_put_that_fails_before_the_server_opened_the_file_does_not_append_to_an_old_one() {
    use std::io::Read;
    use std::sync::atomic::Ordering;
    // The destination exists (50000 bytes of something else); the first session dies at
    // EPSV, before any STOR. Its size must not be taken for bytes of this copy.
    let port = fake_server(|cmd, conn| {
        if let Some(reply) = login_reply(cmd) {
            return conn.write_all(reply).is_ok();
        }
        let reply = match cmd.split(' ').next().unwrap_or("") {
            "SIZE" if STOR_DONE.load(Ordering::SeqCst) => {
                format!("213 {}\r\n", STORED_BYTES.load(Ordering::SeqCst))
            }
            "SIZE" => "213 50000\r\n".to_string(),
            "EPSV" => {
                let mut first = false;
                FIRST_EPSV.call_once(|| first = true);
                if first {
                    return false;
                }
                let data = TcpListener::bind("127.0.0.1:0").unwrap();
                let p = data.local_addr().unwrap().port();
                *DATA_LISTENER.lock().unwrap() = Some(data);
                format!("229 Entering Extended Passive Mode (|||{p}|)\r\n")
            }
            "STOR" | "APPE" => {
                let _ = conn.write_all(b"150 go\r\n");
                let listener = DATA_LISTENER.lock().unwrap().take().unwrap();
                let (mut d, _) = listener.accept().unwrap();
                let mut got = Vec::new();
                d.read_to_end(&mut got).unwrap();
                STORED_BYTES.store(got.len() as u64, Ordering::SeqCst);
                STOR_DONE.store(true, Ordering::SeqCst);
                "226 stored\r\n".to_string()
            }
            _ => "502 no\r\n".to_string(),
        };
        conn.write_all(reply.as_bytes()).is_ok()
    });
    let sandbox = Sandbox::new();
    let src = sandbox.local_dir("local").join("src.bin");
    let data = random_bytes(120_000, 14);
    write_file(&src, &data);
    let out = run_ferry(&[
        "copy",
        "--json",
        path_str(&src),
        &format!("ftp://127.0.0.1:{port}/dst.bin"),
    ]);
    out.assert_success();
    let resumed = out
        .events_named("retry")
        .first()
        .map(|r| r["resumed_bytes"].clone());
    if resumed != Some(serde_json::json!(0)) || out.stderr.contains("> APPE") {
        out.fail("the retry should send the whole file with STOR, not append to the old file");
    }
    assert_eq!(STORED_BYTES.load(Ordering::SeqCst), data.len() as u64);
}

#[test]
fn a_server_that_answers_garbage_or_dies_mid_reply_fails_the_copy_clearly() {
    let sandbox = Sandbox::new();
    let local = sandbox.local_dir("local");

    // Garbage where the reply to USER should be.
    let port = fake_server(|cmd, conn| {
        let reply: &[u8] = if cmd.starts_with("USER") {
            b"hello, this is not FTP\r\n"
        } else {
            b"200 ok\r\n"
        };
        conn.write_all(reply).is_ok()
    });
    let dst = local.join("garbage.bin");
    let out = run_ferry(&[
        "copy",
        "--retries",
        "0",
        &format!("ftp://127.0.0.1:{port}/f"),
        path_str(&dst),
    ]);
    if out.code() == Some(0) || !out.stderr.contains("bad reply") {
        out.fail("garbage from the server should fail the copy with 'bad reply'");
    }
    assert!(!dst.exists());

    // A server that sends part of a file, then dies in the middle of its final reply.
    let port = fake_server(|cmd, conn| {
        if let Some(reply) = login_reply(cmd) {
            return conn.write_all(reply).is_ok();
        }
        if cmd.starts_with("SIZE") {
            return conn.write_all(b"213 100000\r\n").is_ok();
        }
        if cmd.starts_with("MDTM") {
            return conn.write_all(b"213 20261125120000\r\n").is_ok();
        }
        if cmd.starts_with("EPSV") {
            let p = send_once(40_000);
            return conn
                .write_all(format!("229 Entering Extended Passive Mode (|||{p}|)\r\n").as_bytes())
                .is_ok();
        }
        if cmd.starts_with("RETR") {
            let _ = conn.write_all(b"150 sending\r\n");
            std::thread::sleep(Duration::from_millis(200));
            let _ = conn.write_all(b"22");
            return false;
        }
        conn.write_all(b"502 no\r\n").is_ok()
    });
    let dst = local.join("half.bin");
    let out = run_ferry(&[
        "copy",
        "--json",
        "--retries",
        "0",
        &format!("ftp://127.0.0.1:{port}/f"),
        path_str(&dst),
    ]);
    if out.code() == Some(0) || !out.events_named("done").is_empty() {
        out.fail("a copy whose server died mid-reply was reported done");
    }
    if out.events_named("failed").is_empty() {
        out.fail("no failed event for the interrupted file");
    }

    // A server whose data ends short of the size it gave, then says 226: in stream mode only
    // the size tells that the file is not all there.
    let port = fake_server(|cmd, conn| {
        if let Some(reply) = login_reply(cmd) {
            return conn.write_all(reply).is_ok();
        }
        let reply = match cmd.split(' ').next().unwrap_or("") {
            "SIZE" => "213 100000\r\n".to_string(),
            "MDTM" => "213 20261125120000\r\n".to_string(),
            "EPSV" => {
                let p = send_once(40_000);
                format!("229 Entering Extended Passive Mode (|||{p}|)\r\n")
            }
            "RETR" => {
                let _ = conn.write_all(b"150 sending\r\n");
                std::thread::sleep(Duration::from_millis(200));
                "226 done\r\n".to_string()
            }
            _ => "502 no\r\n".to_string(),
        };
        conn.write_all(reply.as_bytes()).is_ok()
    });
    let dst = local.join("short.bin");
    let out = run_ferry(&[
        "copy",
        "--json",
        "--retries",
        "0",
        &format!("ftp://127.0.0.1:{port}/f"),
        path_str(&dst),
    ]);
    let failed = out.events_named("failed");
    let said = failed
        .first()
        .and_then(|f| f["error"].as_str())
        .unwrap_or("");
    if out.code() == Some(0) || !said.contains("40000 of 100000 bytes") {
        out.fail("a short stream-mode file with a 226 was not failed for its size");
    }

    // ftpes:// to a server without TLS.
    let port = fake_server(|cmd, conn| {
        let reply: &[u8] = if cmd.starts_with("AUTH") {
            b"500 AUTH not understood\r\n"
        } else {
            b"530 log in first\r\n"
        };
        conn.write_all(reply).is_ok()
    });
    let out = run_ferry(&["ls", &format!("ftpes://127.0.0.1:{port}/")]);
    if out.code() != Some(3) || !out.stderr.contains("does not offer FTP over TLS") {
        out.fail("ftpes:// to a server without TLS should say it does not offer TLS");
    }
}

/// A server whose FEAT lists `PARALLEL` (GridFTP's parallel streams, which only MODE E
/// carries) is sent MODE E without waiting for its reply, with the next command. One that
/// lists it and still refuses MODE E is broken; the copy must fail and say so, naming MODE E
/// and the server's answer, with nothing written.
#[test]
fn a_server_listing_parallel_that_refuses_mode_e_fails_the_copy_naming_mode_e() {
    let sandbox = Sandbox::new();
    let local = sandbox.local_dir("local");
    let port = fake_server(|cmd, conn| {
        let reply = match cmd.split(' ').next().unwrap_or("") {
            "FEAT" => "211-Features:\r\n SIZE\r\n PARALLEL\r\n211 End\r\n".to_string(),
            "MODE" => "504 stream only\r\n".to_string(),
            "SIZE" => "213 40000\r\n".to_string(),
            "MDTM" => "213 20261125120000\r\n".to_string(),
            "EPSV" => {
                let p = send_once(40_000);
                format!("229 Entering Extended Passive Mode (|||{p}|)\r\n")
            }
            "RETR" => "150 sending\r\n226 done\r\n".to_string(),
            _ => match login_reply(cmd) {
                Some(r) => String::from_utf8_lossy(r).into_owned(),
                None => "502 no\r\n".to_string(),
            },
        };
        conn.write_all(reply.as_bytes()).is_ok()
    });
    let dst = local.join("f.bin");
    let out = run_ferry(&[
        "copy",
        "--retries",
        "0",
        &format!("ftp://127.0.0.1:{port}/f"),
        path_str(&dst),
    ]);
    if out.code() == Some(0) || !out.stderr.contains("MODE E") || !out.stderr.contains("504") {
        out.fail("a refused deferred MODE E should fail the copy, naming MODE E and the 504");
    }
    // The destination was opened for the data before the refusal came back; nothing was
    // written to it.
    if std::fs::metadata(&dst).is_ok_and(|m| m.len() > 0) {
        out.fail("bytes were written to the destination of a refused copy");
    }
}

std::thread_local! {
    /// What the next data connection of `serve_listing` sends (the fake server's one thread).
    static NEXT_DATA: std::cell::RefCell<Option<&'static [u8]>> = const { std::cell::RefCell::new(None) };
}

/// A server with MLST whose `/dir` lists `listing`; every file in it holds `12345`.
fn serve_listing(cmd: &str, conn: &mut TcpStream, listing: &'static str) -> bool {
    let (verb, arg) = cmd.split_once(' ').unwrap_or((cmd, ""));
    let reply = match verb {
        "FEAT" => "211-Features:\r\n SIZE\r\n MLST type*;size*;\r\n211 End\r\n".to_string(),
        "MLST" if arg.trim_end_matches('/').ends_with("dir") => {
            format!("250-Listing {arg}\r\n type=dir; {arg}\r\n250 End\r\n")
        }
        "MLST" => format!("250-Listing {arg}\r\n type=file;size=5; {arg}\r\n250 End\r\n"),
        "SIZE" => "213 5\r\n".to_string(),
        "MDTM" => "213 20261125120000\r\n".to_string(),
        "MLSD" | "RETR" => {
            let body: &'static [u8] = if verb == "MLSD" {
                listing.as_bytes()
            } else {
                b"12345"
            };
            NEXT_DATA.with(|d| *d.borrow_mut() = Some(body));
            "150 sending\r\n226 done\r\n".to_string()
        }
        "EPSV" | "PASV" => {
            // The body is chosen by the command after EPSV, so the listener waits for it.
            let data = TcpListener::bind("127.0.0.1:0").unwrap();
            let p = data.local_addr().unwrap().port();
            NEXT_DATA.with(|d| *d.borrow_mut() = None);
            let _ = conn
                .write_all(format!("229 Entering Extended Passive Mode (|||{p}|)\r\n").as_bytes());
            let mut next = String::new();
            let mut lines = BufReader::new(conn.try_clone().unwrap());
            if lines.read_line(&mut next).map(|n| n == 0).unwrap_or(true) {
                return false;
            }
            if !serve_listing(next.trim_end(), conn, listing) {
                return false;
            }
            let body = NEXT_DATA.with(|d| d.borrow_mut().take());
            if let Some(body) = body {
                if let Ok((mut d, _)) = data.accept() {
                    let _ = d.write_all(body);
                }
            }
            return true;
        }
        _ => match login_reply(cmd) {
            Some(r) => String::from_utf8_lossy(r).into_owned(),
            None => "502 no\r\n".to_string(),
        },
    };
    conn.write_all(reply.as_bytes()).is_ok()
}

/// A recursive get from a server whose listing names `../../victim/evil` and `/abs-evil` fails
/// naming the entry, and writes nothing outside its destination (nor anything at all).
#[test]
fn a_listing_with_names_that_climb_out_is_refused_and_nothing_is_written_outside() {
    let sandbox = Sandbox::new();
    let base = sandbox.local_dir("client");
    let dst = base.join("a").join("b").join("dst");
    std::fs::create_dir_all(&dst).unwrap();
    let port = fake_server(|cmd, conn| {
        serve_listing(
            cmd,
            conn,
            "type=file;size=5; ../../victim/evil\r\ntype=file;size=5; ok.txt\r\n",
        )
    });
    let out = run_ferry(&[
        "copy",
        "-r",
        "--retries",
        "0",
        &format!("ftp://127.0.0.1:{port}/dir/"),
        path_str(&dst),
    ]);
    if out.code() == Some(0) || !out.stderr.contains("../../victim/evil") {
        out.fail("a listing naming ../../victim/evil should fail the copy, naming the entry");
    }
    if base.join("a").join("victim").exists() || dst.join("ok.txt").exists() {
        out.fail("a refused listing still wrote files");
    }
    let port =
        fake_server(|cmd, conn| serve_listing(cmd, conn, "type=file;size=5; /tmp/abs-evil\r\n"));
    let out = run_ferry(&[
        "copy",
        "-r",
        "--retries",
        "0",
        &format!("ftp://127.0.0.1:{port}/dir/"),
        path_str(&dst),
    ]);
    if out.code() == Some(0) || !out.stderr.contains("/tmp/abs-evil") {
        out.fail("a listing naming an absolute path should fail the copy, naming the entry");
    }
}

/// A `type=dir` entry named `..` is the parent, not a subdirectory: planning does not walk
/// into it (it looped, listing the same directory over and over) and the copy goes on.
#[test]
fn a_listing_with_a_dir_named_dot_dot_is_not_walked_into() {
    let sandbox = Sandbox::new();
    let dst = sandbox.local_dir("dst");
    let port = fake_server(|cmd, conn| {
        serve_listing(
            cmd,
            conn,
            "type=dir; ..\r\ntype=dir; .\r\ntype=file;size=5; ok.txt\r\n",
        )
    });
    let out = spawn_ferry(&[
        "copy",
        "-r",
        "--retries",
        "0",
        &format!("ftp://127.0.0.1:{port}/dir/"),
        path_str(&dst),
    ])
    .wait(Duration::from_secs(30));
    out.assert_success();
    out.assert_bytes(b"12345", &dst.join("ok.txt"));
    if out.dialogue().matches("MLSD").count() > 2 {
        out.fail("planning listed the directory more than once");
    }
}

/// A server that names a service port for its data (`229 (|||25|)`, `227 (...,0,25)`) does
/// not get the client to send an upload there: the copy fails, naming the address.
#[test]
fn a_server_naming_a_service_port_for_data_is_not_followed() {
    let sandbox = Sandbox::new();
    let src = sandbox.local_dir("local").join("up.txt");
    write_file(&src, b"not for smtp");
    let port = fake_server(|cmd, conn| {
        let reply = match cmd.split(' ').next().unwrap_or("") {
            "EPSV" => "229 Entering Extended Passive Mode (|||25|)\r\n".to_string(),
            "PASV" => "227 Entering Passive Mode (127,0,0,1,0,25)\r\n".to_string(),
            "SIZE" => "550 no such file\r\n".to_string(),
            _ => match login_reply(cmd) {
                Some(r) => String::from_utf8_lossy(r).into_owned(),
                None => "502 no\r\n".to_string(),
            },
        };
        conn.write_all(reply.as_bytes()).is_ok()
    });
    let out = run_ferry(&[
        "copy",
        "--retries",
        "0",
        path_str(&src),
        &format!("ftp://127.0.0.1:{port}/up.txt"),
    ]);
    if out.code() == Some(0) || !out.stderr.contains("ports below 1024 are never data ports") {
        out.fail("a data address on port 25 should be refused, naming the reason");
    }
}
