//! The traffic book (pure): per domain and for the whole edge, what the access log said, in
//! rings of time slots (`window.rs`). Bounded: at most `max_domains` names are kept apart
//! (a client may send any Host), the rest are counted together as [`OTHER`]; at most
//! [`MAX_REASONS`] distinct reasons, the rest as `other`.

use std::collections::HashMap;

use super::report::{DomainReport, Point, Reasons, TimeQuantiles, Totals, WindowReport};
use super::sample::Sample;
use super::window::{Counts, Ring, Series, Window};

/// The name the domains past `max_domains` are counted under (not a host name).
pub const OTHER: &str = "(other)";
/// Requests without a Host.
pub const NO_HOST: &str = "(no host)";
/// Distinct reasons kept apart; limits, profiles and pages are a few dozen at most.
pub const MAX_REASONS: usize = 64;

/// Cumulative figures since the daemon started (the Prometheus counters).
#[derive(Debug, Clone, Default)]
struct Cumulative {
    classes: [u64; 6],
    bytes_in: u64,
    bytes_out: u64,
}

#[derive(Debug, Clone)]
struct ReasonSeries {
    id: u16,
    total: u64,
    series: Series<u32>,
}

#[derive(Debug, Clone, Default)]
struct Domain {
    series: Series<Counts>,
    total: Cumulative,
    /// Only the reasons this domain met.
    reasons: Vec<ReasonSeries>,
}

impl Domain {
    fn record(&mut self, at: u64, s: &Sample, reason: Option<u16>) {
        self.series.record(at, |c| add(c, s));
        let t = &mut self.total;
        t.classes[s.class] += 1;
        t.bytes_in += s.bytes_in;
        t.bytes_out += s.bytes_out;
        if let Some(id) = reason {
            let i = match self.reasons.iter().position(|r| r.id == id) {
                Some(i) => i,
                None => {
                    self.reasons.push(ReasonSeries {
                        id,
                        total: 0,
                        series: Series::default(),
                    });
                    self.reasons.len() - 1
                }
            };
            let r = &mut self.reasons[i];
            r.total += 1;
            r.series.record(at, |n| *n += 1);
        }
    }

    fn requests(&self) -> u64 {
        self.total.classes.iter().sum()
    }
}

fn add(c: &mut Counts, s: &Sample) {
    c.classes[s.class] = c.classes[s.class].saturating_add(1);
    c.turned_away = c.turned_away.saturating_add(u32::from(s.reason.is_some()));
    c.bytes_in += s.bytes_in;
    c.bytes_out += s.bytes_out;
    if let Some(ms) = s.time_ms {
        c.times.record(ms);
    }
}

/// The edge's traffic since `started` (Unix seconds).
#[derive(Debug)]
pub struct Book {
    started: u64,
    max_domains: usize,
    domains: HashMap<Box<str>, Box<Domain>>,
    other: Box<Domain>,
    edge: Box<Domain>,
    /// The whole edge minute by minute over the hour, for the charts; by reason too.
    edge_minutes: Ring<Counts, 61, 60>,
    reason_minutes: Vec<Ring<u32, 61, 60>>,
    reasons: Vec<Box<str>>,
}

impl Book {
    pub fn new(started: u64, max_domains: usize) -> Book {
        Book {
            started,
            max_domains,
            domains: HashMap::new(),
            other: Box::default(),
            edge: Box::default(),
            edge_minutes: Ring::default(),
            reason_minutes: Vec::new(),
            reasons: Vec::new(),
        }
    }

    /// Counts one request that ended at `at` (Unix seconds).
    pub fn record(&mut self, at: u64, s: &Sample) {
        let reason = s.reason.as_deref().map(|r| self.reason_id(r));
        self.edge.record(at, s, reason);
        add(self.edge_minutes.slot(at), s);
        if let Some(id) = reason {
            *self.reason_minutes[usize::from(id)].slot(at) += 1;
        }
        let host = if s.host.is_empty() { NO_HOST } else { &s.host };
        if let Some(d) = self.domains.get_mut(host) {
            d.record(at, s, reason);
        } else if self.domains.len() < self.max_domains {
            let mut d = Box::<Domain>::default();
            d.record(at, s, reason);
            self.domains.insert(host.into(), d);
        } else {
            self.other.record(at, s, reason);
        }
    }

