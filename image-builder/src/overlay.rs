//! Foothold's own files, laid over every image's root before the spec's overlay: the units and scripts of the
//! agent, first boot, readiness, data growth, SSH host keys and the Kubernetes bring-up (the repository's
//! `rootfs/`). They are compiled into `foothold-build` (see `build.rs`), so no image is ever built without
//! them, wherever the builder is installed.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{Context as _, Result};
use sha2::{Digest, Sha256};

/// A directory (no content) or a file, at a path relative to the root.
pub struct Entry {
    pub path: &'static str,
    pub mode: u32,
    pub content: Option<&'static [u8]>,
}

include!(concat!(env!("OUT_DIR"), "/overlay.rs"));

/// Writes every entry into `root` (directories first, as they are listed), with its mode.
pub fn write(root: &Path) -> Result<()> {
    for e in ENTRIES {
        let path = root.join(e.path);
        match e.content {
            None => fs::create_dir_all(&path),
            Some(bytes) => fs::write(&path, bytes),
        }
        .and_then(|()| fs::set_permissions(&path, fs::Permissions::from_mode(e.mode)))
        .with_context(|| format!("writing Foothold's overlay file {}", path.display()))?;
    }
    Ok(())
}

/// The sha256 of every entry's path, mode and content.
pub fn digest() -> String {
    let mut h = Sha256::new();
    for e in ENTRIES {
        h.update(format!("{} {:o} {}\n", e.path, e.mode, e.content.is_some()).as_bytes());
        if let Some(bytes) = e.content {
            h.update(Sha256::digest(bytes));
        }
    }
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overlay_carries_foothold_units_and_executable_scripts() {
        let find = |p: &str| ENTRIES.iter().find(|e| e.path == p);
        for unit in [
            "etc/systemd/system/foothold-agent.service",
            "etc/systemd/system/foothold-firstboot.service",
            "etc/systemd/system/kubelet.service",
        ] {
            let e = find(unit).unwrap_or_else(|| panic!("{unit} is not embedded"));
            assert_eq!(e.mode, 0o644, "{unit}");
        }
        let pki = find("usr/local/lib/foothold/kube-pki").expect("kube-pki embedded");
        assert_eq!(pki.mode, 0o755);
        assert!(pki.content.unwrap().starts_with(b"#!"));
        let dir = find("usr/local/lib/foothold").unwrap();
        assert!(dir.content.is_none());
    }

    #[test]
    fn write_lays_out_the_entries_with_their_modes() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path()).unwrap();
        for e in ENTRIES {
            let md = fs::metadata(dir.path().join(e.path)).unwrap();
            assert_eq!(md.permissions().mode() & 0o7777, e.mode, "{}", e.path);
            assert_eq!(md.is_dir(), e.content.is_none(), "{}", e.path);
            if let Some(bytes) = e.content {
                assert_eq!(
                    fs::read(dir.path().join(e.path)).unwrap(),
                    bytes,
                    "{}",
                    e.path
                );
            }
        }
        assert_eq!(digest(), digest());
    }
}
