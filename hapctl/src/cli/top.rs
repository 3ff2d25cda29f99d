//! `hapctl top`: traffic per domain, live, from the running `hapctl serve` (its counts live in
//! the daemon's memory: `GET /v1/traffic` over the daemon's unix socket).

use std::path::Path;
use std::time::Duration;

use clap::Args;

use hapctl::contract::TRAFFIC_MAX_LIMIT;
use hapctl::traffic::{SortKey, TrafficReport, Window, WindowReport};

use super::{forward, output, Failure};

#[derive(Args)]
pub struct TopArgs {
    /// Order: requests, errors (5xx), turned_away, bytes, p95 or domain.
    #[arg(long, short, default_value = "requests")]
    sort: SortKey,
    /// The window shown and sorted by: 1m, 15m or 1h.
    #[arg(long, short, default_value = "1m")]
    window: Window,
    /// Domains shown.
    #[arg(long, short = 'n', default_value_t = 20)]
    limit: usize,
    /// Seconds between two screens.
    #[arg(long, short = 'd', default_value_t = 2)]
    delay: u64,
    /// Screens to show before exiting (0: until interrupted).
    #[arg(long, default_value_t = 0)]
    iterations: u64,
    /// Print the report once as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(dir: &Path, args: TopArgs) -> Result<u8, Failure> {
    if !(1..=TRAFFIC_MAX_LIMIT).contains(&args.limit) {
        return Err(Failure::input(anyhow::anyhow!(
            "--limit must be 1 to {TRAFFIC_MAX_LIMIT}"
        )));
    }
    let (mut sort, mut window) = (args.sort, args.window);
    let mut shown = 0;
    // Keys change the order and the window as in top; none when stdin is not a terminal.
    let keys = Keys::enter();
    loop {
        let path = format!(
            "/v1/traffic?limit={}&sort={}&window={}",
            args.limit,
            sort.as_str(),
            window.as_str()
        );
        let report = fetch(dir, &path)?;
        if args.json {
            output::print_json(&report);
            return Ok(0);
        }
        // Clear the screen and go home, as top does.
        print!("\x1b[H\x1b[2J");
        print_screen(&report, sort, window, keys.is_some());
        shown += 1;
        if args.iterations != 0 && shown >= args.iterations {
            return Ok(0);
        }
        let delay = Duration::from_secs(args.delay.max(1));
        let Some(keys) = &keys else {
            std::thread::sleep(delay);
            continue;
        };
        match keys.next(delay).and_then(|k| Key::of(k, sort, window)) {
            Some(Key::Quit) => return Ok(0),
            Some(Key::Show(s, w)) => (sort, window) = (s, w),
            None => {}
        }
    }
}

/// What a key asks for.
enum Key {
    Quit,
    Show(SortKey, Window),
}

impl Key {
    /// r e t b p n: the order; 1 2 3: the window; q (or Ctrl-C): quit.
    fn of(byte: u8, sort: SortKey, window: Window) -> Option<Key> {
        let sort_by = |s| Some(Key::Show(s, window));
        let window_of = |w| Some(Key::Show(sort, w));
        match byte {
            b'q' | 3 => Some(Key::Quit),
            b'r' => sort_by(SortKey::Requests),
            b'e' => sort_by(SortKey::Errors),
            b't' => sort_by(SortKey::TurnedAway),
            b'b' => sort_by(SortKey::Bytes),
            b'p' => sort_by(SortKey::P95),
            b'n' => sort_by(SortKey::Domain),
            b'1' => window_of(Window::OneMinute),
            b'2' => window_of(Window::FifteenMinutes),
            b'3' => window_of(Window::OneHour),
            _ => None,
        }
    }
}

/// The terminal without line buffering, echo or signals while `top` runs (Ctrl-C comes as a
/// key and quits), restored on drop.
struct Keys {
    saved: libc::termios,
}