    /// The id of a reason, interned; past [`MAX_REASONS`] they share `other`.
    fn reason_id(&mut self, reason: &str) -> u16 {
        if let Some(i) = self.reasons.iter().position(|r| &**r == reason) {
            return i as u16;
        }
        let name = if self.reasons.len() < MAX_REASONS - 1 {
            reason
        } else {
            "other"
        };
        if let Some(i) = self.reasons.iter().position(|r| &**r == name) {
            return i as u16;
        }
        self.reasons.push(name.into());
        self.reason_minutes.push(Ring::default());
        (self.reasons.len() - 1) as u16
    }

    pub fn started(&self) -> u64 {
        self.started
    }

    /// Names kept apart now.
    pub fn domain_count(&self) -> usize {
        self.domains.len()
    }

    /// The whole edge.
    pub fn edge_report(&self, now: u64) -> DomainReport {
        self.report_of("*", &self.edge, now)
    }

    /// Every domain (and [`OTHER`] when it counted any), unsorted.
    pub fn domain_reports(&self, now: u64) -> Vec<DomainReport> {
        let mut all: Vec<DomainReport> = self
            .domains
            .iter()
            .map(|(name, d)| self.report_of(name, d, now))
            .collect();
        if self.other.requests() > 0 {
            all.push(self.report_of(OTHER, &self.other, now));
        }
        all
    }

    /// The reports of the `limit` domains (and [`OTHER`]) that `rank` puts first, from their
    /// counts over `window` (larger first, names break ties), in that order, built for those
    /// only: at 10,000
    /// domains a page of 50 costs 50 reports, not 10,000, while the lock is held.
    pub fn top_reports(
        &self,
        now: u64,
        window: Window,
        limit: usize,
        rank: impl Fn(&Counts) -> f64,
    ) -> Vec<DomainReport> {
        let other = (self.other.requests() > 0).then_some((OTHER, &*self.other));
        let mut ranked: Vec<(f64, &str, &Domain)> = self
            .domains
            .iter()
            .map(|(name, d)| (&**name, &**d))
            .chain(other)
            .map(|(name, d)| (rank(&d.series.window(now, window).0), name, d))
            .collect();
        let order = |a: &(f64, &str, &Domain), b: &(f64, &str, &Domain)| {
            b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1))
        };
        if limit < ranked.len() {
            ranked.select_nth_unstable_by(limit, order);
            ranked.truncate(limit);
        }
        ranked.sort_unstable_by(order);
        ranked
            .into_iter()
            .map(|(_, name, d)| self.report_of(name, d, now))
            .collect()
    }

    fn report_of(&self, name: &str, d: &Domain, now: u64) -> DomainReport {
        let windows = Window::ALL
            .into_iter()
            .map(|w| {
                let (c, from) = d.series.window(now, w);
                let from = from.max(self.started);
                let by_reason = d
                    .reasons
                    .iter()
                    .map(|r| (self.reason_name(r.id), u64::from(r.series.window(now, w).0)))
                    .filter(|(_, n)| *n > 0)
                    .collect();
                WindowReport::new(w, now.saturating_sub(from).max(1), &c, by_reason)
            })
            .collect();
        DomainReport {
            domain: name.to_string(),
            windows,
            totals: Totals {
                requests: d.requests(),
                status: d.total.classes.into(),
                bytes_in: d.total.bytes_in,
                bytes_out: d.total.bytes_out,
                turned_away: Reasons(
                    d.reasons
                        .iter()
                        .map(|r| (self.reason_name(r.id), r.total))
                        .collect(),
                ),
            },
        }
    }

    fn reason_name(&self, id: u16) -> String {
        self.reasons[usize::from(id)].to_string()
    }

    /// The whole edge's hour, minute by minute, oldest first.
    pub fn edge_points(&self, now: u64) -> Vec<Point> {
        let by_reason: Vec<(String, Vec<(u64, u32)>)> = self
            .reason_minutes
            .iter()
            .enumerate()
            .map(|(i, ring)| (self.reason_name(i as u16), ring.points(now)))
            .collect();
        points_of(self.edge_minutes.points(now), &by_reason, 60)
    }

    /// A domain's hour in five-minute points, oldest first.
    pub fn domain_points(&self, name: &str, now: u64) -> Option<Vec<Point>> {
        let d = self.domains.get(name)?;
        let by_reason: Vec<(String, Vec<(u64, u32)>)> = d
            .reasons
            .iter()
            .map(|r| (self.reason_name(r.id), r.series.hour_points(now)))
            .collect();
        let points = points_of(d.series.hour_points(now), &by_reason, 300);
        Some(points)
    }
}

