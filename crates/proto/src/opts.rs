//! `OPTS` arguments.

use std::fmt;

use crate::args::{Args, CommandError};
use crate::ranges::parse_u64;

#[cfg(test)]
mod tests;

/// Stripe layout requested with `OPTS RETR StripeLayout=...;`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum StripeLayout {
    /// `StripeLayout=Partitioned;`.
    Partitioned,
    /// `StripeLayout=Blocked;` (with `BlockSize=n;`).
    Blocked,
}

/// Parsed `OPTS RETR` items; absent items are `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetrOpts {
    /// `Parallelism=start[,min,max];` (only `start` is used).
    pub parallelism: Option<u32>,
    /// `StripeLayout=...;`.
    pub layout: Option<StripeLayout>,
    /// `BlockSize=n;`.
    pub block_size: Option<u64>,
    /// `Markers=sec;`: perf markers on RETR every `sec` seconds.
    pub markers: Option<u32>,
}

/// One `OPTS` command.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Opts {
    /// `OPTS RETR k=v;...`.
    Retr(RetrOpts),
    /// `OPTS CKSM Markers=sec;`.
    Cksm {
        /// Marker interval in seconds (`None` if the item is missing).
        markers: Option<u32>,
    },
    /// `OPTS PASV|EPSV|SPAS AllowDelayed=0|1`.
    AllowDelayed {
        /// Which command (upper-cased).
        command: String,
        /// The setting.
        allow: bool,
    },
    /// `OPTS MLST|MLSD|MLSR fact;fact;...`: facts to show (lower-cased names).
    Mlst(Vec<String>),
    /// `OPTS UTF8 ON|OFF`.
    Utf8(bool),
    /// Any other `OPTS <word> <params>` (upper-cased word, params as sent).
    Other {
        /// Option word.
        command: String,
        /// Parameter string.
        params: String,
    },
}

/// Parses the arguments of `OPTS` (the option word and its parameter string).
pub(crate) fn parse_opts(a: Args<'_>) -> Result<Opts, CommandError> {
    let text = a.required()?;
    let (word, params) = text.split_once(' ').unwrap_or((text, ""));
    let command = word.to_ascii_uppercase();
    let params = params.trim_start_matches(' ');
    if matches!(command.as_str(), "MLST" | "MLSD" | "MLSR") {
        // RFC 3659: an empty fact list is valid and selects no facts.
        return Ok(Opts::Mlst(facts(params)));
    }
    if params.is_empty() {
        return Err(a.bad(format!("OPTS {command} needs parameters")));
    }
    // Globus lower-cases the parameters, so keys and values are case-insensitive.
    let lower = params.to_ascii_lowercase();
    let bad = |reason: String| a.bad(format!("OPTS {command}: {reason}"));
    match command.as_str() {
        "RETR" => retr(&lower).map(Opts::Retr).map_err(bad),
        "CKSM" => cksm(&lower)
            .map(|markers| Opts::Cksm { markers })
            .map_err(bad),
        "PASV" | "EPSV" | "SPAS" => {
            let item = lower.trim_end_matches(' ');
            let item = item.strip_suffix(';').unwrap_or(item);
            match key_value(item).map_err(&bad)? {
                ("allowdelayed", "0") => Ok(Opts::AllowDelayed {
                    command,
                    allow: false,
                }),
                ("allowdelayed", "1") => Ok(Opts::AllowDelayed {
                    command,
                    allow: true,
                }),
                _ => Err(bad("expected AllowDelayed=0 or AllowDelayed=1".to_owned())),
            }
        }
        "UTF8" => match lower.trim_end_matches(' ') {
            "on" => Ok(Opts::Utf8(true)),
            "off" => Ok(Opts::Utf8(false)),
            _ => Err(bad("expected ON or OFF".to_owned())),
        },
        _ => Ok(Opts::Other {
            command,
            params: params.to_owned(),
        }),
    }
}

/// Splits `key=value` (both trimmed).
fn key_value(item: &str) -> Result<(&str, &str), String> {
    let (key, value) = item
        .split_once('=')
        .ok_or_else(|| format!("'{item}' is not key=value"))?;
    Ok((key.trim(), value.trim()))
}

