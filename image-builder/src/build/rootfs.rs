//! The Debian root file system of a spec's base: mmdebstrap's tree for the suite, the mirror and the package
//! set, cached under the hash of those inputs (and reused by every build and bundle that names them). The
//! downloaded packages are kept in the cache too, so a second tree of the same suite downloads nothing.

use std::fs::{self, File};
use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context as _, Result};
use sha2::{Digest, Sha256};

use super::context::Settings;
use crate::cmd::CommandExt as _;
use crate::progress::Progress;
use crate::spec::Loaded;

/// Packages every image needs to boot and report readiness.
const BOOT_PACKAGES: &[&str] = &[
    "linux-image-amd64",
    "systemd-sysv",
    "udev",
    "e2fsprogs",
    "iproute2",
    "curl",
    "kmod",
    "ca-certificates",
    "openssl",
    // The ISO boots its squashfs root with live-boot's initramfs scripts (inert without boot=live).
    "live-boot",
];
/// The root file system for the spec's base, from the cache or built by mmdebstrap (then cached under the hash
/// of its inputs).
pub fn rootfs(
    loaded: &Loaded,
    settings: &Settings,
    progress: &Progress,
) -> Result<(PathBuf, String)> {
    let base = &loaded.spec.base;
    let mut packages: Vec<String> = BOOT_PACKAGES.iter().map(|s| s.to_string()).collect();
    // systemd-repart (which grows the data partition) is a package of its own from trixie on.
    if !matches!(base.suite.as_str(), "bookworm" | "bullseye") {
        packages.push("systemd-repart".into());
    }
    if loaded.spec.users.iter().any(|u| u.sudo) {
        packages.push("sudo".into());
    }
    if loaded.spec.components.kubernetes.is_some() {
        packages.extend(crate::kube::PACKAGES.iter().map(|s| s.to_string()));
    }
    if loaded.spec.components.node.is_some() {
        packages.extend(crate::node::PACKAGES.iter().map(|s| s.to_string()));
    }
    if loaded.spec.components.ipa.is_some() {
        packages.extend(crate::ipa::PACKAGES.iter().map(|s| s.to_string()));
    }
    if loaded.spec.components.metal3.is_some() {
        packages.extend(crate::metal3::PACKAGES.iter().map(|s| s.to_string()));
    }
    if super::configure::provisioning_dhcp(&loaded.spec).is_some() {
        packages.extend(crate::dhcp::PACKAGES.iter().map(|s| s.to_string()));
    }
    if super::configure::serves_provisioning(&loaded.spec) {
        packages.extend(crate::firewall::PACKAGES.iter().map(|s| s.to_string()));
    }
    packages.extend(base.packages.iter().cloned());
    packages.sort();
    packages.dedup();
    let key = hex::encode(Sha256::digest(
        format!(
            "rootfs v1\n{}\n{}\n{}\n{}",
            base.suite,
            base.mirror,
            packages.join(","),
            settings.source_date_epoch
        )
        .as_bytes(),
    ));
    let dir = settings.cache.join("rootfs").join(&key);
    if dir.join(".complete").exists() {
        progress.step("rootfs", &format!("cached {}", &key[..12]));
        return Ok((dir, key));
    }
    if settings.offline {
        bail!(
            "offline: the root file system for {} ({}) is not in the cache or bundle; build it (or fetch --bundle) on a connected machine",
            base.suite,
            &key[..12]
        );
    }
    progress.step(
        "rootfs",
        &format!("mmdebstrap {} ({} packages)", base.suite, packages.len()),
    );
    let debs = settings.cache.join("debs");
    fs::create_dir_all(&debs)?;
    let tmp = settings.cache.join("rootfs").join(format!("{key}.tmp"));
    if tmp.exists() {
        fs::remove_dir_all(&tmp)?;
    }
    fs::create_dir_all(tmp.parent().expect("has parent"))?;
    Command::new("mmdebstrap")
        .env("SOURCE_DATE_EPOCH", settings.source_date_epoch.to_string())
        .args([
            "--variant=apt",
            "--dpkgopt=force-unsafe-io",
            "--skip=essential/unlink",
            "--quiet",
        ])
        .arg(format!("--include={}", packages.join(",")))
        .arg("--setup-hook=mkdir -p \"$1\"/var/cache/apt/archives/")
        .arg(format!(
            "--setup-hook=sync-in {} /var/cache/apt/archives/",
            debs.display()
        ))
        .arg(format!(
            "--customize-hook=sync-out /var/cache/apt/archives {}",
            debs.display()
        ))
        .arg(&base.suite)
        .arg(&tmp)
        .arg(&base.mirror)
        .run()
        .context("building the root file system with mmdebstrap (needs root)")?;
    File::create(tmp.join(".complete"))?.sync_all()?;
    fs::rename(&tmp, &dir)?;
    Ok((dir, key))
}
