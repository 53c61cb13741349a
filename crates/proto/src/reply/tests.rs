use proptest::prelude::*;

use super::*;

fn parse_all(bytes: &[u8]) -> Result<Vec<Reply>, ReplyError> {
    let mut parser = ReplyParser::new();
    parser.feed(bytes);
    let mut out = Vec::new();
    while let Some(reply) = parser.next_reply()? {
        out.push(reply);
    }
    Ok(out)
}

fn lines(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn single_line_reply_is_code_space_text_crlf() {
    assert_eq!(
        Reply::new(226, "Transfer Complete.").to_bytes(),
        b"226 Transfer Complete.\r\n"
    );
    assert_eq!(Reply::new(200, "").to_bytes(), b"200 \r\n");
}

#[test]
fn multi_line_reply_prefixes_lines_without_a_leading_space() {
    let reply = Reply::multi(
        211,
        lines(&["Extensions supported", " MDTM", "SIZE", "End."]),
    );
    assert_eq!(
        reply.to_string(),
        "211-Extensions supported\r\n MDTM\r\n211-SIZE\r\n211 End.\r\n"
    );
}

#[test]
fn first_line_is_always_prefixed_even_with_a_leading_space() {
    let reply = Reply::multi(250, lines(&[" odd", "End."]));
    assert_eq!(reply.to_bytes(), b"250- odd\r\n250 End.\r\n");
    assert_eq!(parse_all(&reply.to_bytes()), Ok(vec![reply]));
}

#[test]
fn line_ends_inside_text_cannot_inject_replies() {
    let reply = Reply::new(550, "bad\r\n230 User logged in.");
    assert_eq!(reply.to_bytes(), b"550 bad  230 User logged in.\r\n");
}

#[test]
fn parser_reads_globus_spas_and_feat_replies() {
    let wire =
        b"229-Entering Striped Passive Mode.\r\n 127,0,0,1,4,1\r\n 127,0,0,1,4,2\r\n229 End\r\n\
                 211-Extensions supported\r\n PARALLEL\r\n211 End.\r\n";
    let replies = parse_all(wire).expect("valid");
    assert_eq!(replies.len(), 2);
    assert_eq!(replies[0].code, 229);
    assert_eq!(
        replies[0].lines,
        lines(&[
            "Entering Striped Passive Mode.",
            " 127,0,0,1,4,1",
            " 127,0,0,1,4,2",
            "End"
        ])
    );
    assert_eq!(
        replies[1].lines,
        lines(&["Extensions supported", " PARALLEL", "End."])
    );
}

#[test]
fn parser_accepts_bare_lf_and_bare_code() {
    assert_eq!(
        parse_all(b"200 OK\n226\n"),
        Ok(vec![Reply::new(200, "OK"), Reply::new(226, "")])
    );
}

#[test]
fn multi_line_ends_only_at_the_same_code_and_space() {
    let wire = b"250-start\r\n226 not the end\r\n250-inner\r\n250x\r\n250 End.\r\n";
    let replies = parse_all(wire).expect("valid");
    assert_eq!(
        replies,
        vec![Reply::multi(
            250,
            lines(&["start", "226 not the end", "inner", "250x", "End."])
        )]
    );
}

#[test]
fn parser_waits_for_the_rest_of_a_reply() {
    let mut parser = ReplyParser::new();
    parser.feed(b"211-a\r\n 1\r\n21");
    assert_eq!(parser.next_reply(), Ok(None));
    parser.feed(b"1 End.\r");
    assert_eq!(parser.next_reply(), Ok(None));
    parser.feed(b"\n");
    assert_eq!(
        parser.next_reply(),
        Ok(Some(Reply::multi(211, lines(&["a", " 1", "End."]))))
    );
    assert_eq!(parser.next_reply(), Ok(None));
}

#[test]
fn malformed_first_lines_are_refused() {
    for bad in [
        &b"hello\r\n"[..],
        b"22 x\r\n",
        b"2a0 x\r\n",
        b"200x\r\n",
        b"\r\n",
    ] {
        assert_eq!(parse_all(bad), Err(ReplyError::Malformed), "{bad:?}");
    }
    assert_eq!(parse_all(b"200 \xff\r\n"), Err(ReplyError::NotText));
}

#[test]
fn over_long_line_is_refused_and_skipped() {
    let mut parser = ReplyParser::new();
    parser.feed(b"200 ");
    parser.feed(&vec![b'x'; MAX_REPLY_LINE]);
    assert_eq!(parser.next_reply(), Err(ReplyError::LineTooLong));
    parser.feed(&vec![b'x'; 3 * MAX_REPLY_LINE]);
    assert_eq!(parser.next_reply(), Ok(None));
    parser.feed(b"still the long line\r\n226 Next.\r\n");
    assert_eq!(parser.next_reply(), Ok(Some(Reply::new(226, "Next."))));
}

#[test]
fn over_long_terminated_line_is_refused() {
    let mut long = b"200 ".to_vec();
    long.extend(vec![b'y'; MAX_REPLY_LINE]);
    long.extend_from_slice(b"\r\n226 ok\r\n");
    let mut parser = ReplyParser::new();
    parser.feed(&long);
    assert_eq!(parser.next_reply(), Err(ReplyError::LineTooLong));
    assert_eq!(parser.next_reply(), Ok(Some(Reply::new(226, "ok"))));
}

#[test]
fn too_many_lines_are_refused() {
    let mut parser = ReplyParser::new();
    parser.feed(b"250-start\r\n");
    let mut result = Ok(None);
    for _ in 0..MAX_REPLY_LINES {
        parser.feed(b" x\r\n");
        result = parser.next_reply();
        if result.is_err() {
            break;
        }
    }
    assert_eq!(result, Err(ReplyError::TooManyLines));
}

/// Feeds `wire` in `chunk`-byte pieces, draining replies after each, and returns the replies
/// and errors in order with the most bytes the parser held after any drain.
fn feed_in_chunks(
    parser: &mut ReplyParser,
    wire: &[u8],
    chunk: usize,
) -> (Vec<Result<Reply, ReplyError>>, usize) {
    let mut out = Vec::new();
    let mut most = 0;
    for piece in wire.chunks(chunk.max(1)) {
        parser.feed(piece);
        loop {
            match parser.next_reply() {
                Ok(None) => break,
                Ok(Some(r)) => out.push(Ok(r)),
                Err(e) => out.push(Err(e)),
            }
        }
        most = most.max(parser.held());
    }
    (out, most)
}

#[test]
fn an_endless_220_banner_is_refused_once_past_the_bound_and_never_held_whole() {
    let mut parser = ReplyParser::new();
    parser.feed(b"220-Welcome\r\n");
    assert_eq!(parser.next_reply(), Ok(None));
    let mut line = vec![b'x'; 8000];
    line.extend_from_slice(b"\r\n");
    let mut fed = 13;
    let mut refused_at = None;
    // 99 900 such lines held `ferry ls` at 811 MB; a few times the bound is enough to show
    // the parser drops them.
    while fed < 4 * MAX_REPLY_BYTES {
        for piece in line.chunks(4096) {
            parser.feed(piece);
            fed += piece.len();
            match parser.next_reply() {
                Ok(None) => {}
                Err(ReplyError::TooLong { limit }) if refused_at.is_none() => {
                    assert_eq!(limit, MAX_REPLY_BYTES);
                    refused_at = Some(fed);
                }
                other => panic!("after {fed} bytes: {other:?}"),
            }
            assert!(
                parser.held() <= MAX_REPLY_BYTES,
                "held {} bytes after {fed}",
                parser.held()
            );
        }
    }
    let refused_at = refused_at.expect("the banner was never refused");
    assert!(
        refused_at > MAX_REPLY_BYTES && refused_at <= MAX_REPLY_BYTES + 4096,
        "refused after {refused_at} bytes"
    );
    assert!(
        parser.held() < MAX_REPLY_LINE,
        "the refused banner is dropped"
    );
    // The banner's last line ends the skipping; the next reply reads as usual.
    parser.feed(b"220 End.\r\n421 Bye.\r\n");
    assert_eq!(parser.next_reply(), Ok(Some(Reply::new(421, "Bye."))));
    assert!(!parser.has_buffered());
}

#[test]
fn large_legitimate_replies_fit_the_bound() {
    // A STAT listing of 10 000 entries, the longest body a client sees on the control channel.
    let listing: Vec<String> = (0..10_000)
        .map(|i| {
            format!(" -rw-r--r--   1 ferry    ferry    1073741824 Nov 25 12:00 file-{i:06}.dat")
        })
        .collect();
    let mut lines = vec!["Status of /data:".to_string()];
    lines.extend(listing);
    lines.push("End.".into());
    let stat = Reply::multi(213, lines);
    // SPAS with 1 024 stripes and a GSI error whose chain runs to many lines.
    let spas = Reply::multi(
        229,
        std::iter::once("Entering Striped Passive Mode.".to_string())
            .chain(
                (0..1024).map(|i| format!(" 192,168,{},{},{},{}", i / 256, i % 256, 195, i % 256)),
            )
            .chain(["End".to_string()])
            .collect(),
    );
    let chain = Reply::from_text(
        535,
        &(0..200)
            .map(|i| {
                format!(
                    "globus_gsi_callback_module: Could not verify credential {i}: {}",
                    "x".repeat(300)
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
    );
    for reply in [stat, spas, chain] {
        assert!(reply.to_bytes().len() < MAX_REPLY_BYTES);
        assert_eq!(parse_all(&reply.to_bytes()), Ok(vec![reply]));
    }
}

#[test]
fn an_over_long_line_inside_a_multi_line_reply_drops_the_rest_of_that_reply() {
    let mut wire = b"250-start\r\n ".to_vec();
    wire.extend(vec![b'y'; MAX_REPLY_LINE]);
    wire.extend_from_slice(b"\r\n230 injected\r\n250-more\r\n250 End.\r\n200 next\r\n");
    let mut parser = ReplyParser::new();
    parser.feed(&wire);
    assert_eq!(parser.next_reply(), Err(ReplyError::LineTooLong));
    assert_eq!(parser.next_reply(), Ok(Some(Reply::new(200, "next"))));
}

#[test]
fn a_reply_refused_on_its_last_line_skips_nothing_after_it() {
    let reply = Reply::multi(211, lines(&["a", "b", "End."]));
    let wire = reply.to_bytes();
    let mut parser = ReplyParser::with_max_bytes(wire.len() - 1);
    parser.feed(&wire);
    parser.feed(b"200 next\r\n");
    assert_eq!(
        parser.next_reply(),
        Err(ReplyError::TooLong {
            limit: wire.len() - 1
        })
    );
    assert_eq!(parser.next_reply(), Ok(Some(Reply::new(200, "next"))));
}

#[test]
fn reply_classes() {
    assert!(Reply::new(150, "").is_preliminary());
    assert!(Reply::new(226, "").is_success());
    assert!(Reply::new(350, "").is_intermediate());
    assert!(Reply::new(530, "").is_error());
    assert_eq!(Reply::multi(211, lines(&["a", "b"])).text(), "a\nb");
}

fn reply() -> impl Strategy<Value = Reply> {
    let line = "[ -~é]{0,30}";
    (100u16..=599, proptest::collection::vec(line, 1..6))
        .prop_map(|(code, lines)| Reply { code, lines })
}

proptest! {
    #[test]
    fn replies_round_trip_through_random_splits(
        replies in proptest::collection::vec(reply(), 1..5),
        cuts in proptest::collection::vec(any::<proptest::sample::Index>(), 0..8),
    ) {
        let mut wire = Vec::new();
        for r in &replies {
            r.write_to(&mut wire);
        }
        let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(wire.len() + 1)).collect();
        cuts.sort_unstable();
        let mut parser = ReplyParser::new();
        let mut got = Vec::new();
        let mut prev = 0;
        for cut in cuts.into_iter().chain([wire.len()]) {
            parser.feed(&wire[prev..cut]);
            prev = cut;
            while let Some(r) = parser.next_reply().expect("valid wire") {
                got.push(r);
            }
        }
        prop_assert_eq!(got, replies);
    }

    #[test]
    fn a_reply_is_refused_exactly_when_longer_than_the_bound(
        r in reply(),
        chunk in 1usize..64,
    ) {
        let wire = r.to_bytes();
        let mut fits = ReplyParser::with_max_bytes(wire.len());
        let (got, _) = feed_in_chunks(&mut fits, &wire, chunk);
        prop_assert_eq!(got, vec![Ok(r.clone())]);
        let limit = wire.len() - 1;
        let mut short = ReplyParser::with_max_bytes(limit);
        let mut after = wire.clone();
        // A reply short enough for the smallest bound (`100 \r\n`, less one).
        after.extend_from_slice(b"226\n");
        let (got, _) = feed_in_chunks(&mut short, &after, chunk);
        prop_assert_eq!(
            got,
            vec![Err(ReplyError::TooLong { limit }), Ok(Reply::new(226, ""))]
        );
    }

    #[test]
    fn an_unending_reply_is_refused_once_and_held_within_the_bound(
        limit in 64usize..2048,
        body in proptest::collection::vec("[ -~]{0,80}", 1..200),
        chunk in 1usize..300,
    ) {
        let mut wire = b"220-Welcome\r\n".to_vec();
        for line in &body {
            // Inner lines as Globus writes them, so none can end the reply early.
            wire.push(b' ');
            wire.extend_from_slice(line.as_bytes());
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(b"220 End.\r\n");
        let over = wire.len() > limit;
        wire.extend_from_slice(b"230 next\r\n");
        let mut parser = ReplyParser::with_max_bytes(limit);
        let (got, most) = feed_in_chunks(&mut parser, &wire, chunk);
        prop_assert!(most <= limit, "held {} of {}", most, limit);
        let errors: Vec<_> = got.iter().filter_map(|r| r.clone().err()).collect();
        let expected = if over { vec![ReplyError::TooLong { limit }] } else { vec![] };
        prop_assert_eq!(errors, expected);
        prop_assert_eq!(got.last(), Some(&Ok(Reply::new(230, "next"))));
    }

    #[test]
    fn arbitrary_bytes_never_panic(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8)) {
        let mut parser = ReplyParser::new();
        for chunk in chunks {
            parser.feed(&chunk);
            for _ in 0..64 {
                if parser.next_reply() == Ok(None) {
                    break;
                }
            }
        }
    }
}

#[test]
fn a_text_of_several_lines_becomes_a_multi_line_reply_each_line_its_own() {
    assert_eq!(Reply::from_text(451, "one").to_bytes(), b"451 one\r\n");
    let r = Reply::from_text(451, "header\n Forward Failed: x\n Forward Failed: y");
    assert_eq!(
        String::from_utf8(r.to_bytes()).unwrap(),
        "451-header\r\n Forward Failed: x\r\n Forward Failed: y\r\n451 End.\r\n"
    );
}
