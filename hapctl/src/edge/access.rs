//! The access capability as the front ends reach it: the edge's token and audit database.

use super::{Edge, EdgeError};
use crate::access::Access;

impl Edge {
    /// This edge's tokens and audit trail (`access.db`), with the token file made the admin
    /// token `default` when `adopt` (every caller but `serve --no-auth`).
    pub fn access(&self, adopt: bool) -> Result<Access, EdgeError> {
        let access = Access::open(
            &self.settings.paths.access_database(),
            &self.settings.api.token_file,
        )?;
        if adopt {
            access.adopt_token_file()?;
        }
        Ok(access)
    }
}