/// Chart points from slots of `seconds` and each reason's slots (the same times).
fn points_of(
    slots: Vec<(u64, Counts)>,
    by_reason: &[(String, Vec<(u64, u32)>)],
    seconds: u64,
) -> Vec<Point> {
    slots
        .into_iter()
        .enumerate()
        .map(|(i, (at, c))| {
            let reasons = by_reason
                .iter()
                .map(|(name, p)| (name.clone(), u64::from(p[i].1)))
                .filter(|(_, n)| *n > 0)
                .collect();
            Point::new(at, seconds, &c, reasons)
        })
        .collect()
}

impl TimeQuantiles {
    fn of(c: &Counts) -> TimeQuantiles {
        TimeQuantiles {
            p50: c.times.quantile(0.50),
            p95: c.times.quantile(0.95),
            p99: c.times.quantile(0.99),
        }
    }
}

impl WindowReport {
    fn new(w: Window, seconds: u64, c: &Counts, by_reason: Vec<(String, u64)>) -> WindowReport {
        let requests = c.requests();
        WindowReport {
            window: w.as_str().to_string(),
            seconds,
            requests,
            requests_per_second: requests as f64 / seconds as f64,
            status: c.classes.map(u64::from).into(),
            bytes_in: c.bytes_in,
            bytes_out: c.bytes_out,
            time_ms: TimeQuantiles::of(c),
            turned_away: u64::from(c.turned_away),
            by_reason: Reasons(by_reason.into_iter().collect()),
        }
    }
}

impl Point {
    fn new(at: u64, seconds: u64, c: &Counts, by_reason: Vec<(String, u64)>) -> Point {
        Point {
            at,
            seconds,
            requests: c.requests(),
            errors: u64::from(c.classes[5]),
            turned_away: u64::from(c.turned_away),
            by_reason: Reasons(by_reason.into_iter().collect()),
            p95_ms: c.times.quantile(0.95),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::sample::parse;

    fn line(host: &str, status: i64, denied_by: &str) -> Vec<u8> {
        format!(
            r#"{{"host":"{host}","status":{status},"bytes":100,"bytes_in":10,"ta":20,"denied_by":"{denied_by}"}}"#
        )
        .into_bytes()
    }

    #[test]
    fn domains_windows_reasons_and_the_bound_on_names() {
        let t = 1_700_000_000;
        let mut book = Book::new(t - 10, 2);
        for (host, status, by) in [
            ("a.test", 200, "-"),
            ("a.test", 503, "-"),
            ("a.test", 429, "limit:req_rate"),
            ("b.test", 403, "blocked"),
            ("c.test", 200, "-"),
            ("d.test", 200, "-"),
        ] {
            book.record(t, &parse(&line(host, status, by)).unwrap());
        }
        let top = book.top_reports(t + 5, Window::OneHour, 1, |c| c.requests() as f64);
        assert_eq!(top.len(), 1);
        let a = &top[0];
        assert_eq!(a.domain, "a.test", "the most requests");
        let w = &a.windows[1];
        assert_eq!(
            (w.window.as_str(), w.requests, w.turned_away),
            ("15m", 3, 1)
        );
        assert_eq!(w.status.s5xx, 1);
        assert_eq!(w.bytes_in, 30);
        assert_eq!(w.seconds, 15, "the history starts with the daemon");
        assert_eq!(w.by_reason.0["limit:req_rate"], 1);
        // Two answered samples of 20 ms in the (10, 25] bucket; a third would move p50 to 20.
        assert_eq!(
            w.time_ms.p50,
            Some(17.5),
            "turned-away requests have no time"
        );
        assert_eq!(book.domain_count(), 2);
        let all = book.domain_reports(t + 5);
        let other = all.iter().find(|d| d.domain == OTHER).unwrap();
        assert_eq!(other.totals.requests, 2, "c and d are past the bound");
        assert_eq!(book.edge_report(t + 5).totals.requests, 6);
        let points = book.edge_points(t + 5);
        assert_eq!(points.len(), 61);
        let last = points.last().unwrap();
        assert_eq!((last.requests, last.errors, last.turned_away), (6, 1, 2));
        assert_eq!(last.by_reason.0["blocked"], 1);
        let a_points = book.domain_points("a.test", t + 5).unwrap();
        assert_eq!(a_points.last().unwrap().requests, 3);
    }
}
