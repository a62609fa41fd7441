//! Files written so that nothing half-written is ever visible (the store's `write_durably`), with a temporary
//! name beside them.

use std::io;
use std::path::Path;

/// Writes `bytes` to `path` durably and atomically, the file made with `mode`: a temporary `.<name>.tmp`
/// beside it, synced, renamed over `path`, the directory synced.
pub fn write_file(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy()
    ));
    crate::store::blobs::write_durably_mode(&tmp, path, bytes, mode)
}
