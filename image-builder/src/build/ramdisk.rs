//! `outputs.formats: [ramdisk]`: the kernel and an initramfs holding the whole root, which the kernel unpacks into
//! memory and runs (`/init` is systemd): what Ironic boots as a deploy ramdisk, by PXE or from the ISO it makes of
//! the two; and the EFI system partition Ironic puts in such an ISO for UEFI (`<name>.esp`: GRUB, which finds the
//! ISO by the configuration Ironic writes into it, `/EFI/BOOT/grub.cfg`). No disk, no agent, no cache of its own
//! (the Debian tree under it is cached).
//!
//! The archive is reproducible: the tree's times are the epoch, its entries sorted, cpio's inode and device
//! numbers its own (`--reproducible`), and zstd's output the same for any number of threads.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context as _, Result};

use super::context::{Build, Record};
use super::inputs::FileInput;
use crate::files::{clamp_mtimes, publish};

/// What a ramdisk leaves out of its root: documentation, the package index and caches (nothing installs there),
/// and `/boot` (the kernel is a file of its own; the initramfs-tools image is not used).
const PRUNED: &[&str] = &[
    "boot",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "var/cache/apt",
    "var/lib/apt/lists",
    "var/cache/debconf",
];

/// Ironic's `[DEFAULT] grub_config_path` (its default): where the GRUB of [`esp`] looks for its menu on the ISO.
pub const ISO_GRUB_CFG: &str = "EFI/BOOT/grub.cfg";

/// Writes `<out>/<name>.kernel`, `<out>/<name>.initramfs` and `<out>/<name>.esp`; returns them.
pub fn write(b: &Build, files: &[FileInput], record: &mut Record) -> Result<Vec<PathBuf>> {
    let Build {
        loaded,
        settings,
        progress,
        layout,
        work,
    } = b;
    let spec = &loaded.spec;
    let (base, base_key) = super::rootfs::rootfs(loaded, settings, progress)?;
    record.inputs.insert(
        "rootfs".into(),
        serde_json::json!({"suite": spec.base.suite, "mirror": spec.base.mirror, "cacheKey": base_key}),
    );
    progress.step("stage", "root file system, files, configuration");
    let root = work.join("root");
    fs::create_dir_all(&root)?;
    super::root::stage(loaded, settings, &base, files, layout, &root)?;
    let kernel = work.join("kernel");
    fs::copy(super::root::resolve_in_root(&root, "vmlinuz")?, &kernel)
        .context("copying the kernel")?;
    for p in PRUNED {
        let dir = root.join(p);
        if dir.is_dir() {
            fs::remove_dir_all(&dir)?;
            fs::create_dir(&dir)?;
        }
    }
    for link in ["vmlinuz", "vmlinuz.old", "initrd.img", "initrd.img.old"] {
        let _ = fs::remove_file(root.join(link));
    }
    // The kernel runs /init from the initramfs; systemd, finding no /etc/initrd-release, runs the system.
    std::os::unix::fs::symlink("sbin/init", root.join("init"))?;
    clamp_mtimes(&root, settings.source_date_epoch)?;

    progress.step("ramdisk", "the root as an initramfs (cpio, zstd)");
    let out = |ext: &str| settings.out.join(format!("{}.{ext}", spec.name));
    let initramfs = out("initramfs");
    let tmp = settings.out.join(format!(".{}.initramfs.tmp", spec.name));
    archive(&root, &tmp)?;
    publish(&tmp, &initramfs)?;
    let tmp = settings.out.join(format!(".{}.kernel.tmp", spec.name));
    fs::rename(&kernel, &tmp).or_else(|_| fs::copy(&kernel, &tmp).map(drop))?;
    publish(&tmp, &out("kernel"))?;
    let tmp = settings.out.join(format!(".{}.esp.tmp", spec.name));
    esp(b, &tmp)?;
    publish(&tmp, &out("esp"))?;
    for (tool, arg) in [
        ("cpio", "--version"),
        ("zstd", "--version"),
        ("grub-mkimage", "--version"),
    ] {
        record
            .tools
            .insert(tool, crate::cmd::tool_version(tool, arg));
    }
    Ok(vec![out("kernel"), initramfs, out("esp")])
}

