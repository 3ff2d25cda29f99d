//! Applying a change: the safe apply path, reload discipline, and the first apply on an
//! HAProxy started by someone else.

mod adoption;
mod reloads;
mod safe;
