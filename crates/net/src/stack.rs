//! Driver stacks (`SITE SETNETSTACK tcp`, later `udt,gsi`): parsing and the admin whitelist.

use crate::NetError;

/// One driver in a stack with its option string (`udt:mss=9000` → name `udt`, options `mss=9000`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DriverSpec {
    /// Driver name, lower-cased.
    pub name: String,
    /// Options after `:`, verbatim.
    pub options: String,
}

/// A data-channel driver stack, transport first (as SETNETSTACK lists it, bottom first).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StackSpec {
    /// Drivers, bottom (transport) first.
    pub drivers: Vec<DriverSpec>,
}

impl Default for StackSpec {
    fn default() -> Self {
        StackSpec {
            drivers: vec![DriverSpec {
                name: "tcp".into(),
                options: String::new(),
            }],
        }
    }
}

impl StackSpec {
    /// Parses `tcp`, `udt,gsi`, `udt:mss=9000,gsi`.
    pub fn parse(s: &str) -> Result<StackSpec, NetError> {
        let mut drivers = Vec::new();
        for item in s.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(NetError::MalformedStack(s.to_string()));
            }
            let (name, options) = match item.split_once(':') {
                Some((n, o)) => (n, o),
                None => (item, ""),
            };
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(NetError::MalformedStack(s.to_string()));
            }
            drivers.push(DriverSpec {
                name: name.to_ascii_lowercase(),
                options: options.to_string(),
            });
        }
        if drivers.is_empty() {
            return Err(NetError::MalformedStack(s.to_string()));
        }
        Ok(StackSpec { drivers })
    }

    /// The transport at the bottom.
    pub fn transport(&self) -> &str {
        self.drivers
            .first()
            .map(|d| d.name.as_str())
            .unwrap_or("tcp")
    }
}

impl std::fmt::Display for StackSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, d) in self.drivers.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(&d.name)?;
            if !d.options.is_empty() {
                write!(f, ":{}", d.options)?;
            }
        }
        Ok(())
    }
}

/// The drivers an administrator allows clients to choose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Whitelist {
    allowed: Vec<String>,
}

impl Default for Whitelist {
    fn default() -> Self {
        Whitelist {
            allowed: vec!["tcp".into()],
        }
    }
}

impl Whitelist {
    /// A whitelist of these driver names.
    pub fn new(names: impl IntoIterator<Item = String>) -> Whitelist {
        Whitelist {
            allowed: names.into_iter().map(|n| n.to_ascii_lowercase()).collect(),
        }
    }

    /// Checks every driver of `stack` against the whitelist and against what this build implements.
    pub fn admit(&self, stack: &StackSpec) -> Result<(), NetError> {
        for d in &stack.drivers {
            if !self.allowed.iter().any(|a| a == &d.name) || !IMPLEMENTED.contains(&d.name.as_str())
            {
                return Err(NetError::DriverNotAllowed(d.name.clone()));
            }
        }
        Ok(())
    }
}

/// Drivers this build can put on a data channel.
const IMPLEMENTED: &[&str] = &["tcp"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_with_options_parses_and_prints_back() {
        let s = StackSpec::parse("udt:mss=9000,gsi").unwrap();
        assert_eq!(s.drivers.len(), 2);
        assert_eq!(s.drivers[0].options, "mss=9000");
        assert_eq!(s.to_string(), "udt:mss=9000,gsi");
    }

    #[test]
    fn whitelist_refuses_unlisted_and_unimplemented_drivers() {
        let w = Whitelist::new(["tcp".to_string(), "udt".to_string()]);
        assert!(w.admit(&StackSpec::parse("tcp").unwrap()).is_ok());
        assert!(w.admit(&StackSpec::parse("udt").unwrap()).is_err());
        assert!(w.admit(&StackSpec::parse("quic").unwrap()).is_err());
        assert!(StackSpec::parse("tcp,,gsi").is_err());
    }
}
