//! What boots the disk: the ESP's tree (GRUB's EFI image, or systemd-boot with its loader entry, the kernel and
//! the initrd), GRUB's BIOS core image and MBR code, and the raw disk assembled from the cached root partition,
//! the agent written into it, the data file system, the ESP and the GPT, without loop devices or mounts.
//! GRUB's and FAT's helpers serve the ISO too.

use std::fs::{self, File};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _, Result};

use super::context::{Build, Record};
use super::layout::{kernel_cmdline, Layout, MIB};
use super::root::{AGENT_DIR, INITRD, ROOT_EXT4, VMLINUZ};
use crate::cmd::{tool_version, CommandExt as _};
use crate::files::{clamp_mtimes, publish, write_file};
use crate::gpt;

const SYSTEMD_BOOT_EFI: &str = "/usr/lib/systemd/boot/efi/systemd-bootx64.efi";
/// GRUB modules every image of ours embeds: its menu, the serial console, Linux.
const GRUB_MODULES: &[&str] = &[
    "search",
    "normal",
    "linux",
    "configfile",
    "echo",
    "serial",
    "terminal",
    "test",
    "boot",
    "gzio",
    "sleep",
    "minicmd",
];
/// The disk's GRUB finds its ext4 root by UUID; the ISO's finds the ISO by a marker file.
const GRUB_DISK_MODULES: &[&str] = &["part_gpt", "ext2", "search_fs_uuid"];
pub const GRUB_ISO_MODULES: &[&str] = &["iso9660", "search_fs_file"];

/// Writes `<out>/<name>.raw`: the cached root partition copied in (its holes stay holes), `agent` written into
/// it, the data file system made from `data`, then the ESP and the boot code. Returns its path.
pub fn disk(
    b: &Build,
    root: &Path,
    agent: &Path,
    data: &Path,
    record: &mut Record,
) -> Result<PathBuf> {
    let Build {
        loaded,
        settings,
        progress,
        layout,
        work,
    } = b;
    let spec = &loaded.spec;
    let epoch = settings.source_date_epoch;
    progress.step(
        "disk",
        if layout.systemd_boot {
            "GPT, systemd-boot (UEFI), ESP with the kernel, root and data file systems"
        } else {
            "GPT, GRUB (BIOS and UEFI), ESP, root and data file systems"
        },
    );
    let raw = settings.out.join(format!("{}.raw", spec.name));
    let tmp_raw = settings.out.join(format!(".{}.raw.tmp", spec.name));
    {
        let _ = fs::remove_file(&tmp_raw);
        let f = File::create(&tmp_raw)?;
        f.set_len(layout.size)?;
        crate::sparse::copy_into(&root.join(ROOT_EXT4), &f, layout.root.offset())?;
    }
    crate::ext4::add_file(
        &tmp_raw,
        layout.root.offset(),
        agent,
        AGENT_DIR,
        "foothold-agent",
        0o755,
        epoch,
    )
    .context("writing the agent into the root partition")?;
    crate::ext4::mkfs(
        &tmp_raw,
        layout.data.offset(),
        layout.data.size(),
        data,
        "foothold-data",
        layout.ids.data,
        epoch,
    )?;

    // The ESP's tree: GRUB's EFI image, or systemd-boot with its configuration, the kernel and the initrd.
    let esp_tree = work.join("esp");
    fs::create_dir_all(esp_tree.join("EFI/BOOT"))?;
    let bios_core = if layout.systemd_boot {
        systemd_boot_esp(spec.name.as_str(), layout, root, &esp_tree, record)?;
        None
    } else {
        Some(grub_esp(layout, &esp_tree, work, record)?)
    };
    // The ESP, formatted and filled in a file of its own, then copied in.
    let esp_img = work.join("esp.img");
    fat_image(
        &esp_img,
        &Fat {
            size: layout.esp.size(),
            fat32: true,
            label: "FOOTHOLDESP",
            id: layout.ids.disk,
            epoch,
        },
        &esp_tree,
    )?;
    let mut f = fs::OpenOptions::new().write(true).open(&tmp_raw)?;
    crate::sparse::copy_into(&esp_img, &f, layout.esp.offset())?;
    if let Some(core) = bios_core {
        // BIOS: core.img in the BIOS boot partition, boot.img's code in the MBR (see `bios`).
        let part = layout
            .bios
            .as_ref()
            .expect("GRUB disks have a BIOS boot partition");
        let boot_img = fs::read("/usr/lib/grub/i386-pc/boot.img")
            .context("reading GRUB's boot.img (Debian grub-pc-bin)")?;
        let (mbr, core_patched) =
            crate::bios::embed(&boot_img, &core, part.first_lba).map_err(anyhow::Error::msg)?;
        f.seek(SeekFrom::Start(part.offset()))?;
        f.write_all(&core_patched)?;
        f.seek(SeekFrom::Start(0))?;
        f.write_all(&mbr)?;
    }
    gpt::write(
        &mut f,
        layout.sectors(),
        layout.ids.disk,
        &layout.partitions(),
    )?;
    drop(f);
    publish(&tmp_raw, &raw)?;
    Ok(raw)
}

