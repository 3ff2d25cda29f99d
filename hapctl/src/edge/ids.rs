//! The stable integer ids of domains and blocks (`store/ids.rs`), and the domains'
//! `backend_name` labels (`store/labels.rs`), for the edge manager's routes.

use std::collections::HashMap;

use super::{Edge, EdgeError};
use crate::model::BackendLabel;

impl Edge {
    /// Every domain's `backend_name` label, by name as stored.
    pub fn backend_labels(&self) -> Result<HashMap<String, BackendLabel>, EdgeError> {
        Ok(self.store.backend_labels()?)
    }

    /// Every domain's id, by name as stored (`*.example.com` for a wildcard).
    pub fn domain_ids(&self) -> Result<HashMap<String, i64>, EdgeError> {
        Ok(self.store.domain_ids()?)
    }

    pub fn domain_id(&self, name: &str) -> Result<Option<i64>, EdgeError> {
        Ok(self.store.domain_id(name)?)
    }

    /// Every block's id, by key.
    pub fn block_ids(&self) -> Result<HashMap<String, i64>, EdgeError> {
        Ok(self.store.block_ids()?)
    }

    pub fn block_id(&self, key: &str) -> Result<Option<i64>, EdgeError> {
        Ok(self.store.block_id(key)?)
    }
}
