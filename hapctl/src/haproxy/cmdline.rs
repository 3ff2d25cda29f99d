//! The running master's command line: which configuration files it loads.
//!
//! A reload re-executes the master with its own arguments, never the unit's or hapctl's: a
//! master started with `-f haproxy.cfg` alone keeps loading that one file at every reload.
//! So before hapctl reloads a master it did not start, it compares these files with its own.

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The configuration files of a running master, in load order (`-f FILE`, `-f DIR`, and the
/// files after `--`), resolved against its working directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasterCommand {
    pub pid: i32,
    pub argv: Vec<String>,
    files: Vec<PathBuf>,
}

/// How a master's files compare with the files hapctl writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MasterLayout {
    /// Every file of hapctl's with configuration in it is loaded, and nothing else.
    Fits,
    /// A reload would load something other than what hapctl checked.
    Differs {
        /// hapctl's files with configuration in them that the master does not load.
        missing: Vec<PathBuf>,
        /// Files the master loads that are not hapctl's.
        foreign: Vec<PathBuf>,
    },
}

impl MasterCommand {
    /// Reads `/proc/PID/cmdline` (and its working directory, for relative paths).
    pub fn read(pid: i32) -> io::Result<MasterCommand> {
        let raw = std::fs::read(format!("/proc/{pid}/cmdline"))?;
        let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap_or_else(|_| "/".into());
        let argv = raw
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| OsString::from_vec(a.to_vec()))
            .collect::<Vec<_>>();
        Ok(MasterCommand::parse(pid, &argv, &cwd))
    }

    /// Reads HAProxy's options as its own parser does (`haproxy -h`): `-f` takes the next
    /// argument; everything after `--` is a configuration file.
    pub fn parse(pid: i32, argv: &[OsString], cwd: &Path) -> MasterCommand {
        let mut files = Vec::new();
        let mut args = argv.iter().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_bytes() {
                b"-f" => files.extend(args.next().map(|f| cwd.join(f))),
                b"--" => {
                    files.extend(args.by_ref().map(|f| cwd.join(f)));
                }
                _ => {}
            }
        }
        MasterCommand {
            pid,
            argv: argv
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            files,
        }
    }

    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// Whether a reload of this master reads `file`: named, or a `.cfg` in a named folder.
    fn loads(&self, file: &Path) -> bool {
        let file = canonical(file);
        self.files.iter().any(|f| {
            let f = canonical(f);
            f == file
                || (f.is_dir()
                    && file.parent() == Some(&f)
                    && file.extension().is_some_and(|e| e == "cfg"))
        })
    }

    /// Compares with hapctl's files, each given with whether it holds any configuration (a
    /// file of comments only changes nothing whether it is loaded or not).
    pub fn layout(&self, ours: &[(&Path, bool)]) -> MasterLayout {
        let missing: Vec<PathBuf> = ours
            .iter()
            .filter(|(path, content)| *content && !self.loads(path))
            .map(|(path, _)| path.to_path_buf())
            .collect();
        let ours_canonical: Vec<PathBuf> = ours.iter().map(|(p, _)| canonical(p)).collect();
        let foreign: Vec<PathBuf> = self
            .files
            .iter()
            .flat_map(|f| read_by_reload(f))
            .filter(|f| !ours_canonical.contains(&canonical(f)) && declares_something(f))
            .collect();
        if missing.is_empty() && foreign.is_empty() {
            MasterLayout::Fits
        } else {
            MasterLayout::Differs { missing, foreign }
        }
    }
}

/// The files a reload reads for one `-f` argument: the file, or a folder's `.cfg` files (as
/// HAProxy lists them). A folder that cannot be listed stands for itself.
fn read_by_reload(f: &Path) -> Vec<PathBuf> {
    if !f.is_dir() {
        return vec![f.to_path_buf()];
    }
    match std::fs::read_dir(f) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "cfg"))
            .collect(),
        Err(_) => vec![f.to_path_buf()],
    }
}

/// Whether loading `file` changes what HAProxy serves; one that cannot be read counts (a
/// reload would fail on it). An empty folder of drop-ins, as Debian's 3.2+ unit loads
/// (`-f /etc/haproxy/conf.d`), declares nothing.
fn declares_something(file: &Path) -> bool {
    std::fs::read(file).map_or(true, |text| has_configuration(&text))
}

