//! The root partition: the base tree (see [`super::rootfs`]) with Foothold's overlay, the spec's overlay, the file
//! inputs and the generated configuration, formatted as ext4 and squashed for the ISO. Both are cached under
//! the hash of everything in them, which leaves out the agent: a new agent reuses them (it is written into the
//! partition with debugfs, and into an ISO layer of its own). Hit or miss, the bytes are the same.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _, Result};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::configure;
use super::context::{Build, Record, Settings};
use super::inputs::{spec_overlay, FileInput};
use super::layout::Layout;
use crate::cmd::{tool_version, CommandExt as _};
use crate::files::{clamp_mtimes, copy_tree, prune_cache, publish, tree_digest};
use crate::spec::Loaded;

/// A cached root partition's entry (`<cache>/root/<key>/`): the ext4 image of the root partition without the
/// agent, its kernel and initrd, and the squashfs of the same tree for the ISO.
pub const ROOT_EXT4: &str = "root.ext4";
pub const LIVE_SQUASHFS: &str = "filesystem.squashfs";
pub const VMLINUZ: &str = "vmlinuz";
pub const INITRD: &str = "initrd.img";
/// How many root partitions the cache keeps (the most recently used); each takes about 1 GiB.
const ROOT_CACHE_KEEP: usize = 3;
/// Where the agent binary lives in the root file system.
pub const AGENT_DIR: &str = "/usr/local/bin";

/// The cached root partition of `loaded` (made now if the cache lacks it, with the ISO's squashfs when
/// `squash`): the directory holding [`ROOT_EXT4`], [`VMLINUZ`], [`INITRD`] and [`LIVE_SQUASHFS`]; and the base
/// tree it was made from (Debian's, cached).
pub fn partition(
    b: &Build,
    files: &[FileInput],
    squash: bool,
    record: &mut Record,
) -> Result<(PathBuf, PathBuf)> {
    let Build {
        loaded,
        settings,
        progress,
        layout,
        work,
    } = b;
    let spec = &loaded.spec;
    let epoch = settings.source_date_epoch;
    let (base, base_key) = super::rootfs::rootfs(loaded, settings, progress)?;
    let key = key(loaded, &base_key, files, layout.root.size(), epoch)?;
    record.inputs.insert(
        "rootfs".into(),
        json!({"suite": spec.base.suite, "mirror": spec.base.mirror, "cacheKey": base_key, "partitionCacheKey": key}),
    );
    let cached = settings.cache.join("root").join(&key);
    if cached.join(ROOT_EXT4).is_file() && (!squash || cached.join(LIVE_SQUASHFS).is_file()) {
        progress.step("stage", &format!("root partition cached {}", &key[..12]));
    } else {
        progress.step("stage", "root file system, overlay, files, configuration");
        let root = work.join("root");
        fs::create_dir_all(&root)?;
        stage(loaded, settings, &base, files, layout, &root)?;
        clamp_mtimes(&root, epoch)?;
        fs::create_dir_all(&cached)?;
        if !cached.join(ROOT_EXT4).is_file() {
            progress.step("stage", "formatting the root partition");
            // The kernel and initrd (for systemd-boot's ESP and the ISO) first: the partition marks the entry whole.
            for (link, name) in [("vmlinuz", VMLINUZ), ("initrd.img", INITRD)] {
                let from = resolve_in_root(&root, link)?;
                let tmp = cached.join(format!(".{name}.tmp"));
                fs::copy(&from, &tmp)
                    .with_context(|| format!("{} (linux-image-amd64)", from.display()))?;
                publish(&tmp, &cached.join(name))?;
            }
            let tmp = cached.join(format!(".{ROOT_EXT4}.tmp"));
            File::create(&tmp)?.set_len(layout.root.size())?;
            crate::ext4::mkfs(
                &tmp,
                0,
                layout.root.size(),
                &root,
                "foothold-root",
                layout.ids.root,
                epoch,
            )?;
            publish(&tmp, &cached.join(ROOT_EXT4))?;
        }
        if squash && !cached.join(LIVE_SQUASHFS).is_file() {
            progress.step("stage", "squashing the root file system for the ISO");
            let tmp = cached.join(format!(".{LIVE_SQUASHFS}.tmp"));
            mksquashfs(&root, &tmp, epoch, &[])?;
            publish(&tmp, &cached.join(LIVE_SQUASHFS))?;
        }
        fs::remove_dir_all(&root)?;
    }
    prune_cache(&settings.cache.join("root"), &cached, ROOT_CACHE_KEEP)?;
    Ok((cached, base))
}