fn number<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, String> {
    parse_u64(value)
        .and_then(|n| n.to_string().parse().ok())
        .ok_or_else(|| format!("bad value '{value}' for {key}"))
}

/// `key=value;` items, each ending in `;` (Globus refuses an item without it).
fn retr(params: &str) -> Result<RetrOpts, String> {
    let mut opts = RetrOpts::default();
    let mut rest = params.trim_start_matches(' ');
    while !rest.is_empty() {
        let (item, after) = rest.split_once(';').ok_or("each option must end in ';'")?;
        let (key, value) = key_value(item)?;
        match key {
            "parallelism" => {
                let mut counts = value.split(',').map(|n| number::<u32>(key, n.trim()));
                let start = counts.next().ok_or("empty parallelism")??;
                for other in counts {
                    other?;
                }
                if start == 0 {
                    return Err("parallelism must be at least 1".to_owned());
                }
                opts.parallelism = Some(start);
            }
            "stripelayout" => {
                opts.layout = Some(match value {
                    "partitioned" => StripeLayout::Partitioned,
                    "blocked" => StripeLayout::Blocked,
                    _ => return Err(format!("unknown stripe layout '{value}'")),
                });
            }
            "blocksize" => match number::<u64>(key, value)? {
                0 => return Err("block size must be at least 1".to_owned()),
                n => opts.block_size = Some(n),
            },
            "markers" => opts.markers = Some(number(key, value)?),
            _ => return Err(format!("unknown option '{key}'")),
        }
        rest = after.trim_start_matches(' ');
    }
    Ok(opts)
}

/// `Markers=n;` (the final `;` may be missing); the item is required.
fn cksm(params: &str) -> Result<Option<u32>, String> {
    let mut markers = None;
    for item in params.split(';').map(str::trim).filter(|i| !i.is_empty()) {
        match key_value(item)? {
            ("markers", value) => markers = Some(number("markers", value)?),
            (key, _) => return Err(format!("unknown option '{key}'")),
        }
    }
    markers
        .map(Some)
        .ok_or_else(|| "expected Markers=n;".to_owned())
}

/// `fact;fact;...` lower-cased, blanks and empty items dropped.
fn facts(params: &str) -> Vec<String> {
    params
        .split(';')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}

impl fmt::Display for RetrOpts {
    /// The items as globus-url-copy sends them: `Parallelism=4,4,4;StripeLayout=Blocked;...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(n) = self.parallelism {
            write!(f, "Parallelism={n},{n},{n};")?;
        }
        if let Some(layout) = self.layout {
            let layout = match layout {
                StripeLayout::Partitioned => "Partitioned",
                StripeLayout::Blocked => "Blocked",
            };
            write!(f, "StripeLayout={layout};")?;
        }
        if let Some(n) = self.block_size {
            write!(f, "BlockSize={n};")?;
        }
        if let Some(n) = self.markers {
            write!(f, "Markers={n};")?;
        }
        Ok(())
    }
}

impl fmt::Display for Opts {
    /// The wire form after `OPTS ` (`RETR Parallelism=4,4,4;`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Opts::Retr(retr) => write!(f, "RETR {retr}"),
            Opts::Cksm { markers: Some(n) } => write!(f, "CKSM Markers={n};"),
            Opts::Cksm { markers: None } => f.write_str("CKSM"),
            Opts::AllowDelayed { command, allow } => {
                write!(f, "{command} AllowDelayed={}", u8::from(*allow))
            }
            Opts::Mlst(facts) => {
                f.write_str("MLST")?;
                for (i, fact) in facts.iter().enumerate() {
                    f.write_str(if i == 0 { " " } else { "" })?;
                    write!(f, "{fact};")?;
                }
                Ok(())
            }
            Opts::Utf8(on) => f.write_str(if *on { "UTF8 ON" } else { "UTF8 OFF" }),
            Opts::Other { command, params } => write!(f, "{command} {params}"),
        }
    }
}
