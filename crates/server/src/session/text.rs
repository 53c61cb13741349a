//! Fixed reply texts: FEAT, HELP, SITE HELP.

use ferry_proto::Reply;
use ferry_storage::ChecksumAlgorithm;

/// The congestion controls this process can give its data connections, `;`-separated (the
/// kernel's available ones that a socket here accepts), asked once.
pub(crate) fn offered_congestion() -> &'static str {
    static OFFERED: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    OFFERED.get_or_init(|| {
        ferry_net::Congestion::offered_here()
            .iter()
            .map(|c| format!("{c};"))
            .collect()
    })
}

/// The most this host's TCP autotuning lets one socket buffer, receiving and sending (the third
/// values of `net.ipv4.tcp_rmem` and `tcp_wmem` in this process's network namespace), as FEAT's
/// `TCP-AUTOTUNE-MAX rmem=N;wmem=N;` says them (a ferry extension: a client tuning streams for a
/// third-party copy reads the servers' limits there, as it cannot read their kernels); read
/// once, empty when unreadable.
pub(crate) fn autotune_max() -> &'static str {
    static MAX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    MAX.get_or_init(|| {
        match (
            ferry_net::autotune_max(true),
            ferry_net::autotune_max(false),
        ) {
            (Some(r), Some(w)) => format!("rmem={r};wmem={w};"),
            _ => String::new(),
        }
    })
}

/// The FEAT reply, modelled on what globus-gridftp-server advertises (clients match lines by
/// name, so order does not matter). `congestion` lists what `SITE SETNETSTACK
/// tcp:congestion=NAME` may choose (a ferry extension; empty: the line is left out).
pub(crate) fn feat(congestion: &str, autotune: &str, multicast: bool, udt: bool) -> Reply {
    let cksm: String = ChecksumAlgorithm::all()
        .iter()
        .map(|a| format!("{}:10;", a.name()))
        .collect();
    let lines = [
        "Extensions supported".to_string(),
        " UTF8".into(),
        " LANG EN".into(),
        " DCAU".into(),
        " PARALLEL".into(),
        " SIZE".into(),
        " MLST Type*;Size*;Modify*;Perm*;Charset;UNIX.mode*;UNIX.owner*;UNIX.uid*;UNIX.group*;UNIX.gid*;Unique*;UNIX.slink*;".into(),
        " ERET".into(),
        " ESTO".into(),
        " SPAS".into(),
        " SPOR".into(),
        " REST STREAM".into(),
        " MDTM".into(),
        " MFMT".into(),
        " EPSV".into(),
        " EPRT".into(),
        " WHOAMI".into(),
        " SITE BLOCKSIZE".into(),
        " SITE TCPINFO".into(),
        format!(" CKSM {cksm}"),
    ];
    let mut lines = lines.to_vec();
    if !congestion.is_empty() {
        lines.push(format!(" TCP-CONGESTION {congestion}"));
    }
    if !autotune.is_empty() {
        lines.push(format!(" TCP-AUTOTUNE-MAX {autotune}"));
    }
    if multicast {
        // ferry's gridftp_multicast takes MODE E from any number of streams; a client tells
        // it from Globus' driver, which corrupts the file unless one stream brings it.
        lines.push(format!(" {}", ferry_proto::multicast::PARALLEL_FEATURE));
    }
    if udt {
        lines.push(format!(" {}", ferry_proto::stack::UDT_PARALLEL_FEATURE));
    }
    lines.push("End.".into());
    Reply::multi(211, lines)
}

const VERBS: &[&str] = &[
    "USER", "PASS", "ACCT", "FEAT", "OPTS", "HELP", "SYST", "NOOP", "QUIT", "STAT", "TYPE", "MODE",
    "STRU", "PASV", "EPSV", "PORT", "EPRT", "SPAS", "SPOR", "REST", "RETR", "STOR", "STOU", "APPE",
    "ERET", "ESTO", "LIST", "NLST", "MLST", "MLSD", "SIZE", "MDTM", "MFMT", "CWD", "CDUP", "PWD",
    "MKD", "RMD", "DELE", "RNFR", "RNTO", "ALLO", "ABOR", "SBUF", "CKSM", "DCAU", "PROT", "PBSZ",
    "TREV", "LANG", "SITE",
];

/// `HELP`: the verbs, eight per line; `HELP X`: one line about X.
pub(crate) fn help(topic: Option<&str>) -> Reply {
    if let Some(t) = topic {
        let t = t.trim().to_ascii_uppercase();
        return if VERBS.contains(&t.as_str()) {
            Reply::new(214, format!("Syntax: {t} (see RFC 959 and GFD.20)."))
        } else {
            Reply::new(502, format!("Unknown command '{t}'."))
        };
    }
    let mut lines = vec!["The following commands are recognized:".to_string()];
    for chunk in VERBS.chunks(8) {
        lines.push(format!(
            " {}",
            chunk
                .iter()
                .map(|v| format!("{v:<5}"))
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    lines.push("End".into());
    Reply::multi(214, lines)
}

/// `SITE HELP`.
pub(crate) fn site_help() -> Reply {
    let lines = vec![
        "The following commands are recognized:".to_string(),
        " SITE HELP".into(),
        " SITE CHMOD <octal mode> <path>".into(),
        " SITE UTIME <YYYYMMDDHHMMSS> <path>".into(),
        " SITE SYMLINK <target> <link>".into(),
        " SITE SYMLINKFROM <target> / SITE SYMLINKTO <link>".into(),
        " SITE RDEL <path>".into(),
        " SITE BUFSIZE|SBUF|RETRBUFSIZE|STORBUFSIZE <bytes>".into(),
        " SITE BLOCKSIZE <bytes>".into(),
        " SITE TCPINFO".into(),
        " SITE CLIENTINFO <info>".into(),
        " SITE TASKID <id>".into(),
        " SITE WHOAMI".into(),
        " SITE VERSION".into(),
        " SITE STATUS".into(),
        " SITE SETNETSTACK|SETDCSTACK <drivers>".into(),
        " SITE SETDISKSTACK <drivers>".into(),
        "End.".into(),
    ];
    Reply::multi(214, lines)
}
