//! HTTP and WebDAV request parts the HTTPS door reads from the network, parsed here with bounded
//! sizes and typed errors (the door's handlers only act on the values): byte ranges, digest
//! negotiation and values (RFC 3230, RFC 9530), WebDAV headers and paths (RFC 4918), PROPFIND
//! bodies, and the multistatus answers and HTTP dates the door writes.

pub mod dates;
pub mod dav;
mod davxml;
pub mod digest;
pub mod propfind;
pub mod proppatch;
pub mod range;
pub mod tpc;