/// The EFI system partition of a virtual-media ISO Ironic makes of the kernel and the initramfs: GRUB as the
/// removable-media loader, which finds the ISO by [`ISO_GRUB_CFG`] and reads that menu, Ironic's, there.
fn esp(b: &Build, out: &Path) -> Result<()> {
    use super::boot::{fat_image, grub_image, Fat, GrubImage, GRUB_ISO_MODULES};
    let early = b.work.join("esp-early.cfg");
    fs::write(
        &early,
        format!(
            "search --no-floppy --file --set=root /{ISO_GRUB_CFG}\nset prefix=($root)/EFI/BOOT\n"
        ),
    )?;
    let tree = b.work.join("esp");
    fs::create_dir_all(tree.join("EFI/BOOT"))?;
    let bootx64 = tree.join("EFI/BOOT/BOOTX64.EFI");
    grub_image(GrubImage::Efi, &early, GRUB_ISO_MODULES, &bootx64)?;
    fat_image(
        out,
        &Fat {
            size: (fs::metadata(&bootx64)?.len() + super::layout::MIB)
                .next_multiple_of(super::layout::MIB),
            fat32: false,
            label: "ESP",
            id: super::layout::derived_uuid(&b.loaded.sha256, "esp"),
            epoch: b.settings.source_date_epoch,
        },
        &tree,
    )?;
    File::open(out)?.sync_all()?;
    Ok(())
}

/// `dir` as a zstd-compressed newc cpio archive at `out`: entries in byte order of their paths, owners and modes
/// kept.
fn archive(dir: &Path, out: &Path) -> Result<()> {
    let mut names = Vec::new();
    list(dir, Path::new(""), &mut names)?;
    names.sort();
    let mut input = names.join(&b"\n"[..]);
    input.push(b'\n');
    let file = File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut zstd = Command::new("zstd")
        .args(["-q", "-T0", "-12", "-c"])
        .stdin(Stdio::piped())
        .stdout(file)
        .spawn()
        .context("zstd (Debian zstd)")?;
    let mut cpio = Command::new("cpio")
        .args(["--quiet", "-o", "-H", "newc", "--reproducible"])
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(zstd.stdin.take().expect("piped"))
        .spawn()
        .context("cpio (Debian cpio)")?;
    {
        use std::io::Write as _;
        let mut stdin = cpio.stdin.take().expect("piped");
        stdin.write_all(&input)?;
    }
    let cpio = cpio.wait()?;
    let zstd = zstd.wait()?;
    if !cpio.success() || !zstd.success() {
        bail!("making the initramfs: cpio {cpio}, zstd {zstd}");
    }
    File::open(out)?.sync_all()?;
    Ok(())
}

/// Every path under `dir` (relative, as bytes), directories before what they hold.
fn list(dir: &Path, rel: &Path, out: &mut Vec<Vec<u8>>) -> Result<()> {
    use std::os::unix::ffi::OsStrExt as _;
    for e in fs::read_dir(dir.join(rel))
        .with_context(|| format!("reading {}", dir.join(rel).display()))?
    {
        let e = e?;
        let path = rel.join(e.file_name());
        out.push(path.as_os_str().as_bytes().to_vec());
        if e.file_type()?.is_dir() {
            list(dir, &path, out)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Needs Debian's cpio and zstd (scripts/install-build-tools.sh).
    #[test]
    fn the_archive_holds_the_tree_and_is_the_same_twice() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        fs::create_dir_all(root.join("etc/b")).unwrap();
        fs::write(root.join("etc/a"), "a\n").unwrap();
        fs::write(root.join("etc/b/c"), "c\n").unwrap();
        std::os::unix::fs::symlink("sbin/init", root.join("init")).unwrap();
        clamp_mtimes(&root, 1_700_000_000).unwrap();
        let (one, two) = (dir.path().join("1"), dir.path().join("2"));
        archive(&root, &one).unwrap();
        archive(&root, &two).unwrap();
        assert_eq!(fs::read(&one).unwrap(), fs::read(&two).unwrap());
        let listing = Command::new("sh")
            .arg("-c")
            .arg(format!("zstd -dc {} | cpio -t --quiet", one.display()))
            .output()
            .unwrap();
        let names = String::from_utf8(listing.stdout).unwrap();
        assert_eq!(names, "etc\netc/a\netc/b\netc/b/c\ninit\n");
    }
}
