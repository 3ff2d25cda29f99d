//! The apply history: one row per apply, with the diff of the rendered files it changed.

use rusqlite::{params, OptionalExtension, Row};

use super::{ApplyRecord, Store, StoreError, Tx};

/// The unified diff each apply made (`apply::diff`, bounded; empty when no file changed).
pub(super) const MIGRATION: &str = "ALTER TABLE applies ADD COLUMN diff TEXT NOT NULL DEFAULT '';";

/// One apply as the API lists it: the record, how big its diff is, and the diff itself when
/// one apply was asked for (a list stays small).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ApplyEntry {
    #[serde(flatten)]
    pub record: ApplyRecord,
    /// Bytes of the stored diff (0: no rendered file changed, or an apply older than diffs).
    pub diff_bytes: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

const COLUMNS: &str =
    "id, started_at_ms, duration_ms, trigger, outcome, message, checks, reloads, \
                       changed_files, reload_reasons, length(diff)";

fn entry(r: &Row) -> rusqlite::Result<ApplyEntry> {
    let files: String = r.get(8)?;
    let reasons: String = r.get(9)?;
    Ok(ApplyEntry {
        record: ApplyRecord {
            id: r.get(0)?,
            started_at_ms: r.get(1)?,
            duration_ms: r.get(2)?,
            trigger: r.get(3)?,
            outcome: r.get(4)?,
            message: r.get(5)?,
            checks: r.get(6)?,
            reloads: r.get(7)?,
            changed_files: files.split_whitespace().map(String::from).collect(),
            reload_reasons: reasons.lines().map(String::from).collect(),
        },
        diff_bytes: r.get(10)?,
        diff: None,
    })
}

impl Store {
    /// Newest first.
    pub fn applies(&self, limit: usize) -> Result<Vec<ApplyRecord>, StoreError> {
        Ok(self
            .apply_entries(limit)?
            .into_iter()
            .map(|e| e.record)
            .collect())
    }

    /// Newest first, with the size of each diff (not the diff).
    pub fn apply_entries(&self, limit: usize) -> Result<Vec<ApplyEntry>, StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {COLUMNS} FROM applies ORDER BY id DESC LIMIT ?1"
        ))?;
        let rows = stmt.query_map([limit as i64], entry)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// One apply with its diff.
    pub fn apply_entry(&self, id: i64) -> Result<Option<ApplyEntry>, StoreError> {
        let sql = format!("SELECT {COLUMNS}, diff FROM applies WHERE id = ?1");
        let found = self
            .conn
            .query_row(&sql, [id], |r| {
                let mut e = entry(r)?;
                e.diff = Some(r.get(11)?);
                Ok(e)
            })
            .optional()?;
        Ok(found)
    }

    /// Records an apply and its diff in its own transaction (for applies whose change was
    /// rolled back).
    pub fn record_apply_diff(&mut self, rec: &ApplyRecord, diff: &str) -> Result<(), StoreError> {
        let tx = self.begin()?;
        tx.record_apply_diff(rec, diff)?;
        tx.commit()
    }
}

impl Tx<'_> {
    pub fn record_apply_diff(&self, rec: &ApplyRecord, diff: &str) -> Result<(), StoreError> {
        // History is not desired state: the mirror stays exact.
        self.mirror.follow(
            &self.tx,
            || {
                self.tx.execute(
                    "INSERT INTO applies (started_at_ms, duration_ms, trigger, outcome, message, checks, reloads, changed_files, reload_reasons, diff)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                    params![
                        rec.started_at_ms,
                        rec.duration_ms,
                        rec.trigger,
                        rec.outcome,
                        rec.message,
                        rec.checks,
                        rec.reloads,
                        rec.changed_files.join(" "),
                        rec.reload_reasons.join("\n"),
                        diff
                    ],
                )?;
                Ok(())
            },
            |_| {},
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(outcome: &str) -> ApplyRecord {
        ApplyRecord {
            id: 0,
            started_at_ms: 1,
            duration_ms: 2,
            trigger: "t".into(),
            outcome: outcome.into(),
            message: String::new(),
            checks: 1,
            reloads: 0,
            changed_files: vec!["haproxy.cfg".into(), "maps/hosts.map".into()],
            reload_reasons: vec!["config: haproxy.cfg changed".into()],
        }
    }

    #[test]
    fn history_is_newest_first_and_keeps_each_diff() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("s.db"), &dir.path().join("b.db")).unwrap();
        store.record_apply(&rec("applied")).unwrap();
        store
            .record_apply_diff(&rec("rejected"), "--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n")
            .unwrap();
        let h = store.applies(10).unwrap();
        assert_eq!(h[0].outcome, "rejected");
        assert_eq!(h[1].changed_files.len(), 2);
        let list = store.apply_entries(10).unwrap();
        assert_eq!((list[0].diff_bytes, list[1].diff_bytes), (30, 0));
        assert!(
            list.iter().all(|e| e.diff.is_none()),
            "a list holds no diff"
        );
        let one = store.apply_entry(list[0].record.id).unwrap().unwrap();
        assert_eq!(one.diff.as_deref().unwrap().lines().last(), Some("+y"));
        assert_eq!(one.record, list[0].record);
        assert!(store.apply_entry(999).unwrap().is_none());
    }
}
