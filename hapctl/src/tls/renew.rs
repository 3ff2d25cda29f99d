//! When a certificate is renewed. Pure: the daemon and `hapctl cert renew` run the orders.
//!
//! Due when a third of the lifetime is left (Let's Encrypt's 90 days → day 60), or inside the
//! window the CA suggests through ACME Renewal Information (RFC 9773) when it offers one.
//! Times are jittered so a fleet does not renew in lockstep, a failure backs off
//! exponentially, and a failed renewal never touches the certificate being served.

use std::hash::{BuildHasher, Hasher};

use crate::store::CertRecord;

/// Orders in flight at once, across all certificates.
pub const MAX_IN_FLIGHT: usize = 2;
/// First retry after a failure; doubled each time, up to `MAX_BACKOFF`.
const FIRST_BACKOFF: i64 = 10 * 60;
const MAX_BACKOFF: i64 = 12 * 3600;

/// When a certificate valid from `not_before` to `not_after` is due: a third of its lifetime
/// before it ends.
pub fn due_at(not_before: i64, not_after: i64) -> i64 {
    not_after - (not_after - not_before).max(0) / 3
}

/// A random point in `[start, end)` (the ARI window, or a spread after the due time).
pub fn within(start: i64, end: i64) -> i64 {
    if end <= start {
        return start;
    }
    start + (random() % (end - start) as u64) as i64
}

/// When to try again after `failures` failures in a row (at least one), with ±10 % jitter.
pub fn retry_at(failures: u32, now: i64) -> i64 {
    let exp = failures.saturating_sub(1).min(16);
    let base = (FIRST_BACKOFF << exp).min(MAX_BACKOFF);
    now + within(base * 9 / 10, base * 11 / 10)
}

/// The ACME certificates due at `now` and not backing off, soonest first.
pub fn due(records: &[CertRecord], now: i64) -> Vec<&CertRecord> {
    let mut out: Vec<&CertRecord> = records
        .iter()
        .filter(|r| r.source.is_acme())
        .filter(|r| r.next_renewal.is_some_and(|t| t <= now))
        .filter(|r| r.retry_at.is_none_or(|t| t <= now))
        .collect();
    out.sort_by_key(|r| r.next_renewal);
    out
}

/// Process-random bits (std's per-process hash keys): enough for jitter.
fn random() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::Instant::now().elapsed().as_nanos());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_third_of_the_lifetime_before_the_end() {
        let day = 86_400;
        assert_eq!(due_at(0, 90 * day), 60 * day);
        assert_eq!(due_at(100, 100), 100);
    }

    #[test]
    fn backoff_doubles_and_stays_bounded() {
        let now = 1_000_000;
        let first = retry_at(1, now) - now;
        assert!((540..=660).contains(&first), "{first}");
        let third = retry_at(3, now) - now;
        assert!((2160..=2640).contains(&third), "{third}");
        let many = retry_at(40, now) - now;
        assert!(many <= MAX_BACKOFF * 11 / 10, "{many}");
        for _ in 0..100 {
            let t = within(10, 20);
            assert!((10..20).contains(&t));
        }
    }
}
