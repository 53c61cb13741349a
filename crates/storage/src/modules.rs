//! Data-processing modules (ERET/ESTO): a registry of named stages between storage and the
//! data channel. Built-in: `P offset length` (partial read) and `A offset` (write at offset).

/// What a retrieve module asks the DTP to read: a section of the file, mapped to wire offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReadSection {
    /// First file byte sent.
    pub file_offset: u64,
    /// Bytes to send (`None` = to end of file).
    pub length: Option<u64>,
    /// Subtracted from file offsets to get wire offsets (ERET P: wire offset 0 = first byte).
    pub wire_base: u64,
}

/// What a store module asks the DTP to do with incoming blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WritePlacement {
    /// Added to wire offsets to get file offsets (ESTO A).
    pub file_base: u64,
    /// Whether the file is truncated first.
    pub truncate: bool,
}

/// Errors from module lookup or parameter parsing: 501 / 504.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModuleError {
    /// No module of that name is registered: 504.
    #[error("no data processing module named {0}")]
    Unknown(String),
    /// The module's parameters are invalid: 501.
    #[error("bad parameters for module {module}: {reason}")]
    BadParameters {
        /// Module name.
        module: String,
        /// What is wrong.
        reason: String,
    },
}

/// A retrieve-side module: turns its parameter string into a section to read.
pub trait RetrieveModule: Send + Sync {
    /// Module name as sent in ERET.
    fn name(&self) -> &str;
    /// Parses parameters.
    fn plan(&self, params: &str) -> Result<ReadSection, ModuleError>;
}

/// A store-side module: turns its parameter string into a write placement.
pub trait StoreModule: Send + Sync {
    /// Module name as sent in ESTO.
    fn name(&self) -> &str;
    /// Parses parameters.
    fn plan(&self, params: &str) -> Result<WritePlacement, ModuleError>;
}

/// The registry of modules a server offers.
pub struct ModuleRegistry {
    retrieve: Vec<Box<dyn RetrieveModule>>,
    store: Vec<Box<dyn StoreModule>>,
}

impl ModuleRegistry {
    /// A registry with the built-in `P` and `A` modules.
    pub fn with_builtins() -> ModuleRegistry {
        ModuleRegistry {
            retrieve: vec![Box::new(PartialRetrieve)],
            store: vec![Box::new(AdjustedStore)],
        }
    }

    /// An empty registry (a server that offers no ERET/ESTO modules).
    pub fn empty() -> ModuleRegistry {
        ModuleRegistry {
            retrieve: Vec::new(),
            store: Vec::new(),
        }
    }

    /// Adds a retrieve module.
    pub fn add_retrieve(&mut self, m: Box<dyn RetrieveModule>) {
        self.retrieve.push(m);
    }

    /// Adds a store module.
    pub fn add_store(&mut self, m: Box<dyn StoreModule>) {
        self.store.push(m);
    }

    /// Plans an ERET with module `name` and `params` (for `P`: `"<offset> <length>"`).
    pub fn plan_retrieve(&self, name: &str, params: &str) -> Result<ReadSection, ModuleError> {
        match self.retrieve.iter().find(|m| m.name() == name) {
            Some(m) => m.plan(params),
            None => Err(ModuleError::Unknown(name.to_string())),
        }
    }

    /// Plans an ESTO with module `name` and `params` (for `A`: `"<offset>"`).
    pub fn plan_store(&self, name: &str, params: &str) -> Result<WritePlacement, ModuleError> {
        match self.store.iter().find(|m| m.name() == name) {
            Some(m) => m.plan(params),
            None => Err(ModuleError::Unknown(name.to_string())),
        }
    }
}

impl Default for ModuleRegistry {
    fn default() -> ModuleRegistry {
        ModuleRegistry::with_builtins()
    }
}

/// `ERET P <offset> <length>`: a section of the file, sent with wire offsets from 0.
#[derive(Debug, Clone, Copy, Default)]
pub struct PartialRetrieve;

impl RetrieveModule for PartialRetrieve {
    fn name(&self) -> &str {
        "P"
    }

    /// `"<offset> <length>"`; a length of `-1` means to the end of the file, as in CKSM.
    fn plan(&self, params: &str) -> Result<ReadSection, ModuleError> {
        let bad = |reason: &str| ModuleError::BadParameters {
            module: "P".into(),
            reason: reason.into(),
        };
        let mut words = params.split_whitespace();
        let (Some(offset), Some(length), None) = (words.next(), words.next(), words.next()) else {
            return Err(bad("expected <offset> <length>"));
        };
        let offset: u64 = offset
            .parse()
            .map_err(|_| bad("offset is not a byte count"))?;
        let length = match length {
            "-1" => None,
            n => Some(
                n.parse::<u64>()
                    .map_err(|_| bad("length is not a byte count"))?,
            ),
        };
        if length.is_some_and(|l| offset.checked_add(l).is_none()) {
            return Err(bad("offset + length overflows"));
        }
        Ok(ReadSection {
            file_offset: offset,
            length,
            wire_base: offset,
        })
    }
}

