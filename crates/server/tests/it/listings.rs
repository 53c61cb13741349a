//! LIST, NLST and MLSD over a data channel.

use crate::common;

use std::collections::BTreeSet;

use common::*;
use ferry_client::ControlClient;

async fn listing(c: &mut ControlClient, line: &str) -> String {
    let addr = pasv(c).await;
    let mut conn = data_connect(addr).await;
    start_transfer(c, line).await;
    let got = read_all(&mut conn).await;
    expect_final(c, 226).await;
    let text = String::from_utf8(got).expect("listing is UTF-8");
    assert!(
        text.is_empty() || text.ends_with("\r\n"),
        "lines end CRLF: {text:?}"
    );
    assert!(
        !text.replace("\r\n", "").contains('\n'),
        "every line ends CRLF: {text:?}"
    );
    text
}

async fn fixture() -> TestServer {
    let srv = TestServer::start().await;
    srv.write("alpha.txt", b"aaaa");
    srv.write("beta.bin", &random_bytes(1234, 41));
    srv.write("gamma/inner.txt", b"i");
    srv.write("with space.txt", b"s");
    srv
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nlst_lists_exactly_the_names() {
    let srv = fixture().await;
    let mut c = srv.login().await;
    let text = listing(&mut c, "NLST").await;
    let names: BTreeSet<&str> = text.lines().collect();
    let want: BTreeSet<&str> = ["alpha.txt", "beta.bin", "gamma", "with space.txt"].into();
    assert_eq!(names, want);
    let text = listing(&mut c, "NLST gamma").await;
    assert_eq!(text, "inner.txt\r\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_one_line_per_entry_with_type_and_size() {
    let srv = fixture().await;
    let mut c = srv.login().await;
    let text = listing(&mut c, "LIST").await;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    let line_of = |name: &str| {
        *lines
            .iter()
            .find(|l| l.ends_with(&format!(" {name}")))
            .unwrap_or_else(|| panic!("{name} in LIST: {text}"))
    };
    assert!(line_of("gamma").starts_with('d'), "{text}");
    assert!(line_of("alpha.txt").starts_with('-'), "{text}");
    assert!(line_of("beta.bin").contains(" 1234 "), "{text}");
    line_of("with space.txt");
    // LIST of a file lists that file; `-l` style flags are ignored.
    let text = listing(&mut c, "LIST -l alpha.txt").await;
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.trim_end().ends_with(" alpha.txt"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mlsd_lines_carry_type_facts_and_names() {
    let srv = fixture().await;
    let mut c = srv.login().await;
    let text = listing(&mut c, "MLSD").await;
    let mut by_name = std::collections::BTreeMap::new();
    for line in text.lines() {
        let (facts, name) = line
            .split_once(' ')
            .unwrap_or_else(|| panic!("'facts name': {line}"));
        assert!(facts.contains("Type="), "Type fact in {line}");
        assert!(facts.ends_with(';'), "facts end with ';': {line}");
        by_name.insert(name.to_string(), facts.to_string());
    }
    assert!(by_name["."].contains("Type=cdir;"), "{text}");
    assert!(by_name["alpha.txt"].contains("Type=file;"), "{text}");
    assert!(by_name["alpha.txt"].contains("Size=4;"), "{text}");
    assert!(by_name["gamma"].contains("Type=dir;"), "{text}");
    assert!(by_name.contains_key("with space.txt"), "{text}");
    assert!(by_name.contains_key("beta.bin"), "{text}");
    assert_eq!(by_name.len(), 5, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_a_missing_directory_fails_with_550() {
    let srv = fixture().await;
    let mut c = srv.login().await;
    for line in ["LIST nowhere", "NLST nowhere", "MLSD nowhere"] {
        pasv(&mut c).await;
        let r = cmd(&mut c, line).await;
        let code = if r.is_preliminary() {
            final_reply(&mut c).await.1.code
        } else {
            r.code
        };
        assert_eq!(code, 550, "'{line}'");
    }
    expect(&mut c, "NOOP", 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opts_mlst_selects_the_facts_mlsd_and_mlst_show() {
    let srv = fixture().await;
    let mut c = srv.login().await;
    expect(&mut c, "OPTS MLST Type;Size;", 200).await;
    let text = listing(&mut c, "MLSD").await;
    for line in text.lines() {
        let (facts, _) = line.split_once(' ').unwrap();
        for fact in facts.split(';').filter(|f| !f.is_empty()) {
            let name = fact.split('=').next().unwrap().to_ascii_lowercase();
            assert!(
                name == "type" || name == "size",
                "only Type and Size: {line}"
            );
        }
    }
    let r = expect(&mut c, "MLST alpha.txt", 250).await;
    assert_eq!(r.lines[1].trim(), "Type=file;Size=4; alpha.txt", "{r}");
}
