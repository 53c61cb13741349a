//! The argument text of one command, split the way the Globus server splits it, and why a
//! command does not parse. Commands, `OPTS` and `SITE` all read arguments through this, so it
//! sits below the three.

use crate::ranges::parse_u64;

/// Why a line is not a valid command; each maps to the FTP reply a server sends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// The line is longer than [`MAX_COMMAND_LINE`](crate::command::MAX_COMMAND_LINE): 500.
    #[error("command line too long")]
    TooLong,
    /// The line is not UTF-8 or has control characters: 500.
    #[error("command line is not valid text")]
    NotText,
    /// Empty line or a verb that is not letters only: 500.
    #[error("malformed command")]
    Malformed,
    /// A verb this parser does not know: 500 `Invalid command.` (carries the upper-cased verb).
    #[error("unknown command {0}")]
    Unknown(String),
    /// Known verb, wrong arguments: 501 (carries the verb and what is wrong).
    #[error("{verb}: {reason}")]
    BadArguments {
        /// Upper-cased verb.
        verb: String,
        /// What is wrong, for the reply text.
        reason: String,
    },
    /// Known verb, argument value not supported (e.g. `MODE B`, `STRU R`, `PROT E`): 504.
    #[error("{verb}: {reason}")]
    Unsupported {
        /// Upper-cased verb.
        verb: String,
        /// What is unsupported.
        reason: String,
    },
    /// `EPRT`/`SPOR` with a network protocol other than 1 or 2: 522, as Globus answers
    /// `522 Network protocol not supported, use (1,2).`
    #[error("{verb}: network protocol not supported, use (1,2)")]
    UnsupportedNetworkProtocol {
        /// Upper-cased verb.
        verb: String,
    },
}

impl CommandError {
    /// The FTP reply code a server answers this error with.
    pub fn reply_code(&self) -> u16 {
        match self {
            CommandError::TooLong | CommandError::NotText | CommandError::Malformed => 500,
            CommandError::Unknown(_) => 500,
            CommandError::BadArguments { .. } => 501,
            CommandError::Unsupported { .. } => 504,
            CommandError::UnsupportedNetworkProtocol { .. } => 522,
        }
    }
}

/// The text after a verb (or after a `SITE`/`OPTS` word), with the separating spaces removed.
///
/// Arguments are separated by runs of spaces; the last argument a command takes is the rest of
/// the text verbatim, spaces included (Globus `globus_l_gsc_parse_command`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Args<'a> {
    /// Upper-cased verb, for error messages (`SITE CHMOD` for site commands).
    verb: &'a str,
    /// Everything after the separator; empty when there are no arguments.
    rest: &'a str,
}

impl<'a> Args<'a> {
    /// Arguments `text` (leading spaces are the separator and are dropped) of `verb`.
    pub(crate) fn new(verb: &'a str, text: &'a str) -> Args<'a> {
        Args {
            verb,
            rest: text.trim_start_matches(' '),
        }
    }

    /// The verb these arguments belong to.
    pub(crate) fn verb(&self) -> &'a str {
        self.verb
    }

    /// The whole argument text (may be empty).
    pub(crate) fn rest(&self) -> &'a str {
        self.rest
    }

    /// A 501 error for these arguments.
    pub(crate) fn bad(&self, reason: impl Into<String>) -> CommandError {
        CommandError::BadArguments {
            verb: self.verb.to_owned(),
            reason: reason.into(),
        }
    }

    /// A 504 error for these arguments.
    pub(crate) fn unsupported(&self, reason: impl Into<String>) -> CommandError {
        CommandError::Unsupported {
            verb: self.verb.to_owned(),
            reason: reason.into(),
        }
    }

    /// Requires that there are no arguments.
    pub(crate) fn none(&self) -> Result<(), CommandError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(self.bad("takes no arguments"))
        }
    }

    /// The single optional argument (the rest of the text), `None` when absent.
    pub(crate) fn optional(&self) -> Option<String> {
        (!self.rest.is_empty()).then(|| self.rest.to_owned())
    }

    /// The single required argument (the rest of the text).
    pub(crate) fn required(&self) -> Result<&'a str, CommandError> {
        if self.rest.is_empty() {
            Err(self.bad("missing argument"))
        } else {
            Ok(self.rest)
        }
    }

    /// The single required argument as a word: surrounding spaces are not part of it.
    pub(crate) fn word(&self) -> Result<&'a str, CommandError> {
        Ok(self.required()?.trim_end_matches(' '))
    }

    /// The single required argument as a decimal number.
    pub(crate) fn number(&self) -> Result<u64, CommandError> {
        let word = self.word()?;
        parse_u64(word).ok_or_else(|| self.bad(format!("'{word}' is not a number")))
    }

    /// Exactly `N` arguments: the first `N - 1` are words, the last is the rest of the text.
    pub(crate) fn exactly<const N: usize>(&self) -> Result<[&'a str; N], CommandError> {
        let tokens = split(self.rest, N);
        <[&str; N]>::try_from(tokens).map_err(|_| self.bad(format!("expected {N} arguments")))
    }
}

/// Splits `text` (no leading spaces) into at most `max` arguments, the last taking the rest.
fn split(text: &str, max: usize) -> Vec<&str> {
    let mut out = Vec::with_capacity(max);
    let mut rest = text;
    while !rest.is_empty() && out.len() < max {
        if out.len() + 1 == max {
            out.push(rest);
            break;
        }
        match rest.split_once(' ') {
            Some((token, after)) => {
                out.push(token);
                rest = after.trim_start_matches(' ');
            }
            None => {
                out.push(rest);
                break;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_argument_takes_the_rest_with_its_spaces() {
        assert_eq!(split("P 0  10 /a b  ", 4), vec!["P", "0", "10", "/a b  "]);
        assert_eq!(split("a b", 1), vec!["a b"]);
        assert_eq!(split("a  ", 2), vec!["a"]);
        assert_eq!(split("", 3), Vec::<&str>::new());
    }

    #[test]
    fn exactly_counts_arguments() {
        let args = Args::new("MFMT", "  20200101000000 my file");
        assert_eq!(args.exactly::<2>(), Ok(["20200101000000", "my file"]));
        assert!(Args::new("MFMT", "20200101000000").exactly::<2>().is_err());
    }
}
