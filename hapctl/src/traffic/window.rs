//! Counts over time: fixed rings of time slots (pure). A slot knows which stretch of time it
//! holds (its epoch), so a slot from a lap ago reads as empty and is reset when written: no
//! timer sweeps the rings, and memory is fixed per domain whatever the traffic.

use std::ops::AddAssign;

/// Upper bounds (ms) of the request time histogram; the last bucket has no bound.
pub const TIME_BOUNDS_MS: [u32; 9] = [10, 25, 50, 100, 250, 500, 1_000, 2_500, 10_000];
const TIME_BUCKETS: usize = TIME_BOUNDS_MS.len() + 1;

/// What one stretch of time saw. Status class 0 is "no answer" (`-1`: the client left first)
/// and anything outside 100..=599.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub classes: [u32; 6],
    pub turned_away: u32,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub times: Times,
}

impl Counts {
    pub fn requests(&self) -> u64 {
        self.classes.iter().map(|c| u64::from(*c)).sum()
    }
}

/// How long answered requests took (`%Ta`), by bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Times([u32; TIME_BUCKETS]);

impl Times {
    pub fn record(&mut self, ms: u32) {
        let i = TIME_BOUNDS_MS
            .iter()
            .position(|b| ms <= *b)
            .unwrap_or(TIME_BOUNDS_MS.len());
        self.0[i] = self.0[i].saturating_add(1);
    }

    pub fn count(&self) -> u64 {
        self.0.iter().map(|c| u64::from(*c)).sum()
    }

    /// The `q` quantile (0..1) in ms, interpolated inside its bucket; the open last bucket
    /// answers its lower bound. `None` without a sample.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = (q * total as f64).ceil().max(1.0);
        let mut seen = 0.0;
        for (i, n) in self.0.iter().enumerate() {
            let n = f64::from(*n);
            if seen + n >= rank {
                let low = if i == 0 {
                    0.0
                } else {
                    f64::from(TIME_BOUNDS_MS[i - 1])
                };
                let Some(high) = TIME_BOUNDS_MS.get(i) else {
                    return Some(low);
                };
                return Some(low + (f64::from(*high) - low) * (rank - seen) / n);
            }
            seen += n;
        }
        None
    }
}

impl AddAssign<&Times> for Times {
    fn add_assign(&mut self, o: &Times) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a = a.saturating_add(b);
        }
    }
}

impl AddAssign<&Counts> for Counts {
    fn add_assign(&mut self, o: &Counts) {
        for (a, b) in self.classes.iter_mut().zip(o.classes) {
            *a = a.saturating_add(b);
        }
        self.turned_away = self.turned_away.saturating_add(o.turned_away);
        self.bytes_in += o.bytes_in;
        self.bytes_out += o.bytes_out;
        self.times += &o.times;
    }
}

/// `N` slots of `W` seconds each: the last `N - 1` whole slots and the running one.
#[derive(Debug, Clone)]
pub struct Ring<T, const N: usize, const W: u32> {
    epochs: [u32; N],
    values: [T; N],
}

impl<T: Default + Copy + for<'a> AddAssign<&'a T>, const N: usize, const W: u32> Default
    for Ring<T, N, W>
{
    fn default() -> Self {
        Ring {
            epochs: [u32::MAX; N],
            values: [T::default(); N],
        }
    }
}

impl<T: Default + Copy + for<'a> AddAssign<&'a T>, const N: usize, const W: u32> Ring<T, N, W> {
    /// The slot of the time `at` (Unix seconds), emptied first when it held an older stretch.
    pub fn slot(&mut self, at: u64) -> &mut T {
        let epoch = (at / u64::from(W)) as u32;
        let i = epoch as usize % N;
        if self.epochs[i] != epoch {
            self.epochs[i] = epoch;
            self.values[i] = T::default();
        }
        &mut self.values[i]
    }

    /// The sum of the running slot and the `back` whole slots before it, and when the
    /// oldest of them began.
    pub fn sum(&self, now: u64, back: u32) -> (T, u64) {
        let current = (now / u64::from(W)) as u32;
        let back = back.min(N as u32 - 1);
        let first = current.saturating_sub(back);
        let mut total = T::default();
        for epoch in first..=current {
            let i = epoch as usize % N;
            if self.epochs[i] == epoch {
                total += &self.values[i];
            }
        }
        (total, u64::from(first) * u64::from(W))
    }

    /// Every slot from the oldest the ring holds to the running one, oldest first, with its
    /// start (Unix seconds); an empty slot is the default value.
    pub fn points(&self, now: u64) -> Vec<(u64, T)> {
        let current = (now / u64::from(W)) as u32;
        let first = current.saturating_sub(N as u32 - 1);
        (first..=current)
            .map(|epoch| {
                let i = epoch as usize % N;
                let value = if self.epochs[i] == epoch {
                    self.values[i]
                } else {
                    T::default()
                };
                (u64::from(epoch) * u64::from(W), value)
            })
            .collect()
    }
}