/// A CA certificate for the image: PEM certificates and nothing secret (an image is not a place for a key).
fn certificates_only(field: &str, src: &Path) -> Result<()> {
    let text =
        fs::read_to_string(src).with_context(|| format!("{field}: reading {}", src.display()))?;
    if text.contains("PRIVATE KEY-----") {
        bail!(
            "{field}: {} holds a private key; the image carries the CA's certificate only (its key goes on the \
             FOOTHOLD-CA medium the appliance reads at boot)",
            src.display()
        );
    }
    if !text.contains("-----BEGIN CERTIFICATE-----") {
        bail!("{field}: {} is not a PEM certificate", src.display());
    }
    Ok(())
}

/// Lays the root's tree out in `root`: the base, Foothold's overlay, the spec's, the placed files, then the
/// generated configuration.
pub(super) fn stage(
    loaded: &Loaded,
    settings: &Settings,
    base: &Path,
    files: &[FileInput],
    layout: &Layout,
    root: &Path,
) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    copy_tree(base, root)?;
    let _ = fs::remove_file(root.join(".complete"));
    crate::overlay::write(root)?;
    if let Some(overlay) = spec_overlay(loaded)? {
        copy_tree(&overlay, root)
            .with_context(|| format!("components.overlay: copying {}", overlay.display()))?;
    }
    for f in files {
        let Some(d) = &f.component.dest else { continue };
        if [crate::spec::SITE_CA_FIELD, crate::spec::Node::CA_FIELD].contains(&f.field.as_str()) {
            certificates_only(&f.field, &f.src)?;
        }
        let dest = root.join(d.trim_start_matches('/'));
        fs::create_dir_all(dest.parent().expect("absolute"))?;
        fs::copy(&f.src, &dest)?;
        let mode = f
            .component
            .mode
            .as_deref()
            .map(|m| u32::from_str_radix(m, 8).expect("validated"))
            .unwrap_or(0o644);
        fs::set_permissions(&dest, fs::Permissions::from_mode(mode))?;
    }
    if let Some(f) = files.iter().find(|f| f.field == crate::spec::Ipa::FIELD) {
        crate::ipa::unpack(&f.src, root)?;
    }
    place_bmo_crds(loaded, files, root)?;
    fs::create_dir_all(root.join(AGENT_DIR.trim_start_matches('/')))?;
    // pause and CoreDNS by the digests of the images the data phase imports (made from the pinned binaries:
    // the same bytes, from the same cache entry).
    let pinned = match &loaded.spec.components.kubernetes {
        Some(k) => Some(super::workload::pinned(
            k,
            files,
            &settings.cache,
            settings.source_date_epoch,
        )?),
        None => None,
    };
    configure::apply(
        root,
        &configure::render(&loaded.spec, &layout.ids, pinned.as_ref()),
    )?;
    crate::metal3::stage(&loaded.spec, root)
}

