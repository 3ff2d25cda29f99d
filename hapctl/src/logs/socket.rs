//! The access-log socket: a unix stream socket HAProxy's workers connect to (the `server` of
//! the `ring` section), owned by `hapctl serve`.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

use super::LogError;

/// Binds `path` (replacing a stale socket file nobody listens on), mode 0660, with the group
/// of HAProxy's workers (`worker_gid`) when they drop to one: they connect as that user.
pub(super) fn bind(path: &Path, worker_gid: Option<u32>) -> Result<UnixListener, LogError> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(LogError::NotASocket(path.to_path_buf()));
        }
        // A socket someone listens on accepts a connection; a stale file refuses it.
        if UnixStream::connect(path).is_ok() {
            return Err(LogError::SocketInUse(path.to_path_buf()));
        }
        let _ = std::fs::remove_file(path);
    }
    let bind_error = |source| LogError::Bind {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(bind_error)?;
    }
    let listener = UnixListener::bind(path).map_err(bind_error)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(bind_error)?;
    if let Some(gid) = worker_gid {
        std::os::unix::fs::chown(path, None, Some(gid)).map_err(bind_error)?;
        check_reachable(path, gid)?;
    }
    // Accepting polls so that the acceptor notices a stop.
    listener.set_nonblocking(true).map_err(bind_error)?;
    Ok(listener)
}

/// Every folder above `socket` must be searchable by a process of group `gid` that is not the
/// folder's owner (the workers' user owns none of hapctl's folders).
fn check_reachable(socket: &Path, gid: u32) -> Result<(), LogError> {
    use std::os::unix::fs::MetadataExt;
    for dir in socket.ancestors().skip(1) {
        if dir.as_os_str().is_empty() {
            continue;
        }
        let meta = std::fs::metadata(dir).map_err(|source| LogError::Bind {
            path: socket.to_path_buf(),
            source,
        })?;
        let mode = meta.mode();
        if mode & 0o001 == 0 && !(mode & 0o010 != 0 && meta.gid() == gid) {
            return Err(LogError::Unreachable {
                socket: socket.to_path_buf(),
                dir: dir.to_path_buf(),
                gid,
            });
        }
    }
    Ok(())
}
