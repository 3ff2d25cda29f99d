//! Running external programs with a bound, and looking at processes by PID.
//!
//! Every external command hapctl runs (`haproxy -c`, `systemctl`, …) goes through
//! [`run_with_timeout`], so a hung program can never hang an apply.

use std::io::{self, Read};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("`{program}` was not found; install it or configure its full path")]
    NotFound { program: String },
    #[error("`{program}` exists but cannot be executed (permission denied); check its mode and the directories leading to it")]
    NotExecutable { program: String },
    #[error("`{program}` did not finish within {after:?} and was killed; check that it is not stuck, or raise the timeout")]
    Timeout { program: String, after: Duration },
    /// Stopped by its caller (see [`run_cancellable`]): not a verdict of the program.
    #[error("`{program}` was stopped before it finished: something more urgent came first")]
    Cancelled { program: String },
    #[error("running `{program}` failed: {source}")]
    Io {
        program: String,
        #[source]
        source: io::Error,
    },
}

impl ProcessError {
    /// Classifies an error from `Command::spawn`: a missing or non-executable binary is a
    /// configuration problem the user can fix, anything else is an I/O failure.
    pub(crate) fn from_spawn(program: &str, source: io::Error) -> ProcessError {
        let program = program.to_string();
        match source.kind() {
            io::ErrorKind::NotFound => ProcessError::NotFound { program },
            io::ErrorKind::PermissionDenied => ProcessError::NotExecutable { program },
            _ => ProcessError::Io { program, source },
        }
    }
}

/// Runs `cmd` with stdin closed and stdout/stderr captured, and kills it (SIGKILL) if it has
/// not exited after `timeout`.
///
/// A non-zero exit is not an error here: the caller decides what the status means.
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Result<Output, ProcessError> {
    run_cancellable(cmd, timeout, &|| false)
}

/// [`run_with_timeout`] that also kills the program (`Cancelled`) as soon as `cancel` answers
/// true; asked at every poll, so within 20 ms. For work that may give way, like the daemon's
/// background `haproxy -c` when a change arrives.
pub fn run_cancellable(
    cmd: &mut Command,
    timeout: Duration,
    cancel: &dyn Fn() -> bool,
) -> Result<Output, ProcessError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let deadline = Instant::now() + timeout;
    let timed_out = || ProcessError::Timeout {
        program: program.clone(),
        after: timeout,
    };
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| ProcessError::from_spawn(&program, e))?;
    // Both pipes are drained concurrently: a child that fills one pipe while we block on the
    // other would otherwise never exit.
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());

    let status = match wait_until(&mut child, deadline, cancel) {
        Ok(Waited::Exited(status)) => status,
        Ok(Waited::TimedOut) => {
            kill_and_reap(&mut child);
            return Err(timed_out());
        }
        Ok(Waited::Cancelled) => {
            kill_and_reap(&mut child);
            return Err(ProcessError::Cancelled { program });
        }
        Err(source) => {
            kill_and_reap(&mut child);
            return Err(ProcessError::Io { program, source });
        }
    };
    // A background process started by the child can keep the pipes open after the child
    // exited; the deadline bounds that wait too.
    let collect = |rx: Receiver<io::Result<Vec<u8>>>| match rx
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
    {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(source)) => Err(ProcessError::Io {
            program: program.clone(),
            source,
        }),
        Err(RecvTimeoutError::Timeout) => Err(timed_out()),
        Err(RecvTimeoutError::Disconnected) => Ok(Vec::new()),
    };
    Ok(Output {
        status,
        stdout: collect(stdout)?,
        stderr: collect(stderr)?,
    })
}

fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> Receiver<io::Result<Vec<u8>>> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut pipe) = pipe {
        thread::spawn(move || {
            let mut buf = Vec::new();
            let result = pipe.read_to_end(&mut buf).map(|_| buf);
            // The receiver is gone when the caller already gave up; nothing left to do then.
            let _ = tx.send(result);
        });
    }
    rx
}

enum Waited {
    Exited(ExitStatus),
    TimedOut,
    Cancelled,
}

/// Polls the child until it exits, the deadline passes or `cancel` answers true.
///
/// Polling (instead of a blocking `wait` in another thread) keeps waiting and killing in one
/// place, so we can never kill a PID that was already reaped and reused.
fn wait_until(
    child: &mut Child,
    deadline: Instant,
    cancel: &dyn Fn() -> bool,
) -> io::Result<Waited> {
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Waited::Exited(status));
        }
        if cancel() {
            return Ok(Waited::Cancelled);
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(Waited::TimedOut);
        }
        thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

fn kill_and_reap(child: &mut Child) {
    // Errors mean the child already exited; `wait` then reaps it so no zombie is left.
    let _ = child.kill();
    let _ = child.wait();
}

/// True when a process with this PID exists and is not a zombie.
///
/// A zombie has exited but was not reaped yet (its parent may be slow, or be us): for every
/// purpose of hapctl it is dead.
pub fn pid_alive(pid: i32) -> bool {
    // PIDs <= 0 address process groups in kill(2); they never name one process.
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 performs only the existence and permission checks.
    let exists = unsafe { libc::kill(pid, 0) } == 0
        || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    exists && !is_zombie(pid)
}

