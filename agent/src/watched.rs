//! Files the agent follows while it runs (its certificate, its credentials): looked at every few seconds by
//! their metadata, read again only when that changed.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// How often the files are looked at: a `stat` each, so cheap; a change is in force within this.
pub const CHECK: Duration = Duration::from_secs(5);

/// What identifies a file's content without reading it: modification time, length, inode (a file replaced by
/// a rename has a new one). `None`: the file is not there.
pub type Stamp = Option<(SystemTime, u64, u64)>;

pub fn stamp(path: &Path) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}