/// The windows every figure is given over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Window {
    OneMinute,
    FifteenMinutes,
    OneHour,
}

impl Window {
    pub const ALL: [Window; 3] = [Window::OneMinute, Window::FifteenMinutes, Window::OneHour];

    pub fn as_str(self) -> &'static str {
        match self {
            Window::OneMinute => "1m",
            Window::FifteenMinutes => "15m",
            Window::OneHour => "1h",
        }
    }

    pub fn seconds(self) -> u64 {
        match self {
            Window::OneMinute => 60,
            Window::FifteenMinutes => 900,
            Window::OneHour => 3_600,
        }
    }
}

impl std::str::FromStr for Window {
    type Err = String;
    fn from_str(s: &str) -> Result<Window, String> {
        Window::ALL
            .into_iter()
            .find(|w| w.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not a window: 1m, 15m or 1h"))
    }
}

/// Minute slots for the 1 minute window (the running minute and the whole one before).
pub type Minutes<T> = Ring<T, 2, 60>;
/// Five-minute slots for the 15 minute window and the hour (the running one and 12 whole
/// ones). Memory is per domain: five-minute slots for the 15 minutes take a seventh of what
/// minute slots would.
pub type FiveMinutes<T> = Ring<T, 13, 300>;

/// A figure kept for every window: minute slots and five-minute slots.
#[derive(Debug, Clone, Default)]
pub struct Series<T: Default + Copy + for<'a> AddAssign<&'a T>> {
    minutes: Minutes<T>,
    fives: FiveMinutes<T>,
}

impl<T: Default + Copy + for<'a> AddAssign<&'a T>> Series<T> {
    /// Adds `f`'s change at `at` to both rings.
    pub fn record(&mut self, at: u64, f: impl Fn(&mut T)) {
        f(self.minutes.slot(at));
        f(self.fives.slot(at));
    }

    /// The window's sum and when the time it covers began: whole slots, the running one
    /// included, reaching back at least the window's length (1 min: 60 to 120 s; 15 min: 15 to
    /// 20 min; 1 h: 60 to 65 min).
    pub fn window(&self, now: u64, window: Window) -> (T, u64) {
        match window {
            Window::OneMinute => self.minutes.sum(now, 1),
            Window::FifteenMinutes => self.fives.sum(now, 3),
            Window::OneHour => self.fives.sum(now, 12),
        }
    }

    /// The hour in five-minute points, oldest first (per-domain charts).
    pub fn hour_points(&self, now: u64) -> Vec<(u64, T)> {
        self.fives.points(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_of_a_lap_ago_is_empty_and_windows_reach_back_whole_slots() {
        let mut s: Series<u32> = Series::default();
        let t0 = 1_000_000 * 300;
        s.record(t0, |c| *c += 1);
        s.record(t0 + 61, |c| *c += 2);
        s.record(t0 + 119, |c| *c += 4);
        // At t0 + 125: the running minute (t0+120..) and the one before (t0+60..).
        assert_eq!(s.window(t0 + 125, Window::OneMinute), (6, t0 + 60));
        assert_eq!(s.window(t0 + 125, Window::FifteenMinutes).0, 7);
        assert_eq!(s.window(t0 + 125, Window::OneHour).0, 7);
        // 15 minutes reach back three whole five-minute slots: t0's is in at t0 + 19 min,
        // out at t0 + 20 min; the minute slot of t0 was reused two minutes on.
        s.record(t0 + 19 * 60, |c| *c += 8);
        assert_eq!(s.window(t0 + 19 * 60, Window::FifteenMinutes), (15, t0));
        assert_eq!(s.window(t0 + 20 * 60, Window::FifteenMinutes).0, 8);
        assert_eq!(s.window(t0 + 19 * 60, Window::OneMinute).0, 8);
        // An hour on, the hour still has t0's slot; 65 minutes on, only the last one.
        assert_eq!(s.window(t0 + 61 * 60, Window::OneHour).0, 15);
        assert_eq!(s.window(t0 + 65 * 60, Window::OneHour).0, 8);
        assert_eq!(s.window(t0 + 3 * 3600, Window::OneHour).0, 0);
        assert_eq!(s.hour_points(t0 + 16 * 60).len(), 13);
    }

    #[test]
    fn quantiles_come_from_the_buckets() {
        let mut t = Times::default();
        assert_eq!(t.quantile(0.5), None);
        for ms in 1..=100 {
            t.record(ms);
        }
        // 10 samples ≤ 10 ms, 15 in (10, 25], 25 in (25, 50], 50 in (50, 100].
        assert_eq!(t.quantile(0.5), Some(50.0));
        assert_eq!(t.quantile(0.95), Some(95.0));
        assert_eq!(t.quantile(0.1), Some(10.0));
        t.record(60_000);
        assert_eq!(t.quantile(1.0), Some(10_000.0));
    }
}
