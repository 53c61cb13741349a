//! Misbehaving HTTP servers for the unhappy paths of third-party copies: a Python script on
//! loopback whose `handle(c, head)` answers each connection (`c`, a socket; `head`, the request
//! line and headers as bytes), one connection at a time, each closed after. Killed when dropped.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A running scripted server.
pub struct PySource {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

impl Drop for PySource {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl PySource {
    /// Runs `handler` (Python defining `handle(c, head)`, and whatever it needs; `PORT` is its
    /// own port) in `dir`.
    pub fn start(dir: &Path, handler: &str) -> PySource {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let script = format!(
            r#"
import socket, sys, time, threading
PORT = {port}
{handler}
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", {port})); s.listen(16)
print("ready", flush=True)
def serve(c):
    try:
        f = c.makefile("rb")
        head = b""
        while True:
            line = f.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            head += line
        handle(c, head)
        f.close()
    except OSError:
        pass
    finally:
        c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#
        );
        let path = dir.join(format!("source-{port}.py"));
        std::fs::write(&path, script).unwrap();
        let mut child = Command::new("python3")
            .arg(&path)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready", "the scripted source did not start");
        PySource { child, port }
    }

    /// The URL of `/f` on it.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/f", self.port)
    }
}
