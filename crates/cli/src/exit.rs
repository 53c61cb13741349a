//! Exit codes that tell scripts what kind of failure happened.

use ferry_client::{ClientError, ErrorClass};

/// Success.
pub(crate) const OK: u8 = 0;
/// Bad arguments (also clap's own code).
pub(crate) const USAGE: u8 = 2;

/// The exit code for a class of failure.
pub(crate) fn code(class: ErrorClass) -> u8 {
    match class {
        ErrorClass::Usage => USAGE,
        ErrorClass::Auth => 3,
        ErrorClass::NotFound => 4,
        ErrorClass::Network => 5,
        ErrorClass::Verification => 6,
        ErrorClass::Other => 1,
    }
}

/// A hint on what to do about an error, printed under it.
pub(crate) fn hint(e: &ClientError) -> Option<&'static str> {
    match e.class() {
        ErrorClass::Auth if e.to_string().contains("GSI") => Some("check the proxy (ferry proxy info; X509_USER_PROXY), the trusted CAs (X509_CERT_DIR), that your DN is in the server's grid-mapfile, and --subject if the server's certificate is not for the URL's host"),
        ErrorClass::Auth => Some("check the user and password in the URL (ftp://user:pass@host/...), or that the server allows anonymous access"),
        ErrorClass::NotFound => Some("check the path; directories need -r, and listing the parent (ferry ls URL/) shows what is there"),
        ErrorClass::Network => Some("check that the server runs and the host and port are right; --retries N resumes interrupted files"),
        ErrorClass::Verification => Some("the copy differs from the source: copy it again"),
        _ => None,
    }
}
