//! Globus' `gridftp_multicast` disk-stack driver, as its option string says it: the URLs of a
//! subtree of destinations, how many children this node forwards to, and how; how a node
//! splits its subtree among its children; and how `globus-url-copy -MC FILE` writes the whole
//! tree into one `SITE SETDISKSTACK` argument.
//!
//! The option string (already %-decoded once by [`StackSpec`](crate::stack::StackSpec)) is
//! `key=value;…` with keys `urls`, `cc`, `P`, `tcpbs`, `local_write` and `subject`; unknown keys
//! are errors and empty items are skipped, as XIO's string parser does. `urls` is a list whose
//! first character is its delimiter (`#`), each element %-decoded again: `url?child-options`.

use crate::stack::percent_decode;

mod report;

pub use report::{is_report, report, route_to, subtree, ForwardFailure, REPORT_HEADER};

/// The FEAT line of a ferry server that may forward (`gridftp_multicast` whitelisted) and takes
/// MODE E on any number of streams, which Globus' driver does not.
pub const PARALLEL_FEATURE: &str = "MULTICAST PARALLEL";

/// Characters globus-url-copy and the driver %-encode in stack strings (besides `%`, controls
/// and non-ASCII): the stack syntax's own.
const ENCODED: &[u8] = b"#;:=+ ,";

/// Why a multicast option string or `-MC` file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MulticastError {
    /// An item without `=`.
    #[error("option {0:?} has no value (key=value expected)")]
    NoValue(String),
    /// A key the driver does not have.
    #[error("unknown option {0:?} (known: urls, cc, P, tcpbs, local_write, subject)")]
    UnknownKey(String),
    /// A value of the wrong kind.
    #[error("option {key}={value:?}: {why}")]
    BadValue {
        /// The key.
        key: String,
        /// Its value.
        value: String,
        /// What was expected.
        why: &'static str,
    },
    /// A destination that is not an `ftp://` or `gsiftp://` URL with a host and a path.
    #[error("destination {0:?} is not an ftp:// or gsiftp:// URL with a path")]
    BadUrl(String),
    /// Nothing to do: no local write and no destination.
    #[error("local_write=n with no destination to forward to")]
    Nothing,
    /// An `-MC` file with no destination.
    #[error("the multicast file names no destination")]
    EmptyFile,
}

/// One destination of a subtree: its URL and the options it passes to its own driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// `ftp://` or `gsiftp://` URL of the file to write.
    pub url: String,
    /// Driver options for that destination (`cc=3;P=4`), empty when none.
    pub options: String,
}

impl Destination {
    /// Splits `url?options` (the form a `urls` element and an `-MC` line take).
    pub fn parse(element: &str) -> Result<Destination, MulticastError> {
        let (url, options) = element.split_once('?').unwrap_or((element, ""));
        let rest = url
            .strip_prefix("gsiftp://")
            .or_else(|| url.strip_prefix("ftp://"))
            .ok_or_else(|| MulticastError::BadUrl(url.into()))?;
        match rest.split_once('/') {
            Some((host, _)) if !host.is_empty() => Ok(Destination {
                url: url.into(),
                options: options.into(),
            }),
            _ => Err(MulticastError::BadUrl(url.into())),
        }
    }

    /// `url?options`, as a `urls` element carries it (the `?` always, as globus-url-copy).
    pub fn element(&self) -> String {
        format!("{}?{}", self.url, self.options)
    }
}

/// The driver's options at one node of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MulticastOptions {
    /// Every destination below this node, in order.
    pub urls: Vec<Destination>,
    /// `cc`: how many children this node forwards to (Globus' default 2).
    pub cast_count: u32,
    /// `P`: parallel streams of each forwarded transfer (default 1).
    pub parallelism: u32,
    /// `tcpbs`: TCP buffer of forwarded transfers, bytes. Globus' default is 131072; ferry
    /// leaves the kernel's autotuning alone unless it is given (`None`).
    pub tcp_buffer: Option<u64>,
    /// `local_write`: whether this node also writes the file (default yes).
    pub local_write: bool,
    /// `subject`: the subject the children's servers must present.
    pub subject: Option<String>,
}

