//! Embedding GRUB for BIOS boot on a GPT disk, as grub-bios-setup does for a BIOS boot partition: `core.img` at
//! the partition's first sector with the blocklist in its first sector pointing at its second, and `boot.img`'s
//! code in the MBR with `core.img`'s sector.

/// Offset in boot.img of the LBA of core.img's first sector (GRUB_BOOT_MACHINE_KERNEL_SECTOR).
const KERNEL_SECTOR: usize = 0x5c;
/// Offset in core.img's first sector (diskboot.img) of the blocklist's start LBA: the sector minus the
/// 12-byte list entry (GRUB_BOOT_MACHINE_LIST_SIZE).
const BLOCKLIST_START: usize = 512 - 12;
/// boot.img's code: the MBR's bytes before the disk signature and partition table.
pub const MBR_CODE: usize = 440;

/// The MBR code (440 bytes) and the patched core image for a core image written at `core_lba`.
pub fn embed(
    boot_img: &[u8],
    core_img: &[u8],
    core_lba: u64,
) -> Result<([u8; MBR_CODE], Vec<u8>), String> {
    if boot_img.len() != 512 || boot_img[510..512] != [0x55, 0xAA] {
        return Err(format!(
            "boot.img is {} bytes without the 55 AA signature; expected GRUB's 512-byte boot.img",
            boot_img.len()
        ));
    }
    if core_img.len() < 1024 {
        return Err(format!(
            "core.img is {} bytes; expected GRUB's i386-pc core image",
            core_img.len()
        ));
    }
    let mut mbr = [0u8; MBR_CODE];
    mbr.copy_from_slice(&boot_img[..MBR_CODE]);
    mbr[KERNEL_SECTOR..KERNEL_SECTOR + 8].copy_from_slice(&core_lba.to_le_bytes());
    let mut core = core_img.to_vec();
    core[BLOCKLIST_START..BLOCKLIST_START + 8].copy_from_slice(&(core_lba + 1).to_le_bytes());
    Ok((mbr, core))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn boot_img() -> Vec<u8> {
        let mut b: Vec<u8> = (0..512).map(|i| (i % 251) as u8).collect();
        b[510] = 0x55;
        b[511] = 0xAA;
        b
    }

    #[test]
    fn the_sectors_go_where_grub_reads_them_and_nothing_else_changes() {
        let core: Vec<u8> = (0..4096).map(|i| (i % 13) as u8).collect();
        let (mbr, patched) = embed(&boot_img(), &core, 2048).unwrap();
        assert_eq!(
            u64::from_le_bytes(mbr[0x5c..0x64].try_into().unwrap()),
            2048
        );
        assert_eq!(
            u64::from_le_bytes(patched[500..508].try_into().unwrap()),
            2049
        );
        let b = boot_img();
        for (i, (&got, &was)) in mbr.iter().zip(&b[..440]).enumerate() {
            if !(0x5c..0x64).contains(&i) {
                assert_eq!(got, was, "MBR byte {i}");
            }
        }
        for (i, (&got, &was)) in patched.iter().zip(&core).enumerate() {
            if !(500..508).contains(&i) {
                assert_eq!(got, was, "core byte {i}");
            }
        }
    }

    #[test]
    fn what_is_not_grub_is_refused() {
        let mut b = boot_img();
        b[511] = 0;
        assert!(embed(&b, &[0; 4096], 2048).unwrap_err().contains("55 AA"));
        assert!(embed(&boot_img(), &[0; 100], 2048)
            .unwrap_err()
            .contains("core.img"));
    }

    #[test]
    fn debians_grub_images_embed() {
        let b = std::fs::read("/usr/lib/grub/i386-pc/boot.img").expect(
            "GRUB's boot.img (Debian grub-pc-bin, installed by scripts/install-build-tools.sh)",
        );
        let (mbr, _) = embed(&b, &[0; 4096], 2048).unwrap();
        assert_eq!(&mbr[..0x5c], &b[..0x5c]);
    }
}
