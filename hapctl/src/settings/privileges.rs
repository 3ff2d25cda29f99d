//! `[haproxy] user`, `group`, `chroot`: what HAProxy's workers drop to when the master starts
//! as root.
//!
//! The default is decided by `hapctl init`, not at render time: init writes `user = "haproxy"`
//! when that account exists on the host (Debian's package creates it), else `user = ""`. The
//! choice is then visible in the file and stable: installing or removing a package later never
//! changes, on the next reload, the user an edge's workers run as, and rendering stays pure. A
//! file without the key (written before the setting existed) keeps the workers as the starting
//! user.
//!
//! Only the workers drop: the master stays root and reads the configuration, maps, pages and
//! certificates (0600 root) at start and at every reload. Workers only send the access log to
//! `hapctl serve` over loopback TCP (which admits the workers' user, see `crate::logs`) and
//! answer on sockets the master bound; certificates reach them through the admin socket, never as files.

use std::ffi::{CStr, CString};
use std::path::PathBuf;

use crate::model::bounded;

use super::{LogSettings, LogTarget, Mode};

/// The account workers run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub id: u32,
}

/// What the workers drop to. Rendered (`user`/`group`/`chroot` in `global`) only when the
/// master starts as root: HAProxy refuses `user` otherwise.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Privileges {
    pub user: Option<Account>,
    pub group: Option<Account>,
    pub chroot: Option<PathBuf>,
    /// Whether the master starts as root: hapctl's own effective user in `direct` mode; in
    /// `systemd` mode the unit starts it, and units run HAProxy's master as root.
    pub master_is_root: bool,
}

impl Privileges {
    /// The drop HAProxy actually makes; all `None` when the master does not start as root.
    pub fn effective(&self) -> Privileges {
        if self.master_is_root {
            self.clone()
        } else {
            Privileges::default()
        }
    }

    /// The user the workers send the access log as, when they drop.
    pub fn worker_user(&self) -> Option<u32> {
        self.effective().user.map(|u| u.id)
    }
}

/// The account `hapctl init` writes as the default when it exists on this host.
pub const DEFAULT_USER: &str = "haproxy";

/// Whether `name` is a user of this host (for `hapctl init`'s default).
pub fn user_exists(name: &str) -> bool {
    lookup_user(name).is_some()
}

/// An error is `(key, message)`.
pub(super) fn resolve(
    user: Option<String>,
    group: Option<String>,
    chroot: Option<PathBuf>,
    mode: Mode,
    logs: &LogSettings,
    resolve_path: impl Fn(PathBuf) -> PathBuf,
) -> Result<Privileges, (String, String)> {
    let user = resolve_user(user.as_deref())?;
    let group = resolve_group(group.as_deref(), user.as_ref())?;
    let chroot = match chroot {
        None => None,
        Some(p) if p.as_os_str().is_empty() => None,
        Some(p) => Some(resolve_chroot(resolve_path(p), logs)?),
    };
    if user.is_none() && group.is_some() {
        return Err(err(
            "group",
            "is set without haproxy.user; set both or neither".into(),
        ));
    }
    let master_is_root = match mode {
        // SAFETY: geteuid has no preconditions and cannot fail.
        Mode::Direct => (unsafe { libc::geteuid() }) == 0,
        Mode::Systemd => true,
    };
    Ok(Privileges {
        user: user.map(|(a, _)| a),
        group,
        chroot,
        master_is_root,
    })
}

fn err(key: &str, m: String) -> (String, String) {
    (format!("haproxy.{key}"), m)
}

/// `user`: an account of this host, with its primary group id.
fn resolve_user(user: Option<&str>) -> Result<Option<(Account, u32)>, (String, String)> {
    let name = match user {
        None | Some("") => return Ok(None),
        Some(name) => name,
    };
    check_name(name).map_err(|m| err("user", m))?;
    let (id, primary_gid) = lookup_user(name).ok_or_else(|| {
        err(
            "user",
            format!(
                "{:?} is not a user of this host; create it or set user = \"\" to keep the workers as the starting user",
                bounded(name)
            ),
        )
    })?;
    let account = Account {
        name: name.to_string(),
        id,
    };
    Ok(Some((account, primary_gid)))
}

/// `group`: a group of this host, else the user's primary group.
fn resolve_group(
    group: Option<&str>,
    user: Option<&(Account, u32)>,
) -> Result<Option<Account>, (String, String)> {
    match (group, user) {
        (Some(""), _) | (None, None) => Ok(None),
        (Some(name), _) => {
            check_name(name).map_err(|m| err("group", m))?;
            let id = lookup_group(name).ok_or_else(|| {
                err(
                    "group",
                    format!("{:?} is not a group of this host", bounded(name)),
                )
            })?;
            Ok(Some(Account {
                name: name.to_string(),
                id,
            }))
        }
        // The user's primary group.
        (None, Some((account, gid))) => {
            let name = group_name(*gid).ok_or_else(|| {
                err(
                    "group",
                    format!(
                        "the primary group {gid} of user {:?} has no name; set group explicitly",
                        account.name
                    ),
                )
            })?;
            Ok(Some(Account { name, id: *gid }))
        }
    }
}

/// `chroot`: an existing directory, and logs that reach out of it.
fn resolve_chroot(path: PathBuf, logs: &LogSettings) -> Result<PathBuf, (String, String)> {
    super::check_config_path(&path).map_err(|m| err("chroot", m))?;
    if !path.is_dir() {
        return Err(err(
            "chroot",
            format!("{} is not an existing directory", path.display()),
        ));
    }
    // Workers open /dev/log by path at each line, inside the chroot, where it is not.
    // The `file` target (TCP) and UDP syslog need no file.
    if logs.target == LogTarget::Journald {
        return Err(err(
            "chroot",
            "cannot be used with [logs] target = \"journald\": chrooted workers cannot reach /dev/log; use \"file\" or \"syslog:HOST:PORT\"".into(),
        ));
    }
    Ok(path)
}