impl Default for MulticastOptions {
    fn default() -> Self {
        MulticastOptions {
            urls: Vec::new(),
            cast_count: 2,
            parallelism: 1,
            tcp_buffer: None,
            local_write: true,
            subject: None,
        }
    }
}

/// One child of a node: where it writes, and the disk stack that makes it forward its share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Child {
    /// The child's file.
    pub url: String,
    /// The destinations the child forwards to in turn.
    pub subtree: Vec<Destination>,
    /// The `SITE SETDISKSTACK` argument for the child, `None` for a leaf with no options
    /// (which any server takes without the driver whitelisted).
    pub disk_stack: Option<String>,
}

impl MulticastOptions {
    /// Parses a (once-decoded) option string.
    pub fn parse(options: &str) -> Result<MulticastOptions, MulticastError> {
        let mut out = MulticastOptions::default();
        for item in options.split(';').filter(|i| !i.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| MulticastError::NoValue(item.into()))?;
            let bad = |why| MulticastError::BadValue {
                key: key.into(),
                value: value.into(),
                why,
            };
            match key {
                "urls" => {
                    let mut chars = value.chars();
                    if let Some(delimiter) = chars.next() {
                        for element in chars.as_str().split(delimiter).filter(|e| !e.is_empty()) {
                            let text = String::from_utf8(percent_decode(element))
                                .map_err(|_| bad("a URL that is not UTF-8 text"))?;
                            out.urls.push(Destination::parse(&text)?);
                        }
                    }
                }
                "cc" => out.cast_count = count(value).ok_or_else(|| bad("a count"))?,
                "P" => {
                    out.parallelism = count(value)
                        .filter(|&p| p >= 1)
                        .ok_or_else(|| bad("a stream count of at least 1"))?
                }
                "tcpbs" => {
                    out.tcp_buffer = Some(formatted_size(value).ok_or_else(|| bad("a size (4M)"))?)
                }
                "local_write" => {
                    out.local_write = boolean(value).ok_or_else(|| bad("yes or no"))?
                }
                "subject" => out.subject = Some(value.into()),
                _ => return Err(MulticastError::UnknownKey(key.into())),
            }
        }
        if !out.local_write && (out.urls.is_empty() || out.cast_count == 0) {
            return Err(MulticastError::Nothing);
        }
        Ok(out)
    }

    /// This node's children: the first `cc` destinations, each given an even share of the
    /// rest to forward, in order, the first children one more when they do not divide evenly.
    /// Globus gives each child up to ⌈all / children⌉, which leaves the last children short;
    /// the shares here differ by at most one, and for the trees globus-url-copy users write
    /// (`cc` of 2, up to 4 destinations) the two agree.
    pub fn children(&self) -> Vec<Child> {
        let n = (self.cast_count as usize).min(self.urls.len());
        if n == 0 {
            return Vec::new();
        }
        let mut rest = &self.urls[n..];
        let (base, extra) = (rest.len() / n, rest.len() % n);
        self.urls[..n]
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let (share, after) = rest.split_at(base + usize::from(i < extra));
                rest = after;
                let subtree = share.to_vec();
                let disk_stack = child_stack(&subtree, &d.options);
                Child {
                    url: d.url.clone(),
                    subtree,
                    disk_stack,
                }
            })
            .collect()
    }
}

/// The disk stack that makes a child write its file and forward to `subtree` with `options`
/// (as the Globus driver builds it: `urls=#e1#e2;` then the options, %-encoded once more).
fn child_stack(subtree: &[Destination], options: &str) -> Option<String> {
    if subtree.is_empty() && options.is_empty() {
        return None;
    }
    let mut s = String::new();
    if !subtree.is_empty() {
        s.push_str("urls=");
        for d in subtree {
            s.push('#');
            s.push_str(&percent_encode(&d.element()));
        }
        s.push(';');
    }
    s.push_str(options);
    Some(format!("file,gridftp_multicast:{}", percent_encode(&s)))
}

