//! A TOML configuration with every key loads and a server started from it honours the keys.

use crate::common;

use std::net::SocketAddr;

use common::*;
use ferry_server::{Server, ServerConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_toml_file_with_every_key_starts_a_server_that_honours_it() {
    let base = tempfile::tempdir().unwrap();
    // base_config writes the root and the password file; the TOML names them.
    let defaults = base_config(base.path());
    let root = defaults.root.clone();
    let passwd = defaults.password_file.clone().unwrap();
    let log = base.path().join("xfer.log");
    let toml = format!(
        r#"
listen = "127.0.0.1:0"
root = "{root}"
anonymous = true
anonymous-write = true
password-file = "{passwd}"
port-range = "41000-41999"
connections-max = 3
control-idle-timeout = 30
control-preauth-timeout = 10
data-idle-timeout = 20
log-transfer = "{log}"
block-size = 65536
net-stack-whitelist = ["tcp"]
fs-whitelist = ["file"]
banner = "Welcome to the ferry test server"
allow-root-sessions = true
anonymous-user = "{me}"
"#,
        root = root.display(),
        passwd = passwd.display(),
        log = log.display(),
        me = ferry_storage::Identity::of_process().unwrap().name,
    );
    let file = base.path().join("ferry.toml");
    std::fs::write(&file, toml).unwrap();
    let cfg = ServerConfig::from_toml_file(&file).expect("config loads");
    cfg.validate().expect("config is valid");
    assert_eq!(cfg.root, root);
    assert!(cfg.anonymous && cfg.anonymous_write);
    assert_eq!(cfg.password_file.as_deref(), Some(passwd.as_path()));
    let range = cfg.port_range.expect("port range");
    assert_eq!((range.lo, range.hi), (41000, 41999));
    assert_eq!(cfg.connections_max, 3);
    assert_eq!(cfg.control_idle_timeout, 30);
    assert_eq!(cfg.control_preauth_timeout, 10);
    assert_eq!(cfg.data_idle_timeout, 20);
    assert_eq!(cfg.log_transfer.as_deref(), Some(log.as_path()));
    assert_eq!(cfg.block_size, Some(65536));
    // The old key still names the data-channel whitelist.
    assert_eq!(cfg.dc_whitelist, ["tcp"]);
    assert_eq!(cfg.fs_whitelist, ["file"]);

    let server = Server::bind(cfg).await.expect("server starts");
    let addr: SocketAddr = server.local_addr().unwrap();
    let task = tokio::spawn(server.run());

    // The banner key sets the 220 text.
    let stream = within("connect", tokio::net::TcpStream::connect(addr))
        .await
        .unwrap();
    let mut reader = tokio::io::BufReader::new(stream);
    let mut line = String::new();
    within(
        "banner",
        tokio::io::AsyncBufReadExt::read_line(&mut reader, &mut line),
    )
    .await
    .unwrap();
    assert_eq!(line, "220 Welcome to the ferry test server\r\n");
    drop(reader);

    let mut c = within("connect", ferry_client::ControlClient::connect(addr))
        .await
        .unwrap();
    within("login", c.login(USER, PASSWORD)).await.unwrap();
    // The passive port comes from the range.
    let data_addr = pasv(&mut c).await;
    assert!((41000..=41999).contains(&data_addr.port()), "{data_addr}");
    // A transfer lands in the log.
    let data = random_bytes(100_000, 111);
    client_put(&mut c, &data, "cfg.bin", 2).await.unwrap();
    assert!(std::fs::read(root.join("cfg.bin")).unwrap() == data);
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    // Anonymous users may write.
    let mut anon = within("connect", ferry_client::ControlClient::connect(addr))
        .await
        .unwrap();
    within("anonymous login", anon.login("anonymous", "x@y"))
        .await
        .unwrap();
    expect(&mut anon, "MKD anon-dir", 257).await;
    task.abort();
}

#[test]
fn unknown_keys_and_bad_values_in_a_toml_file_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        "bogus-key = 1\n",
        "port-range = \"9-1-2\"\n",
        "listen = \"not an address\"\n",
        "connections-max = \"many\"\n",
    ];
    for text in cases {
        let f = dir.path().join("bad.toml");
        std::fs::write(&f, text).unwrap();
        assert!(
            ServerConfig::from_toml_file(&f).is_err(),
            "should be refused: {text}"
        );
    }
    assert!(ServerConfig::from_toml_file(&dir.path().join("missing.toml")).is_err());
    // Values that parse but do not make sense together are refused by validate().
    let f = dir.path().join("invalid.toml");
    std::fs::write(&f, "anonymous = false\n").unwrap();
    let cfg = ServerConfig::from_toml_file(&f).unwrap();
    assert!(cfg.validate().is_err(), "no way to log in");
    std::fs::write(&f, "anonymous = true\nblock-size = 100\n").unwrap();
    let cfg = ServerConfig::from_toml_file(&f).unwrap();
    assert!(cfg.validate().is_err(), "block size too small");
}

#[test]
fn check_config_reports_what_it_loaded_without_binding_or_writing() {
    let base = tempfile::tempdir().unwrap();
    let mut config = base_config(base.path());
    // A port someone else holds: a start would fail, a check does not bind.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    config.listen = taken.local_addr().unwrap();
    config.anonymous = true;
    let log = base.path().join("logs").join("xfer.log");
    std::fs::create_dir(base.path().join("logs")).unwrap();
    config.log_transfer = Some(log.clone());
    config.dc_whitelist = vec!["tcp".into(), "gsi".into(), "rate".into()];
    let report = Server::check_config(&config, &ferry_server::Drivers::default()).unwrap();
    let all = report.checked.join("\n");
    for expected in [
        "single server",
        "root ",
        "anonymous logins, read-only",
        "users",
    ] {
        assert!(all.contains(expected), "{expected:?} not in {all}");
    }
    assert!(all.contains("will be created"), "{all}");
    assert!(!log.exists(), "the check created the transfer log");
    assert_eq!(
        report.warnings,
        ["--dc-whitelist names 'rate', which this build does not have"]
    );
}

#[test]
fn check_config_finds_what_a_start_would_refuse() {
    let base = tempfile::tempdir().unwrap();
    let good = base_config(base.path());
    let check = |c: &ServerConfig| {
        Server::check_config(c, &ferry_server::Drivers::default())
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    check(&good).unwrap();

    let missing_root = ServerConfig {
        root: base.path().join("nowhere"),
        ..good.clone()
    };
    assert!(check(&missing_root).unwrap_err().contains("nowhere"));

    let missing_passwords = ServerConfig {
        password_file: Some(base.path().join("no-such-passwd")),
        ..good.clone()
    };
    assert!(check(&missing_passwords)
        .unwrap_err()
        .contains("no-such-passwd"));

    let log_nowhere = ServerConfig {
        log_transfer: Some(base.path().join("no-dir").join("xfer.log")),
        ..good.clone()
    };
    assert!(check(&log_nowhere).unwrap_err().contains("no-dir"));

    let gsi_without_credential = ServerConfig {
        gsi: true,
        host_cert: Some(base.path().join("no-hostcert.pem")),
        host_key: Some(base.path().join("no-hostkey.pem")),
        ..good.clone()
    };
    assert!(check(&gsi_without_credential)
        .unwrap_err()
        .contains("no-hostcert.pem"));

    let no_login = ServerConfig {
        anonymous: false,
        password_file: None,
        gsi: false,
        ..good
    };
    assert!(check(&no_login).unwrap_err().contains("no way to log in"));
}
