//! `ferry submit`, `ferry jobs`, `ferry job`, `ferry cancel`: the service's client commands.

use super::*;

/// The body of a submission from the command line.
pub(crate) fn submission(args: &SubmitArgs) -> Result<Value, ServiceError> {
    let mut files = Vec::new();
    let file_entry = |src: &str, dst: &str, checksum: Option<&str>| json!({"sources": [src], "destinations": [dst], "checksum": checksum});
    match (&args.src, &args.dst, &args.file) {
        (Some(s), Some(d), None) => files.push(file_entry(s, d, args.checksum.as_deref())),
        (None, None, Some(path)) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                ServiceError::Config(format!("cannot read {}: {e}", path.display()))
            })?;
            let listed = ferry_client::parse_transfer_list(&text)
                .map_err(|e| ServiceError::Config(format!("{}: {e}", path.display())))?;
            for l in &listed {
                let checksum = l.checksum.as_deref().or(args.checksum.as_deref());
                files.push(file_entry(&l.source, &l.dest, checksum));
            }
            if files.is_empty() {
                return Err(ServiceError::Config(format!(
                    "{} lists no files",
                    path.display()
                )));
            }
        }
        _ => return Err(ServiceError::Config("give SRC DST, or --file LIST".into())),
    }
    Ok(json!({
        "files": files,
        "params": {
            // FTS3 reads 0 as "the service's default" and a negative number as none.
            "retry": args.retry.map(|n| if n == 0 { -1 } else { i64::from(n) }),
            "retry_delay": args.retry_delay,
            "priority": args.priority,
            "overwrite": args.overwrite,
            "verify_checksum": args.verify,
            "nostreams": args.streams,
            "buffer_size": args.tcp_bs,
            "job_id": args.job_id,
        }
    }))
}

/// `ferry submit`.
pub(crate) fn submit(args: SubmitArgs) -> u8 {
    run_client("submit", async {
        let body = submission(&args)?;
        let c = client(&args.conn)?;
        let (answer, delegated) = c.submit(&body, !args.no_delegate).await?;
        if delegated && !args.conn.json {
            eprintln!("ferry submit: delegated a proxy to the service");
        }
        let id = answer["job_id"].as_str().unwrap_or_default().to_owned();
        if args.conn.json && !args.wait {
            out!("{answer}");
        } else {
            out!("{id}");
        }
        if !args.wait {
            return Ok(exit::OK);
        }
        wait(&c, &id, args.conn.json).await
    })
}

/// Waits for a job to end, saying its progress; its end state is the exit code (0 only for
/// FINISHED).
async fn wait(c: &ServiceClient, id: &str, json_out: bool) -> Result<u8, ServiceError> {
    let mut last = String::new();
    let job = c
        .wait(id, |job| {
            let line = progress_line(job["job_state"].as_str().unwrap_or("?"), job);
            if !json_out && line != last {
                eprintln!("{line}");
                last = line;
            }
        })
        .await?;
    let state = job["job_state"].as_str().unwrap_or("?");
    if json_out {
        let path = format!("/jobs/{id}/files");
        let files = c.json(Method::GET, &path, None).await?;
        out!("{}", json!({"job": job, "files": files}));
    } else if let Some(r) = job["reason"].as_str() {
        eprintln!("{id}: {state}: {r}");
    }
    Ok(if state == "FINISHED" { exit::OK } else { 1 })
}

/// `STATE: 3 ACTIVE, 7 FINISHED` from a job answer's `files_by_state`, with the bytes moved
/// (`bytes_transferred`) once the job has ended.
fn progress_line(state: &str, job: &Value) -> String {
    let parts: Vec<String> = job["files_by_state"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(s, n)| format!("{} {s}", n.as_i64().unwrap_or(0)))
        .collect();
    match job["bytes_transferred"].as_i64() {
        Some(b) => format!(
            "{state}: {} ({})",
            parts.join(", "),
            crate::present::human_bytes(b.max(0) as u64)
        ),
        None => format!("{state}: {}", parts.join(", ")),
    }
}

