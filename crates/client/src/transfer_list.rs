//! A list of transfers in a file, one per line: `SOURCE DESTINATION [CHECKSUM]`, with blank
//! lines and `#` comments skipped and URLs that hold spaces in double quotes. globus-url-copy's
//! `-f FILE` reads this shape (without the checksum), fts-transfer-submit's `-f FILE` with it.

use crate::ClientError;

/// One transfer of a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Where the file is read.
    pub source: String,
    /// Where it is written.
    pub dest: String,
    /// The expected checksum (`ALG:VALUE`), when the line gives one.
    pub checksum: Option<String>,
    /// The line's number, from 1.
    pub line: usize,
}

/// The transfers `text` lists; a line that is not `SOURCE DESTINATION [CHECKSUM]` is an error
/// naming it.
pub fn parse_transfer_list(text: &str) -> Result<Vec<Listed>, ClientError> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = split_quoted(line).into_iter();
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some(source), Some(dest), checksum, None) => out.push(Listed {
                source,
                dest,
                checksum,
                line: n + 1,
            }),
            _ => {
                return Err(ClientError::Usage(format!(
                    "line {}: expected SOURCE DESTINATION [CHECKSUM]",
                    n + 1
                )))
            }
        }
    }
    Ok(out)
}

/// Words split at white space outside double quotes, the quotes dropped.
fn split_quoted(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_checksums_comments_and_quoted_spaces_are_read() {
        let text = "# two\n\n a b\n\"file:///x y\"\tgsiftp://h/z ADLER32:0a0b0c0d\n";
        let listed = parse_transfer_list(text).unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!(
            (listed[0].source.as_str(), listed[0].dest.as_str()),
            ("a", "b")
        );
        assert_eq!(listed[0].checksum, None);
        assert_eq!(listed[1].source, "file:///x y");
        assert_eq!(listed[1].checksum.as_deref(), Some("ADLER32:0a0b0c0d"));
        assert_eq!(listed[1].line, 4);
    }

    #[test]
    fn a_line_of_one_or_four_words_is_refused_with_its_number() {
        for text in ["a b\nlonely\n", "a b\nw x y z\n"] {
            let e = parse_transfer_list(text).unwrap_err().to_string();
            assert!(e.starts_with("line 2:"), "{e}");
        }
    }
}
