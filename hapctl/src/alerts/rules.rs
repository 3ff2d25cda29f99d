//! Conditions computed from figures (pure): what the daemon's look hands the tracker.

use super::{Alert, Kind};
use crate::traffic::DomainReport;

/// Domains whose share of 5xx answers over the 1 min window is above `ratio`, with at least
/// `min_requests` requests in it.
pub fn domain_errors(domains: &[DomainReport], ratio: f64, min_requests: u64) -> Vec<Alert> {
    domains
        .iter()
        .filter_map(|d| {
            let w = d.window("1m")?;
            let share = w.status.s5xx as f64 / w.requests.max(1) as f64;
            (w.requests >= min_requests && share > ratio).then(|| {
                Alert::new(
                    Kind::DomainErrors,
                    d.domain.clone(),
                    format!(
                        "{:.1} % of {} requests answered 5xx over the last {} s (threshold {:.1} %)",
                        share * 100.0,
                        w.requests,
                        w.seconds,
                        ratio * 100.0
                    ),
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::Traffic;

    #[test]
    fn a_domain_above_the_share_with_enough_requests() {
        let t = Traffic::new(1_000, 100);
        let send = |host: &str, status: u16, n: usize| {
            for _ in 0..n {
                let line =
                    format!(r#"{{"host":"{host}","status":{status},"ta":1,"denied_by":"-"}}"#);
                t.record_line(1_010, line.as_bytes());
            }
        };
        send("bad.test", 503, 3);
        send("bad.test", 200, 7);
        send("few.test", 503, 2);
        send("fine.test", 200, 50);
        send("fine.test", 500, 1);
        let domains = t.with(|b| b.domain_reports(1_020));
        let alerts = domain_errors(&domains, 0.05, 5);
        assert_eq!(alerts.len(), 1, "{alerts:?}");
        assert_eq!(alerts[0].subject, "bad.test");
        assert!(
            alerts[0].summary.starts_with("30.0 % of 10 requests"),
            "{}",
            alerts[0].summary
        );
    }
}
