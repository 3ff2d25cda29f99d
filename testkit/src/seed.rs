//! Many domains at once, the fastest real way: the rows an apply commits, written in one
//! transaction (`haproxy start` then renders, checks and loads them in one apply).

use hapctl::model::{Backend, Domain, Profile, Server, ServerName};
use hapctl::settings::Settings;
use hapctl::store::Store;

use super::Edge;

/// Writes a domain for each of `names`, each routed to `addr` (one server, no health check).
pub fn seed_domains(edge: &Edge, names: impl IntoIterator<Item = String>, addr: &str) {
    let paths = Settings::load(edge.state_dir()).unwrap().paths;
    let mut store = Store::open(&paths.database, &paths.blocks_database).unwrap();
    let tx = store.begin().unwrap();
    let server = Server::parse_spec(&format!("{addr},nocheck"), ServerName::nth(1)).unwrap();
    let backend = Backend::new(vec![server], Profile::Default).unwrap();
    let now = hapctl::clock::unix_now();
    for name in names {
        let domain: Domain = name.parse().unwrap();
        tx.put_domain(&domain, &backend, now).unwrap();
    }
    tx.commit().unwrap();
}
