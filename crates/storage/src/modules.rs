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
        todo!()
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
        let _ = (name, params);
        todo!()
    }

    /// Plans an ESTO with module `name` and `params` (for `A`: `"<offset>"`).
    pub fn plan_store(&self, name: &str, params: &str) -> Result<WritePlacement, ModuleError> {
        let _ = (name, params);
        todo!()
    }
}

impl std::fmt::Debug for ModuleRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleRegistry")
            .field("retrieve", &self.retrieve.iter().map(|m| m.name().to_string()).collect::<Vec<_>>())
            .field("store", &self.store.iter().map(|m| m.name().to_string()).collect::<Vec<_>>())
            .finish()
    }
}
