//! The access log `hapctl serve` writes, read one bounded page at a time as `hapctl logs`
//! reads it (the same filters and parsers), for `GET /v1/logs`.

use super::Services;
use crate::contract::LogQuery;
use crate::logs::{access_log_file, read_page, LogError, LogPage};

/// The bytes of log one request examines past its cursor: a filter that matches little
/// answers a partial page (and a `next` to search on) rather than read 600 MiB of files.
pub const SCAN_BUDGET: u64 = 16 << 20;

impl Services {
    /// The page `query` asks for, newest first; [`LogError::NotAFile`] when the log goes to
    /// syslog or journald. Reads files: call it off the async threads.
    pub fn access_log_page(&self, query: &LogQuery) -> Result<LogPage, LogError> {
        let logs = self.settings().logs;
        let file = access_log_file(&logs)?;
        read_page(
            file,
            logs.keep,
            &query.filter(),
            query.limit,
            query.before.as_ref(),
            SCAN_BUDGET,
        )
    }
}