/// The `SITE SETDISKSTACK` argument `globus-url-copy -MC` sends the first destination: with
/// `own_options` when the first line of the file is that destination (its options, possibly
/// empty), without when the destination came from the command line; `rest` are the
/// destinations it forwards to.
pub fn first_hop_stack(own_options: Option<&str>, rest: &[Destination]) -> String {
    let mut s = String::from(own_options.unwrap_or(""));
    let mut tack_on = if own_options.is_some() {
        ";urls="
    } else {
        "urls="
    };
    for d in rest {
        s.push_str(tack_on);
        s.push('#');
        s.push_str(&percent_encode(&d.element()));
        tack_on = "";
    }
    format!("file,gridftp_multicast:{}", percent_encode(&s))
}

/// Reads an `-MC` file: one `url[?options]` per line, blank lines skipped. A line without
/// `subject=` gets `subject` when one is given (globus-url-copy's `-s`/`-ds`).
pub fn parse_mc_file(
    text: &str,
    subject: Option<&str>,
) -> Result<Vec<Destination>, MulticastError> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim_end).filter(|l| !l.is_empty()) {
        let mut d = Destination::parse(line)?;
        if let Some(s) = subject.filter(|_| !d.options.contains("subject=")) {
            if !d.options.is_empty() {
                d.options.push(';');
            }
            d.options.push_str("subject=");
            d.options.push_str(s);
        }
        out.push(d);
    }
    if out.is_empty() {
        return Err(MulticastError::EmptyFile);
    }
    Ok(out)
}

/// What `globus-url-copy -MC FILE` sends to (the destination `dest` given on its command line,
/// else the file's first line) and the disk stack that makes it forward to the file's others.
pub fn mc_first_hop(
    text: &str,
    subject: Option<&str>,
    dest: Option<&str>,
) -> Result<(String, String), MulticastError> {
    let lines = parse_mc_file(text, subject)?;
    if let Some(dest) = dest {
        return Ok((dest.to_owned(), first_hop_stack(None, &lines)));
    }
    let (first, rest) = lines.split_first().ok_or(MulticastError::EmptyFile)?;
    Ok((
        first.url.clone(),
        first_hop_stack(Some(&first.options), rest),
    ))
}

/// Levels of a tree of `n` destinations in which every node forwards to up to `fan_out`
/// children with [`MulticastOptions::children`]'s shares (a chain of `n` at fan-out 1).
pub fn tree_depth(n: usize, fan_out: usize) -> usize {
    if n == 0 {
        return 0;
    }
    let children = fan_out.max(1).min(n);
    1 + tree_depth((n - children).div_ceil(children), fan_out)
}

/// The fan-out that delivers `n` destinations soonest, with its estimate in seconds, where
/// sending the file over one link takes `transfer_s` and starting one hop (connection,
/// login, data channel) `setup_s`. Blocks go down the tree as they arrive, so a node with `k`
/// children shares its uplink `k` ways (`k · transfer_s`) and each level adds a start-up:
/// large files want a chain, small files on slow-starting hops a flat tree.
pub fn best_fan_out(n: usize, transfer_s: f64, setup_s: f64) -> (usize, f64) {
    let estimate = |k: usize| k as f64 * transfer_s + tree_depth(n, k) as f64 * setup_s;
    (1..=n.max(1))
        .map(|k| (k, estimate(k)))
        .fold(
            (1, f64::INFINITY),
            |best, c| if c.1 < best.1 { c } else { best },
        )
}

/// %-encodes what the stack syntax uses, `%`, controls and non-ASCII bytes, in upper-case hex
/// (Globus' `globus_url_string_hex_encode`).
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b <= 0x1f || b >= 0x7f || b == b'%' || ENCODED.contains(&b) {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(b as char);
        }
    }
    out
}

/// A non-negative count (`sscanf("%d")` of Globus, without its tolerance of trailing text).
fn count(v: &str) -> Option<u32> {
    v.trim().parse().ok()
}

