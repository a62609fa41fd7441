//! The hybrid ISO for CD and USB: the cached root's squashfs, a layer above it with the agent and its store, and
//! GRUB for BIOS and UEFI.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result};

use super::boot::{fat_image, grub_image, Fat, GrubImage, GRUB_ISO_MODULES};
use super::context::Build;
use super::layout::{derived_uuid, MIB};
use super::root::{mksquashfs, INITRD, LIVE_SQUASHFS, VMLINUZ};
use crate::cmd::CommandExt as _;
use crate::files::{clamp_mtimes, copy_tree, publish, write_file};

/// Where the ISO's El Torito images are, in the ISO.
const ISO_ELTORITO: &str = "boot/grub/i386-pc/eltorito.img";
const ISO_EFI_IMAGE: &str = "boot/grub/efi.img";

/// The hybrid ISO: live-boot's squashfs root (the agent's store inside it; writes go to memory), booted by GRUB
/// from CD (El Torito, BIOS and UEFI) or USB (the MBR and GPT xorriso writes). live-boot stacks
/// `live/*.squashfs` in name order, so the cached squashfs of the root (`filesystem.squashfs`) is the bottom
/// layer and `foothold.squashfs` above it holds what changes from build to build: the agent, the store (no data
/// partition is mounted) and the live system's fstab.
///
/// GRUB's images and the EFI boot image are made here and xorriso is run directly, not through grub-mkrescue:
/// grub-mkrescue stamps the ISO with the time of the build (`--modification-date`, which also makes the GPT's
/// GUIDs) and formats its EFI image with a random FAT serial, so two builds of one spec differed. Here every
/// date is `SOURCE_DATE_EPOCH` and the serial derives from the spec.
pub fn write(b: &Build, cached: &Path, agent: &Path, data: &Path) -> Result<PathBuf> {
    let Build {
        loaded,
        settings,
        work,
        ..
    } = b;
    use std::os::unix::fs::PermissionsExt;
    let spec = &loaded.spec;
    let epoch = settings.source_date_epoch;
    let tree = work.join("iso");
    fs::create_dir_all(tree.join("live"))?;
    fs::create_dir_all(tree.join("boot/grub"))?;
    let base = tree.join("live").join(LIVE_SQUASHFS);
    if fs::hard_link(cached.join(LIVE_SQUASHFS), &base).is_err() {
        fs::copy(cached.join(LIVE_SQUASHFS), &base)?;
    }
    for name in [VMLINUZ, INITRD] {
        fs::copy(cached.join(name), tree.join("live").join(name))
            .with_context(|| format!("copying {name} into the ISO"))?;
    }
    let layer = work.join("iso-layer");
    fs::create_dir_all(layer.join("var/lib/foothold"))?;
    copy_tree(data, &layer.join("var/lib/foothold"))?;
    // The layer's directories are the merged ones the live system sees: the root's modes.
    for d in [
        "",
        "etc",
        "usr",
        "usr/local",
        "usr/local/bin",
        "var",
        "var/lib",
        "var/lib/foothold",
    ] {
        fs::create_dir_all(layer.join(d))?;
        fs::set_permissions(layer.join(d), fs::Permissions::from_mode(0o755))?;
    }
    write_file(
        &layer.join("etc/fstab"),
        "# live system: the root is live-boot's overlay\n",
        0o644,
    )?;
    fs::copy(agent, layer.join("usr/local/bin/foothold-agent"))?;
    fs::set_permissions(
        layer.join("usr/local/bin/foothold-agent"),
        fs::Permissions::from_mode(0o755),
    )?;
    clamp_mtimes(&layer, epoch)?;
    mksquashfs(
        &layer,
        &tree.join("live/foothold.squashfs"),
        epoch,
        &["-all-root"],
    )?;
    fs::write(
        tree.join("boot/grub/grub.cfg"),
        format!(
            "serial --unit=0 --speed=115200\nterminal_input serial console\nterminal_output serial console\nset timeout=1\nmenuentry 'Foothold {name} (live)' {{\n  linux /live/vmlinuz boot=live console=tty0 console=ttyS0,115200n8\n  initrd /live/initrd.img\n}}\n",
            name = spec.name
        ),
    )?;
    // GRUB for both firmwares finds the ISO by a marker file named after the spec (on a CD drive or, written
    // to a USB stick, on the whole disk), then reads /boot/grub/grub.cfg there.
    let id = derived_uuid(&loaded.sha256, "iso");
    let marker = format!(".disk/foothold-{}", id.simple());
    write_file(&tree.join(&marker), "", 0o644)?;
    let early = work.join("iso-early.cfg");
    fs::write(
        &early,
        format!("search --no-floppy --file --set=root /{marker}\nset prefix=($root)/boot/grub\n"),
    )?;
    fs::create_dir_all(tree.join("boot/grub/i386-pc"))?;
    grub_image(
        GrubImage::BiosCdrom,
        &early,
        GRUB_ISO_MODULES,
        &tree.join(ISO_ELTORITO),
    )?;
    let efi_tree = work.join("iso-efi");
    fs::create_dir_all(efi_tree.join("EFI/BOOT"))?;
    let bootx64 = efi_tree.join("EFI/BOOT/BOOTX64.EFI");
    grub_image(GrubImage::Efi, &early, GRUB_ISO_MODULES, &bootx64)?;
    // The El Torito EFI image: a small FAT holding BOOTX64.EFI, with room for its tables.
    fat_image(
        &tree.join(ISO_EFI_IMAGE),
        &Fat {
            size: (fs::metadata(&bootx64)?.len() + MIB).next_multiple_of(MIB),
            fat32: false,
            label: "FOOTHOLDEFI",
            id,
            epoch,
        },
        &efi_tree,
    )?;
    clamp_mtimes(&tree, epoch)?;
    let out = settings.out.join(format!("{}.iso", spec.name));
    let tmp = settings.out.join(format!(".{}.iso.tmp", spec.name));
    let _ = fs::remove_file(&tmp);
    let volid: String = format!("FOOTHOLD_{}", spec.name.to_uppercase().replace('-', "_"))
        .chars()
        .take(32)
        .collect();
    // With SOURCE_DATE_EPOCH, xorriso takes the volume's dates, its UUID and the GPT's GUIDs from it and gives
    // every file its (clamped) mtime.
    Command::new("xorriso")
        .env("SOURCE_DATE_EPOCH", epoch.to_string())
        .args(["-as", "mkisofs", "-quiet", "-r", "-V", &volid, "-o"])
        .arg(&tmp)
        .args(["-b", ISO_ELTORITO, "-no-emul-boot", "-boot-load-size", "4"])
        .args(["-boot-info-table", "--grub2-boot-info"])
        .args(["--grub2-mbr", "/usr/lib/grub/i386-pc/boot_hybrid.img"])
        .args([
            "--efi-boot",
            ISO_EFI_IMAGE,
            "-efi-boot-part",
            "--efi-boot-image",
        ])
        .arg("--protective-msdos-label")
        .arg(&tree)
        .run()
        .context("xorriso (Debian xorriso)")?;
    publish(&tmp, &out)?;
    Ok(out)
}