/// `ferry jobs`.
pub(crate) fn jobs(args: JobsArgs) -> u8 {
    run_client("jobs", async {
        let c = client(&args.conn)?;
        let mut q = vec![format!("limit={}", args.limit)];
        if args.all {
            q.push("state_in=SUBMITTED,ACTIVE,FINISHED,FINISHEDDIRTY,FAILED,CANCELED".into());
        } else if let Some(s) = &args.state {
            q.push(format!("state_in={}", url_escape(s)));
        }
        if let Some(u) = &args.user {
            q.push(format!("user_dn={}", url_escape(u)));
        }
        let list = c
            .json(Method::GET, &format!("/jobs?{}", q.join("&")), None)
            .await?;
        if args.conn.json {
            out!("{list}");
            return Ok(exit::OK);
        }
        let jobs = list.as_array().cloned().unwrap_or_default();
        if jobs.is_empty() {
            eprintln!("no jobs");
        }
        for j in jobs {
            out!(
                "{:<36}  {:<13}  {}  {}",
                j["job_id"].as_str().unwrap_or(""),
                j["job_state"].as_str().unwrap_or(""),
                j["submit_time"].as_str().unwrap_or(""),
                j["reason"].as_str().unwrap_or("")
            );
        }
        Ok(exit::OK)
    })
}

/// `ferry job`.
pub(crate) fn job(args: JobArgs) -> u8 {
    run_client("job", async {
        let c = client(&args.conn)?;
        let id = &args.id;
        let job = c
            .json(Method::GET, &format!("/jobs/{}", url_escape(id)), None)
            .await?;
        let files = c
            .json(
                Method::GET,
                &format!("/jobs/{}/files", url_escape(id)),
                None,
            )
            .await?;
        let mut attempts = Vec::new();
        if args.attempts {
            for f in files.as_array().into_iter().flatten() {
                let fid = f["file_id"].as_i64().unwrap_or(0);
                attempts.push(
                    c.json(
                        Method::GET,
                        &format!("/jobs/{}/files/{fid}/retries", url_escape(id)),
                        None,
                    )
                    .await?,
                );
            }
        }
        if args.conn.json {
            let mut out = json!({"job": job, "files": files});
            if args.attempts {
                out["attempts"] = Value::Array(attempts);
            }
            out!("{out}");
            return Ok(exit::OK);
        }
        out!(
            "{}  {}  submitted {}  by {}",
            job["job_id"].as_str().unwrap_or(""),
            job["job_state"].as_str().unwrap_or(""),
            job["submit_time"].as_str().unwrap_or(""),
            job["user_dn"].as_str().unwrap_or("")
        );
        if let Some(r) = job["reason"].as_str() {
            out!("  {r}");
        }
        if let Some(ig) = job["ignored_fields"].as_array().filter(|a| !a.is_empty()) {
            let names: Vec<&str> = ig.iter().filter_map(Value::as_str).collect();
            out!("  accepted but not acted on: {}", names.join(", "));
        }
        for (i, f) in files.as_array().into_iter().flatten().enumerate() {
            out!(
                "  {:<9} {} → {}  {}{}",
                f["file_state"].as_str().unwrap_or(""),
                f["source_surl"].as_str().unwrap_or(""),
                f["dest_surl"].as_str().unwrap_or(""),
                f["transferred"]
                    .as_i64()
                    .map(|b| crate::present::human_bytes(b.max(0) as u64))
                    .unwrap_or_default(),
                f["retry"]
                    .as_i64()
                    .filter(|&n| n > 0)
                    .map(|n| format!(", {n} retries"))
                    .unwrap_or_default(),
            );
            if let Some(r) = f["reason"].as_str() {
                out!("            {r}");
            }
            if let Some(list) = attempts.get(i).and_then(Value::as_array) {
                for a in list {
                    out!(
                        "            attempt {}{}: resumed at {} bytes{}",
                        a["attempt"],
                        a["host"]
                            .as_str()
                            .map(|h| format!(" on {h}"))
                            .unwrap_or_default(),
                        a["resumed_bytes"],
                        a["error"]
                            .as_str()
                            .map(|e| format!(": {e}"))
                            .unwrap_or_default()
                    );
                }
            }
        }
        Ok(exit::OK)
    })
}

/// `ferry cancel`.
pub(crate) fn cancel(args: CancelArgs) -> u8 {
    run_client("cancel", async {
        let c = client(&args.conn)?;
        let ids: Vec<String> = args.ids.iter().map(|s| url_escape(s)).collect();
        let answer = c
            .json(Method::DELETE, &format!("/jobs/{}", ids.join(",")), None)
            .await?;
        if args.conn.json {
            out!("{answer}");
            return Ok(exit::OK);
        }
        let list = match answer {
            Value::Array(a) => a,
            one => vec![one],
        };
        for j in list {
            out!(
                "{}  {}",
                j["job_id"].as_str().unwrap_or(""),
                j["job_state"].as_str().unwrap_or("")
            );
        }
        Ok(exit::OK)
    })
}