/// The kernel's start time of a process (clock ticks since boot), to tell a PID from a later
/// process that reused it.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22 overall; the 20th after the state-and-comm prefix `PID (COMM) `.
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.split_whitespace().nth(19)?.parse().ok()
}

/// Sends `signal` to every process of the process group `pgid` (a session leader's group).
pub fn signal_group(pgid: i32, signal: i32) -> io::Result<()> {
    if pgid <= 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to signal process group {pgid}"),
        ));
    }
    // SAFETY: kill(2) has no memory-safety preconditions.
    if unsafe { libc::kill(-pgid, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn is_zombie(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        // No /proc (or the process just vanished): trust kill(2).
        return false;
    };
    // Format: `PID (COMM) STATE ...`; COMM may contain spaces and parentheses, so the state
    // is the first field after the *last* ')'.
    stat.rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
        .is_some_and(|state| state == "Z" || state == "X")
}

/// Sends `signal` (e.g. `libc::SIGTERM`) to one process.
pub fn send_signal(pid: i32, signal: i32) -> io::Result<()> {
    if pid <= 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to signal PID {pid}: it would address a process group"),
        ));
    }
    // SAFETY: kill(2) has no memory-safety preconditions.
    if unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captures_stdout_stderr_and_status() {
        let out = run_with_timeout(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
        assert_eq!(out.status.code(), Some(3));
    }

    #[test]
    fn large_output_on_both_pipes_does_not_deadlock() {
        // 1 MiB on each pipe: far beyond the 64 KiB pipe buffer.
        let script = "head -c 1048576 /dev/zero; head -c 1048576 /dev/zero >&2";
        let out = run_with_timeout(
            Command::new("sh").args(["-c", script]),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(out.stdout.len(), 1 << 20);
        assert_eq!(out.stderr.len(), 1 << 20);
    }

    #[test]
    fn stdin_is_closed() {
        let out = run_with_timeout(&mut Command::new("cat"), Duration::from_secs(5)).unwrap();
        assert!(out.status.success());
        assert!(out.stdout.is_empty());
    }

    #[test]
    fn a_slow_program_is_killed_at_the_deadline() {
        let started = Instant::now();
        let err = run_with_timeout(Command::new("sleep").arg("10"), Duration::from_millis(200))
            .unwrap_err();
        assert!(matches!(err, ProcessError::Timeout { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn a_cancelled_program_is_killed_and_reaped_when_asked() {
        let asked = std::cell::Cell::new(0);
        // Gives way at the third poll: the program is running by then.
        let cancel = || {
            asked.set(asked.get() + 1);
            asked.get() >= 3
        };
        let mut cmd = Command::new("sleep");
        cmd.arg("30");
        let err = run_cancellable(&mut cmd, Duration::from_secs(60), &cancel).unwrap_err();
        assert!(matches!(err, ProcessError::Cancelled { .. }), "{err}");
        assert_eq!(asked.get(), 3);
        // Reaped: no child of this test is left, not even a zombie.
        // SAFETY: gettid has no preconditions.
        let thread = unsafe { libc::gettid() };
        let children =
            std::fs::read_to_string(format!("/proc/self/task/{thread}/children")).unwrap();
        assert!(children.trim().is_empty(), "children left: {children}");
    }

    #[test]
    fn a_background_process_holding_the_pipe_is_bounded_too() {
        let started = Instant::now();
        let err = run_with_timeout(
            Command::new("sh").args(["-c", "sleep 3 & echo started"]),
            Duration::from_millis(300),
        )
        .unwrap_err();
        assert!(matches!(err, ProcessError::Timeout { .. }), "{err}");
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn missing_and_non_executable_binaries_are_told_apart() {
        let err = run_with_timeout(
            &mut Command::new("/nonexistent/haproxy"),
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(matches!(err, ProcessError::NotFound { .. }), "{err}");
        assert!(err.to_string().contains("/nonexistent/haproxy"));

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-executable");
        std::fs::write(&file, "#!/bin/sh\n").unwrap();
        let err = run_with_timeout(&mut Command::new(&file), Duration::from_secs(1)).unwrap_err();
        assert!(matches!(err, ProcessError::NotExecutable { .. }), "{err}");
    }

    #[test]
    fn pid_alive_sees_live_dead_and_zombie_processes() {
        assert!(pid_alive(std::process::id() as i32));
        assert!(!pid_alive(0));
        assert!(!pid_alive(-1));

        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        // Not reaped yet: once it exits it is a zombie, which counts as dead.
        let deadline = Instant::now() + Duration::from_secs(5);
        while pid_alive(pid) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        assert!(
            !pid_alive(pid),
            "an exited, unreaped child must count as dead"
        );
        child.wait().unwrap();
        assert!(!pid_alive(pid));
    }

    #[test]
    fn send_signal_terminates_and_refuses_groups() {
        let mut child = Command::new("sleep").arg("10").spawn().unwrap();
        let pid = child.id() as i32;
        assert!(pid_alive(pid));
        send_signal(pid, libc::SIGTERM).unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success());
        assert_eq!(
            send_signal(0, libc::SIGTERM).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
