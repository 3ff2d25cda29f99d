//! The traffic series of `/metrics` (pure). Cardinality is bounded: the `top` domains by
//! requests since the daemon started have their own series, every other one is summed into
//! `domain="(other)"`. Counters count from the daemon's start; a domain that enters the top
//! later starts its own series then (and `(other)` drops by as much, which `rate()` reads as
//! a reset).

use std::collections::BTreeMap;
use std::fmt::Write;

use super::book::OTHER;
use super::report::{DomainReport, StatusClasses};

/// The exposition text for the domains (all of them, any order) and the names kept apart.
pub fn render_metrics(mut domains: Vec<DomainReport>, top: usize, tracked: usize) -> String {
    domains.sort_by(|a, b| {
        b.totals
            .requests
            .cmp(&a.totals.requests)
            .then_with(|| a.domain.cmp(&b.domain))
    });
    let rest = if domains.len() > top {
        domains.split_off(top)
    } else {
        Vec::new()
    };
    // A domain named like the bucket itself (names past [traffic] max_domains) joins it.
    let (mut shown, merged): (Vec<_>, Vec<_>) =
        domains.into_iter().partition(|d| d.domain != OTHER);
    let other = sum_other(rest.into_iter().chain(merged));
    let quantiles: Vec<DomainReport> = shown.clone();
    shown.extend(other);
    let mut out = String::new();
    let _ = writeln!(out, "# HELP hapctl_traffic_tracked_domains Host names the traffic counts keep apart ([traffic] max_domains).\n# TYPE hapctl_traffic_tracked_domains gauge\nhapctl_traffic_tracked_domains {tracked}");
    let _ = writeln!(out, "# HELP hapctl_domain_requests_total Requests by domain and status class since the daemon started (the top [traffic] top_domains, the rest as (other)).\n# TYPE hapctl_domain_requests_total counter");
    for d in &shown {
        for (class, n) in classes(&d.totals.status) {
            let _ = writeln!(
                out,
                "hapctl_domain_requests_total{{domain=\"{}\",class=\"{class}\"}} {n}",
                escape(&d.domain)
            );
        }
    }
    let _ = writeln!(out, "# HELP hapctl_domain_turned_away_total Requests a rule answered instead of the backend, by domain and reason.\n# TYPE hapctl_domain_turned_away_total counter");
    for d in &shown {
        for (reason, n) in &d.totals.turned_away.0 {
            let _ = writeln!(
                out,
                "hapctl_domain_turned_away_total{{domain=\"{}\",reason=\"{}\"}} {n}",
                escape(&d.domain),
                escape(reason)
            );
        }
    }
    let _ = writeln!(out, "# HELP hapctl_domain_bytes_total Bytes received from (in) and sent to (out) clients, by domain.\n# TYPE hapctl_domain_bytes_total counter");
    for d in &shown {
        for (direction, n) in [("in", d.totals.bytes_in), ("out", d.totals.bytes_out)] {
            let _ = writeln!(
                out,
                "hapctl_domain_bytes_total{{domain=\"{}\",direction=\"{direction}\"}} {n}",
                escape(&d.domain)
            );
        }
    }
    let _ = writeln!(out, "# HELP hapctl_domain_time_seconds Time of the answered requests over the last minute (1 to 2 min), by domain and quantile.\n# TYPE hapctl_domain_time_seconds gauge");
    for d in &quantiles {
        let Some(w) = d.window("1m") else { continue };
        for (q, v) in [
            ("0.5", w.time_ms.p50),
            ("0.95", w.time_ms.p95),
            ("0.99", w.time_ms.p99),
        ] {
            if let Some(ms) = v {
                let _ = writeln!(
                    out,
                    "hapctl_domain_time_seconds{{domain=\"{}\",quantile=\"{q}\"}} {}",
                    escape(&d.domain),
                    ms / 1000.0
                );
            }
        }
    }
    out
}

/// The domains past the top as one `(other)` report (its totals only); `None` when there are
/// none.
fn sum_other(rest: impl Iterator<Item = DomainReport>) -> Option<DomainReport> {
    let mut other: Option<DomainReport> = None;
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    for d in rest {
        for (r, n) in &d.totals.turned_away.0 {
            *reasons.entry(r.clone()).or_default() += n;
        }
        match &mut other {
            None => other = Some(d),
            Some(o) => {
                let (t, s) = (&mut o.totals, &d.totals);
                t.requests += s.requests;
                t.bytes_in += s.bytes_in;
                t.bytes_out += s.bytes_out;
                t.status = add_classes(&t.status, &s.status);
            }
        }
    }
    other.map(|mut o| {
        o.domain = OTHER.to_string();
        o.totals.turned_away.0 = reasons;
        o.windows.clear();
        o
    })
}

fn add_classes(a: &StatusClasses, b: &StatusClasses) -> StatusClasses {
    StatusClasses {
        none: a.none + b.none,
        s1xx: a.s1xx + b.s1xx,
        s2xx: a.s2xx + b.s2xx,
        s3xx: a.s3xx + b.s3xx,
        s4xx: a.s4xx + b.s4xx,
        s5xx: a.s5xx + b.s5xx,
    }
}

fn classes(s: &StatusClasses) -> [(&'static str, u64); 6] {
    [
        ("1xx", s.s1xx),
        ("2xx", s.s2xx),
        ("3xx", s.s3xx),
        ("4xx", s.s4xx),
        ("5xx", s.s5xx),
        ("none", s.none),
    ]
}

/// A label value as the exposition format quotes it: a Host header may hold anything.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::Traffic;

    #[test]
    fn the_top_domains_have_series_the_rest_is_one() {
        let t = Traffic::new(1_000, 100);
        for (host, n) in [
            ("a.test", 5),
            ("b.test", 3),
            ("c.test", 2),
            ("d\"x.test", 1),
        ] {
            for _ in 0..n {
                let line = format!(
                    r#"{{"host":"{}","status":200,"bytes":10,"bytes_in":1,"ta":3,"denied_by":"-"}}"#,
                    host.replace('"', "\\\"")
                );
                t.record_line(1_010, line.as_bytes());
            }
        }
        let domains = t.with(|b| b.domain_reports(1_020));
        let text = render_metrics(domains, 2, 4);
        assert!(text.contains("hapctl_domain_requests_total{domain=\"a.test\",class=\"2xx\"} 5"));
        assert!(text.contains("hapctl_domain_requests_total{domain=\"b.test\",class=\"2xx\"} 3"));
        assert!(text.contains("hapctl_domain_requests_total{domain=\"(other)\",class=\"2xx\"} 3"));
        assert!(!text.contains("c.test"));
        assert!(text.contains("hapctl_domain_bytes_total{domain=\"(other)\",direction=\"out\"} 30"));
        assert!(text.contains("hapctl_domain_time_seconds{domain=\"a.test\",quantile=\"0.5\"}"));
        let all = render_metrics(t.with(|b| b.domain_reports(1_020)), 10, 4);
        assert!(all.contains("domain=\"d\\\"x.test\""), "{all}");
    }
}
