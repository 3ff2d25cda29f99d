//! How a change reaches the files and the worker: which keys it touched (net of each other)
//! and the runtime steps of each plan.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::BlockKey;

use super::cache::BlockCache;
use super::enforce::{Step, Want, Which};
use super::{BlockChange, ChangeResult, DELTA_MAX};

/// How a change reaches the files and the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Plan {
    /// Only the delta map changes.
    Delta,
    /// The base map is rewritten with every key and the delta emptied; the worker's base map
    /// takes the delta's keys and the change, entry by entry.
    Fold,
    /// Both files and both runtime maps are rewritten whole: what the worker or the files hold
    /// is not known (a killed change, files written by someone else).
    Whole,
}

impl Plan {
    /// The plan for `touched`: whole when the files or the worker are not known to hold
    /// what the database says (`unknown`), a fold when the delta map cannot take the change
    /// (a removal of a base key, or too many keys), else the delta alone.
    pub(super) fn choose(unknown: bool, delta: &BTreeSet<BlockKey>, touched: &Touched) -> Plan {
        if unknown {
            Plan::Whole
        } else if touched.gone.iter().any(|k| !delta.contains(k))
            || delta.len() + touched.new.len() > DELTA_MAX
        {
            Plan::Fold
        } else {
            Plan::Delta
        }
    }
}

/// The keys a change added, removed and only refreshed (reason or expiry), net of each other.
#[derive(Debug, Default)]
pub(super) struct Touched {
    pub new: BTreeSet<BlockKey>,
    pub gone: BTreeSet<BlockKey>,
    pub refreshed: BTreeSet<BlockKey>,
}

impl Touched {
    pub fn is_empty(&self) -> bool {
        self.new.is_empty() && self.gone.is_empty() && self.refreshed.is_empty()
    }
}

/// Applies a committed change to the key set; returns what it changed, net (a key removed and
/// added again in one batch is only refreshed).
pub(super) fn touched(
    cache: &mut BlockCache,
    changes: &[BlockChange],
    results: &[ChangeResult],
    expired: &[String],
) -> Touched {
    let mut t = Touched::default();
    for key in expired.iter().filter_map(|k| k.parse::<BlockKey>().ok()) {
        if cache.all.remove(&key) {
            t.gone.insert(key);
        }
    }
    for (change, result) in changes.iter().zip(results) {
        match (change, result) {
            (BlockChange::Put(b) | BlockChange::Add(b), ChangeResult::Created) => {
                cache.all.insert(b.key);
                if t.gone.remove(&b.key) {
                    t.refreshed.insert(b.key);
                } else {
                    t.new.insert(b.key);
                }
            }
            (BlockChange::Put(b), ChangeResult::Updated) => {
                cache.all.insert(b.key);
                if !t.new.contains(&b.key) {
                    t.refreshed.insert(b.key);
                }
            }
            (BlockChange::Remove(k), ChangeResult::Removed) => {
                cache.all.remove(k);
                t.refreshed.remove(k);
                if !t.new.remove(k) {
                    t.gone.insert(*k);
                }
            }
            _ => {}
        }
    }
    t
}

/// Only the delta map changes; a refreshed base key is checked in the base map.
pub(super) fn delta_steps(cache: &BlockCache, touched: &Touched) -> Vec<Step> {
    let mut delta: Vec<(BlockKey, Want)> = touched.new.iter().map(|k| (*k, Want::Added)).collect();
    delta.extend(touched.gone.iter().map(|k| (*k, Want::Removed)));
    let (in_delta, in_base): (Vec<BlockKey>, Vec<BlockKey>) = touched
        .refreshed
        .iter()
        .partition(|k| cache.delta.contains(k));
    delta.extend(in_delta.into_iter().map(|k| (k, Want::Present)));
    let mut steps = vec![Step::Each {
        map: Which::Delta,
        touched: delta,
        total: cache.delta.len(),
    }];
    if !in_base.is_empty() {
        steps.push(Step::Each {
            map: Which::Base,
            touched: in_base.into_iter().map(|k| (k, Want::Present)).collect(),
            total: cache.all.len() - cache.delta.len(),
        });
    }
    steps
}

/// The base map takes the old delta's keys and the change, then the delta map is emptied.
pub(super) fn fold_steps(
    cache: &BlockCache,
    old_delta: &BTreeSet<BlockKey>,
    touched: &Touched,
) -> Vec<Step> {
    // Moving keys are looked up before they are added: the worker's base map may hold them
    // already (a fold killed half-way, or a reload since the files changed).
    let mut want: BTreeMap<BlockKey, Want> = old_delta
        .iter()
        .chain(&touched.refreshed)
        .map(|k| (*k, Want::Present))
        .collect();
    want.extend(touched.new.iter().map(|k| (*k, Want::Added)));
    want.extend(touched.gone.iter().map(|k| (*k, Want::Removed)));
    vec![
        Step::Each {
            map: Which::Base,
            touched: want.into_iter().collect(),
            total: cache.all.len(),
        },
        Step::Replace {
            map: Which::Delta,
            keys: Vec::new(),
        },
    ]
}

pub(super) fn whole_steps(cache: &BlockCache) -> Vec<Step> {
    vec![
        Step::Replace {
            map: Which::Base,
            keys: cache.all.iter().copied().collect(),
        },
        Step::Replace {
            map: Which::Delta,
            keys: Vec::new(),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Block, Note};

    fn put(key: &str) -> BlockChange {
        BlockChange::Put(Block {
            key: key.parse().unwrap(),
            reason: Note::parse("reason", "").unwrap(),
            author: Note::parse("author", "").unwrap(),
            created_at: 0,
            expires_at: None,
        })
    }

    fn keys(list: &[&str]) -> BTreeSet<BlockKey> {
        list.iter().map(|k| k.parse().unwrap()).collect()
    }

    #[test]
    fn a_batch_touches_each_key_once_net_of_itself() {
        let mut cache = BlockCache::default();
        cache.all = keys(&["10.0.0.1", "10.0.0.2", "10.0.0.9"]);
        let changes = [
            put("10.0.0.3"),                                  // new
            BlockChange::Remove("10.0.0.3".parse().unwrap()), // and gone again: nothing
            put("10.0.0.1"),                                  // refreshed
            BlockChange::Remove("10.0.0.2".parse().unwrap()), // gone
            put("10.0.0.9"),                                  // expired, then again: refreshed
            put("10.0.0.4"),                                  // new
        ];
        use ChangeResult::*;
        let results = [Created, Removed, Updated, Removed, Created, Created];
        let t = touched(&mut cache, &changes, &results, &["10.0.0.9".into()]);
        assert_eq!(t.new, keys(&["10.0.0.4"]));
        assert_eq!(t.gone, keys(&["10.0.0.2"]));
        assert_eq!(t.refreshed, keys(&["10.0.0.1", "10.0.0.9"]));
        assert_eq!(cache.all, keys(&["10.0.0.1", "10.0.0.4", "10.0.0.9"]));
    }
}
