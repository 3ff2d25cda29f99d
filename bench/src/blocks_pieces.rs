//! The block path's pieces, timed in-process on a bench edge while its daemon is idle: what
//! a change costs where (load every block, render and write the base map, write a delta map,
//! `show proc`, one key's runtime add/del + read-back through the master and on the admin
//! socket, the whole-map replacement).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;
use hapctl::haproxy::{CliSocket, Master, RuntimeMap};
use hapctl::model::BlockKey;
use hapctl::render::FileId;
use hapctl::store::Store;
use serde_json::{json, Value};
use testkit::Edge;

use crate::stats::{ms, Summary};
use crate::Table;

pub struct Pieces {
    entries: usize,
    load: Summary,
    render: Summary,
    write: Summary,
    /// `write_atomic` of a 100-key delta map.
    write_delta: Summary,
    show_proc: Summary,
    /// `add map` + `get map` of one key on the worker's admin socket.
    admin_add_get: Summary,
    add_get: Summary,
    del_get: Summary,
    replace: Summary,
    show_map: Summary,
    bytes: usize,
}

/// Runs of each piece.
const PIECE_RUNS: usize = 5;
/// A key no series uses, added and removed again by [`time`].
const SCRATCH_KEY: &str = "127.250.250.250";

/// Times, in-process, what the block path does on a change, on this edge while the daemon is
/// idle: load every block from the database, render the map, write it atomically (to a scratch
/// file), ask the master for `show proc`, one key's runtime add (or del) + read-back through the
/// master socket (a scratch key, removed again), and the whole-map runtime replacement with the
/// same entries, with its `show map` check.
/// What the pieces run on: the edge's database, its blocked maps through the master and the
/// worker's admin socket, and scratch files beside the live maps' folder.
struct Handles {
    store: Store,
    runtime: RuntimeMap,
    master: Master,
    admin: RuntimeMap,
    scratch: PathBuf,
    delta_scratch: PathBuf,
}

impl Handles {
    fn open(edge: &Edge) -> anyhow::Result<Handles> {
        let paths = &edge.settings()?.paths;
        let socket = CliSocket::new(&paths.master_socket, Duration::from_secs(30));
        Ok(Handles {
            store: Store::open(&paths.database, &paths.blocks_database)?,
            runtime: RuntimeMap::new(
                socket.clone(),
                FileId::BlockedMap.path(paths).display().to_string(),
            ),
            master: Master::new(socket),
            admin: RuntimeMap::on_worker(
                CliSocket::new(&paths.admin_socket, Duration::from_secs(30)),
                FileId::BlockedDeltaMap.path(paths).display().to_string(),
            ),
            scratch: edge.path("blocked.map.bench"),
            delta_scratch: edge.path("blocked-delta.map.bench"),
        })
    }
}