/// baremetal-operator's CRDs, read from its checked source archive, where the bring-up applies manifests (before
/// the spec's own: `00-bmo-…` sorts first).
fn place_bmo_crds(loaded: &Loaded, files: &[FileInput], root: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let Some(m) = &loaded.spec.components.metal3 else {
        return Ok(());
    };
    let resolved = |field: &str| -> Result<crate::source::ArchiveSource> {
        let f = files
            .iter()
            .find(|f| f.field == field)
            .with_context(|| format!("{field}: not among the resolved inputs"))?;
        Ok(crate::source::ArchiveSource {
            path: Some(f.src.clone()),
            sha256: f.sha256.clone(),
            name: f.origin.clone(),
        })
    };
    // The archives are the source, its replacements, then its patches (`BaremetalOperator::archives`).
    let archives = m.baremetal_operator.archives();
    let field = &archives[0].0;
    let archive = resolved(field)?;
    let patches = archives[1 + m.baremetal_operator.replace.len()..]
        .iter()
        .map(|(f, _)| resolved(f))
        .collect::<Result<Vec<_>>>()?;
    let dir = root.join(crate::spec::KUBE_MANIFESTS_DIR.trim_start_matches('/'));
    fs::create_dir_all(&dir)?;
    // One unpacking of the source for both: its CRDs, and the ClusterRole its controllers need.
    let mut read = crate::go_archive::read_dirs(
        &archive,
        &patches,
        &[
            (crate::spec::BMO_CRDS, ".yaml"),
            (crate::spec::BMO_RBAC, "role.yaml"),
        ],
    )
    .with_context(|| format!("{field}: BMO's CRDs and RBAC"))?;
    let rbac = read.pop().unwrap_or_default();
    for (name, bytes) in read.pop().unwrap_or_default() {
        let dest = dir.join(format!("00-bmo-{name}"));
        fs::write(&dest, bytes)?;
        fs::set_permissions(&dest, fs::Permissions::from_mode(0o600))?;
    }
    let role = rbac
        .into_iter()
        .find(|(name, _)| name == "role.yaml")
        .with_context(|| format!("{field}: no {}/role.yaml", crate::spec::BMO_RBAC))?;
    let text = String::from_utf8(role.1)
        .with_context(|| format!("{field}: {}/role.yaml is not UTF-8", crate::spec::BMO_RBAC))?;
    let dest = dir.join("00-bmo-rbac.yaml");
    fs::write(
        &dest,
        bmo_rbac(&text).with_context(|| format!("{field}: BMO's RBAC"))?,
    )?;
    fs::set_permissions(&dest, fs::Permissions::from_mode(0o600))?;
    Ok(())
}

/// BMO's own ClusterRole (upstream's `config/base/rbac/role.yaml`, what its controllers' kubebuilder markers
/// ask for) under the name its kustomization gives it, bound to the user of the appliance's
/// `baremetal-operator.conf` instead of upstream's ServiceAccount: BMO acts with exactly the rights its
/// authors list, never as cluster-admin.
fn bmo_rbac(role: &str) -> Result<String> {
    const UPSTREAM: &str = "\n  name: manager-role\n";
    anyhow::ensure!(
        role.matches(UPSTREAM).count() == 1 && role.contains("\nkind: ClusterRole\n"),
        "role.yaml is no longer one ClusterRole named manager-role: look at BMO's config/base/rbac"
    );
    Ok(format!(
        "{}---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n\
         metadata:\n  name: {BMO_ROLE}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {BMO_ROLE}}}\n\
         subjects:\n- {{apiGroup: rbac.authorization.k8s.io, kind: User, name: \"foothold:baremetal-operator\"}}\n",
        role.replace(UPSTREAM, &format!("\n  name: {BMO_ROLE}\n"))
    ))
}

/// The name BMO's kustomization (`namePrefix: baremetal-operator-`) gives its ClusterRole.
const BMO_ROLE: &str = "baremetal-operator-manager-role";

/// The hash of everything in the root partition but the agent: this builder (its code writes the
/// configuration, and it carries Foothold's overlay), the Debian tree, the spec, the spec's overlay, the files
/// placed in the root, the partition's size, the epoch and the formatting tools.
fn key(
    loaded: &Loaded,
    base_key: &str,
    files: &[FileInput],
    size: u64,
    epoch: u64,
) -> Result<String> {
    let exe = std::env::current_exe().context("finding this program's own binary")?;
    let overlay = match spec_overlay(loaded)? {
        Some(dir) => tree_digest(&dir)?,
        None => String::new(),
    };
    let placed: Vec<_> = files
        .iter()
        .filter(|f| f.component.dest.is_some())
        .map(|f| json!([f.field, f.sha256, f.component.dest, f.component.mode]))
        .collect();
    let key = json!({
        "v": 2,
        "builder": crate::sparse::sha256(&exe)?,
        "rootfs": base_key,
        "spec": loaded.sha256,
        "footholdOverlay": crate::overlay::digest(),
        "overlay": overlay,
        "files": placed,
        "size": size,
        "sourceDateEpoch": epoch,
        "mke2fs": tool_version("mkfs.ext4", "-V"),
        "mksquashfs": tool_version("mksquashfs", "-version"),
    });
    Ok(hex::encode(Sha256::digest(key.to_string().as_bytes())))
}

