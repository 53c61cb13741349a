//! `ferry ca` and `ferry proxy init | info | destroy`, end to end, checked with the Globus tools
//! where they are installed.

use std::path::Path;
use std::process::{Command, Output};

fn ferry(args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ferry"));
    c.args(args)
        .env_remove("X509_USER_PROXY")
        .env_remove("X509_CERT_DIR");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_throw_away_ca_gives_a_proxy_that_info_and_globus_accept_and_destroy_removes() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = tmp.path().join("ca");
    let out = ferry(
        &[
            "ca",
            ca.to_str().unwrap(),
            "--host",
            "localhost",
            "--user",
            "Test User:nobody",
            "--days",
            "2",
        ],
        &[],
    );
    assert!(out.status.success(), "{}", text(&out));
    let certs = ca.join("certificates");
    assert!(std::fs::read_dir(&certs).unwrap().any(|e| e
        .unwrap()
        .path()
        .extension()
        .is_some_and(|x| x == "signing_policy")));
    let gridmap = std::fs::read_to_string(ca.join("grid-mapfile")).unwrap();
    assert!(gridmap.contains("/CN=Test User\" nobody"), "{gridmap}");

    // Issuing again reuses the CA: the trusted directory still holds one CA.
    let again = ferry(&["ca", ca.to_str().unwrap(), "--user", "Second"], &[]);
    assert!(again.status.success(), "{}", text(&again));
    assert_eq!(
        std::fs::read_dir(&certs).unwrap().count(),
        2,
        "one <hash>.0 and its policy"
    );

    let user = ca.join("users/Test User");
    let proxy = tmp.path().join("x509up");
    let init = ferry(
        &[
            "proxy",
            "init",
            "--cert",
            user.join("usercert.pem").to_str().unwrap(),
            "--key",
            user.join("userkey.pem").to_str().unwrap(),
            "--out",
            proxy.to_str().unwrap(),
            "--valid",
            "2:00",
        ],
        &[("X509_CERT_DIR", &certs)],
    );
    assert!(init.status.success(), "{}", text(&init));
    assert!(
        text(&init).contains("Your identity: /O=Grid/OU=ferry-"),
        "{}",
        text(&init)
    );

    let info = ferry(
        &["proxy", "info", "-f", proxy.to_str().unwrap(), "--json"],
        &[],
    );
    assert!(info.status.success(), "{}", text(&info));
    let v: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(v["type"], "RFC 3820 compliant impersonation proxy");
    assert!(v["identity"].as_str().unwrap().ends_with("/CN=Test User"));
    let left = v["timeleft_s"].as_i64().unwrap();
    assert!((7000..=7200).contains(&left), "{left}");

    let exists = |valid: &str| {
        ferry(
            &[
                "proxy",
                "info",
                "-f",
                proxy.to_str().unwrap(),
                "-e",
                "--valid",
                valid,
            ],
            &[],
        )
        .status
        .code()
    };
    assert_eq!(exists("1:00"), Some(0));
    assert_eq!(exists("3:00"), Some(1), "two hours do not cover three");

    if let Ok(g) = Command::new("grid-proxy-info")
        .arg("-file")
        .arg(&proxy)
        .arg("-all")
        .output()
    {
        let t = text(&g);
        assert!(
            g.status.success() && t.contains("RFC 3820 compliant impersonation proxy"),
            "{t}"
        );
    } else {
        eprintln!("skipping the grid-proxy-info check: not installed (apt-get install globus-proxy-utils)");
    }

    let gone = ferry(&["proxy", "destroy", "-f", proxy.to_str().unwrap()], &[]);
    assert!(gone.status.success(), "{}", text(&gone));
    assert!(!proxy.exists());
    assert_eq!(exists("0:00"), Some(1));
}

#[test]
fn proxy_init_refuses_a_certificate_the_cas_do_not_trust() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for d in [&a, &b] {
        let out = ferry(&["ca", d.to_str().unwrap(), "--user", "U"], &[]);
        assert!(out.status.success(), "{}", text(&out));
    }
    let user = a.join("users/U");
    let out = ferry(
        &[
            "proxy",
            "init",
            "--cert",
            user.join("usercert.pem").to_str().unwrap(),
            "--key",
            user.join("userkey.pem").to_str().unwrap(),
            "--out",
            tmp.path().join("p").to_str().unwrap(),
        ],
        &[("X509_CERT_DIR", &b.join("certificates"))],
    );
    assert!(!out.status.success());
    assert!(text(&out).contains("does not verify"), "{}", text(&out));
    assert!(!tmp.path().join("p").exists(), "no proxy written");
}