/// systemd-boot's ESP: its EFI binary, its loader entry, the kernel and the initrd. Fails when they do not fit.
fn systemd_boot_esp(
    name: &str,
    layout: &Layout,
    root: &Path,
    esp_tree: &Path,
    record: &mut Record,
) -> Result<()> {
    let efi = fs::read(SYSTEMD_BOOT_EFI)
        .with_context(|| format!("reading {SYSTEMD_BOOT_EFI} (Debian systemd-boot-efi)"))?;
    record.tools.insert(
        "systemd-boot",
        systemd_boot_version(&efi).unwrap_or_else(|| "unknown".into()),
    );
    fs::write(esp_tree.join("EFI/BOOT/BOOTX64.EFI"), &efi)?;
    for (path, text) in systemd_boot_config(name, &kernel_cmdline(&layout.ids)) {
        write_file(&esp_tree.join(path), &text, 0o644)?;
    }
    fs::create_dir_all(esp_tree.join("foothold"))?;
    let mut needed = efi.len() as u64;
    for name in [VMLINUZ, INITRD] {
        let from = root.join(name);
        needed += fs::metadata(&from)
            .with_context(|| format!("{}", from.display()))?
            .len();
        fs::copy(&from, esp_tree.join("foothold").join(name))?;
    }
    // FAT32's tables and directories take a few MiB of the partition.
    let esp_size = layout.esp.size();
    if needed + 8 * MIB > esp_size {
        bail!(
            "outputs.bootloader: systemd-boot needs the kernel and initrd on the ESP ({} MiB), which holds {} MiB",
            needed.div_ceil(MIB),
            esp_size / MIB - 8
        );
    }
    Ok(())
}

/// GRUB's ESP (its EFI image) and its BIOS core image, returned: both find the root by its UUID and read
/// /boot/grub/grub.cfg there.
fn grub_esp(layout: &Layout, esp_tree: &Path, work: &Path, record: &mut Record) -> Result<Vec<u8>> {
    record
        .tools
        .insert("grub-mkimage", tool_version("grub-mkimage", "--version"));
    let early = work.join("early.cfg");
    fs::write(
        &early,
        format!(
            "search --no-floppy --fs-uuid --set=root {}\nset prefix=($root)/boot/grub\n",
            layout.ids.root
        ),
    )?;
    grub_image(
        GrubImage::Efi,
        &early,
        GRUB_DISK_MODULES,
        &esp_tree.join("EFI/BOOT/BOOTX64.EFI"),
    )?;
    let core = work.join("core.img");
    grub_image(GrubImage::BiosDisk, &early, GRUB_DISK_MODULES, &core)?;
    let core_bytes = fs::read(&core)?;
    let part = layout
        .bios
        .as_ref()
        .expect("GRUB disks have a BIOS boot partition");
    if core_bytes.len() as u64 > part.size() {
        bail!(
            "the BIOS core image ({} bytes) does not fit the BIOS boot partition",
            core_bytes.len()
        );
    }
    Ok(core_bytes)
}

