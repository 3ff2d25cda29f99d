//! Crash consistency: SIGKILLs at every crash point and at random instants, of the apply path
//! (`apply`) and of the certificate path (`certs`).

mod apply;
mod certs;
