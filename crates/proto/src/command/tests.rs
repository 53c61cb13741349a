use std::net::SocketAddr;

use super::*;
use crate::opts::{RetrOpts, StripeLayout};

fn parse(line: &str) -> Result<Command, CommandError> {
    Command::parse(line.as_bytes())
}

fn ok(line: &str) -> Command {
    match parse(line) {
        Ok(cmd) => cmd,
        Err(err) => panic!("{line:?} should parse: {err}"),
    }
}

fn code(line: &str) -> u16 {
    match parse(line) {
        Ok(cmd) => panic!("{line:?} should fail, got {cmd:?}"),
        Err(err) => err.reply_code(),
    }
}

fn hp(s: &str) -> HostPort {
    HostPort(s.parse::<SocketAddr>().expect("test address"))
}

#[test]
fn line_ends_are_optional() {
    assert_eq!(ok("NOOP\r\n"), Command::Noop);
    assert_eq!(ok("NOOP\n"), Command::Noop);
    assert_eq!(ok("NOOP"), Command::Noop);
}

#[test]
fn verb_is_case_insensitive_and_upper_cased() {
    assert_eq!(ok("retr /x"), Command::Retr("/x".into()));
    assert_eq!(ok("rEtR /x").verb(), "RETR");
    assert_eq!(parse("frob x"), Err(CommandError::Unknown("FROB".into())));
}

#[test]
fn over_long_line_is_too_long() {
    let line = format!("RETR {}\r\n", "a".repeat(MAX_COMMAND_LINE));
    assert_eq!(parse(&line), Err(CommandError::TooLong));
    let fits = format!("RETR {}\r\n", "a".repeat(MAX_COMMAND_LINE - 7));
    assert!(parse(&fits).is_ok());
}

#[test]
fn non_utf8_and_control_characters_are_not_text() {
    assert_eq!(Command::parse(b"RETR \xff\r\n"), Err(CommandError::NotText));
    assert_eq!(parse("RETR a\tb"), Err(CommandError::NotText));
    assert_eq!(parse("RETR a\rb\r\n"), Err(CommandError::NotText));
    assert_eq!(parse("RETR a\0"), Err(CommandError::NotText));
    assert_eq!(parse("RETR a\r\n\r\n"), Err(CommandError::NotText));
}

#[test]
fn empty_line_or_bad_verb_is_malformed() {
    assert_eq!(parse("\r\n"), Err(CommandError::Malformed));
    assert_eq!(parse(" NOOP"), Err(CommandError::Malformed));
    assert_eq!(parse("RE7R x"), Err(CommandError::Malformed));
    assert_eq!(code("é x"), 500);
}

#[test]
fn path_takes_the_rest_of_the_line_with_spaces() {
    assert_eq!(ok("RETR my file\r\n"), Command::Retr("my file".into()));
    assert_eq!(
        ok("STOR   two  spaces  \r\n"),
        Command::Stor("two  spaces  ".into())
    );
    assert_eq!(ok("CWD /a b/c"), Command::Cwd("/a b/c".into()));
}

#[test]
fn missing_or_extra_arguments_are_501() {
    for line in [
        "RETR",
        "RETR   ",
        "USER",
        "SIZE",
        "MFMT 20200101000000",
        "CKSM MD5 0 -1",
    ] {
        assert_eq!(code(line), 501, "{line}");
    }
    for line in ["NOOP x", "PASV 1", "FEAT all", "CDUP ..", "QUIT now"] {
        assert_eq!(code(line), 501, "{line}");
    }
    assert_eq!(ok("NOOP   "), Command::Noop);
}

#[test]
fn pass_may_be_empty() {
    assert_eq!(ok("PASS"), Command::Pass(String::new()));
    assert_eq!(ok("PASS dummy"), Command::Pass("dummy".into()));
    assert_eq!(Command::Pass(String::new()).to_string(), "PASS");
}

#[test]
fn type_accepts_a_an_i_and_l8() {
    assert_eq!(ok("TYPE A"), Command::Type(TransferType::Ascii));
    assert_eq!(ok("TYPE a n"), Command::Type(TransferType::Ascii));
    assert_eq!(ok("TYPE I"), Command::Type(TransferType::Image));
    assert_eq!(ok("TYPE L 8"), Command::Type(TransferType::Image));
    assert_eq!(code("TYPE E"), 504);
    assert_eq!(code("TYPE A T"), 504);
    assert_eq!(code("TYPE L 7"), 504);
    assert_eq!(code("TYPE X"), 501);
    assert_eq!(code("TYPE"), 501);
}

#[test]
fn mode_accepts_stream_and_extended_only() {
    assert_eq!(ok("MODE E"), Command::Mode(TransferMode::Extended));
    assert_eq!(ok("mode s"), Command::Mode(TransferMode::Stream));
    assert_eq!(code("MODE B"), 504);
    assert_eq!(code("MODE C"), 504);
    assert_eq!(code("MODE Q"), 501);
}