/// A reproducible squashfs of `dir` (zstd, every time `epoch`).
pub fn mksquashfs(dir: &Path, out: &Path, epoch: u64, extra: &[&str]) -> Result<()> {
    let _ = fs::remove_file(out);
    Command::new("mksquashfs")
        .arg(dir)
        .arg(out)
        .args([
            "-noappend",
            "-no-progress",
            "-quiet",
            "-comp",
            "zstd",
            "-Xcompression-level",
            "6",
            "-mkfs-time",
            &epoch.to_string(),
            "-all-time",
            &epoch.to_string(),
        ])
        .args(extra)
        .run()
        .context("mksquashfs (Debian squashfs-tools)")?;
    Ok(())
}

/// The file a symlink in the root file system points at (`vmlinuz` → `boot/vmlinuz-6.1.0-…`), inside `root`.
pub(super) fn resolve_in_root(root: &Path, link: &str) -> Result<PathBuf> {
    let target = fs::read_link(root.join(link))
        .with_context(|| format!("/{link} in the root file system (linux-image-amd64)"))?;
    let rel = target.strip_prefix("/").unwrap_or(&target);
    Ok(root.join(rel))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bmo_gets_its_upstream_role_bound_to_its_own_user() {
        let upstream =
            "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  \
                        name: manager-role\nrules:\n- apiGroups:\n  - metal3.io\n  resources:\n  - \
                        baremetalhosts\n  verbs:\n  - get\n";
        let out = bmo_rbac(upstream).unwrap();
        let docs: Vec<serde_json::Value> = out
            .split("---\n")
            .filter(|d| !d.trim().is_empty())
            .map(|d| serde_saphyr::from_str(d).unwrap())
            .collect();
        assert_eq!(docs.len(), 2, "{out}");
        assert_eq!(docs[0]["metadata"]["name"], BMO_ROLE);
        assert_eq!(docs[0]["rules"][0]["resources"][0], "baremetalhosts");
        assert_eq!(docs[1]["kind"], "ClusterRoleBinding");
        assert_eq!(docs[1]["roleRef"]["name"], BMO_ROLE);
        assert_eq!(docs[1]["subjects"][0]["kind"], "User");
        assert_eq!(
            docs[1]["subjects"][0]["name"],
            "foothold:baremetal-operator"
        );
        // Upstream renamed or reshaped: the build stops, naming where to look.
        let e = bmo_rbac(&upstream.replace("manager-role", "controller-role")).unwrap_err();
        assert!(e.to_string().contains("config/base/rbac"), "{e}");
    }

    #[test]
    fn a_ca_for_the_image_is_certificates_and_nothing_secret() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("site-ca.pem");
        let cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        fs::write(&file, cert).unwrap();
        certificates_only("components.siteCa", &file).unwrap();
        fs::write(
            &file,
            format!("{cert}-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"),
        )
        .unwrap();
        let e = certificates_only("components.siteCa", &file)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "components.siteCa: {} holds a private key",
                file.display()
            )),
            "{e}"
        );
        fs::write(
            &file,
            "-----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY-----\n",
        )
        .unwrap();
        let e = certificates_only("components.node.ca", &file)
            .unwrap_err()
            .to_string();
        assert!(e.contains("holds a private key"), "{e}");
        fs::write(&file, "ssh-ed25519 AAAA\n").unwrap();
        let e = certificates_only("components.node.ca", &file)
            .unwrap_err()
            .to_string();
        assert!(e.ends_with("is not a PEM certificate"), "{e}");
    }

    #[test]
    fn links_in_the_root_resolve_inside_it() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("boot")).unwrap();
        fs::write(dir.path().join("boot/vmlinuz-6.1.0-1-amd64"), b"kernel").unwrap();
        std::os::unix::fs::symlink("boot/vmlinuz-6.1.0-1-amd64", dir.path().join("vmlinuz"))
            .unwrap();
        std::os::unix::fs::symlink("/boot/vmlinuz-6.1.0-1-amd64", dir.path().join("abs")).unwrap();
        for link in ["vmlinuz", "abs"] {
            let got = resolve_in_root(dir.path(), link).unwrap();
            assert_eq!(got, dir.path().join("boot/vmlinuz-6.1.0-1-amd64"));
        }
        let e = resolve_in_root(dir.path(), "initrd.img").unwrap_err();
        assert!(
            format!("{e:#}").contains("/initrd.img in the root file system"),
            "{e:#}"
        );
    }
}
