//! Driver stacks as `SITE SETNETSTACK` (data channel) and `SITE SETDISKSTACK` (storage) name
//! them, in Globus XIO's syntax, and the administrator's whitelists.
//!
//! A stack is a comma-separated list, bottom (transport or file system) first: `tcp`,
//! `udt,gsi`, `file,gridftp_multicast:urls=%23gsiftp...`. An entry is `name` or `name:options`;
//! the options are %-decoded once (`%HH` is that byte, `%%` a per cent sign, any other `%`
//! stays), so values may carry `,` `;` `:` `=`. Names are compared exactly, as Globus does:
//! nothing is trimmed or case-folded. The word `default` (in any case) stands for the server's
//! default stack.

/// The FEAT line of a server that takes MODE E data connections over UDT with the GSI layer
/// in either role. Globus' UDT driver does not: a Globus server or globus-url-copy that
/// accepts such a connection never answers its GSI handshake (its own `-udt -p N` hangs the
/// same way; stream mode works), so clients keep that combination for servers saying this.
pub const UDT_PARALLEL_FEATURE: &str = "UDT PARALLEL";
use serde::{Deserialize, Serialize};

/// Why a stack string cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StackError {
    /// Nothing was named.
    #[error("empty driver stack")]
    Empty,
    /// A driver's options do not decode to UTF-8 text.
    #[error("options of driver {0} are not UTF-8 text")]
    NotText(String),
    /// The administrator does not allow the driver, or this build has no such driver. Globus
    /// gives both the same answer (unknown drivers are never loaded, so never whitelisted).
    #[error("{0} driver not whitelisted")]
    NotWhitelisted(String),
}

/// One driver of a stack with its decoded option string (`udt:mss=9000` → `udt`, `mss=9000`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DriverSpec {
    /// Driver name, exactly as sent.
    pub name: String,
    /// Options after the first `:`, %-decoded; empty when none were given.
    pub options: String,
}

impl DriverSpec {
    /// A driver without options.
    pub fn named(name: &str) -> DriverSpec {
        DriverSpec {
            name: name.to_string(),
            options: String::new(),
        }
    }
}

/// A driver stack, bottom first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackSpec {
    /// Drivers, bottom (transport or file system) first.
    pub drivers: Vec<DriverSpec>,
}

/// What a `SETNETSTACK` / `SETDISKSTACK` argument asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StackChoice {
    /// `default`: the server's default stack.
    Default,
    /// This stack.
    Stack(StackSpec),
}

impl StackSpec {
    /// One driver without options (`tcp`, `file`).
    pub fn single(name: &str) -> StackSpec {
        StackSpec {
            drivers: vec![DriverSpec::named(name)],
        }
    }

    /// The data channel's default: plain TCP (DCAU and PROT add the `gsi` layer by themselves).
    pub fn default_net() -> StackSpec {
        StackSpec::single("tcp")
    }

    /// The storage default: the file system.
    pub fn default_disk() -> StackSpec {
        StackSpec::single("file")
    }

    /// Parses a stack string (see the module doc).
    pub fn parse(s: &str) -> Result<StackSpec, StackError> {
        if s.is_empty() {
            return Err(StackError::Empty);
        }
        let drivers = s
            .split(',')
            .map(|entry| {
                let (name, raw) = entry.split_once(':').unwrap_or((entry, ""));
                let options = String::from_utf8(percent_decode(raw))
                    .map_err(|_| StackError::NotText(name.to_string()))?;
                Ok(DriverSpec {
                    name: name.to_string(),
                    options,
                })
            })
            .collect::<Result<Vec<_>, StackError>>()?;
        Ok(StackSpec { drivers })
    }

    /// The bottom driver (the transport of a net stack, the file system of a disk stack).
    pub fn bottom(&self) -> &str {
        self.drivers.first().map_or("", |d| d.name.as_str())
    }

    /// Whether a driver of this name is in the stack.
    pub fn has(&self, name: &str) -> bool {
        self.drivers.iter().any(|d| d.name == name)
    }
}

impl StackChoice {
    /// Parses a `SETNETSTACK` / `SETDISKSTACK` argument.
    pub fn parse(s: &str) -> Result<StackChoice, StackError> {
        if s.eq_ignore_ascii_case("default") {
            return Ok(StackChoice::Default);
        }
        StackSpec::parse(s).map(StackChoice::Stack)
    }
}