#[test]
fn stru_record_and_page_parse_so_the_server_can_refuse_them() {
    assert_eq!(ok("STRU F"), Command::Stru(Structure::File));
    assert_eq!(ok("STRU R"), Command::Stru(Structure::Record));
    assert_eq!(ok("STRU P"), Command::Stru(Structure::Page));
    assert_eq!(code("STRU X"), 501);
}

#[test]
fn prot_levels_parse_and_unknown_letters_are_504() {
    assert_eq!(ok("PROT C"), Command::Prot(Protection::Clear));
    assert_eq!(ok("PROT S"), Command::Prot(Protection::Safe));
    assert_eq!(ok("PROT E"), Command::Prot(Protection::Confidential));
    assert_eq!(ok("prot p"), Command::Prot(Protection::Private));
    assert_eq!(code("PROT X"), 504);
    assert_eq!(code("PROT XY"), 501);
}

#[test]
fn dcau_modes_and_subject() {
    assert_eq!(ok("DCAU N"), Command::Dcau(Dcau::None));
    assert_eq!(ok("DCAU A"), Command::Dcau(Dcau::Self_));
    assert_eq!(
        ok("DCAU S /O=Grid/CN=Some Host"),
        Command::Dcau(Dcau::Subject("/O=Grid/CN=Some Host".into()))
    );
    assert_eq!(code("DCAU S"), 501);
    assert_eq!(code("DCAU S   "), 501);
    assert_eq!(code("DCAU N x"), 501);
    assert_eq!(code("DCAU Q"), 504);
}

#[test]
fn rest_with_a_dash_is_a_range_list() {
    let mut expected = RangeSet::from_range(0, 1_048_576);
    expected.insert(3_145_728, 4_194_304);
    assert_eq!(
        ok("REST 0-1048576,3145728-4194304"),
        Command::Rest(Restart::Ranges(expected))
    );
    assert_eq!(ok("REST 1000"), Command::Rest(Restart::Stream(1000)));
    assert_eq!(code("REST 10-5"), 501);
    assert_eq!(code("REST abc"), 501);
    assert_eq!(code("REST -"), 501);
}

#[test]
fn cksm_reads_algorithm_offset_length_and_path() {
    assert_eq!(
        ok("CKSM md5 0 -1 /x"),
        Command::Cksm {
            algorithm: "MD5".into(),
            offset: 0,
            length: None,
            path: "/x".into()
        }
    );
    assert_eq!(
        ok("CKSM ADLER32 10 20 /a b"),
        Command::Cksm {
            algorithm: "ADLER32".into(),
            offset: 10,
            length: Some(20),
            path: "/a b".into()
        }
    );
    assert_eq!(code("CKSM MD5 x -1 /x"), 501);
    assert_eq!(code("CKSM MD5 0 -2 /x"), 501);
}

#[test]
fn eret_partial_and_module_forms() {
    assert_eq!(
        ok("ERET P 0 10 /path with space"),
        Command::Eret(Eret::Partial {
            offset: 0,
            length: 10,
            path: "/path with space".into()
        })
    );
    assert_eq!(
        ok("ERET rot13=\"key=1 x\" /f g"),
        Command::Eret(Eret::Module {
            name: "rot13".into(),
            params: "key=1 x".into(),
            path: "/f g".into()
        })
    );
    assert_eq!(code("ERET P 0 /x"), 501);
    assert_eq!(code("ERET P x 10 /x"), 501);
    assert_eq!(code("ERET /plain"), 501);
    assert_eq!(code("ERET m=\"unterminated /x"), 501);
    assert_eq!(code("ERET m=\"p\""), 501);
}

#[test]
fn esto_adjusted_and_module_forms() {
    assert_eq!(
        ok("ESTO A 1048576 /p q"),
        Command::Esto(Esto::Adjusted {
            offset: 1_048_576,
            path: "/p q".into()
        })
    );
    assert_eq!(
        ok("ESTO m=\"\" /p"),
        Command::Esto(Esto::Module {
            name: "m".into(),
            params: String::new(),
            path: "/p".into()
        })
    );
    assert_eq!(code("ESTO A /p"), 501);
}

#[test]
fn list_drops_leading_flags() {
    assert_eq!(ok("LIST -la /x"), Command::List(Some("/x".into())));
    assert_eq!(ok("LIST -la"), Command::List(None));
    assert_eq!(ok("LIST -l -a  /x y"), Command::List(Some("/x y".into())));
    assert_eq!(ok("LIST"), Command::List(None));
    assert_eq!(ok("NLST -1 dir"), Command::Nlst(Some("dir".into())));
}

#[test]
fn mfmt_converts_utc_time_to_epoch_seconds() {
    assert_eq!(
        ok("MFMT 20240101000000 /my file"),
        Command::Mfmt {
            mtime: 1_704_067_200,
            path: "/my file".into()
        }
    );
    assert_eq!(code("MFMT 20241301000000 /x"), 501);
    assert_eq!(code("MFMT yesterday /x"), 501);
}

