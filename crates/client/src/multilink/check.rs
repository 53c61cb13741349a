//! What a multilink copy checks afterwards: every destination the client can reach holds the
//! source's bytes (its checksum, or its size with `--no-verify`).

use std::sync::Arc;

use ferry_proto::multicast::Destination;

use super::Plan;
use crate::{GsiSetup, Location, RemoteSession};

/// What a good copy must show: the source's checksum, or its size with --no-verify.
pub(super) enum Expected {
    Checksum(&'static str, String),
    Size(u64),
}

impl Expected {
    pub(super) fn what(&self) -> String {
        match self {
            Expected::Checksum(alg, _) => format!("{alg} compared"),
            Expected::Size(_) => "size compared".into(),
        }
    }
}

pub(super) async fn expected(
    source: &Location,
    verify: Option<&crate::Verify>,
    gsi: &Arc<GsiSetup>,
) -> Result<Expected, String> {
    let Some(verify) = verify else {
        return super::source_size(source, gsi).await.map(Expected::Size);
    };
    let alg = verify.algorithm.name();
    let value = match source {
        Location::Local(p) => {
            // As the copy's own verification sums a local end: the storage's checksum.
            let shown = p.display().to_string();
            let abs = std::path::absolute(p).map_err(|e| format!("{shown}: {e}"))?;
            let vp = ferry_storage::VirtualPath::resolve(
                &ferry_storage::VirtualPath::root(),
                &abs.to_string_lossy(),
            )
            .map_err(|e| format!("{shown}: {e}"))?;
            let alg = verify.algorithm;
            tokio::task::spawn_blocking(move || {
                let storage = ferry_storage::PosixStorage::open(std::path::Path::new("/"), true)?;
                ferry_storage::Storage::checksum(&storage, &vp, alg, 0, None)
            })
            .await
            .map_err(|e| format!("checksum task failed: {e}"))?
            .map_err(|e| format!("{shown}: {e}"))?
        }
        Location::Remote(u) => {
            let mut s = RemoteSession::connect(u, gsi)
                .await
                .map_err(|e| e.to_string())?;
            s.checksum(&u.path, alg, 0, None)
                .await
                .map_err(|e| e.to_string())?
        }
    };
    Ok(Expected::Checksum(alg, value))
}

/// The stored destinations that do not hold the source's bytes, with what is wrong; all are
/// asked at once.
pub(super) async fn check_all(
    plan: &Plan,
    expected: &Arc<Expected>,
    gsi: &Arc<GsiSetup>,
) -> Vec<(Destination, String)> {
    let mut set = tokio::task::JoinSet::new();
    for d in plan.stored.iter().cloned() {
        let (expected, gsi) = (Arc::clone(expected), Arc::clone(gsi));
        set.spawn(async move {
            let got = check(&d.url, &expected, &gsi).await;
            (d, got)
        });
    }
    let mut good = Vec::new();
    let mut failed = Vec::new();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((d, Ok(()))) => good.push(d.url),
            Ok((d, Err(why))) => failed.push((d, why)),
            Err(e) => tracing::warn!("a check stopped: {e}"),
        }
    }
    // A check that stopped without an answer counts as a failure.
    for d in &plan.stored {
        if !good.contains(&d.url) && !failed.iter().any(|(f, _)| f.url == d.url) {
            failed.push((d.clone(), "not checked: the check stopped".into()));
        }
    }
    failed
}

/// Whether the copy at `url` holds the source's bytes.
async fn check(url: &str, expected: &Expected, gsi: &Arc<GsiSetup>) -> Result<(), String> {
    let Ok(Location::Remote(u)) = Location::parse(url) else {
        return Err("not a server URL".into());
    };
    let mut s = RemoteSession::connect(&u, gsi)
        .await
        .map_err(|e| e.to_string())?;
    match expected {
        Expected::Checksum(alg, want) => {
            let got = s
                .checksum(&u.path, alg, 0, None)
                .await
                .map_err(|e| e.to_string())?;
            if &got == want {
                Ok(())
            } else {
                Err(format!("{alg} {got} where the source has {want}"))
            }
        }
        Expected::Size(want) => {
            let got = s.size(&u.path).await.map_err(|e| e.to_string())?;
            if got == *want {
                Ok(())
            } else {
                Err(format!("{got} bytes where the source has {want}"))
            }
        }
    }
}