/// XIO's formatted integer: a number with an optional `K`, `M` or `G` (powers of 1024; the
/// lower-case letters are bits, an eighth of the byte value).
fn formatted_size(v: &str) -> Option<u64> {
    let v = v.trim();
    let digits = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let n: u64 = v[..digits].parse().ok()?;
    let scaled = match &v[digits..] {
        "" | "B" | "b" => n,
        "K" => n.checked_mul(1 << 10)?,
        "M" => n.checked_mul(1 << 20)?,
        "G" => n.checked_mul(1 << 30)?,
        "k" => n.checked_mul(1 << 10)? / 8,
        "m" => n.checked_mul(1 << 20)? / 8,
        "g" => n.checked_mul(1 << 30)? / 8,
        _ => return None,
    };
    Some(scaled)
}

/// XIO's boolean: yes/y/true/t/no/n/false/f in any case, or a number.
fn boolean(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "yes" | "y" | "true" | "t" => Some(true),
        "no" | "n" | "false" | "f" => Some(false),
        other => other.parse::<i64>().ok().map(|i| i != 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::StackSpec;
    use proptest::prelude::*;

    fn d(url: &str) -> Destination {
        Destination::parse(url).unwrap()
    }

    /// The options a node's driver sees for a stack string (decoded once by the stack parser).
    fn options_of(stack: &str) -> MulticastOptions {
        let spec = StackSpec::parse(stack).unwrap();
        assert_eq!(spec.drivers[0].name, "file");
        assert_eq!(spec.drivers[1].name, "gridftp_multicast");
        MulticastOptions::parse(&spec.drivers[1].options).unwrap()
    }

    #[test]
    fn globus_url_copy_stack_captured_on_the_wire_decodes_to_its_urls() {
        // As captured from globus-url-copy -MC with four destinations (first is the hop).
        let wire = "file,gridftp_multicast:%3Burls%3D%23ftp%253A//127.0.0.3%253A27303/p/d3/out.bin?%23ftp%253A//127.0.0.4%253A27304/p/d4/out.bin?%23ftp%253A//127.0.0.5%253A27305/p/d5/out.bin?";
        let o = options_of(wire);
        let urls: Vec<_> = o.urls.iter().map(|d| d.url.as_str()).collect();
        assert_eq!(
            urls,
            [
                "ftp://127.0.0.3:27303/p/d3/out.bin",
                "ftp://127.0.0.4:27304/p/d4/out.bin",
                "ftp://127.0.0.5:27305/p/d5/out.bin"
            ]
        );
        assert_eq!((o.cast_count, o.parallelism, o.local_write), (2, 1, true));
        // And ferry writes the same string from the same file.
        let rest: Vec<_> = o.urls.clone();
        assert_eq!(first_hop_stack(Some(""), &rest), wire);
    }

    #[test]
    fn tree_of_three_below_with_cc_2_is_globus_shape() {
        let o = MulticastOptions {
            urls: vec![d("ftp://h3/a"), d("ftp://h4/a"), d("ftp://h5/a")],
            ..Default::default()
        };
        let c = o.children();
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].url, "ftp://h3/a");
        assert_eq!(c[0].subtree, vec![d("ftp://h5/a")]);
        assert_eq!(c[1].subtree, vec![]);
        assert_eq!(c[1].disk_stack, None);
        // The child's stack decodes (once by the stack parser) to exactly its subtree.
        let below = options_of(c[0].disk_stack.as_ref().unwrap());
        assert_eq!(below.urls, vec![d("ftp://h5/a")]);
    }

    #[test]
    fn per_hop_options_go_to_that_hop_and_leaves_with_options_get_a_stack() {
        let first = "file,gridftp_multicast:".to_string()
            + &percent_encode(&format!(
                "cc=1;P=4;tcpbs=4M;urls=#{}#{}",
                percent_encode("gsiftp://h2:2811/x?cc=3;local_write=n"),
                percent_encode("gsiftp://h3/x?")
            ));
        let o = options_of(&first);
        assert_eq!(
            (o.cast_count, o.parallelism, o.tcp_buffer),
            (1, 4, Some(4 << 20))
        );
        let c = o.children();
        assert_eq!(c.len(), 1);
        let below = options_of(c[0].disk_stack.as_ref().unwrap());
        assert_eq!(below.cast_count, 3);
        assert!(!below.local_write);
        assert_eq!(below.urls, vec![d("gsiftp://h3/x")]);
    }

    #[test]
    fn bad_options_are_named() {
        assert_eq!(
            MulticastOptions::parse("cc=2;bogus=1"),
            Err(MulticastError::UnknownKey("bogus".into()))
        );
        assert_eq!(
            MulticastOptions::parse("cc"),
            Err(MulticastError::NoValue("cc".into()))
        );
        assert!(matches!(
            MulticastOptions::parse("P=0"),
            Err(MulticastError::BadValue { .. })
        ));
        assert!(matches!(
            MulticastOptions::parse("urls=#http%3A//x/y"),
            Err(MulticastError::BadUrl(_))
        ));
        assert_eq!(
            MulticastOptions::parse("local_write=n"),
            Err(MulticastError::Nothing)
        );
        assert_eq!(formatted_size("8m"), Some(1 << 20));
        assert_eq!(formatted_size("1X"), None);
        assert_eq!(boolean("NO"), Some(false));
    }

    #[test]
    fn mc_file_lines_take_the_subject_unless_they_name_one() {
        let f = "gsiftp://a/x\n\ngsiftp://b/y?subject=/O=B\nftp://c/z?cc=3\n";
        let v = parse_mc_file(f, Some("/O=S")).unwrap();
        assert_eq!(v[0].options, "subject=/O=S");
        assert_eq!(v[1].options, "subject=/O=B");
        assert_eq!(v[2].options, "cc=3;subject=/O=S");
        assert_eq!(parse_mc_file("\n\n", None), Err(MulticastError::EmptyFile));
        assert!(parse_mc_file("/local/path\n", None).is_err());
    }

    #[test]
    fn big_files_go_down_a_chain_and_small_ones_fan_out() {
        assert_eq!(tree_depth(4, 2), 2);
        assert_eq!(tree_depth(4, 1), 4);
        assert_eq!(tree_depth(8, 8), 1);
        assert_eq!(tree_depth(7, 2), 3);
        // 1 GiB at 1 Gbit/s (8.6 s) with 50 ms hops: a chain.
        assert_eq!(best_fan_out(8, 8.6, 0.05).0, 1);
        // 1 MiB (8 ms) with 200 ms hops: everyone from the first node.
        assert_eq!(best_fan_out(8, 0.008, 0.2).0, 8);
        // In between, a tree.
        let (k, t) = best_fan_out(8, 0.1, 0.2);
        assert!((2..8).contains(&k), "fan-out {k}");
        // Sooner than flat (8 × 0.1 + 0.2), itself sooner than a chain (0.1 + 8 × 0.2).
        assert!(t < 8.0 * 0.1 + 0.2);
    }

    fn count_all(o: &MulticastOptions) -> usize {
        o.children()
            .iter()
            .map(|c| {
                1 + c
                    .disk_stack
                    .as_ref()
                    .map(|s| count_all(&options_of(s)))
                    .unwrap_or(0)
            })
            .sum()
    }

    proptest! {
        #[test]
        fn every_destination_is_reached_exactly_once(n in 0usize..40, cc in 1u32..6,
                                                      weird in "[a-z#;:=+ ,%]{0,6}") {
            let urls: Vec<_> = (0..n)
                .map(|i| d(&format!("gsiftp://h{i}:2811/dir {weird}/f{i}")))
                .collect();
            let stack = first_hop_stack(Some(&format!("cc={cc}")), &urls);
            let o = options_of(&stack);
            prop_assert_eq!(&o.urls, &urls);
            prop_assert_eq!(count_all(&o), n);
            // Shares differ by at most one.
            let sizes: Vec<_> = o.children().iter().map(|c| c.subtree.len()).collect();
            if let (Some(max), Some(min)) = (sizes.iter().max(), sizes.iter().min()) {
                prop_assert!(max - min <= 1);
            }
        }
    }
}
