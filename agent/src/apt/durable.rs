//! Files written so that nothing half-written is ever visible (the store's `write_durably`), with a temporary
//! name beside them.

use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

/// Writes `bytes` to `path` durably and atomically, the file made with `mode`: a temporary `.<name>.tmp`
/// beside it, synced, renamed over `path`, the directory synced.
///
/// A file it replaces keeps its group, and its group keeps reading it if it could (never writing or running
/// it; others get nothing `mode` does not give): a key shared with a service's group (the agent's TLS key, its
/// credentials file) stays shared when it is written again, by root, while the service runs.
pub fn write_file(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy()
    ));
    match std::fs::metadata(path) {
        Ok(old) => {
            let mode = mode | (old.mode() & 0o040);
            crate::store::blobs::write_durably_shared(&tmp, path, bytes, mode, Some(old.gid()))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            crate::store::blobs::write_durably_mode(&tmp, path, bytes, mode)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_file_written_again_keeps_its_group_and_what_the_group_reads() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("key.pem");
        write_file(&key, b"first", 0o600).unwrap();
        assert_eq!(mode(&key), 0o600);
        // Shared with a group, as an appliance shares the agent's key with the agent's (here: a group this
        // process is in, which it may give a file it owns).
        let gid = other_group().unwrap_or_else(|| std::fs::metadata(&key).unwrap().gid());
        std::os::unix::fs::chown(&key, None, Some(gid)).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_file(&key, b"second", 0o600).unwrap();
        assert_eq!(std::fs::read(&key).unwrap(), b"second");
        assert_eq!(mode(&key), 0o640);
        assert_eq!(std::fs::metadata(&key).unwrap().gid(), gid);
        // A file the group could not read stays so; others never get more than `mode`.
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o604)).unwrap();
        write_file(&key, b"third", 0o600).unwrap();
        assert_eq!(mode(&key), 0o600);
    }

    /// A certificate everyone reads (the agent's, beside its key) is still read by everyone when it is issued
    /// again: written by root, read by the agent's user, which is in none of its groups.
    #[test]
    fn a_file_everyone_reads_written_again_is_still_read_by_everyone() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("cert.pem");
        write_file(&cert, b"first", 0o644).unwrap();
        std::fs::set_permissions(&cert, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_file(&cert, b"second", 0o644).unwrap();
        assert_eq!(std::fs::read(&cert).unwrap(), b"second");
        assert_eq!(mode(&cert), 0o644);
    }

    /// A supplementary group of this process other than its own, if it has one (root may give any).
    fn other_group() -> Option<u32> {
        let own = std::fs::metadata("/proc/self").ok()?.gid();
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let groups = status.lines().find_map(|l| l.strip_prefix("Groups:"))?;
        groups
            .split_whitespace()
            .filter_map(|g| g.parse().ok())
            .find(|&g| g != own)
            .or_else(|| (own == 0).then_some(1))
    }
}