/// `ESTO A <offset>`: file position = wire offset + offset; never truncates (APPE uses it).
#[derive(Debug, Clone, Copy, Default)]
pub struct AdjustedStore;

impl StoreModule for AdjustedStore {
    fn name(&self) -> &str {
        "A"
    }

    /// `"<offset>"`.
    fn plan(&self, params: &str) -> Result<WritePlacement, ModuleError> {
        let bad = |reason: &str| ModuleError::BadParameters {
            module: "A".into(),
            reason: reason.into(),
        };
        let mut words = params.split_whitespace();
        let (Some(offset), None) = (words.next(), words.next()) else {
            return Err(bad("expected <offset>"));
        };
        let offset: u64 = offset
            .parse()
            .map_err(|_| bad("offset is not a byte count"))?;
        Ok(WritePlacement {
            file_base: offset,
            truncate: false,
        })
    }
}

impl std::fmt::Debug for ModuleRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleRegistry")
            .field(
                "retrieve",
                &self
                    .retrieve
                    .iter()
                    .map(|m| m.name().to_string())
                    .collect::<Vec<_>>(),
            )
            .field(
                "store",
                &self
                    .store
                    .iter()
                    .map(|m| m.name().to_string())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eret_p_plans_a_section_with_wire_base() {
        let r = ModuleRegistry::with_builtins();
        let s = r.plan_retrieve("P", "100 50").unwrap();
        assert_eq!(
            s,
            ReadSection {
                file_offset: 100,
                length: Some(50),
                wire_base: 100
            }
        );
        let s = r.plan_retrieve("P", " 7  -1 ").unwrap();
        assert_eq!(
            s,
            ReadSection {
                file_offset: 7,
                length: None,
                wire_base: 7
            }
        );
    }

    #[test]
    fn esto_a_plans_a_placement_without_truncation() {
        let r = ModuleRegistry::with_builtins();
        assert_eq!(
            r.plan_store("A", "4096").unwrap(),
            WritePlacement {
                file_base: 4096,
                truncate: false
            }
        );
    }

    #[test]
    fn module_names_are_case_sensitive() {
        let r = ModuleRegistry::with_builtins();
        assert_eq!(
            r.plan_retrieve("p", "0 1"),
            Err(ModuleError::Unknown("p".into()))
        );
        assert_eq!(
            r.plan_store("a", "0"),
            Err(ModuleError::Unknown("a".into()))
        );
        assert_eq!(
            r.plan_retrieve("A", "0"),
            Err(ModuleError::Unknown("A".into()))
        );
        assert!(matches!(
            ModuleRegistry::empty().plan_store("A", "0"),
            Err(ModuleError::Unknown(_))
        ));
    }

    #[test]
    fn bad_numbers_are_bad_parameters() {
        let r = ModuleRegistry::with_builtins();
        for params in [
            "",
            "1",
            "1 2 3",
            "x 2",
            "1 y",
            "-5 2",
            "1 -2",
            "18446744073709551615 1",
        ] {
            let err = r.plan_retrieve("P", params).unwrap_err();
            assert!(
                matches!(err, ModuleError::BadParameters { .. }),
                "{params:?}: {err:?}"
            );
        }
        for params in ["", "1 2", "-1", "0x10", "99999999999999999999"] {
            let err = r.plan_store("A", params).unwrap_err();
            assert!(
                matches!(err, ModuleError::BadParameters { .. }),
                "{params:?}: {err:?}"
            );
        }
    }

    #[test]
    fn custom_modules_can_be_registered() {
        #[derive(Debug)]
        struct Whole;
        impl RetrieveModule for Whole {
            fn name(&self) -> &str {
                "W"
            }
            fn plan(&self, _: &str) -> Result<ReadSection, ModuleError> {
                Ok(ReadSection {
                    file_offset: 0,
                    length: None,
                    wire_base: 0,
                })
            }
        }
        let mut r = ModuleRegistry::with_builtins();
        r.add_retrieve(Box::new(Whole));
        assert_eq!(r.plan_retrieve("W", "").unwrap().length, None);
    }
}
