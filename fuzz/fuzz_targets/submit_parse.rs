//! The transfer service's job submission (`POST /jobs`: JSON, then FTS3's fields checked one
//! by one into a job) fed arbitrary bytes: never panics, and every job it accepts keeps the
//! limits the queue and the scheduler rely on. Allowing local paths only ever widens what is
//! accepted.
#![no_main]

use ferry_client::Location;
use ferry_service::submit::{self, Defaults, JobOptions, MAX_FILES, MAX_URL};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let remote_only = submit::parse_body(data, "/CN=fuzz", Defaults::default(), false);
    let any = submit::parse_body(data, "/CN=fuzz", Defaults::default(), true);
    if let Ok((job, _)) = &remote_only {
        let (wider, _) = any.as_ref().expect("what is accepted without local paths is accepted with them");
        let ends = |j: &ferry_service::db::NewJob| {
            j.files.iter().map(|f| (f.source.clone(), f.dest.clone())).collect::<Vec<_>>()
        };
        assert_eq!(ends(job), ends(wider));
    }
    for (result, allow_local) in [(remote_only, false), (any, true)] {
        let Ok((job, options)) = result else { continue };
        assert!(!job.files.is_empty() && job.files.len() <= MAX_FILES);
        assert!((1..=5).contains(&job.priority));
        assert!((0..=100).contains(&job.retry));
        assert!((0..=86_400).contains(&job.retry_delay));
        assert!(["auto", "none", "source", "target", "both"].contains(&job.verify.as_str()));
        assert!(
            !job.job_id.is_empty()
                && job.job_id.len() <= 64
                && job.job_id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        );
        let stored: JobOptions = serde_json::from_str(&job.options).expect("options as stored");
        assert_eq!(stored, options);
        for f in &job.files {
            for url in [&f.source, &f.dest] {
                assert!(!url.is_empty() && url.len() <= MAX_URL);
                assert!(!url.contains(['\r', '\n', '\0']), "one line: {url:?}");
            }
            let src = Location::parse(&f.source).expect("an accepted source parses");
            let dst = Location::parse(&f.dest).expect("an accepted destination parses");
            if !allow_local {
                assert!(matches!(src, Location::Remote(_)) && matches!(dst, Location::Remote(_)));
            }
            assert_eq!(f.link, submit::link(&src, &dst));
            assert!(f.filesize.is_none_or(|n| (0..=1 << 53).contains(&n)));
            if let Some(c) = &f.checksum {
                let value = c.split_once(':').map_or("", |(_, v)| v);
                assert!(value.len() <= 128 && value.chars().all(|c| c.is_ascii_hexdigit()));
            }
        }
    }
});
