//! Running the command under proof: its own process group, bounded, output kept.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::ms;
use super::report::CommandRun;

/// Command output kept, per stream (the tail).
const MAX_OUTPUT: usize = 64 * 1024;

/// Runs the command in its own process group (killed as a whole at the timeout), stdin
/// closed, output kept. `HAPCTL_STATE_DIR` is set to the state dir measured, so a plain
/// `hapctl deliver` in the command acts on the same edge.
pub(super) fn run_command(
    argv: &[String],
    state_dir: &Path,
    timeout: Duration,
    clock: Instant,
) -> CommandRun {
    let started_ms = ms(clock);
    let start = Instant::now();
    let mut run = CommandRun {
        exit_code: None,
        signal: None,
        timed_out: false,
        spawn_error: None,
        started_ms,
        ended_ms: started_ms,
        duration_ms: 0.0,
        stdout: String::new(),
        stderr: String::new(),
    };
    let Some((program, args)) = argv.split_first() else {
        run.spawn_error = Some("no command given".into());
        return run;
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("HAPCTL_STATE_DIR", state_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            run.spawn_error = Some(format!("{program}: {e}"));
            run.ended_ms = ms(clock);
            return run;
        }
    };
    let out = keep_tail(child.stdout.take());
    let err = keep_tail(child.stderr.take());
    let deadline = start + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => {
                run.timed_out = true;
                // Its own group: the command and whatever it started in the foreground.
                // SAFETY: kill(2) has no memory-safety preconditions; the PID is our child's.
                unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
                let _ = child.kill();
                break child.wait().ok();
            }
            Ok(None) => thread::sleep(Duration::from_millis(5)),
            Err(_) => break None,
        }
    };
    run.ended_ms = ms(clock);
    run.duration_ms = start.elapsed().as_secs_f64() * 1000.0;
    if let Some(status) = status {
        use std::os::unix::process::ExitStatusExt;
        run.exit_code = status.code();
        run.signal = status.signal();
    }
    // A background process can hold the pipes open: wait for them a little, not forever.
    run.stdout = out.take(Duration::from_secs(1));
    run.stderr = err.take(Duration::from_secs(1));
    run
}

struct Tail {
    buf: Arc<Mutex<Vec<u8>>>,
    done: Arc<AtomicBool>,
}

impl Tail {
    fn take(self, wait: Duration) -> String {
        let deadline = Instant::now() + wait;
        while !self.done.load(Ordering::SeqCst) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        let buf = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&buf).into_owned()
    }
}

fn keep_tail<R: Read + Send + 'static>(pipe: Option<R>) -> Tail {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(AtomicBool::new(false));
    if let Some(mut pipe) = pipe {
        let (buf, done) = (buf.clone(), done.clone());
        thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            loop {
                match pipe.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let mut b = buf.lock().unwrap_or_else(|e| e.into_inner());
                        b.extend_from_slice(&chunk[..n]);
                        if b.len() > MAX_OUTPUT {
                            let cut = b.len() - MAX_OUTPUT;
                            b.drain(..cut);
                        }
                    }
                }
            }
            done.store(true, Ordering::SeqCst);
        });
    } else {
        done.store(true, Ordering::SeqCst);
    }
    Tail { buf, done }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_a_command_with_a_bound_and_keeps_its_output() {
        let clock = Instant::now();
        let dir = Path::new("/tmp");
        let argv = |s: &[&str]| s.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        let r = run_command(
            &argv(&["sh", "-c", "echo out; echo err >&2; exit 3"]),
            dir,
            Duration::from_secs(10),
            clock,
        );
        assert_eq!(r.exit_code, Some(3));
        assert_eq!(r.stdout, "out\n");
        assert_eq!(r.stderr, "err\n");
        let r = run_command(
            &argv(&["sh", "-c", "sleep 5"]),
            dir,
            Duration::from_millis(200),
            clock,
        );
        assert!(r.timed_out);
        assert!(r.duration_ms < 3000.0, "{}", r.duration_ms);
        let r = run_command(
            &argv(&["/nonexistent/x"]),
            dir,
            Duration::from_secs(1),
            clock,
        );
        assert!(r.spawn_error.is_some());
    }
}
