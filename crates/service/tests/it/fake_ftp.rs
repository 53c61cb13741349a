//! A scripted FTP server on loopback, for what a real one will not do on cue: drop the
//! connection at a given command, answer something unclear. It logs every command; what it
//! is not told, it answers as a plain stream-mode server (login, `EPSV`, `STOR` into memory).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// What the script says to a command.
pub(crate) enum Act {
    /// This reply (CRLF added to each line).
    Say(String),
    /// Close the control connection without a word.
    Drop,
    /// What a plain server would answer.
    Plain,
}

/// What the server has seen.
#[derive(Default)]
pub(crate) struct Seen {
    /// Every command line, in order.
    pub commands: Vec<String>,
    /// Control connections accepted.
    pub connections: usize,
    /// Bytes each `STOR` received.
    pub stored: Vec<usize>,
}

impl Seen {
    /// How many commands of this verb came.
    pub(crate) fn count(&self, verb: &str) -> usize {
        self.commands
            .iter()
            .filter(|c| {
                c.split(' ')
                    .next()
                    .is_some_and(|v| v.eq_ignore_ascii_case(verb))
            })
            .count()
    }
}

/// A running fake server.
pub(crate) struct FakeFtp {
    pub port: u16,
    pub seen: Arc<Mutex<Seen>>,
}

type Script = dyn Fn(&str, &Seen) -> Act + Send + Sync;

impl FakeFtp {
    /// Starts one that asks `script` first about every command (with what it has seen before
    /// that command).
    pub(crate) fn start(script: impl Fn(&str, &Seen) -> Act + Send + Sync + 'static) -> FakeFtp {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let script: Arc<Script> = Arc::new(script);
        let shared = Arc::clone(&seen);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                shared.lock().unwrap().connections += 1;
                let (seen, script) = (Arc::clone(&shared), Arc::clone(&script));
                std::thread::spawn(move || session(conn, &seen, &*script));
            }
        });
        FakeFtp { port, seen }
    }

    /// `ftp://[login@]127.0.0.1:PORT/path`.
    pub(crate) fn url(&self, login: &str, path: &str) -> String {
        format!("ftp://{login}127.0.0.1:{}{path}", self.port)
    }
}

fn session(mut conn: TcpStream, seen: &Mutex<Seen>, script: &Script) {
    if conn.write_all(b"220 fake\r\n").is_err() {
        return;
    }
    let Ok(read) = conn.try_clone() else { return };
    let mut lines = BufReader::new(read);
    let mut data: Option<TcpListener> = None;
    let mut line = String::new();
    while lines.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
        let cmd = line.trim_end().to_owned();
        line.clear();
        let act = {
            let s = seen.lock().unwrap();
            script(&cmd, &s)
        };
        seen.lock().unwrap().commands.push(cmd.clone());
        let reply = match act {
            Act::Drop => return,
            Act::Say(text) => text,
            Act::Plain => match plain(&cmd, &mut data, &mut conn, seen) {
                Some(text) => text,
                None => return,
            },
        };
        let mut wire = reply.replace("\r\n", "\n").replace('\n', "\r\n");
        wire.push_str("\r\n");
        if conn.write_all(wire.as_bytes()).is_err() {
            return;
        }
    }
}

/// A plain stream-mode server's answer; `None` closes.
fn plain(
    cmd: &str,
    data: &mut Option<TcpListener>,
    conn: &mut TcpStream,
    seen: &Mutex<Seen>,
) -> Option<String> {
    let verb = cmd.split(' ').next().unwrap_or("").to_ascii_uppercase();
    Some(
        match verb.as_str() {
            "USER" => "331 password",
            "PASS" => "230 in",
            "FEAT" => "211-Features:\n MLST type*;size*;modify*;\n SIZE\n211 End",
            "TYPE" => "200 ok",
            "MODE" if cmd.eq_ignore_ascii_case("MODE S") => "200 ok",
            "MODE" => "504 stream mode only",
            "QUIT" => return None,
            "EPSV" => {
                let listener = TcpListener::bind("127.0.0.1:0").ok()?;
                let port = listener.local_addr().ok()?.port();
                *data = Some(listener);
                return Some(format!("229 Entering Extended Passive Mode (|||{port}|)"));
            }
            "STOR" | "APPE" => {
                conn.write_all(b"150 go\r\n").ok()?;
                let (mut d, _) = data.take()?.accept().ok()?;
                let mut got = Vec::new();
                d.read_to_end(&mut got).ok()?;
                seen.lock().unwrap().stored.push(got.len());
                "226 stored"
            }
            _ => "502 not here",
        }
        .to_owned(),
    )
}

/// An MLST answer for a file of `size` bytes at `path`.
pub(crate) fn mlst_file(path: &str, size: usize) -> Act {
    Act::Say(format!(
        "250-Listing {path}\n Type=file;Size={size};Modify=20260101000000; {path}\n250 End"
    ))
}