/// Prints the wire form back: options %-encoded where they hold the syntax characters.
impl std::fmt::Display for StackSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, d) in self.drivers.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(&d.name)?;
            if !d.options.is_empty() {
                f.write_str(":")?;
                for b in d.options.bytes() {
                    // What globus-url-copy encodes, less `;` and `=`, which the option syntax
                    // itself uses and a decoder must see as they are.
                    if matches!(b, b'%' | b',' | b':' | b'#' | b'+' | b' ') || !b.is_ascii_graphic()
                    {
                        write!(f, "%{b:02X}")?;
                    } else {
                        write!(f, "{}", b as char)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The drivers an administrator lets clients choose (Globus' `-dc-whitelist`,
/// `-fs-whitelist`). A driver must also exist in this build to be admitted; the caller's
/// registry says which do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Whitelist {
    allowed: Vec<String>,
}

impl Whitelist {
    /// A whitelist of these names, compared exactly.
    pub fn new<S: Into<String>>(names: impl IntoIterator<Item = S>) -> Whitelist {
        Whitelist {
            allowed: names.into_iter().map(Into::into).collect(),
        }
    }

    /// Whether `name` is allowed.
    pub fn allows(&self, name: &str) -> bool {
        self.allowed.iter().any(|a| a == name)
    }

    /// Admits `stack` when every driver is whitelisted and known to `exists`; else names the
    /// first that is not.
    pub fn admit(
        &self,
        stack: &StackSpec,
        exists: impl Fn(&str) -> bool,
    ) -> Result<(), StackError> {
        match stack
            .drivers
            .iter()
            .find(|d| !self.allows(&d.name) || !exists(&d.name))
        {
            Some(d) => Err(StackError::NotWhitelisted(d.name.clone())),
            None => Ok(()),
        }
    }
}

/// `%HH` → byte, `%%` → `%`, any other `%` kept (Globus' `globus_url_string_hex_decode`).
pub(crate) fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            if b.get(i + 1) == Some(&b'%') {
                out.push(b'%');
                i += 2;
                continue;
            }
            let hex = |c: Option<&u8>| c.and_then(|c| (*c as char).to_digit(16));
            if let (Some(hi), Some(lo)) = (hex(b.get(i + 1)), hex(b.get(i + 2))) {
                out.push((hi * 16 + lo) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn entries_are_bottom_first_with_options_decoded_once() {
        let s = StackSpec::parse("udt:mss=9000;rcvbuf=%32M,gsi").unwrap();
        assert_eq!(s.bottom(), "udt");
        assert_eq!(s.drivers[0].options, "mss=9000;rcvbuf=2M");
        assert_eq!(s.drivers[1], DriverSpec::named("gsi"));
        let mc =
            StackSpec::parse("file,gridftp_multicast:urls=%23gsiftp%3A%2F%2Fa%2Cb%25%25").unwrap();
        assert_eq!(mc.drivers[1].options, "urls=#gsiftp://a,b%%");
    }

    #[test]
    fn names_are_kept_exactly_as_globus_does() {
        // Globus neither trims nor case-folds: these name drivers that do not exist.
        let s = StackSpec::parse("TCP, gsi").unwrap();
        assert_eq!(s.drivers[0].name, "TCP");
        assert_eq!(s.drivers[1].name, " gsi");
        assert_eq!(StackSpec::parse("tcp,").unwrap().drivers[1].name, "");
        assert_eq!(StackSpec::parse(""), Err(StackError::Empty));
    }

    #[test]
    fn default_in_any_case_means_the_servers_stack() {
        assert_eq!(StackChoice::parse("DeFault"), Ok(StackChoice::Default));
        assert!(matches!(
            StackChoice::parse("file"),
            Ok(StackChoice::Stack(_))
        ));
    }

    #[test]
    fn a_percent_without_two_hex_digits_stays() {
        assert_eq!(percent_decode("50%"), b"50%");
        assert_eq!(percent_decode("%zz%4"), b"%zz%4");
        assert_eq!(percent_decode("%41%%"), b"A%");
    }

    #[test]
    fn whitelist_names_the_first_driver_it_refuses() {
        let w = Whitelist::new(["tcp", "gsi", "udt"]);
        let exists = |n: &str| n == "tcp" || n == "gsi";
        assert!(w
            .admit(&StackSpec::parse("tcp,gsi").unwrap(), exists)
            .is_ok());
        assert_eq!(
            w.admit(&StackSpec::parse("udt,gsi").unwrap(), exists),
            Err(StackError::NotWhitelisted("udt".into()))
        );
        assert_eq!(
            w.admit(&StackSpec::parse("tcp,rate").unwrap(), exists),
            Err(StackError::NotWhitelisted("rate".into()))
        );
    }

    proptest! {
        #[test]
        fn printed_stacks_parse_back(
            names in proptest::collection::vec("[a-z_]{1,12}", 1..4),
            opts in proptest::collection::vec("[ -~]{0,24}", 4),
        ) {
            let spec = StackSpec {
                drivers: names
                    .iter()
                    .zip(&opts)
                    .map(|(n, o)| DriverSpec { name: n.clone(), options: o.clone() })
                    .collect(),
            };
            prop_assert_eq!(StackSpec::parse(&spec.to_string()).unwrap(), spec);
        }
    }
}
