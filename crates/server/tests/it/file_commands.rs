//! Control-channel file management and informational commands, checked against the files
//! on disk.

use crate::common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mkd_cwd_pwd_cdup_rmd_walk_and_change_the_tree() {
    let srv = TestServer::start().await;
    let mut c = srv.login().await;
    let r = expect(&mut c, "MKD projects", 257).await;
    assert!(r.text().contains("\"/projects\""), "{r}");
    assert!(srv.path("projects").is_dir());
    expect(&mut c, "MKD projects", 550).await;
    expect(&mut c, "CWD projects", 250).await;
    let r = expect(&mut c, "PWD", 257).await;
    assert!(r.text().starts_with("\"/projects\""), "{r}");
    // Relative names now resolve inside /projects.
    expect(&mut c, "MKD sub", 257).await;
    assert!(srv.path("projects/sub").is_dir());
    expect(&mut c, "CWD sub", 250).await;
    let r = expect(&mut c, "PWD", 257).await;
    assert!(r.text().starts_with("\"/projects/sub\""), "{r}");
    expect(&mut c, "CDUP", 250).await;
    let r = expect(&mut c, "PWD", 257).await;
    assert!(r.text().starts_with("\"/projects\""), "{r}");
    expect(&mut c, "CWD /", 250).await;
    expect(&mut c, "CWD missing", 550).await;
    srv.write("plain.txt", b"x");
    expect(&mut c, "CWD plain.txt", 550).await;
    // RMD refuses a non-empty directory, then removes it once empty.
    expect(&mut c, "RMD projects", 550).await;
    expect(&mut c, "RMD projects/sub", 250).await;
    expect(&mut c, "RMD projects", 250).await;
    assert!(!srv.path("projects").exists());
    expect(&mut c, "RMD projects", 550).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dele_rnfr_rnto_size_remove_rename_and_measure_files() {
    let srv = TestServer::start().await;
    let data = random_bytes(12_345, 11);
    srv.write("a.bin", &data);
    srv.write("d/keep", b"k");
    let mut c = srv.login().await;
    let r = expect(&mut c, "SIZE a.bin", 213).await;
    assert_eq!(r.text(), "12345");
    expect(&mut c, "SIZE missing.bin", 550).await;
    expect(&mut c, "RNFR a.bin", 350).await;
    expect(&mut c, "RNTO d/b.bin", 250).await;
    assert!(!srv.path("a.bin").exists());
    assert_eq!(srv.read("d/b.bin"), data);
    expect(&mut c, "RNTO e.bin", 503).await;
    expect(&mut c, "RNFR missing.bin", 550).await;
    expect(&mut c, "DELE d/b.bin", 250).await;
    assert!(!srv.path("d/b.bin").exists());
    expect(&mut c, "DELE d/b.bin", 550).await;
    expect(&mut c, "DELE d", 550).await;
    assert!(srv.path("d/keep").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mdtm_mfmt_and_site_utime_read_and_set_modification_times() {
    let srv = TestServer::start().await;
    srv.write("t.txt", b"time");
    let mut c = srv.login().await;
    let r = expect(&mut c, "MDTM t.txt", 213).await;
    let now = r.text();
    assert_eq!(now.len(), 14, "YYYYMMDDHHMMSS: {r}");
    assert!(now.bytes().all(|b| b.is_ascii_digit()), "{r}");
    ok(&mut c, "MFMT 20210304050607 t.txt").await;
    let r = expect(&mut c, "MDTM t.txt", 213).await;
    assert_eq!(r.text(), "20210304050607");
    // 2021-03-04 05:06:07 UTC
    assert_eq!(
        std::fs::metadata(srv.path("t.txt")).unwrap().mtime(),
        1_614_834_367
    );
    expect(&mut c, "SITE UTIME 19991231235959 t.txt", 250).await;
    let r = expect(&mut c, "MDTM t.txt", 213).await;
    assert_eq!(r.text(), "19991231235959");
    assert_eq!(
        std::fs::metadata(srv.path("t.txt")).unwrap().mtime(),
        946_684_799
    );
    expect(&mut c, "MDTM missing.txt", 550).await;
    expect(&mut c, "MFMT 20210304050607 missing.txt", 550).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mlst_and_stat_describe_files_and_directories() {
    let srv = TestServer::start().await;
    srv.write("docs/readme.txt", b"0123456789");
    srv.write("docs/notes.txt", b"abc");
    let mut c = srv.login().await;
    let r = expect(&mut c, "MLST docs/readme.txt", 250).await;
    assert!(r.lines.len() >= 3, "multi-line: {r}");
    let facts = &r.lines[1];
    assert!(facts.starts_with(' '), "fact line starts with a space: {r}");
    assert!(facts.contains("Type=file;"), "{r}");
    assert!(facts.contains("Size=10;"), "{r}");
    assert!(facts.contains("Modify="), "{r}");
    assert!(facts.ends_with(" docs/readme.txt"), "{r}");
    let r = expect(&mut c, "MLST docs", 250).await;
    assert!(r.lines[1].contains("Type=dir;"), "{r}");
    expect(&mut c, "MLST nothing-here", 550).await;

    let r = expect(&mut c, "STAT docs/readme.txt", 213).await;
    assert!(r.lines.len() >= 3, "{r}");
    assert!(r.lines[1].ends_with("readme.txt"), "{r}");
    assert!(r.lines[1].contains(" 10 "), "size in the LIST line: {r}");
    let r = expect(&mut c, "STAT docs", 213).await;
    let body = r.text();
    assert!(
        body.contains("readme.txt") && body.contains("notes.txt"),
        "{r}"
    );
    expect(&mut c, "STAT", 212).await;
    expect(&mut c, "STAT nothing-here", 550).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn site_chmod_symlink_and_rdel_change_the_tree() {
    let srv = TestServer::start().await;
    srv.write("f.txt", b"file");
    srv.write("tree/a/b/c.txt", b"deep");
    srv.write("tree/x.txt", b"x");
    let mut c = srv.login().await;

    expect(&mut c, "SITE CHMOD 640 f.txt", 250).await;
    let mode = std::fs::metadata(srv.path("f.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o640);
    expect(&mut c, "SITE CHMOD 755 f.txt", 250).await;
    let mode = std::fs::metadata(srv.path("f.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
    let r = cmd(&mut c, "SITE CHMOD 9z9 f.txt").await;
    assert_eq!(r.code, 501, "{r}");
    expect(&mut c, "SITE CHMOD 600 missing.txt", 550).await;

    expect(&mut c, "SITE SYMLINK f.txt link1", 250).await;
    assert_eq!(
        std::fs::read_link(srv.path("link1")).unwrap(),
        std::path::Path::new("f.txt")
    );
    expect(&mut c, "SITE SYMLINKTO nofrom", 503).await;
    expect(&mut c, "SITE SYMLINKFROM f.txt", 350).await;
    expect(&mut c, "SITE SYMLINKTO link2", 250).await;
    assert_eq!(
        std::fs::read_link(srv.path("link2")).unwrap(),
        std::path::Path::new("f.txt")
    );
    // Links inside the root are followed.
    let r = expect(&mut c, "SIZE link2", 213).await;
    assert_eq!(r.text(), "4");
    expect(&mut c, "SITE SYMLINK f.txt link1", 550).await;

    expect(&mut c, "SITE RDEL tree", 250).await;
    assert!(!srv.path("tree").exists());
    expect(&mut c, "SITE RDEL tree", 550).await;
    assert_eq!(srv.read("f.txt"), b"file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn site_informational_commands_answer() {
    let srv = TestServer::start().await;
    let mut c = srv.login().await;
    let r = expect(&mut c, "SITE WHOAMI", 200).await;
    assert_eq!(r.text(), USER);
    let r = expect(&mut c, "SITE VERSION", 200).await;
    assert!(r.text().contains(ferry_server::VERSION), "{r}");
    expect(
        &mut c,
        "SITE CLIENTINFO scheme=gsiftp;appname=\"ferry tests\";appver=\"1.0\";",
        250,
    )
    .await;
    expect(&mut c, "SITE TASKID 1234-abcd", 250).await;
    let r = expect(&mut c, "SITE HELP", 214).await;
    assert!(r.lines.len() > 3, "{r}");
    assert!(r.text().contains("CHMOD"), "{r}");
    let r = cmd(&mut c, "SITE FROBNICATE now").await;
    assert_eq!(r.code, 500, "{r}");
    let mut anon = srv.login_anonymous().await;
    let r = expect(&mut anon, "SITE WHOAMI", 200).await;
    assert_eq!(r.text(), "anonymous");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn help_feat_and_syst_describe_the_server() {
    let srv = TestServer::start().await;
    let mut c = srv.login().await;
    let r = expect(&mut c, "HELP", 214).await;
    assert!(r.lines.len() > 3, "{r}");
    for verb in ["RETR", "STOR", "ERET", "ESTO", "CKSM", "MLSD", "SITE"] {
        assert!(r.text().contains(verb), "HELP lists {verb}: {r}");
    }
    expect(&mut c, "HELP RETR", 214).await;
    expect(&mut c, "HELP BOGUS", 502).await;

    let r = expect(&mut c, "FEAT", 211).await;
    let feats: Vec<String> = r.lines[1..r.lines.len() - 1]
        .iter()
        .map(|l| l.trim().to_string())
        .collect();
    for name in [
        "CKSM", "ERET", "ESTO", "PARALLEL", "SPAS", "SPOR", "MLST", "SIZE", "MDTM",
    ] {
        assert!(
            feats
                .iter()
                .any(|f| f == name || f.starts_with(&format!("{name} "))),
            "FEAT advertises {name}: {r}"
        );
    }
    let cksm = feats.iter().find(|f| f.starts_with("CKSM ")).unwrap();
    for alg in ["MD5", "ADLER32", "CRC32C", "SHA256"] {
        assert!(
            cksm.contains(&format!("{alg}:")),
            "CKSM lists {alg}: {cksm}"
        );
    }
    let r = expect(&mut c, "SYST", 215).await;
    assert_eq!(r.text(), "UNIX Type: L8");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_commands_are_accepted() {
    let srv = TestServer::start().await;
    let mut c = srv.login().await;
    expect(&mut c, "NOOP", 200).await;
    expect(&mut c, "ALLO 1048576", 200).await;
    expect(&mut c, "SBUF 1048576", 200).await;
    expect(&mut c, "SITE BUFSIZE 1048576", 200).await;
    expect(&mut c, "SITE RETRBUFSIZE 262144", 200).await;
    expect(&mut c, "SITE STORBUFSIZE 262144", 200).await;
    expect(&mut c, "OPTS RETR Parallelism=4,4,4;", 200).await;
    expect(&mut c, "OPTS RETR Parallelism=4;", 200).await;
    expect(&mut c, "TREV RESTART 5", 200).await;
    expect(&mut c, "TREV PERF 5", 200).await;
    expect(&mut c, "TYPE I", 200).await;
    expect(&mut c, "TYPE A", 200).await;
    expect(&mut c, "MODE E", 200).await;
    expect(&mut c, "MODE S", 200).await;
    expect(&mut c, "STRU F", 200).await;
    expect(&mut c, "DCAU N", 200).await;
    expect(&mut c, "PROT C", 200).await;
    expect(&mut c, "PBSZ 0", 200).await;
    expect(&mut c, "ABOR", 226).await;
    let r = cmd(&mut c, "MODE B").await;
    assert!(r.code == 501 || r.code == 504, "{r}");
    let r = cmd(&mut c, "TYPE X").await;
    assert!(r.code == 501 || r.code == 504, "{r}");
    let r = cmd(&mut c, "SBUF lots").await;
    assert_eq!(r.code, 501, "{r}");
    // The settings leave a transfer working.
    let data = random_bytes(200_000, 12);
    srv.write("after.bin", &data);
    let (got, n) = client_get(&mut c, "after.bin", 3).await;
    assert_eq!(got, data);
    assert_eq!(n, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_spaces_quotes_and_non_ascii_letters_work() {
    let srv = TestServer::start().await;
    let mut c = srv.login().await;
    let r = expect(&mut c, "MKD say \"hi\"", 257).await;
    assert!(
        r.text().contains("\"/say \"\"hi\"\"\""),
        "quotes doubled: {r}"
    );
    assert!(srv.path("say \"hi\"").is_dir());
    expect(&mut c, "MKD Grüße dir", 257).await;
    assert!(srv.path("Grüße dir").is_dir());
    expect(&mut c, "CWD Grüße dir", 250).await;
    let r = expect(&mut c, "PWD", 257).await;
    assert!(r.text().starts_with("\"/Grüße dir\""), "{r}");
    let data = random_bytes(10_000, 13);
    client_put(&mut c, &data, "my file .bin", 2).await.unwrap();
    assert!(
        srv.read("Grüße dir/my file .bin") == data,
        "trailing space kept"
    );
    let r = expect(&mut c, "SIZE my file .bin", 213).await;
    assert_eq!(r.text(), "10000");
    let (got, _) = client_get(&mut c, "/Grüße dir/my file .bin", 1).await;
    assert!(got == data);
}
