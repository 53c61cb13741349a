//! TYPE A line-end conversion for stream mode: LF → CRLF when sending, CRLF → LF when receiving.

/// Appends `input` to `out` with every bare LF turned into CRLF. `prev_cr` carries whether the
/// previous chunk ended in CR, so chunk boundaries do not matter.
pub(crate) fn to_crlf(input: &[u8], prev_cr: &mut bool, out: &mut Vec<u8>) {
    for &b in input {
        if b == b'\n' && !*prev_cr {
            out.push(b'\r');
        }
        out.push(b);
        *prev_cr = b == b'\r';
    }
}

/// Appends `input` to `out` with CRLF turned into LF. A CR at the end of a chunk is held back in
/// `held_cr` until the next chunk shows whether an LF follows.
pub(crate) fn from_crlf(input: &[u8], held_cr: &mut bool, out: &mut Vec<u8>) {
    for &b in input {
        if *held_cr {
            *held_cr = false;
            if b != b'\n' {
                out.push(b'\r');
            }
        }
        if b == b'\r' {
            *held_cr = true;
        } else {
            out.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_ends_round_trip_across_any_chunking() {
        let text = b"a\nb\r\nc\rd\n\n";
        for split in 0..text.len() {
            let (mut cr, mut wire) = (false, Vec::new());
            to_crlf(&text[..split], &mut cr, &mut wire);
            to_crlf(&text[split..], &mut cr, &mut wire);
            assert_eq!(wire, b"a\r\nb\r\nc\rd\r\n\r\n");
            for split2 in 0..wire.len() {
                let (mut held, mut back) = (false, Vec::new());
                from_crlf(&wire[..split2], &mut held, &mut back);
                from_crlf(&wire[split2..], &mut held, &mut back);
                if held {
                    back.push(b'\r');
                }
                assert_eq!(back, b"a\nb\nc\rd\n\n");
            }
        }
    }
}
