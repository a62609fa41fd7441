//! The disk's layout, which depends on the spec alone: a GPT with a BIOS boot partition (GRUB only), the ESP,
//! the root and the data partition, and the UUIDs of the disk and its file systems, all derived from the spec's
//! hash so that one spec always gives the same disk.

use anyhow::Result;
use sha2::{Digest, Sha256};

use crate::gpt::{self, Partition, SECTOR};
use crate::spec::{Bootloader, Loaded};

pub const MIB: u64 = 1 << 20;
const ESP_SIZE: u64 = 64 * MIB;
/// systemd-boot reads the kernel and initrd from the ESP itself.
const SYSTEMD_BOOT_ESP_SIZE: u64 = 256 * MIB;
const BIOS_BOOT_SIZE: u64 = MIB;

/// The UUIDs of the disk and of the file systems the image's fstab and boot loaders name.
pub struct Ids {
    pub disk: uuid::Uuid,
    pub root: uuid::Uuid,
    pub data: uuid::Uuid,
}

/// Where everything goes on the disk.
pub struct Layout {
    pub ids: Ids,
    /// The disk's size in bytes.
    pub size: u64,
    pub systemd_boot: bool,
    /// GRUB's BIOS core image lives here; systemd-boot is UEFI-only and has none.
    pub bios: Option<Partition>,
    pub esp: Partition,
    pub root: Partition,
    pub data: Partition,
}

impl Layout {
    pub fn new(loaded: &Loaded) -> Result<Self> {
        let spec = &loaded.spec;
        let uuid = |label: &str| derived_uuid(&loaded.sha256, label);
        let systemd_boot = spec.outputs.bootloader == Bootloader::SystemdBoot;
        let size = spec.disk_size();
        let data_size = spec.data_size().map_err(anyhow::Error::msg)?;
        let lba = |bytes: u64| bytes / SECTOR;
        let g = |s: &str| uuid::Uuid::parse_str(s).expect("constant GUID");
        let part = |type_guid: &str, label: &str, start: u64, len: u64, name: &str| Partition {
            type_guid: g(type_guid),
            guid: uuid(label),
            first_lba: lba(start),
            last_lba: lba(start + len) - 1,
            name: name.into(),
        };
        let bios =
            (!systemd_boot).then(|| part(gpt::BIOS_BOOT, "bios", MIB, BIOS_BOOT_SIZE, "bios"));
        let esp_start = MIB + bios.as_ref().map_or(0, |b| b.size());
        let esp_size = if systemd_boot {
            SYSTEMD_BOOT_ESP_SIZE
        } else {
            ESP_SIZE
        };
        let root_start = esp_start + esp_size;
        let data_start = size - MIB - data_size;
        Ok(Layout {
            ids: Ids {
                disk: uuid("disk"),
                root: uuid("root"),
                data: uuid("data"),
            },
            size,
            systemd_boot,
            bios,
            esp: part(gpt::EFI_SYSTEM, "esp", esp_start, esp_size, "esp"),
            root: part(
                gpt::LINUX_ROOT_X86_64,
                "root-part",
                root_start,
                data_start - root_start,
                "root",
            ),
            data: part(
                gpt::LINUX_FS,
                "data-part",
                data_start,
                data_size,
                "foothold-data",
            ),
        })
    }

    /// The partitions in disk order.
    pub fn partitions(&self) -> Vec<Partition> {
        self.bios
            .iter()
            .chain([&self.esp, &self.root, &self.data])
            .cloned()
            .collect()
    }

    pub fn sectors(&self) -> u64 {
        self.size / SECTOR
    }
}

/// A UUID derived from the spec's hash and a label: the same spec, the same UUIDs.
pub fn derived_uuid(spec_sha256: &str, label: &str) -> uuid::Uuid {
    let mut b: [u8; 16] =
        Sha256::digest(format!("foothold-build\n{spec_sha256}\n{label}").as_bytes())[..16]
            .try_into()
            .expect("16 bytes");
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    uuid::Uuid::from_bytes(b)
}

/// The kernel command line of the disk images (GRUB's menu entry and systemd-boot's loader entry).
pub fn kernel_cmdline(ids: &Ids) -> String {
    format!(
        "root=UUID={} ro console=tty0 console=ttyS0,115200n8",
        ids.root
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(bootloader: &str, disk: &str, data: &str) -> Layout {
        let yaml = format!(
            "name: t\nbase:\n  suite: trixie\nhostname: t\noutputs:\n  formats: [raw]\n  \
             bootloader: {bootloader}\n  diskSize: {disk}\n  dataSize: {data}\n"
        );
        let loaded = crate::spec::load_text(
            std::path::Path::new("t.yaml"),
            &yaml,
            crate::spec::Pins::Required,
        )
        .unwrap();
        Layout::new(&loaded).unwrap()
    }

    #[test]
    fn partitions_are_in_order_aligned_apart_and_inside_the_disk() {
        for (boot, disk, data) in [("grub", "3GiB", "1GiB"), ("systemd-boot", "16GiB", "8GiB")] {
            let l = layout(boot, disk, data);
            let parts = l.partitions();
            assert_eq!(parts.len(), if boot == "grub" { 4 } else { 3 }, "{boot}");
            assert_eq!(
                parts[0].first_lba,
                MIB / SECTOR,
                "the first starts at 1 MiB"
            );
            for w in parts.windows(2) {
                assert_eq!(w[0].last_lba + 1, w[1].first_lba, "{boot}: contiguous");
            }
            for p in &parts {
                assert_eq!(p.offset() % MIB, 0, "{boot}: {} aligned", p.name);
            }
            // The backup GPT needs the disk's last 33 sectors: the last MiB stays free.
            assert_eq!((l.data.last_lba + 1) * SECTOR, l.size - MIB, "{boot}");
            assert_eq!(l.data.name, "foothold-data");
            let guids: std::collections::BTreeSet<_> = parts.iter().map(|p| p.guid).collect();
            assert_eq!(guids.len(), parts.len(), "{boot}: unique GUIDs");
        }
    }

    #[test]
    fn the_same_spec_gives_the_same_uuids_and_another_spec_others() {
        let a = derived_uuid("aa", "root");
        assert_eq!(a, derived_uuid("aa", "root"));
        assert_ne!(a, derived_uuid("ab", "root"));
        assert_ne!(a, derived_uuid("aa", "data"));
        assert_eq!(a.get_version_num(), 4);
        assert_eq!(a.get_variant(), uuid::Variant::RFC4122);
    }
}
