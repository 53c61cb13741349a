//! `gcp --queue`: a copy handed to the transfer service.

use super::*;

/// `gcp --queue`: plans the copy here (listing directories with the user's own logins, making
/// the destination's directories) and submits its files as one job, delegating as needed.
pub(crate) fn queue(job: &crate::copy::CopyJob, service: &str, dry_run: bool) -> u8 {
    use ferry_client::Location;
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
        let mut sessions = crate::copy::sessions_for(&job.options);
        let planned = ferry_client::plan(&job.sources, &job.dest, job.recursive, &mut sessions);
        let plan = match planned.await {
            Ok(p) => p,
            Err(e) => return crate::present::report(&e),
        };
        if dry_run {
            for j in &plan.jobs {
                out!(
                    "{} -> {}",
                    ferry_client::display(&j.src),
                    ferry_client::display(&j.dst)
                );
            }
            return exit::OK;
        }
        if let Err(e) = plan.make_remote_dirs(&mut sessions).await {
            return crate::present::report(&e);
        }
        if plan.jobs.is_empty() {
            eprintln!("gcp: nothing to queue");
            return exit::OK;
        }
        let body = ferry_service::client::copy_submission(&plan.jobs, &job.options);
        let token = std::env::var("FERRY_TOKEN").ok().filter(|t| !t.is_empty());
        let submitted = async {
            ServiceClient::for_user(service, token)?
                .submit(&body, true)
                .await
        };
        match submitted.await {
            Ok((answer, _)) => {
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
