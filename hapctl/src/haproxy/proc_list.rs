//! The master CLI's `show proc`, parsed.
//!
//! 2.6 to 3.x print the same layout (2.6 shown; `show proc debug` adds columns at the end):
//! ```text
//! #<PID>          <type>          <reloads>       <uptime>        <version>
//! 5021            master          1 [failed: 0]   0d00h00m14s     2.6.12-1+deb12u4
//! # workers
//! 5489            worker          0               0d00h00m01s     2.6.12-1+deb12u4
//! # old workers
//! 5023            worker          1               0d00h00m14s     2.6.12-1+deb12u4
//! # programs
//! ```
//! Parsing is by whitespace-separated columns (PID, type, reloads, then uptime and version),
//! ignores extra trailing columns and unknown sections, and skips `program` entries.

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProcList {
    pub master: MasterProc,
    /// Current workers: the ones serving new connections.
    pub workers: Vec<WorkerProc>,
    /// Workers of earlier configurations, draining their last connections.
    pub old_workers: Vec<WorkerProc>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MasterProc {
    pub pid: i32,
    /// Reloads requested since the master started, successful or not.
    pub reloads: u32,
    /// `[failed: N]`: consecutive failed reloads (see `master.rs`); `None` when not printed.
    pub failed: Option<u32>,
    pub uptime: String,
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WorkerProc {
    pub pid: i32,
    /// Reloads this worker has lived through.
    pub reloads: u32,
    pub uptime: String,
    pub version: String,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot read the master's `show proc` answer: {reason} (line: {line:?}); is this HAProxy's master socket (-S), not a stats socket?")]
pub struct ParseError {
    pub line: String,
    pub reason: String,
}

#[derive(Clone, Copy, PartialEq)]
enum Section {
    Master,
    Workers,
    OldWorkers,
    Other,
}

impl ProcList {
    pub fn parse(text: &str) -> Result<ProcList, ParseError> {
        let mut master = None;
        let mut workers = Vec::new();
        let mut old_workers = Vec::new();
        let mut section = Section::Master;
        for line in text.lines() {
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with("#<") {
                continue;
            }
            if let Some(title) = trimmed.strip_prefix('#') {
                section = match title.trim() {
                    "workers" => Section::Workers,
                    "old workers" => Section::OldWorkers,
                    _ => Section::Other,
                };
                continue;
            }
            match section {
                Section::Master if master.is_none() => master = Some(parse_master(line)?),
                Section::Master => return Err(error(line, "a second line before `# workers`")),
                Section::Workers => workers.extend(parse_worker(line)?),
                Section::OldWorkers => old_workers.extend(parse_worker(line)?),
                Section::Other => {}
            }
        }
        let master = master.ok_or_else(|| {
            error(
                text.lines().next().unwrap_or(""),
                "no `master` line in the answer",
            )
        })?;
        Ok(ProcList {
            master,
            workers,
            old_workers,
        })
    }

    /// PIDs of every worker, current and old.
    pub fn all_worker_pids(&self) -> Vec<i32> {
        self.workers
            .iter()
            .chain(&self.old_workers)
            .map(|w| w.pid)
            .collect()
    }
}

fn parse_master(line: &str) -> Result<MasterProc, ParseError> {
    let mut cols = line.split_whitespace();
    let pid = parse_pid(line, cols.next())?;
    if cols.next() != Some("master") {
        return Err(error(
            line,
            "the first process listed is not of type `master`",
        ));
    }
    let reloads = parse_count(line, cols.next(), "reloads")?;
    let mut cols = cols.peekable();
    let failed = if cols.peek() == Some(&"[failed:") {
        cols.next();
        let n = cols.next().and_then(|c| c.strip_suffix(']'));
        Some(parse_count(line, n, "failed reloads")?)
    } else {
        None
    };
    Ok(MasterProc {
        pid,
        reloads,
        failed,
        uptime: cols.next().unwrap_or_default().to_string(),
        version: cols.next().unwrap_or_default().to_string(),
    })
}

/// `None` for a line that is not a worker (a program listed in an unexpected place).
fn parse_worker(line: &str) -> Result<Option<WorkerProc>, ParseError> {
    let mut cols = line.split_whitespace();
    let pid = parse_pid(line, cols.next())?;
    match cols.next() {
        Some("worker") => {}
        Some(_) => return Ok(None),
        None => return Err(error(line, "no process type after the PID")),
    }
    Ok(Some(WorkerProc {
        pid,
        reloads: parse_count(line, cols.next(), "reloads")?,
        uptime: cols.next().unwrap_or_default().to_string(),
        version: cols.next().unwrap_or_default().to_string(),
    }))
}

fn parse_pid(line: &str, col: Option<&str>) -> Result<i32, ParseError> {
    col.and_then(|c| c.parse::<i32>().ok())
        .filter(|pid| *pid > 0)
        .ok_or_else(|| error(line, "the first column is not a PID"))
}

fn parse_count(line: &str, col: Option<&str>, what: &str) -> Result<u32, ParseError> {
    col.and_then(|c| c.parse().ok())
        .ok_or_else(|| error(line, &format!("the {what} column is not a number")))
}

fn error(line: &str, reason: &str) -> ParseError {
    ParseError {
        line: line.to_string(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from HAProxy 2.6.12 (Debian 12), byte for byte (trailing spaces included).
    const FRESH_2_6: &str =
        "#<PID>          <type>          <reloads>       <uptime>        <version>      \n\
        6358            master          0 [failed: 0]   0d00h00m01s     2.6.12-1+deb12u4\n\
        # workers\n\
        6361            worker          0               0d00h00m01s     2.6.12-1+deb12u4\n\
        # programs\n\
        \n";

    // Two reloads while connections were held open: two old workers still draining.
    const OLD_WORKERS_2_6: &str =
        "#<PID>          <type>          <reloads>       <uptime>        <version>      \n\
        8032            master          2 [failed: 0]   0d00h00m04s     2.6.12-1+deb12u4\n\
        # workers\n\
        8124            worker          0               0d00h00m01s     2.6.12-1+deb12u4\n\
        # old workers\n\
        8120            worker          1               0d00h00m03s     2.6.12-1+deb12u4\n\
        8055            worker          2               0d00h00m03s     2.6.12-1+deb12u4\n\
        # programs\n\
        \n";

    // Then a reload of a config with a syntax error: it failed, every worker counts it and
    // the current worker stays current.
    const FAILED_2_6: &str =
        "#<PID>          <type>          <reloads>       <uptime>        <version>      \n\
        8032            master          3 [failed: 1]   0d00h00m04s     2.6.12-1+deb12u4\n\
        # workers\n\
        8124            worker          1               0d00h00m01s     2.6.12-1+deb12u4\n\
        # old workers\n\
        8120            worker          2               0d00h00m03s     2.6.12-1+deb12u4\n\
        8055            worker          3               0d00h00m03s     2.6.12-1+deb12u4\n\
        # programs\n\
        \n";

    #[test]
    fn parses_a_fresh_master() {
        let p = ProcList::parse(FRESH_2_6).unwrap();
        assert_eq!(
            p.master,
            MasterProc {
                pid: 6358,
                reloads: 0,
                failed: Some(0),
                uptime: "0d00h00m01s".into(),
                version: "2.6.12-1+deb12u4".into(),
            }
        );
        assert_eq!(p.workers.len(), 1);
        assert_eq!(p.workers[0].pid, 6361);
        assert!(p.old_workers.is_empty());
    }

    #[test]
    fn separates_current_and_old_workers() {
        let p = ProcList::parse(OLD_WORKERS_2_6).unwrap();
        assert_eq!(p.master.reloads, 2);
        assert_eq!(p.workers.iter().map(|w| w.pid).collect::<Vec<_>>(), [8124]);
        assert_eq!(
            p.old_workers.iter().map(|w| w.pid).collect::<Vec<_>>(),
            [8120, 8055]
        );
        assert_eq!(p.old_workers[1].reloads, 2);
        assert_eq!(p.all_worker_pids(), [8124, 8120, 8055]);
    }

    #[test]
    fn reads_the_failed_reload_count() {
        let p = ProcList::parse(FAILED_2_6).unwrap();
        assert_eq!(p.master.reloads, 3);
        assert_eq!(p.master.failed, Some(1));
        assert_eq!(p.workers.iter().map(|w| w.pid).collect::<Vec<_>>(), [8124]);
        assert_eq!(p.workers[0].reloads, 1);
        assert_eq!(p.old_workers.len(), 2);
    }

    #[test]
    fn tolerates_debug_columns_programs_and_no_failed_count() {
        let text = "#<PID>          <type>          <reloads>       <uptime>        <version>      \t\t <ipc_fd[0]>     <ipc_fd[1]>\n\
            100             master          4 [failed: 1]   1d02h03m04s     3.0.5-1         \t\t 5               6\n\
            # workers\n\
            200             worker          0               0d00h00m10s     3.0.5-1         \t\t 7               -1\n\
            # old workers\n\
            150             worker          1               0d00h05m00s     3.0.5-1         \t\t 9               -1\n\
            # programs\n\
            300             dataplaneapi    0               0d00h00m10s     -\n\
            # old programs\n\
            250             dataplaneapi    1               0d00h05m00s     -\n";
        let p = ProcList::parse(text).unwrap();
        assert_eq!(p.master.failed, Some(1));
        assert_eq!(p.master.version, "3.0.5-1");
        assert_eq!(p.workers[0].version, "3.0.5-1");
        assert_eq!(p.all_worker_pids(), [200, 150]);

        let old = "1 master 0 0d00h00m01s 1.9.0\n# workers\n2 worker 0 0d00h00m01s 1.9.0\n";
        let p = ProcList::parse(old).unwrap();
        assert_eq!(p.master.failed, None);
        assert_eq!(p.master.uptime, "0d00h00m01s");
    }

    #[test]
    fn errors_name_the_bad_line() {
        let e =
            ProcList::parse("Unknown command, but maybe one of the following ones\n").unwrap_err();
        assert!(e.line.starts_with("Unknown command"), "{e}");

        let e = ProcList::parse("1 master x [failed: 0] 0d 2.6\n").unwrap_err();
        assert!(e.to_string().contains("reloads column"), "{e}");

        let text = "1 master 0 [failed: 0] 0d 2.6\n# workers\nabc worker 0 0d 2.6\n";
        let e = ProcList::parse(text).unwrap_err();
        assert_eq!(e.line, "abc worker 0 0d 2.6");

        let e = ProcList::parse("").unwrap_err();
        assert!(e.reason.contains("no `master` line"), "{e}");
    }
}
