use crate::command::{Command, CommandError};
use crate::site::SiteCommand;

fn site(line: &str) -> SiteCommand {
    match Command::parse(line.as_bytes()) {
        Ok(Command::Site(s)) => s,
        other => panic!("{line:?} should be a SITE command, got {other:?}"),
    }
}

fn code(line: &str) -> u16 {
    match Command::parse(line.as_bytes()) {
        Ok(cmd) => panic!("{line:?} should fail, got {cmd:?}"),
        Err(err) => err.reply_code(),
    }
}

#[test]
fn buffer_size_aliases() {
    assert_eq!(site("SITE SBUF 1048576"), SiteCommand::BufSize(1_048_576));
    assert_eq!(site("site bufsize 10"), SiteCommand::BufSize(10));
    for alias in ["RETRBUFSIZE", "RBUFSZ", "RBUFSIZ"] {
        assert_eq!(
            site(&format!("SITE {alias} 7")),
            SiteCommand::RetrBufSize(7)
        );
    }
    for alias in ["STORBUFSIZE", "SBUFSZ", "SBUFSIZ"] {
        assert_eq!(
            site(&format!("SITE {alias} 7")),
            SiteCommand::StorBufSize(7)
        );
    }
    assert_eq!(code("SITE SBUF lots"), 501);
}

#[test]
fn block_size_takes_a_byte_count() {
    assert_eq!(
        site("SITE BLOCKSIZE 524288"),
        SiteCommand::BlockSize(524_288)
    );
    assert_eq!(site("site blocksize 0"), SiteCommand::BlockSize(0));
    assert_eq!(code("SITE BLOCKSIZE big"), 501);
    assert_eq!(code("SITE BLOCKSIZE"), 501);
}

#[test]
fn chmod_is_octal() {
    assert_eq!(
        site("SITE CHMOD 0755 /a b"),
        SiteCommand::Chmod {
            mode: 0o755,
            path: "/a b".into()
        }
    );
    assert_eq!(code("SITE CHMOD 0855 /a"), 501);
    assert_eq!(code("SITE CHMOD 755"), 501);
    assert_eq!(
        SiteCommand::Chmod {
            mode: 0o644,
            path: "/x".into()
        }
        .to_string(),
        "CHMOD 644 /x"
    );
}

#[test]
fn utime_globus_form() {
    assert_eq!(
        site("SITE UTIME 20240101000000 /my file"),
        SiteCommand::Utime {
            mtime: 1_704_067_200,
            path: "/my file".into()
        }
    );
}

#[test]
fn utime_wu_ftpd_form() {
    assert_eq!(
        site("SITE UTIME /my file 20230101000000 20240101000000 20230101000000 UTC"),
        SiteCommand::Utime {
            mtime: 1_704_067_200,
            path: "/my file".into()
        }
    );
    assert_eq!(
        code("SITE UTIME /f 20230101000000 20240101000000 20230101000000 CET"),
        501
    );
    assert_eq!(code("SITE UTIME /f"), 501);
    assert_eq!(code("SITE UTIME 20231301000000 /f"), 501);
}

#[test]
fn setdcstack_is_an_alias_of_setnetstack() {
    assert_eq!(
        site("SITE SETDCSTACK tcp,gsi"),
        SiteCommand::SetNetStack("tcp,gsi".into())
    );
    assert_eq!(
        site("SITE SETNETSTACK udt"),
        SiteCommand::SetNetStack("udt".into())
    );
    assert_eq!(
        site("SITE SETDISKSTACK file"),
        SiteCommand::SetDiskStack("file".into())
    );
}

#[test]
fn symlink_forms() {
    assert_eq!(
        site("SITE SYMLINK target /the link"),
        SiteCommand::Symlink {
            target: "target".into(),
            link: "/the link".into()
        }
    );
    assert_eq!(
        site("SITE SYMLINKFROM /a"),
        SiteCommand::SymlinkFrom("/a".into())
    );
    assert_eq!(
        site("SITE SYMLINKTO /b"),
        SiteCommand::SymlinkTo("/b".into())
    );
    assert_eq!(code("SITE SYMLINK onlyone"), 501);
}

#[test]
fn informational_and_simple_subcommands() {
    assert_eq!(
        site("SITE CLIENTINFO scheme=gsiftp;appname=\"globus-url-copy\";appver=\"10.4\";"),
        SiteCommand::ClientInfo(
            "scheme=gsiftp;appname=\"globus-url-copy\";appver=\"10.4\";".into()
        )
    );
    assert_eq!(site("SITE TASKID 42"), SiteCommand::TaskId("42".into()));
    assert_eq!(site("SITE WHOAMI"), SiteCommand::Whoami);
    assert_eq!(site("SITE VERSION"), SiteCommand::Version);
    assert_eq!(site("SITE STATUS"), SiteCommand::Status);
    assert_eq!(site("SITE HELP"), SiteCommand::Help);
    assert_eq!(site("SITE HELP CHMOD"), SiteCommand::Help);
    assert_eq!(site("SITE RDEL /tree"), SiteCommand::Rdel("/tree".into()));
    assert_eq!(code("SITE WHOAMI me"), 501);
    assert_eq!(code("SITE"), 501);
}

#[test]
fn unknown_subcommands_are_other() {
    assert_eq!(
        site("SITE trnc 10 /f g"),
        SiteCommand::Other {
            name: "TRNC".into(),
            args: "10 /f g".into()
        }
    );
    assert_eq!(
        site("SITE FAULT"),
        SiteCommand::Other {
            name: "FAULT".into(),
            args: String::new()
        }
    );
}

#[test]
fn errors_name_the_subcommand() {
    let err = Command::parse(b"SITE CHMOD x /a").expect_err("bad mode");
    assert!(matches!(err, CommandError::BadArguments { ref verb, .. } if verb == "SITE CHMOD"));
}
