use crate::command::Command;
use crate::opts::{Opts, RetrOpts, StripeLayout};

fn opts(line: &str) -> Opts {
    match Command::parse(line.as_bytes()) {
        Ok(Command::Opts(o)) => o,
        other => panic!("{line:?} should be OPTS, got {other:?}"),
    }
}

fn code(line: &str) -> u16 {
    match Command::parse(line.as_bytes()) {
        Ok(cmd) => panic!("{line:?} should fail, got {cmd:?}"),
        Err(err) => err.reply_code(),
    }
}

#[test]
fn retr_parallelism_uses_the_first_number() {
    let expected = Opts::Retr(RetrOpts {
        parallelism: Some(4),
        ..RetrOpts::default()
    });
    assert_eq!(opts("OPTS RETR Parallelism=4,4,4;"), expected);
    assert_eq!(opts("OPTS RETR Parallelism=4;"), expected);
    assert_eq!(opts("OPTS RETR Parallelism=4,1,8;"), expected);
}

#[test]
fn retr_items_are_case_insensitive_and_may_be_spaced() {
    assert_eq!(
        opts("opts retr STRIPELAYOUT=blocked; blocksize=1048576;  PARALLELISM=2,2,2;markers=5;"),
        Opts::Retr(RetrOpts {
            parallelism: Some(2),
            layout: Some(StripeLayout::Blocked),
            block_size: Some(1_048_576),
            markers: Some(5),
        })
    );
    assert_eq!(
        opts("OPTS RETR StripeLayout=Partitioned;"),
        Opts::Retr(RetrOpts {
            layout: Some(StripeLayout::Partitioned),
            ..RetrOpts::default()
        })
    );
}

#[test]
fn retr_items_must_end_in_semicolon_and_be_known() {
    assert_eq!(code("OPTS RETR Parallelism=4"), 501);
    assert_eq!(code("OPTS RETR Parallelism=4;BlockSize=10"), 501);
    assert_eq!(code("OPTS RETR WindowSize=1000;"), 501);
    assert_eq!(code("OPTS RETR Parallelism=x;"), 501);
    assert_eq!(code("OPTS RETR Parallelism=0;"), 501);
    assert_eq!(code("OPTS RETR BlockSize=0;"), 501);
    assert_eq!(code("OPTS RETR StripeLayout=Diagonal;"), 501);
    assert_eq!(code("OPTS RETR"), 501);
}

#[test]
fn retr_display_is_what_globus_url_copy_sends() {
    let o = Opts::Retr(RetrOpts {
        parallelism: Some(4),
        layout: Some(StripeLayout::Blocked),
        block_size: Some(1_048_576),
        markers: None,
    });
    assert_eq!(
        o.to_string(),
        "RETR Parallelism=4,4,4;StripeLayout=Blocked;BlockSize=1048576;"
    );
}

#[test]
fn cksm_markers() {
    assert_eq!(
        opts("OPTS CKSM Markers=5;"),
        Opts::Cksm { markers: Some(5) }
    );
    assert_eq!(opts("OPTS CKSM markers=5"), Opts::Cksm { markers: Some(5) });
    assert_eq!(code("OPTS CKSM Speed=5;"), 501);
    assert_eq!(
        code("OPTS CKSM ;;"),
        501,
        "an empty item list would not round-trip"
    );
}

#[test]
fn allow_delayed_for_passive_commands() {
    assert_eq!(
        opts("OPTS PASV AllowDelayed=1"),
        Opts::AllowDelayed {
            command: "PASV".into(),
            allow: true
        }
    );
    assert_eq!(
        opts("OPTS spas allowdelayed=0;"),
        Opts::AllowDelayed {
            command: "SPAS".into(),
            allow: false
        }
    );
    assert_eq!(
        opts("OPTS EPSV AllowDelayed=1").to_string(),
        "EPSV AllowDelayed=1"
    );
    assert_eq!(code("OPTS PASV AllowDelayed=2"), 501);
    assert_eq!(code("OPTS PASV Delayed=1"), 501);
}

#[test]
fn mlst_facts_are_lower_cased() {
    assert_eq!(
        opts("OPTS MLST Type;Size;Modify;UNIX.mode;"),
        Opts::Mlst(vec![
            "type".into(),
            "size".into(),
            "modify".into(),
            "unix.mode".into()
        ])
    );
    assert_eq!(
        opts("OPTS MLSD type; size"),
        Opts::Mlst(vec!["type".into(), "size".into()])
    );
    assert_eq!(opts("OPTS MLSR"), Opts::Mlst(vec![]));
    assert_eq!(
        Opts::Mlst(vec!["type".into(), "size".into()]).to_string(),
        "MLST type;size;"
    );
}

#[test]
fn utf8_on_and_off() {
    assert_eq!(opts("OPTS UTF8 ON"), Opts::Utf8(true));
    assert_eq!(opts("OPTS utf8 off"), Opts::Utf8(false));
    assert_eq!(code("OPTS UTF8 MAYBE"), 501);
    assert_eq!(code("OPTS UTF8"), 501);
}

#[test]
fn unknown_option_words_are_other() {
    assert_eq!(
        opts("OPTS stor Foo=Bar;"),
        Opts::Other {
            command: "STOR".into(),
            params: "Foo=Bar;".into()
        }
    );
    assert_eq!(code("OPTS"), 501);
}
