//! A local SMTP sink for the alert tests: it speaks just enough SMTP (EHLO/HELO, MAIL, RCPT,
//! DATA, RSET, NOOP, QUIT) to take every message a client sends, and keeps them. On
//! 127.0.0.1, a free port, its own thread; drop stops it. Every socket read is bounded.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Bound on one read from a client, and how soon a stop is seen.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);

/// One message as received: the envelope and the data (headers and body, dot-unstuffed).
#[derive(Debug, Clone, Default)]
pub struct Mail {
    pub from: String,
    pub to: Vec<String>,
    pub data: String,
}

pub struct SmtpSink {
    pub port: u16,
    mails: Arc<Mutex<Vec<Mail>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl SmtpSink {
    pub fn start() -> SmtpSink {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the SMTP sink");
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let mails = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (m, s) = (mails.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        if let Err(e) = session(stream, &m) {
                            eprintln!("smtp sink: {e}");
                        }
                    }
                    Err(_) => std::thread::sleep(POLL),
                }
            }
        });
        SmtpSink {
            port,
            mails,
            stop,
            thread: Some(thread),
        }
    }

    /// The messages received so far.
    pub fn mails(&self) -> Vec<Mail> {
        self.mails.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for SmtpSink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One client, to its QUIT or its close.
fn session(stream: TcpStream, mails: &Mutex<Vec<Mail>>) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    let mut out = stream.try_clone()?;
    let mut lines = BufReader::new(stream);
    out.write_all(b"220 sink ESMTP\r\n")?;
    let mut mail = Mail::default();
    let mut line = String::new();
    loop {
        line.clear();
        if lines.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let verb = line.get(..4).unwrap_or("").to_ascii_uppercase();
        let arg = |prefix: &str| {
            line.get(prefix.len()..)
                .unwrap_or("")
                .trim()
                .trim_matches(['<', '>'])
                .to_string()
        };
        let answer: &[u8] = match verb.as_str() {
            "EHLO" => b"250-sink\r\n250 8BITMIME\r\n",
            "HELO" | "NOOP" => b"250 ok\r\n",
            "MAIL" => {
                mail = Mail {
                    from: arg("MAIL FROM:"),
                    ..Mail::default()
                };
                b"250 ok\r\n"
            }
            "RCPT" => {
                mail.to.push(arg("RCPT TO:"));
                b"250 ok\r\n"
            }
            "RSET" => {
                mail = Mail::default();
                b"250 ok\r\n"
            }
            "DATA" => {
                out.write_all(b"354 end with .\r\n")?;
                mail.data = data(&mut lines)?;
                mails
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(std::mem::take(&mut mail));
                b"250 queued\r\n"
            }
            "QUIT" => {
                out.write_all(b"221 bye\r\n")?;
                return Ok(());
            }
            _ => b"502 not here\r\n",
        };
        out.write_all(answer)?;
    }
}

/// The data up to the lone `.` line, dots unstuffed.
fn data(lines: &mut impl BufRead) -> std::io::Result<String> {
    let mut text = String::new();
    let mut line = String::new();
    loop {
        line.clear();
        if lines.read_line(&mut line)? == 0 {
            return Ok(text);
        }
        let l = line.trim_end_matches(['\r', '\n']);
        if l == "." {
            return Ok(text);
        }
        text.push_str(l.strip_prefix('.').unwrap_or(l));
        text.push('\n');
    }
}
