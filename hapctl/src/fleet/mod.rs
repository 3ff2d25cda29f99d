//! The fleet: several edges sharing one desired state in etcd (`[fleet]`, docs/fleet.md).
//! Writers publish changes to etcd in transactions that compare revisions; every edge
//! (the writer too) follows the prefix and applies what it reads through its own safe path.

pub mod object;