/// A user or group name as HAProxy's `user`/`group` take it: one plain token.
fn check_name(name: &str) -> Result<(), String> {
    let ok = name.len() <= 32
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{:?} is not an account name (letters, digits, '.', '_', '-', at most 32)",
            bounded(name)
        ))
    }
}

/// Runs a reentrant passwd/group lookup, growing the buffer on ERANGE.
fn with_buffer<T>(
    mut call: impl FnMut(&mut [libc::c_char]) -> Result<Option<T>, i32>,
) -> Option<T> {
    let mut size = 1024;
    while size <= 1 << 20 {
        let mut buf = vec![0 as libc::c_char; size];
        match call(&mut buf) {
            Ok(found) => return found,
            Err(libc::ERANGE) => size *= 4,
            Err(_) => return None,
        }
    }
    None
}

/// `(uid, primary gid)` of a user.
fn lookup_user(name: &str) -> Option<(u32, u32)> {
    let c_name = CString::new(name).ok()?;
    with_buffer(|buf| {
        // SAFETY: every pointer is valid for the call; `buf` outlives it.
        let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = unsafe {
            libc::getpwnam_r(
                c_name.as_ptr(),
                &mut pwd,
                buf.as_mut_ptr(),
                buf.len(),
                &mut result,
            )
        };
        match rc {
            0 if result.is_null() => Ok(None),
            0 => Ok(Some((pwd.pw_uid, pwd.pw_gid))),
            e => Err(e),
        }
    })
}

fn lookup_group(name: &str) -> Option<u32> {
    let c_name = CString::new(name).ok()?;
    with_buffer(|buf| {
        // SAFETY: as in `lookup_user`.
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::group = std::ptr::null_mut();
        let rc = unsafe {
            libc::getgrnam_r(
                c_name.as_ptr(),
                &mut grp,
                buf.as_mut_ptr(),
                buf.len(),
                &mut result,
            )
        };
        match rc {
            0 if result.is_null() => Ok(None),
            0 => Ok(Some(grp.gr_gid)),
            e => Err(e),
        }
    })
}

fn group_name(gid: u32) -> Option<String> {
    with_buffer(|buf| {
        // SAFETY: as in `lookup_user`; gr_name points into `buf` while it lives.
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::group = std::ptr::null_mut();
        let rc =
            unsafe { libc::getgrgid_r(gid, &mut grp, buf.as_mut_ptr(), buf.len(), &mut result) };
        match rc {
            0 if result.is_null() => Ok(None),
            0 => Ok(Some(
                unsafe { CStr::from_ptr(grp.gr_name) }
                    .to_string_lossy()
                    .into_owned(),
            )),
            e => Err(e),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logs(target: LogTarget) -> LogSettings {
        LogSettings {
            target,
            listen: "127.0.0.1:601".parse().unwrap(),
            file: "/srv/logs/access.log".into(),
            max_size: 1 << 20,
            keep: 1,
            buffer: 1 << 20,
        }
    }

    fn run(
        user: Option<&str>,
        group: Option<&str>,
        chroot: Option<&str>,
        target: LogTarget,
    ) -> Result<Privileges, (String, String)> {
        resolve(
            user.map(String::from),
            group.map(String::from),
            chroot.map(PathBuf::from),
            Mode::Systemd,
            &logs(target),
            |p| p,
        )
    }

    #[test]
    fn root_is_a_user_and_defaults_its_group() {
        let p = run(Some("root"), None, None, LogTarget::File).unwrap();
        assert_eq!(p.user.as_ref().unwrap().id, 0);
        assert_eq!(p.group.as_ref().unwrap().id, 0);
        assert!(p.master_is_root);
        let none = run(Some(""), None, None, LogTarget::File).unwrap();
        assert_eq!(
            none.effective(),
            Privileges {
                master_is_root: true,
                ..Privileges::default()
            }
        );
        assert_eq!(none.worker_user(), None);
    }

    #[test]
    fn refusals_name_the_key() {
        let key = |r: Result<Privileges, (String, String)>| r.unwrap_err().0;
        assert_eq!(
            key(run(Some("no-such-user-x"), None, None, LogTarget::File)),
            "haproxy.user"
        );
        assert_eq!(
            key(run(Some("a b"), None, None, LogTarget::File)),
            "haproxy.user"
        );
        assert_eq!(
            key(run(
                Some("root"),
                Some("no-such-group-x"),
                None,
                LogTarget::File
            )),
            "haproxy.group"
        );
        assert_eq!(
            key(run(None, Some("root"), None, LogTarget::File)),
            "haproxy.group"
        );
        assert_eq!(
            key(run(
                Some("root"),
                None,
                Some("/no/such/dir"),
                LogTarget::File
            )),
            "haproxy.chroot"
        );
        let (k, m) = run(Some("root"), None, Some("/"), LogTarget::Journald).unwrap_err();
        assert_eq!(k, "haproxy.chroot");
        assert!(m.contains("journald"), "{m}");
        let syslog = LogTarget::Syslog {
            host: "127.0.0.1".into(),
            port: 514,
        };
        for target in [LogTarget::File, syslog] {
            let p = run(Some("root"), None, Some("/"), target).unwrap();
            assert_eq!(p.chroot, Some(PathBuf::from("/")));
        }
    }
}