/// systemd-boot's configuration on the ESP (Boot Loader Specification type 1): the loader settings and one
/// entry booting `/foothold/vmlinuz` with `/foothold/initrd.img`, both copied from the root file system.
fn systemd_boot_config(name: &str, cmdline: &str) -> [(&'static str, String); 2] {
    [
        (
            "loader/loader.conf",
            "timeout 1\ndefault foothold.conf\nconsole-mode keep\n".to_owned(),
        ),
        (
            "loader/entries/foothold.conf",
            format!(
                "title Foothold {name}\nlinux /foothold/vmlinuz\ninitrd /foothold/initrd.img\noptions {cmdline}\n"
            ),
        ),
    ]
}

/// The version systemd-boot's EFI binary reports as LoaderInfo (`systemd-boot 252.39-1~deb12u2`).
fn systemd_boot_version(efi: &[u8]) -> Option<String> {
    let marker = b"LoaderInfo: ";
    let at = efi.windows(marker.len()).position(|w| w == marker)? + marker.len();
    let rest = &efi[at..];
    let end = rest.iter().position(|&b| b == b'#' || b == 0)?;
    Some(String::from_utf8_lossy(&rest[..end]).trim().to_owned())
}

/// What a GRUB image boots from.
#[derive(Clone, Copy)]
pub enum GrubImage {
    /// `BOOTX64.EFI`.
    Efi,
    /// `core.img` for the BIOS boot partition.
    BiosDisk,
    /// The El Torito image a BIOS loads from a CD (and the hybrid MBR from a USB stick).
    BiosCdrom,
}

/// Makes a GRUB image at `out` with `early` as its embedded config and [`GRUB_MODULES`] plus `modules` built in.
pub fn grub_image(kind: GrubImage, early: &Path, modules: &[&str], out: &Path) -> Result<()> {
    let (format, firmware, package): (_, &[&str], _) = match kind {
        GrubImage::Efi => (
            "x86_64-efi",
            &["fat", "efi_gop", "all_video"],
            "grub-efi-amd64-bin",
        ),
        GrubImage::BiosDisk => ("i386-pc", &["biosdisk"], "grub-pc-bin"),
        GrubImage::BiosCdrom => ("i386-pc-eltorito", &["biosdisk"], "grub-pc-bin"),
    };
    Command::new("grub-mkimage")
        .args(["-O", format, "-p", "/boot/grub", "-c"])
        .arg(early)
        .arg("-o")
        .arg(out)
        .args(GRUB_MODULES)
        .args(modules)
        .args(firmware)
        .run()
        .with_context(|| format!("grub-mkimage -O {format} (Debian {package})"))?;
    Ok(())
}

/// A FAT file system made reproducibly: its serial from `id`, every date `epoch`.
pub struct Fat {
    /// Bytes, a multiple of 1 KiB.
    pub size: u64,
    pub fat32: bool,
    pub label: &'static str,
    pub id: uuid::Uuid,
    pub epoch: u64,
}

/// Formats a FAT image file at `img` and copies `tree`'s entries into its root, in name order.
pub fn fat_image(img: &Path, fat: &Fat, tree: &Path) -> Result<()> {
    let _ = fs::remove_file(img);
    let serial = format!(
        "{:08X}",
        u32::from_le_bytes(fat.id.as_bytes()[..4].try_into().expect("4 bytes"))
    );
    let epoch = fat.epoch.to_string();
    let mut mkfs = Command::new("mkfs.vfat");
    mkfs.env("SOURCE_DATE_EPOCH", &epoch).args([
        "-C",
        "--invariant",
        "-n",
        fat.label,
        "-i",
        &serial,
    ]);
    if fat.fat32 {
        mkfs.args(["-F", "32"]);
    }
    mkfs.arg(img)
        .arg((fat.size / 1024).to_string())
        .run()
        .context("mkfs.vfat (Debian dosfstools)")?;
    clamp_mtimes(tree, fat.epoch)?;
    let mut top: Vec<PathBuf> = fs::read_dir(tree)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    top.sort();
    Command::new("mcopy")
        .env("SOURCE_DATE_EPOCH", &epoch)
        .env("MTOOLS_SKIP_CHECK", "1")
        .args(["-s", "-m", "-i"])
        .arg(img)
        .args(&top)
        .arg("::")
        .run()
        .context("mcopy (Debian mtools)")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::layout::Ids;

    #[test]
    fn systemd_boot_boots_the_kernel_it_finds_on_the_esp_with_the_disk_cmdline() {
        let ids = Ids {
            disk: uuid::Uuid::nil(),
            root: uuid::Uuid::parse_str("6e1f0c2a-0000-4000-8000-000000000001").unwrap(),
            data: uuid::Uuid::nil(),
        };
        let [loader, entry] = systemd_boot_config("foothold-lab", &kernel_cmdline(&ids));
        assert_eq!(loader.0, "loader/loader.conf");
        assert!(loader.1.contains("default foothold.conf\n"), "{}", loader.1);
        assert_eq!(entry.0, "loader/entries/foothold.conf");
        assert_eq!(
            entry.1,
            "title Foothold foothold-lab\nlinux /foothold/vmlinuz\ninitrd /foothold/initrd.img\n\
             options root=UUID=6e1f0c2a-0000-4000-8000-000000000001 ro console=tty0 console=ttyS0,115200n8\n"
        );
    }

    #[test]
    fn systemd_boot_version_is_read_from_the_loader_info_string() {
        let mut efi = vec![0u8; 64];
        efi.extend_from_slice(b"#### LoaderInfo: systemd-boot 252.39-1~deb12u2 ####\0rest");
        assert_eq!(
            systemd_boot_version(&efi).as_deref(),
            Some("systemd-boot 252.39-1~deb12u2")
        );
        assert_eq!(systemd_boot_version(b"no marker here"), None);
        if let Ok(real) = fs::read(SYSTEMD_BOOT_EFI) {
            assert!(systemd_boot_version(&real).is_some_and(|v| v.starts_with("systemd-boot ")));
        }
    }
}
