//! `--contracts-dir`: a folder of contracts files, one per job, that a scheduler's
//! prolog writes and its epilog removes. The serve loop reads it at start, again at
//! SIGHUP, and whenever its files changed: looked at every [`POLL_INTERVAL`] and before
//! each process's hello, so a job's process never races the prolog that wrote its
//! contract. Polling, not inotify: a few `stat`s of a folder of tens of files cost
//! nothing, need no crate, and the check before each hello closes the one race that
//! matters.
//!
//! Whoever may write in the folder grants contracts, so the daemon refuses a folder
//! that is neither root's nor its own user's, or that its group or others may write
//! in, and skips such files in it: a daemon running as root takes a root-owned folder
//! only; one running as `gpuswap` (the systemd unit) also its own, in which root's
//! prolog writes.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::endpoint::Level;
use crate::identity::{ContractsDir, ProcessContract};

/// How often the folder is looked at for changes.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// What identifies a file's version: its name, modification time, size and inode (a
/// file replaced by a rename has a new inode, even within the same second).
type Version = (PathBuf, SystemTime, u64, u64);

/// A read of the folder: the tables of its good files, and the lines to log.
pub type Read = (Vec<ProcessContract>, Vec<(Level, String)>);

/// The folder and what was read of it.
pub struct Watcher {
    dir: ContractsDir,
    euid: u32,
    seen: Vec<Version>,
    polled: Instant,
}