pub fn time(edge: &Edge) -> anyhow::Result<Pieces> {
    let Handles {
        store,
        runtime,
        master,
        admin,
        scratch,
        delta_scratch,
    } = Handles::open(edge)?;
    let mut t: [Vec<f64>; 10] = Default::default();
    let mut bytes = 0;
    let mut entries = 0;
    let time = |v: &mut Vec<f64>, t0: Instant| v.push(t0.elapsed().as_secs_f64() * 1000.0);
    for _ in 0..PIECE_RUNS {
        let t0 = Instant::now();
        let all = store.blocks()?;
        time(&mut t[0], t0);
        entries = all.len();
        let t0 = Instant::now();
        let keys: Vec<&BlockKey> = all.iter().map(|b| &b.key).collect();
        let map = hapctl::render::blocked_map(keys.iter().copied());
        time(&mut t[1], t0);
        bytes = map.len();
        let t0 = Instant::now();
        hapctl::fsutil::write_atomic(&scratch, &map, 0o644)?;
        time(&mut t[2], t0);
        let delta = hapctl::render::blocked_delta_map(keys.iter().take(100).copied());
        let t0 = Instant::now();
        hapctl::fsutil::write_atomic(&delta_scratch, &delta, 0o644)?;
        time(&mut t[8], t0);
        let t0 = Instant::now();
        admin.add(SCRATCH_KEY, hapctl::render::BLOCKED_VALUE)?;
        admin.lookup(SCRATCH_KEY)?;
        time(&mut t[9], t0);
        admin.remove(SCRATCH_KEY)?;
        let t0 = Instant::now();
        master.show_proc()?;
        time(&mut t[3], t0);
        let t0 = Instant::now();
        runtime.add(SCRATCH_KEY, hapctl::render::BLOCKED_VALUE)?;
        runtime.lookup(SCRATCH_KEY)?;
        time(&mut t[4], t0);
        let t0 = Instant::now();
        runtime.remove(SCRATCH_KEY)?;
        runtime.lookup(SCRATCH_KEY)?;
        time(&mut t[5], t0);
        let texts: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let t0 = Instant::now();
        runtime.replace_all(
            texts
                .iter()
                .map(|k| (k.as_str(), hapctl::render::BLOCKED_VALUE)),
        )?;
        time(&mut t[6], t0);
        let t0 = Instant::now();
        let held = runtime.keys()?;
        time(&mut t[7], t0);
        if held.len() != texts.len() {
            bail!(
                "the runtime map holds {} keys, the database {}",
                held.len(),
                texts.len()
            );
        }
    }
    let _ = std::fs::remove_file(&scratch);
    let _ = std::fs::remove_file(&delta_scratch);
    Ok(Pieces::of(&t, entries, bytes))
}

impl Pieces {
    /// The pieces' summaries from `time`'s samples, indexed as it fills them.
    fn of(t: &[Vec<f64>; 10], entries: usize, bytes: usize) -> Pieces {
        let s = |v: &[f64]| Summary::of(v).expect("PIECE_RUNS > 0");
        Pieces {
            entries,
            load: s(&t[0]),
            render: s(&t[1]),
            write: s(&t[2]),
            write_delta: s(&t[8]),
            show_proc: s(&t[3]),
            admin_add_get: s(&t[9]),
            add_get: s(&t[4]),
            del_get: s(&t[5]),
            replace: s(&t[6]),
            show_map: s(&t[7]),
            bytes,
        }
    }
}

/// The pieces of each run, one row each.
pub fn table(runs: &[&Pieces]) -> Table {
    let mut table = Table::new(
        "blocks: the block path's pieces, run in-process on the same edge while the daemon is idle (median, ms)",
        &[
            "map entries",
            "Store::blocks (all)",
            "render::blocked_map",
            "write_atomic (base map)",
            "write_atomic (100-key delta)",
            "show proc",
            "add+get map (1 key, master @1)",
            "add+get map (1 key, admin socket)",
            "del+get map (1 key, base)",
            "replace_all (whole map)",
            "show map (whole)",
            "map file",
        ],
    );
    for p in runs {
        table.row(vec![
            p.entries.to_string(),
            ms(p.load.median),
            ms(p.render.median),
            ms(p.write.median),
            ms(p.write_delta.median),
            ms(p.show_proc.median),
            ms(p.add_get.median),
            ms(p.admin_add_get.median),
            ms(p.del_get.median),
            ms(p.replace.median),
            ms(p.show_map.median),
            crate::stats::bytes(p.bytes),
        ]);
    }
    table
}

pub fn json(p: &Pieces) -> Value {
    json!({
        "map_entries": p.entries,
        "store_blocks": p.load.to_json(),
        "render_blocked_map": p.render.to_json(),
        "write_atomic": p.write.to_json(),
        "write_atomic_delta": p.write_delta.to_json(),
        "show_proc": p.show_proc.to_json(),
        "admin_add_and_get_map": p.admin_add_get.to_json(),
        "add_and_get_map": p.add_get.to_json(),
        "del_and_get_map": p.del_get.to_json(),
        "replace_all": p.replace.to_json(),
        "show_map": p.show_map.to_json(),
        "bytes": p.bytes,
    })
}
