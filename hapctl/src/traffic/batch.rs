//! Access-log lines waiting to be counted (pure): the counting thread takes them a batch at
//! a time rather than waking for every chunk the log's writer receives, and each line keeps
//! the second it was received in.

/// Whole lines in the order received, cut in runs of one second each.
#[derive(Debug, Default)]
pub struct Batch {
    bytes: Vec<u8>,
    /// Each run's second (Unix seconds) and where it ends in `bytes`.
    runs: Vec<(u64, usize)>,
}

/// Capacity a batch keeps once counted: a burst's buffer is given back.
const KEPT_CAPACITY: usize = 1 << 20;

impl Batch {
    /// Adds `chunk` (whole lines) received at `at`.
    pub fn push(&mut self, at: u64, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        let end = self.bytes.len();
        match self.runs.last_mut() {
            Some((second, last)) if *second == at => *last = end,
            _ => self.runs.push((at, end)),
        }
    }

    /// Bytes waiting.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Each run's second and lines, oldest first.
    pub fn runs(&self) -> impl Iterator<Item = (u64, &[u8])> {
        let starts = std::iter::once(0).chain(self.runs.iter().map(|(_, end)| *end));
        self.runs
            .iter()
            .zip(starts)
            .map(|((at, end), start)| (*at, &self.bytes[start..*end]))
    }

    /// Empties the batch for reuse.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.bytes.shrink_to(KEPT_CAPACITY);
        self.runs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_keep_the_second_they_were_received_in() {
        let mut b = Batch::default();
        assert!(b.is_empty());
        b.push(100, b"a\n");
        b.push(100, b"b\nc\n");
        b.push(101, b"d\n");
        b.push(103, b"e\n");
        let runs: Vec<(u64, &[u8])> = b.runs().collect();
        assert_eq!(
            runs,
            [(100, &b"a\nb\nc\n"[..]), (101, b"d\n"), (103, b"e\n")]
        );
        assert_eq!(b.len(), 10);
        b.clear();
        assert!(b.is_empty());
        assert_eq!(b.runs().count(), 0);
    }
}
