//! Block services for a long-lived caller (the daemon's block worker keeps a [`BlockCache`]
//! across changes), pages of the list, and the keys HAProxy holds.

use super::{Edge, EdgeError};
use crate::blocks::{BlockCache, BlockChange, BlockReport, Blocks};
use crate::clock::unix_now;
use crate::haproxy::{Master, RuntimeError, RuntimeMap};
use crate::model::BlockQuery;
use crate::render::FileId;
use crate::store::BlockPage;

impl Edge {
    /// [`Edge::change_blocks`] from what earlier changes left in `cache`: a change costs what
    /// it changes, not a read of every block.
    pub fn change_blocks_with(
        &mut self,
        cache: &mut BlockCache,
        changes: &[BlockChange],
    ) -> Result<BlockReport, EdgeError> {
        // Expired blocks are lifted by each edge on its own (and by their etcd lease).
        if self.publishes() && !changes.is_empty() {
            return self.publish_blocks(changes);
        }
        Ok(Blocks::new(&self.settings).change_with(&mut self.store, cache, changes)?)
    }

    /// Folds the delta map into the base map when there is something to fold.
    pub fn fold_blocks(&mut self, cache: &mut BlockCache) -> Result<bool, EdgeError> {
        Ok(Blocks::new(&self.settings).fold(&self.store, cache)?)
    }

    /// One page of the blocks in force, in key order.
    pub fn blocks_page(&self, query: &BlockQuery) -> Result<BlockPage, EdgeError> {
        Ok(self.store.blocks_page(query, unix_now())?)
    }

    /// The keys the running worker holds in both blocked maps (the base and the delta of the
    /// blocks since), read back over the runtime API.
    pub fn served_block_keys(&self) -> Result<Vec<String>, RuntimeError> {
        let socket = Master::from_settings(&self.settings).socket().clone();
        let mut keys = Vec::new();
        for id in [FileId::BlockedMap, FileId::BlockedDeltaMap] {
            let path = id.path(&self.settings.paths).display().to_string();
            keys.extend(RuntimeMap::new(socket.clone(), path).keys()?);
        }
        Ok(keys)
    }
}
