//! Distinguished names in the OpenSSL one-line form GSI uses everywhere
//! (`/O=Grid/OU=Example/CN=Jane Doe`): in grid-mapfiles, signing policies and `-s` subjects.

use openssl::nid::Nid;
use openssl::x509::X509NameRef;

/// The one-line form of a name: `/SN=value` per entry, in certificate order.
pub fn one_line(name: &X509NameRef) -> String {
    let mut out = String::new();
    for entry in name.entries() {
        let nid = entry.object().nid();
        let key = if nid == Nid::UNDEF {
            entry.object().to_string()
        } else {
            nid.short_name()
                .map(str::to_owned)
                .unwrap_or_else(|_| entry.object().to_string())
        };
        let value = entry
            .data()
            .to_string()
            .unwrap_or_else(|_| String::from_utf8_lossy(entry.data().as_slice()).into_owned());
        out.push('/');
        out.push_str(&key);
        out.push('=');
        out.push_str(&value);
    }
    out
}

/// Whether two one-line DNs name the same entity, as Globus compares them: case-insensitively,
/// and again after spelling `UID`/`USERID` and `E`/`emailAddress` the same way.
pub fn same(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b) || normalize(a).eq_ignore_ascii_case(&normalize(b))
}

fn normalize(dn: &str) -> String {
    let mut out = String::with_capacity(dn.len());
    for (i, part) in dn.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        let (key, value) = part.split_once('=').unwrap_or((part, ""));
        let key = match key.to_ascii_lowercase().as_str() {
            "uid" | "userid" => "UID",
            "e" | "email" | "emailaddress" => "emailAddress",
            _ => key,
        };
        out.push_str(key);
        if part.contains('=') {
            out.push('=');
            out.push_str(value);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_compare_case_insensitively_and_across_attribute_spellings() {
        assert!(same("/O=Grid/CN=Jane Doe", "/o=grid/cn=jane doe"));
        assert!(same("/O=Grid/USERID=jd/CN=Jane", "/O=Grid/UID=jd/CN=Jane"));
        assert!(same("/O=Grid/E=jd@x.org", "/O=Grid/emailAddress=jd@x.org"));
        assert!(!same("/O=Grid/CN=Jane Doe", "/O=Grid/CN=Jane Do"));
    }
}
