//! The desired state kept between reads. `load_state` parses every row again (tens of ms at
//! 10,000 domains), which an apply did twice (before and after its change). So a transaction
//! keeps what it loaded and follows its own domain writes, and the store keeps the state of
//! the last transaction it committed while nobody else writes.
//!
//! A copy is exact while the connection's `total_changes()` is what it was when the copy was
//! made (or brought up to date): any write the copy does not follow changes that count, and
//! the next read parses the rows again. Another connection's commit changes `PRAGMA
//! data_version`; then the process's shared copy (`serial.rs`) is taken when the database's
//! state serial says it is current, so the daemon's connections parse a change once, not once
//! each. Debug builds (every test) check each hit against a full load.

use rusqlite::Connection;

use super::serial::{self, SharedCopy};
use super::{load_state, StoreError};
use crate::model::EdgeState;

/// A copy of the state and the connection's change count at which it is exact.
#[derive(Debug, Clone)]
pub(super) struct Copy {
    state: EdgeState,
    changes: u64,
}

impl Copy {
    pub(super) fn state(&self) -> &EdgeState {
        &self.state
    }
}

/// The store's copy between transactions, with the data version it was read at, and the
/// copy this connection shares with the others of the process.
#[derive(Debug, Default)]
pub(super) struct Committed {
    own: Option<(Copy, i64)>,
    /// Only between connections that were told to share (`Store::share_state_with`).
    shared: Option<SharedCopy>,
}

fn data_version(conn: &Connection) -> Result<i64, StoreError> {
    Ok(conn.query_row("PRAGMA data_version", [], |r| r.get(0))?)
}

impl Committed {
    /// Shares copies with `other`'s connection from now on.
    pub(super) fn share_with(&mut self, other: &mut Committed) {
        self.shared = Some(other.shared.get_or_insert_default().clone());
    }

    /// The shared copy, if it is the state the rows hold now.
    fn shared_copy(&self, conn: &Connection) -> Result<Option<Copy>, StoreError> {
        let Some(shared) = &self.shared else {
            return Ok(None);
        };
        Ok(shared.get(serial::read(conn)?).map(|state| Copy {
            state,
            changes: conn.total_changes(),
        }))
    }

    /// Offers a copy exact at `conn`'s current state to the shared slot.
    fn offer(&self, conn: &Connection, state: &EdgeState) -> Result<(), StoreError> {
        if let Some(shared) = &self.shared {
            shared.put(serial::read(conn)?, state);
        }
        Ok(())
    }

    /// Forgets this connection's copy (the shared one stays: its serial guards it).
    pub(super) fn forget(&mut self) {
        self.own = None;
    }

    /// The copy, if it is still exact on `conn` (taken out: the transaction owns it now),
    /// else the shared one if it is the state the rows hold.
    pub(super) fn take(&mut self, conn: &Connection) -> Result<Option<Copy>, StoreError> {
        match self.own.take() {
            Some((copy, version))
                if copy.changes == conn.total_changes() && version == data_version(conn)? =>
            {
                Ok(Some(copy))
            }
            _ => self.shared_copy(conn),
        }
    }

    /// Keeps a transaction's copy at its commit, when it is exact; returns the serial it is
    /// the state of, to [`Committed::share`] once the commit succeeded.
    pub(super) fn keep(
        &mut self,
        copy: Option<Copy>,
        conn: &Connection,
    ) -> Result<Option<i64>, StoreError> {
        self.own = match copy.filter(|c| c.changes == conn.total_changes()) {
            Some(copy) => Some((copy, data_version(conn)?)),
            None => return Ok(None),
        };
        match self.shared {
            Some(_) => Ok(Some(serial::read(conn)?)),
            None => Ok(None),
        }
    }

    /// Hands the committed copy to the connections this one shares with.
    pub(super) fn share(&self, serial: Option<i64>) {
        if let (Some(shared), Some(serial), Some((copy, _))) = (&self.shared, serial, &self.own) {
            shared.put(serial, &copy.state);
        }
    }

