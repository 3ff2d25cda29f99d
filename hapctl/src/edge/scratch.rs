//! `haproxy -c` of a state's files rendered into a scratch folder: what an apply of that state
//! would meet, without writing anything HAProxy reads (`apply --dry-run`, `import-legacy`).

use std::path::{Path, PathBuf};

use super::{io_err, Edge, EdgeError};
use crate::apply::ApplyError;
use crate::clock::unix_now;
use crate::haproxy::{ConfigVerdict, Validator};
use crate::model::EdgeState;
use crate::render::{self, FileId};

/// What the check of a scratch copy found.
pub struct ScratchCheck {
    pub verdict: ConfigVerdict,
    /// The haproxy.cfg that was checked, and its path as HAProxy's messages name it (the
    /// folder is gone by now).
    pub config: String,
    pub config_path: PathBuf,
}

impl Edge {
    /// Renders `state` into a scratch folder under the run folder, with the blocked maps of the
    /// database and the ACME token map as they are (the crt-list and certificates stay where
    /// they are), and checks it.
    pub fn check_scratch(&self, state: &EdgeState) -> Result<ScratchCheck, EdgeError> {
        let scratch = tempfile_dir(&self.settings.paths.run_dir)?;
        let mut staged = self.settings.clone();
        staged.paths.config = scratch.path.join("haproxy.cfg");
        staged.paths.generation = scratch.path.join("generation.cfg");
        staged.paths.maps_dir = scratch.path.join("maps");
        staged.paths.pages_dir = scratch.path.join("pages");
        let set = render::render(state, &staged, &self.templates).map_err(ApplyError::from)?;
        let blocked_map = (
            FileId::BlockedMap.path(&staged.paths),
            render::blocked_map(&self.store.block_keys(unix_now())?),
        );
        let blocked_delta = (
            FileId::BlockedDeltaMap.path(&staged.paths),
            render::blocked_delta_map(&[]),
        );
        let acme_map = (
            FileId::AcmeMap.path(&staged.paths),
            crate::fsutil::read_optional(&FileId::AcmeMap.path(&self.settings.paths))
                .map_err(io_err("cannot read the ACME token map"))?
                .unwrap_or_default(),
        );
        let files = set
            .files()
            .iter()
            .map(|f| (f.path.clone(), f.bytes.clone(), f.id.mode()));
        let data = [blocked_map, blocked_delta, acme_map]
            .map(|(path, bytes)| (path, bytes, crate::fsutil::DEFAULT_MODE));
        for (path, bytes, mode) in files.chain(data) {
            crate::fsutil::write_atomic(&path, &bytes, mode)
                .map_err(io_err("cannot write the scratch copy"))?;
        }
        let verdict = Validator::from_settings(&self.settings).check(&set.config_paths());
        let config = set
            .get(FileId::Config)
            .map(|f| String::from_utf8_lossy(&f.bytes).into_owned())
            .unwrap_or_default();
        Ok(ScratchCheck {
            verdict,
            config,
            config_path: staged.paths.config,
        })
    }
}

/// A scratch folder removed on drop.
struct ScratchDir {
    path: PathBuf,
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn tempfile_dir(parent: &Path) -> Result<ScratchDir, EdgeError> {
    let path = parent.join(format!("dry-run.{}.{}", std::process::id(), unix_now()));
    std::fs::create_dir_all(&path).map_err(io_err("cannot create a scratch folder"))?;
    Ok(ScratchDir { path })
}
