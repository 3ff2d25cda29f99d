use super::*;
use crate::settings::{DEFAULT_SETTINGS_TOML, SETTINGS_FILE};

/// Both map files' keys, in order.
fn mapped(files: &BlockFiles) -> Vec<String> {
    let mut keys: Vec<String> = [&files.base, &files.delta]
        .iter()
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap_or_default()
                .lines()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    keys.sort();
    keys
}

/// The view an apply keeps between calls: whatever moved since (another connection's
/// commit, a block's expiry, an interrupted change) brings the files back to the database.
#[test]
fn a_kept_view_reconciles_whatever_moved_since_the_last_apply() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(SETTINGS_FILE), DEFAULT_SETTINGS_TOML).unwrap();
    let settings = Settings::load(dir.path()).unwrap();
    let paths = &settings.paths;
    std::fs::create_dir_all(&paths.run_dir).unwrap();
    std::fs::create_dir_all(BlockFiles::new(paths).base.parent().unwrap()).unwrap();
    let open = || Store::open(&paths.database, &paths.blocks_database).unwrap();
    let (mut ours, mut theirs) = (open(), open());
    let blocks = Blocks::new(&settings);
    let files = BlockFiles::new(paths);
    let mut view = BlockCache::default();
    let reconcile = |view: &mut BlockCache, store: &Store| {
        assert_eq!(
            blocks.reconcile_known(store, view).unwrap(),
            WorkerMap::NotRunning
        );
        mapped(&files)
    };

    ours.put_blocks(&[
        Block::sample("10.0.0.1", None),
        Block::sample("10.0.0.2", None),
    ]);
    assert_eq!(reconcile(&mut view, &ours), ["10.0.0.1", "10.0.0.2"]);
    assert_eq!(
        reconcile(&mut view, &ours),
        ["10.0.0.1", "10.0.0.2"],
        "in line: as it was"
    );

    // Another connection commits a block without writing the files (a killed process).
    theirs.put_blocks(&[Block::sample("10.0.0.3", None)]);
    assert_eq!(
        reconcile(&mut view, &ours),
        ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    );

    // A block whose expiry passed leaves the maps at the next apply.
    theirs.put_blocks(&[Block::sample("10.0.0.4", Some(unix_now() + 1))]);
    assert_eq!(reconcile(&mut view, &ours).len(), 4);
    std::thread::sleep(Duration::from_millis(2_100));
    assert_eq!(
        reconcile(&mut view, &ours),
        ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    );

    // Files changed behind the view's back, then an interrupted change's marker: rebuilt.
    std::fs::write(&files.delta, "192.0.2.9 1\n").unwrap();
    assert_eq!(
        reconcile(&mut view, &ours),
        ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    );
    blocks.set_pending().unwrap();
    assert_eq!(
        reconcile(&mut view, &ours),
        ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    );
    assert!(!blocks.pending_marker().exists());
}