#[test]
fn allo_accepts_a_record_size() {
    assert_eq!(ok("ALLO 1000"), Command::Allo(1000));
    assert_eq!(ok("ALLO 1000 R 10"), Command::Allo(1000));
    assert_eq!(code("ALLO 1000 X 10"), 501);
    assert_eq!(code("ALLO -1"), 501);
}

#[test]
fn epsv_spas_and_stou_optional_arguments() {
    assert_eq!(ok("EPSV"), Command::Epsv(None));
    assert_eq!(ok("EPSV 2"), Command::Epsv(Some(EpsvArg::Protocol(2))));
    assert_eq!(ok("EPSV all"), Command::Epsv(Some(EpsvArg::All)));
    assert_eq!(code("EPSV 3"), 501);
    assert_eq!(ok("SPAS"), Command::Spas(false));
    assert_eq!(ok("SPAS 2"), Command::Spas(true));
    assert_eq!(code("SPAS 1"), 501);
    assert_eq!(ok("STOU"), Command::Stou(None));
    assert_eq!(ok("STOU name"), Command::Stou(Some("name".into())));
}

#[test]
fn port_eprt_and_spor_carry_host_ports() {
    assert_eq!(
        ok("PORT 127,0,0,1,4,1"),
        Command::Port(hp("127.0.0.1:1025"))
    );
    assert_eq!(ok("EPRT |2|::1|5000|"), Command::Eprt(hp("[::1]:5000")));
    assert_eq!(
        ok("SPOR 127,0,0,8,205,125 127,0,0,6,209,225"),
        Command::Spor(vec![hp("127.0.0.8:52605"), hp("127.0.0.6:53729")])
    );
    assert_eq!(
        ok("SPOR |1|10.0.0.1|7000| |2|fe80::1|7001|"),
        Command::Spor(vec![hp("10.0.0.1:7000"), hp("[fe80::1]:7001")])
    );
    assert_eq!(code("PORT 1,2,3"), 501);
    assert_eq!(code("EPRT |3|x|1|"), 522);
    assert_eq!(code("SPOR 127,0,0,1,1,1 |9|x|1|"), 522);
    assert_eq!(code("SPOR"), 501);
}

#[test]
fn opts_retr_as_globus_url_copy_sends_it() {
    assert_eq!(
        ok("OPTS RETR Parallelism=4,4,4;"),
        Command::Opts(Opts::Retr(RetrOpts {
            parallelism: Some(4),
            ..RetrOpts::default()
        }))
    );
    assert_eq!(
        ok("OPTS RETR StripeLayout=Blocked;BlockSize=1048576;Parallelism=4,4,4;Markers=5;"),
        Command::Opts(Opts::Retr(RetrOpts {
            parallelism: Some(4),
            layout: Some(StripeLayout::Blocked),
            block_size: Some(1_048_576),
            markers: Some(5),
        }))
    );
}

#[test]
fn auth_adat_pbsz_trev_lang_sbuf_scks() {
    assert_eq!(ok("AUTH GSSAPI"), Command::Auth("GSSAPI".into()));
    assert_eq!(ok("ADAT YWJj+/=="), Command::Adat("YWJj+/==".into()));
    assert_eq!(ok("PBSZ 1048576"), Command::Pbsz(1_048_576));
    assert_eq!(code("PBSZ big"), 501);
    assert_eq!(
        ok("TREV RESTART 5"),
        Command::Trev {
            event: TrevEvent::Restart,
            interval: 5
        }
    );
    assert_eq!(
        ok("trev perf 10"),
        Command::Trev {
            event: TrevEvent::Perf,
            interval: 10
        }
    );
    assert_eq!(code("TREV OTHER 5"), 504);
    assert_eq!(code("TREV PERF 99999999999"), 501);
    assert_eq!(ok("LANG"), Command::Lang(None));
    assert_eq!(ok("LANG EN"), Command::Lang(Some("EN".into())));
    assert_eq!(ok("SBUF 4194304"), Command::Sbuf(4_194_304));
    assert_eq!(
        ok("SCKS adler32 0a1b2c3d"),
        Command::Scks {
            algorithm: "ADLER32".into(),
            value: "0a1b2c3d".into()
        }
    );
    assert_eq!(ok("MLSR /d"), Command::Mlsr(Some("/d".into())));
    assert_eq!(ok("MLSC"), Command::Mlsc(None));
}

#[test]
fn parse_str_and_from_str_agree_with_parse() {
    assert_eq!(Command::parse_str("SYST"), Ok(Command::Syst));
    assert_eq!("PWD".parse::<Command>(), Ok(Command::Pwd));
}

#[test]
fn error_reply_codes() {
    assert_eq!(CommandError::TooLong.reply_code(), 500);
    assert_eq!(CommandError::Unknown("X".into()).reply_code(), 500);
    assert_eq!(code("RETR"), 501);
    assert_eq!(code("MODE B"), 504);
    assert_eq!(code("EPRT |7|1.2.3.4|5|"), 522);
}