impl Keys {
    fn enter() -> Option<Keys> {
        // SAFETY: isatty/tcgetattr/tcsetattr on fd 0 with a termios they fill or read.
        unsafe {
            if libc::isatty(0) != 1 {
                return None;
            }
            let mut saved: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut saved) != 0 {
                return None;
            }
            let mut raw = saved;
            raw.c_lflag &= !(libc::ICANON | libc::ECHO | libc::ISIG);
            (libc::tcsetattr(0, libc::TCSANOW, &raw) == 0).then_some(Keys { saved })
        }
    }

    /// A key pressed within `wait`, if any.
    fn next(&self, wait: Duration) -> Option<u8> {
        let mut fd = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        let mut byte = 0u8;
        // SAFETY: one pollfd, and a one-byte buffer for read.
        unsafe {
            if libc::poll(&mut fd, 1, wait.as_millis() as i32) != 1 {
                return None;
            }
            (libc::read(0, (&mut byte as *mut u8).cast(), 1) == 1).then_some(byte)
        }
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        // SAFETY: restores the settings read at the start.
        unsafe {
            libc::tcsetattr(0, libc::TCSANOW, &self.saved);
        }
    }
}

fn fetch(dir: &Path, path: &str) -> Result<TrafficReport, Failure> {
    let answer = forward::send(dir, "GET", path, &())?.ok_or_else(|| {
        anyhow::anyhow!("hapctl top reads the traffic `hapctl serve` counts, and none runs for this state directory: start it (hapctl serve)")
    })?;
    if answer.status != 200 {
        return Err(answer.failure());
    }
    serde_json::from_value(answer.body).map_err(|e| {
        anyhow::anyhow!("`hapctl serve` answered /v1/traffic with an unknown shape ({e})").into()
    })
}

fn print_screen(r: &TrafficReport, sort: SortKey, window: Window, keys: bool) {
    let w = window.as_str();
    println!(
        "hapctl top: {} domains counted since {} (a restart of hapctl serve empties the counts)",
        r.tracked_domains,
        humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_secs(r.since)),
    );
    let help = if keys {
        "; keys: r e t b p n order, 1 2 3 window, q quit"
    } else {
        ""
    };
    println!("window {w}, by {}{help}", sort.as_str());
    println!(
        "{:<32} {:>8} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>9} {:>9}",
        "domain",
        "req/s",
        "2xx",
        "3xx",
        "4xx",
        "5xx",
        "away",
        "p50ms",
        "p95ms",
        "p99ms",
        "in",
        "out"
    );
    if let Some(edge) = r.edge.window(w) {
        print_row("(all)", edge);
    }
    for d in &r.domains {
        if let Some(win) = d.window(w) {
            print_row(&d.domain, win);
        }
    }
}

fn print_row(name: &str, w: &WindowReport) {
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
    println!(
        "{:<32} {:>8.2} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7} {:>9} {:>9}",
        name.chars().take(32).collect::<String>(),
        w.requests_per_second,
        w.status.s2xx,
        w.status.s3xx,
        w.status.s4xx,
        w.status.s5xx,
        w.turned_away,
        ms(w.time_ms.p50),
        ms(w.time_ms.p95),
        ms(w.time_ms.p99),
        bytes(w.bytes_in),
        bytes(w.bytes_out),
    );
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1}G", n as f64 / f64::from(1u32 << 30)),
        n if n >= 1 << 20 => format!("{:.1}M", n as f64 / f64::from(1u32 << 20)),
        n if n >= 1 << 10 => format!("{:.1}K", n as f64 / 1024.0),
        n => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_change_the_order_and_the_window() {
        let now = (SortKey::Requests, Window::OneMinute);
        let show = |k: u8| match Key::of(k, now.0, now.1) {
            Some(Key::Show(s, w)) => Some((s, w)),
            _ => None,
        };
        assert_eq!(show(b'e'), Some((SortKey::Errors, Window::OneMinute)));
        assert_eq!(show(b'3'), Some((SortKey::Requests, Window::OneHour)));
        assert_eq!(show(b'x'), None);
        assert!(matches!(Key::of(3, now.0, now.1), Some(Key::Quit)));
    }
}
