//! Edge protections: per-client rate limits and tarpits on a stick table keyed by the real
//! client IP, and the security stats read back from that table.
//!
//! - `edit`: limit edits from the CLI and the API, checked (pure);
//! - `maps`: the limit maps and the template's view (pure);
//! - `table`: parsing `show table` into named counters (pure);
//! - `stats`: the runtime API side (`show table`, `clear table`);
//! - `profiles`: opt-in path protections per domain (`wordpress`), typed rules (pure).

pub mod edit;
pub mod maps;
pub mod profiles;
pub mod stats;
pub mod table;

pub use edit::{parse_switch, EdgeEdit, PolicyEdit};
pub use maps::{DEFAULT_KEY, TABLE};
pub use stats::{SecurityStats, Stats, StatsError};
pub use table::{ClientRow, TableDump, TableError};