/// Checks that `meta` (of `path`) is owned by root or `euid` and that its group and
/// others may not write it.
fn check_owner(path: &Path, meta: &std::fs::Metadata, euid: u32) -> Result<(), String> {
    if meta.uid() != 0 && meta.uid() != euid {
        return Err(format!(
            "{} is owned by uid {}, neither root nor the daemon's uid {euid}: whoever writes \
             there grants contracts",
            path.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} may be written by its group or others (mode {:o}): whoever writes there grants \
             contracts; chmod go-w it",
            path.display(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

impl Watcher {
    /// Opens the folder: it must be root's or the daemon's own uid's, and its group and
    /// others may not write in it.
    pub fn open(dir: ContractsDir, euid: u32) -> Result<Self, String> {
        let what = |e: String| format!("--contracts-dir {}: {e}", dir.path.display());
        let meta = std::fs::metadata(&dir.path).map_err(|e| what(e.to_string()))?;
        if !meta.is_dir() {
            return Err(what("not a folder".into()));
        }
        check_owner(&dir.path, &meta, euid).map_err(what)?;
        Ok(Self {
            dir,
            euid,
            seen: Vec::new(),
            polled: Instant::now(),
        })
    }

    /// The folder's contracts files (`*.toml`, not hidden: a prolog writes a hidden
    /// file, then renames it) and their versions, in name order.
    fn versions(&self) -> Vec<Version> {
        let Ok(entries) = std::fs::read_dir(&self.dir.path) else {
            return Vec::new();
        };
        let mut versions: Vec<Version> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.extension().is_some_and(|x| x == "toml")
                    && !p
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .filter_map(|p| {
                let meta = std::fs::symlink_metadata(&p).ok()?;
                let mtime = meta.modified().ok()?;
                Some((p, mtime, meta.len(), meta.ino()))
            })
            .collect();
        versions.sort();
        versions
    }

    /// Whether the folder is due a look (every [`POLL_INTERVAL`]).
    pub fn due(&self) -> bool {
        self.polled.elapsed() >= POLL_INTERVAL
    }

    /// Reads the folder again if its files changed since the last read, or `always`
    /// (SIGHUP): the tables of its good files, and the lines to log (one per file
    /// skipped, and one for the read).
    pub fn refresh(&mut self, always: bool) -> Option<Read> {
        self.polled = Instant::now();
        let versions = self.versions();
        if !always && versions == self.seen {
            return None;
        }
        let mut tables = Vec::new();
        let mut lines = Vec::new();
        for (path, ..) in &versions {
            let read = std::fs::symlink_metadata(path)
                .map_err(|e| format!("{}: {e}", path.display()))
                .and_then(|meta| {
                    if !meta.is_file() {
                        return Err(format!("{} is not a regular file", path.display()));
                    }
                    check_owner(path, &meta, self.euid)
                })
                .and_then(|()| (self.dir.load)(path));
            match read {
                Ok(mut file) => tables.append(&mut file),
                Err(why) => lines.push((Level::Warn, format!("contract file skipped: {why}"))),
            }
        }
        lines.push((
            Level::Info,
            format!(
                "contracts read from {}: {} file(s), {} table(s)",
                self.dir.path.display(),
                versions.len(),
                tables.len()
            ),
        ));
        self.seen = versions;
        Some((tables, lines))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::Arc;

    use gpuswap_core::Contract;

    /// A loader that makes one table per file, named after the file's first line.
    fn dir(path: &Path) -> ContractsDir {
        ContractsDir {
            path: path.to_owned(),
            load: Arc::new(|p: &Path| {
                let text = std::fs::read_to_string(p).map_err(|e| e.to_string())?;
                let name = text.lines().next().unwrap_or_default();
                if name == "bad" {
                    return Err(format!("{}: bad table", p.display()));
                }
                Ok(vec![ProcessContract {
                    name: name.to_owned(),
                    contract: Contract::default(),
                    uids: Vec::new(),
                    cgroup: None,
                    source: p.to_owned(),
                }])
            }),
        }
    }

    fn euid() -> u32 {
        crate::socket::euid()
    }

    fn folder(name: &str) -> PathBuf {
        let path = std::env::temp_dir().join(format!(
            "gpuswap-contracts-dir-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn names(tables: &[ProcessContract]) -> Vec<&str> {
        tables.iter().map(|t| t.name.as_str()).collect()
    }

    #[test]
    fn the_folder_is_read_again_when_a_file_changes_and_bad_files_are_skipped() {
        let path = folder("changes");
        std::fs::write(path.join("job_1.toml"), "one\n").unwrap();
        std::fs::write(path.join(".job_2.toml.tmp"), "hidden\n").unwrap();
        std::fs::write(path.join("notes.txt"), "ignored\n").unwrap();
        let mut w = Watcher::open(dir(&path), euid()).unwrap();
        let (tables, lines) = w.refresh(false).unwrap();
        assert_eq!(names(&tables), ["one"]);
        assert!(lines[0].1.contains("1 file(s), 1 table(s)"), "{lines:?}");
        // Nothing changed: nothing read; SIGHUP reads anyway.
        assert!(w.refresh(false).is_none());
        assert!(w.refresh(true).is_some());
        std::fs::write(path.join("job_2.toml"), "two\n").unwrap();
        std::fs::write(path.join("job_3.toml"), "bad\n").unwrap();
        let (tables, lines) = w.refresh(false).unwrap();
        assert_eq!(names(&tables), ["one", "two"]);
        assert_eq!(lines[0].0, Level::Warn);
        assert!(lines[0].1.contains("job_3.toml: bad table"), "{lines:?}");
        // A file others may write is skipped with why.
        let loose = path.join("job_2.toml");
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o666)).unwrap();
        std::fs::remove_file(path.join("job_1.toml")).unwrap();
        let (tables, lines) = w.refresh(false).unwrap();
        assert!(tables.is_empty(), "{tables:?}");
        assert!(lines[0].1.contains("mode 666"), "{lines:?}");
        std::fs::remove_dir_all(&path).unwrap();
    }

    #[test]
    fn a_folder_others_may_write_in_or_no_folder_is_refused() {
        let path = folder("loose");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = Watcher::open(dir(&path), euid()).err().unwrap();
        assert!(e.contains("chmod go-w"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Another user's folder: root, running this test, gives it away first.
        let daemon = if euid() == 0 {
            std::os::unix::fs::chown(&path, Some(4243), None).unwrap();
            4242
        } else {
            euid() + 1
        };
        let e = Watcher::open(dir(&path), daemon).err().unwrap();
        assert!(e.contains("neither root nor the daemon's uid"), "{e}");
        let file = path.join("file");
        std::fs::write(&file, "").unwrap();
        let e = Watcher::open(dir(&file), euid()).err().unwrap();
        assert!(e.contains("not a folder"), "{e}");
        std::fs::remove_dir_all(&path).unwrap();
        let e = Watcher::open(dir(&path), euid()).err().unwrap();
        assert!(e.starts_with("--contracts-dir"), "{e}");
    }
}
