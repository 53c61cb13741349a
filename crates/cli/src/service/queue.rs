//! `gcp --queue`: a copy handed to the transfer service.

use super::*;

/// `gcp --queue`: plans the copy here (listing directories with the user's own logins, making
/// the destination's directories) and submits its files as one job, delegating as needed.
pub(crate) fn queue(job: &crate::copy::CopyJob, service: &str, dry_run: bool) -> u8 {
    use ferry_client::{Location, Sessions};
    for loc in job.sources.iter().chain(std::iter::once(&job.dest)) {
        if let Location::Local(p) = loc {
            eprintln!(
                "gcp: --queue: {} is on this host; the transfer service copies between transfer servers, so give a host:path (or URL) for both ends",
                p.display()
            );
            return exit::USAGE;
        }
    }
    let Some(rt) = crate::present::runtime() else {
        return 1;
    };
    rt.block_on(async {
        let gsi = std::sync::Arc::new(ferry_client::GsiSetup::new(job.options.gsi.clone()));
        let mut sessions = Sessions::with_gsi(gsi);
        let plan = match ferry_client::plan(&job.sources, &job.dest, job.recursive, &mut sessions).await {
            Ok(p) => p,
            Err(e) => return crate::present::report(&e),
        };
        let url = |l: &Location| match l {
            Location::Remote(r) => r.to_url(),
            Location::Local(p) => p.display().to_string(),
        };
        if dry_run {
            for j in &plan.jobs {
                out!("{} -> {}", url(&j.src), url(&j.dst));
            }
            return exit::OK;
        }
        for dir in &plan.dirs {
            if let Location::Remote(r) = dir {
                let made = async { sessions.get(r).await?.mkdir_all(&r.path).await };
                if let Err(e) = made.await {
                    return crate::present::report(&e);
                }
            }
        }
        let files: Vec<Value> = plan
            .jobs
            .iter()
            .map(|j| json!({"sources": [url(&j.src)], "destinations": [url(&j.dst)], "filesize": j.size}))
            .collect();
        if files.is_empty() {
            eprintln!("gcp: nothing to queue");
            return exit::OK;
        }
        let verify = match &job.options.verify {
            None => Some("none"),
            Some(v) if v.required => Some("both"),
            Some(_) => None,
        };
        let body = json!({
            "files": files,
            "params": {
                "retry": if job.options.retries == 0 { -1 } else { i64::from(job.options.retries) },
                "retry_delay": job.options.retry_wait.as_secs().max(1),
                "overwrite": true,
                "verify_checksum": verify,
                "nostreams": (job.options.request.parallelism > 0).then_some(job.options.request.parallelism),
            }
        });
        let conn = Conn {
            service: service.to_owned(),
            token: std::env::var("FERRY_TOKEN").ok().filter(|t| !t.is_empty()),
            json: false,
        };
        let submitted = async {
            let c = client(&conn)?;
            c.delegate_if_needed().await?;
            c.json(Method::POST, "/jobs", Some(&body)).await
        };
        match submitted.await {
            Ok(answer) => {
                out!("{}", answer["job_id"].as_str().unwrap_or_default());
                eprintln!(
                    "gcp: queued {} file(s) on {service}; follow with: ferry job ID",
                    plan.jobs.len()
                );
                exit::OK
            }
            Err(e) => {
                eprintln!("gcp: --queue: {e}");
                code_of(&e)
            }
        }
    })
}