/// Whether a configuration file's text declares anything (not only comments and blank lines).
pub fn has_configuration(text: &[u8]) -> bool {
    text.split(|b| *b == b'\n').any(|line| {
        let line = line.trim_ascii();
        !line.is_empty() && !line.starts_with(b"#")
    })
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(args: &[&str]) -> MasterCommand {
        let argv: Vec<OsString> = args.iter().map(OsString::from).collect();
        MasterCommand::parse(1, &argv, Path::new("/srv"))
    }

    #[test]
    fn files_come_from_dash_f_and_after_double_dash() {
        let c = cmd(&[
            "/usr/sbin/haproxy",
            "-Ws",
            "-f",
            "/etc/haproxy/haproxy.cfg",
            "-p",
            "/run/haproxy.pid",
            "-S",
            "/run/haproxy-master.sock",
            "-f",
            "local.cfg",
            "--",
            "/a.cfg",
            "b.cfg",
        ]);
        let want: Vec<PathBuf> = [
            "/etc/haproxy/haproxy.cfg",
            "/srv/local.cfg",
            "/a.cfg",
            "/srv/b.cfg",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(c.files(), &want[..]);
        // A trailing -f without a value names nothing.
        assert!(cmd(&["haproxy", "-f"]).files().is_empty());
    }

    #[test]
    fn layout_ignores_files_without_configuration_and_names_the_rest() {
        let stock = cmd(&["haproxy", "-Ws", "-f", "/etc/haproxy/haproxy.cfg"]);
        let config = Path::new("/etc/haproxy/haproxy.cfg");
        let generation = Path::new("/etc/haproxy/generation.cfg");
        assert_eq!(
            stock.layout(&[(config, true), (generation, false)]),
            MasterLayout::Fits
        );
        assert_eq!(
            stock.layout(&[(config, true), (generation, true)]),
            MasterLayout::Differs {
                missing: vec![generation.into()],
                foreign: vec![]
            }
        );
        let more = cmd(&[
            "haproxy",
            "-f",
            "/etc/haproxy/haproxy.cfg",
            "-f",
            "/etc/haproxy/extra.cfg",
        ]);
        assert_eq!(
            more.layout(&[(config, true), (generation, false)]),
            MasterLayout::Differs {
                missing: vec![],
                foreign: vec!["/etc/haproxy/extra.cfg".into()]
            }
        );
    }

    #[test]
    fn a_folder_loads_its_cfg_files() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("haproxy.cfg");
        let generation = dir.path().join("generation.cfg");
        let c = cmd(&["haproxy", "-f", dir.path().to_str().unwrap()]);
        assert_eq!(
            c.layout(&[(&config, true), (&generation, true)]),
            MasterLayout::Fits
        );
    }

    #[test]
    fn a_folder_of_drop_ins_counts_only_for_the_configuration_in_it() {
        let etc = tempfile::tempdir().unwrap();
        let config = etc.path().join("haproxy.cfg");
        std::fs::write(&config, "global\n").unwrap();
        let conf_d = etc.path().join("conf.d");
        std::fs::create_dir(&conf_d).unwrap();
        // Debian's 3.2+ unit: `-f haproxy.cfg -f conf.d`, the folder shipped empty.
        let debian = cmd(&[
            "haproxy",
            "-f",
            config.to_str().unwrap(),
            "-f",
            conf_d.to_str().unwrap(),
        ]);
        let ours = [(config.as_path(), true)];
        assert_eq!(debian.layout(&ours), MasterLayout::Fits);
        // Comments only, or not a .cfg: still nothing a reload would serve.
        std::fs::write(conf_d.join("00-note.cfg"), "# nothing yet\n").unwrap();
        std::fs::write(conf_d.join("README"), "frontend x\n").unwrap();
        assert_eq!(debian.layout(&ours), MasterLayout::Fits);
        // A drop-in that declares something is named, the file itself.
        let extra = conf_d.join("50-extra.cfg");
        std::fs::write(&extra, "frontend extra\n    bind :8080\n").unwrap();
        assert_eq!(
            debian.layout(&ours),
            MasterLayout::Differs {
                missing: vec![],
                foreign: vec![extra]
            }
        );
    }

    #[test]
    fn configuration_is_anything_but_comments() {
        assert!(!has_configuration(b"# header\n\n   # more\n"));
        assert!(!has_configuration(b""));
        assert!(has_configuration(b"# header\nbackend app\n"));
    }

    #[test]
    fn reads_this_process() {
        let me = MasterCommand::read(std::process::id() as i32).unwrap();
        assert!(!me.argv.is_empty());
    }
}