    /// The copy as of now, taken out (parsed from the rows when there is none or it is not
    /// exact), with the data version it is exact at; [`Committed::put`] keeps it again.
    ///
    /// One read transaction covers the version and the rows: outside one, another
    /// connection's commit between two of `load_state`'s queries gives a state that is neither,
    /// and a commit between the load and a later `data_version` would tag an old copy as
    /// current, so every later read would return it.
    pub(super) fn read(&mut self, conn: &Connection) -> Result<(Copy, i64), StoreError> {
        let tx = conn.unchecked_transaction()?;
        let version = data_version(&tx)?;
        let copy = match self.take(&tx)? {
            Some(copy) => checked(copy, &tx)?,
            None => {
                let copy = Copy {
                    state: parse(&tx)?,
                    changes: tx.total_changes(),
                };
                self.offer(&tx, &copy.state)?;
                copy
            }
        };
        tx.commit()?;
        Ok((copy, version))
    }

    /// Runs `write`, which changes no desired-state row (a fleet record, say): a copy exact
    /// before it stays exact, so the next transaction does not parse every row again.
    pub(super) fn beside<T>(
        &mut self,
        conn: &Connection,
        write: impl FnOnce() -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let was_exact = matches!(&self.own, Some((c, _)) if c.changes == conn.total_changes());
        let out = write()?;
        match &mut self.own {
            Some((copy, _)) if was_exact => copy.changes = conn.total_changes(),
            _ => self.own = None,
        }
        Ok(out)
    }

    /// Keeps a copy [`Committed::read`] returned, at the version it was read at.
    pub(super) fn put(&mut self, copy: Copy, version: i64) {
        self.own = Some((copy, version));
    }
}

/// A transaction's copy: what it loaded, followed through its domain writes.
#[derive(Debug, Default)]
pub(super) struct Mirror(std::cell::RefCell<Option<Copy>>);

impl Mirror {
    pub(super) fn new(copy: Option<Copy>) -> Mirror {
        Mirror(std::cell::RefCell::new(copy))
    }

    pub(super) fn into_copy(self) -> Option<Copy> {
        self.0.into_inner()
    }

    fn exact(&self, conn: &Connection) -> bool {
        matches!(&*self.0.borrow(), Some(c) if c.changes == conn.total_changes())
    }

    /// The state: the copy when exact, else the rows (and the copy is made again).
    pub(super) fn load(&self, conn: &Connection) -> Result<EdgeState, StoreError> {
        if self.exact(conn) {
            let copy = self.0.borrow().clone().expect("exact implies a copy");
            return Ok(checked(copy, conn)?.state);
        }
        let state = parse(conn)?;
        *self.0.borrow_mut() = Some(Copy {
            state: state.clone(),
            changes: conn.total_changes(),
        });
        Ok(state)
    }

    /// Runs `write`; when the copy was exact before it, `update` makes the same change to the
    /// copy, which stays exact. `write` must change exactly what `update` does.
    pub(super) fn follow<T>(
        &self,
        conn: &Connection,
        write: impl FnOnce() -> Result<T, StoreError>,
        update: impl FnOnce(&mut EdgeState),
    ) -> Result<T, StoreError> {
        let was_exact = self.exact(conn);
        let out = write()?;
        if let (true, Some(copy)) = (was_exact, self.0.borrow_mut().as_mut()) {
            update(&mut copy.state);
            copy.changes = conn.total_changes();
        }
        Ok(out)
    }
}

/// The state parsed from the rows, for a copy. The parse reads every page once and the copy
/// then holds what they say, so the connection's page cache hands them back instead of keeping
/// them too (the next parse reads them from the OS's page cache).
fn parse(conn: &Connection) -> Result<EdgeState, StoreError> {
    let state = load_state(conn)?;
    conn.execute_batch("PRAGMA shrink_memory")?;
    Ok(state)
}

/// In debug builds, a hit must equal what the rows say.
fn checked(copy: Copy, conn: &Connection) -> Result<Copy, StoreError> {
    if cfg!(debug_assertions) {
        let rows = load_state(conn)?;
        assert_eq!(
            copy.state, rows,
            "the cached desired state drifted from the database"
        );
    }
    Ok(copy)
}
