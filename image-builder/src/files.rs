//! Writing files so that nothing half-written is ever visible (temporary name, fsync, rename, fsync the
//! directory), and the tree-wide helpers the builder's phases share: copying a tree, clamping its mtimes for
//! reproducibility, hashing it. A leaf: it knows nothing of specs or builds.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result};
use sha2::{Digest, Sha256};

use crate::cmd::CommandExt as _;

/// Makes `tmp` visible as `dest` only once it is whole: its data on disk, renamed, the rename on disk.
pub fn publish(tmp: &Path, dest: &Path) -> Result<()> {
    File::open(tmp)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("syncing {}", tmp.display()))?;
    fs::rename(tmp, dest)
        .with_context(|| format!("renaming {} to {}", tmp.display(), dest.display()))?;
    let dir = dest
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing the directory {}", dir.display()))
}

/// [`publish`] for a directory: every file under `tmp` synced, then `tmp` renamed to `dest` (which must not
/// exist) and the rename synced. A reader sees the whole tree or none of it.
pub fn publish_dir(tmp: &Path, dest: &Path) -> Result<()> {
    let mut stack = vec![tmp.to_owned()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let path = e?.path();
            let md = path.symlink_metadata()?;
            if md.is_dir() {
                stack.push(path.clone());
            }
            if md.is_dir() || md.is_file() {
                File::open(&path)
                    .and_then(|f| f.sync_all())
                    .with_context(|| format!("syncing {}", path.display()))?;
            }
        }
    }
    publish(tmp, dest)
}

/// Marks the cache entry `used` (a directory in `dir`) as just used and removes all but the `keep` most
/// recently used entries of `dir`, never `used`.
pub fn prune_cache(dir: &Path, used: &Path, keep: usize) -> Result<()> {
    filetime::set_file_mtime(used, filetime::FileTime::now())?;
    let mut entries: Vec<(filetime::FileTime, PathBuf)> = fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| {
            let md = e.metadata().ok()?;
            Some((
                filetime::FileTime::from_last_modification_time(&md),
                e.path(),
            ))
        })
        .collect();
    entries.sort_by(|a, b| b.cmp(a));
    for (_, old) in entries.into_iter().skip(keep) {
        if old != used {
            fs::remove_dir_all(&old)
                .with_context(|| format!("removing the old cache entry {}", old.display()))?;
        }
    }
    Ok(())
}

/// Writes `text` to `path` with `mode`, making its parent directories.
pub fn write_file(path: &Path, text: &str, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(p) = path.parent() {
        fs::create_dir_all(p)?;
    }
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// Copies `from`'s content into `to` (`cp -a`: modes, owners, links, extended attributes; reflinked where
/// the file system can).
pub fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    Command::new("cp")
        .arg("-a")
        .arg("--reflink=auto")
        .arg(format!("{}/.", from.display()))
        .arg(to)
        .run()?;
    Ok(())
}

/// Sets every mtime after `epoch` to `epoch` (symlinks themselves included).
pub fn clamp_mtimes(dir: &Path, epoch: u64) -> Result<()> {
    let t = filetime::FileTime::from_unix_time(epoch as i64, 0);
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d)? {
            let e = e?;
            let md = e.path().symlink_metadata()?;
            if md.is_dir() {
                stack.push(e.path());
            }
            if filetime::FileTime::from_last_modification_time(&md) > t {
                filetime::set_symlink_file_times(e.path(), t, t)?;
            }
        }
    }
    let md = dir.symlink_metadata()?;
    if filetime::FileTime::from_last_modification_time(&md) > t {
        filetime::set_symlink_file_times(dir, t, t)?;
    }
    Ok(())
}

/// The sha256 of a directory tree: every entry's relative path, type, permission bits, owner and content (a
/// file's sha256, a link's target), in sorted order.
pub fn tree_digest(dir: &Path) -> Result<String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mut h = Sha256::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let mut entries: Vec<_> = fs::read_dir(dir.join(&rel))
            .with_context(|| format!("reading {}", dir.join(&rel).display()))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<std::io::Result<_>>()?;
        entries.sort();
        // Depth first in sorted order: push in reverse so the smallest name comes off the stack first.
        for name in entries.into_iter().rev() {
            let rel = rel.join(name);
            let path = dir.join(&rel);
            let md = path.symlink_metadata()?;
            // `cp -a` carries the owner into the root too.
            let mode = format!(
                "{:o} {}:{}",
                md.permissions().mode() & 0o7777,
                md.uid(),
                md.gid()
            );
            let line = if md.is_dir() {
                stack.push(rel.clone());
                format!("d {mode} {}\n", rel.display())
            } else if md.file_type().is_symlink() {
                format!("l {} {}\n", rel.display(), fs::read_link(&path)?.display())
            } else {
                format!(
                    "f {mode} {} {}\n",
                    rel.display(),
                    crate::sparse::sha256(&path)?
                )
            };
            h.update(line.as_bytes());
        }
    }
    Ok(hex::encode(h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_keeps_the_most_recently_used_entries_and_the_one_in_use() {
        let dir = tempfile::tempdir().unwrap();
        for (i, name) in ["a", "b", "c", "d", "e"].iter().enumerate() {
            fs::create_dir(dir.path().join(name)).unwrap();
            let t = filetime::FileTime::from_unix_time(1_000 + i as i64, 0);
            filetime::set_file_mtime(dir.path().join(name), t).unwrap();
        }
        prune_cache(dir.path(), &dir.path().join("a"), 3).unwrap();
        let mut left: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["a", "d", "e"]);
    }

    /// The overlay's digest is part of the root partition's cache key: whatever `cp -a` would carry into the
    /// root must change it, and nothing else.
    #[test]
    fn the_tree_digest_follows_content_modes_owners_and_links() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path();
        fs::create_dir_all(t.join("etc/foothold")).unwrap();
        fs::write(t.join("etc/foothold/a.conf"), b"a=1\n").unwrap();
        fs::write(t.join("b"), b"b").unwrap();
        std::os::unix::fs::symlink("b", t.join("link")).unwrap();
        let first = tree_digest(t).unwrap();
        assert_eq!(tree_digest(t).unwrap(), first);
        let mut seen = vec![first];
        let mut changed = |what: &str| {
            let d = tree_digest(t).unwrap();
            assert!(!seen.contains(&d), "{what} did not change the digest");
            seen.push(d);
        };
        fs::write(t.join("etc/foothold/a.conf"), b"a=2\n").unwrap();
        changed("content");
        fs::set_permissions(t.join("b"), fs::Permissions::from_mode(0o755)).unwrap();
        changed("a file's mode");
        fs::set_permissions(t.join("etc"), fs::Permissions::from_mode(0o700)).unwrap();
        changed("a directory's mode");
        fs::remove_file(t.join("link")).unwrap();
        std::os::unix::fs::symlink("etc", t.join("link")).unwrap();
        changed("a link's target");
        fs::create_dir(t.join("empty")).unwrap();
        changed("an empty directory");
        std::os::unix::fs::lchown(t.join("b"), Some(1), Some(1)).unwrap();
        changed("an owner");
        // Times are clamped in the root; they do not count.
        filetime::set_file_mtime(t.join("b"), filetime::FileTime::from_unix_time(1, 0)).unwrap();
        assert_eq!(tree_digest(t).unwrap(), *seen.last().unwrap());
    }
}
