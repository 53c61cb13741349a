//! The protected control channel of RFC 2228 as GSI uses it: after the security exchange every
//! command travels as `ENC <base64 token>` (or `MIC`, integrity only) and every reply line as
//! `632 <base64 token>` (`631`), with `-` after the code on all but a reply's last line. Each
//! token wraps one line, CRLF included. Both ends of a session use this one codec.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;

use crate::{GsiError, Result, SecurityContext};

/// One command line as it goes on the wire: `ENC <token>\r\n`, or `MIC` when the context only
/// protects integrity. `line` is the plain command without its line end.
pub fn wrap_command(ctx: &mut SecurityContext, line: &[u8]) -> Result<Vec<u8>> {
    let mut plain = Vec::with_capacity(line.len() + 2);
    plain.extend_from_slice(line);
    plain.extend_from_slice(b"\r\n");
    let token = ctx.wrap(&plain)?;
    let verb = if ctx.confidential() { "ENC" } else { "MIC" };
    Ok(format!("{verb} {}\r\n", B64.encode(token)).into_bytes())
}

/// The plain bytes a protected command line (`ENC`, `MIC` or `CONF`, without its line end)
/// carries; `None` when the line is not one or does not open.
pub fn unwrap_command(ctx: &mut SecurityContext, line: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(line).ok()?;
    let (verb, arg) = text.trim_end().split_once(' ')?;
    if !["ENC", "MIC", "CONF"]
        .iter()
        .any(|v| verb.eq_ignore_ascii_case(v))
    {
        return None;
    }
    let token = B64.decode(arg.trim()).ok()?;
    ctx.unwrap(&token).ok()
}

/// Reply bytes (one or more CRLF-ended lines) as they go on the wire: one `632`/`631` line per
/// line, `-` after the code on all but the last.
pub fn wrap_reply(ctx: &mut SecurityContext, bytes: &[u8]) -> Result<Vec<u8>> {
    let code = if ctx.confidential() { "632" } else { "631" };
    let lines: Vec<&[u8]> = bytes
        .split_inclusive(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let token = ctx.wrap(line)?;
        let sep = if i + 1 == lines.len() { ' ' } else { '-' };
        out.extend_from_slice(format!("{code}{sep}{}\r\n", B64.encode(token)).as_bytes());
    }
    Ok(out)
}

/// Whether a reply code is one of a protected reply (631 integrity, 632 confidential, 633
/// confidentiality and integrity).
pub fn is_protected_reply(code: u16) -> bool {
    matches!(code, 631..=633)
}

/// The plain bytes one line of a protected reply carries (its text after the code).
pub fn unwrap_reply_line(ctx: &mut SecurityContext, text: &str) -> Result<Vec<u8>> {
    let token = B64
        .decode(text.trim())
        .map_err(|_| GsiError::Protocol("a protected reply line that is not base64".into()))?;
    ctx.unwrap(&token)
}
