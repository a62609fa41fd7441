//! GUID partition tables written in-process: the protective MBR, the primary header and entries, and the
//! backup at the end of the disk (UEFI 2.10 §5.3). Deterministic: the GUIDs come from the caller.

use std::io::{Seek, SeekFrom, Write};

pub const SECTOR: u64 = 512;
const ENTRIES: u32 = 128;
const ENTRY_SIZE: u32 = 128;
/// Sectors the 128 entries take.
const ENTRY_SECTORS: u64 = (ENTRIES as u64 * ENTRY_SIZE as u64) / SECTOR;

pub const BIOS_BOOT: &str = "21686148-6449-6e6f-744e-656564454649";
pub const EFI_SYSTEM: &str = "c12a7328-f81f-11d2-ba4b-00a0c93ec93b";
pub const LINUX_FS: &str = "0fc63daf-8483-4772-8e79-3d69d8477de4";
/// The root partition type of the Discoverable Partitions Specification (x86-64).
pub const LINUX_ROOT_X86_64: &str = "4f68bce3-e8cd-4db1-96e7-fbcaf984b709";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    pub type_guid: uuid::Uuid,
    pub guid: uuid::Uuid,
    pub first_lba: u64,
    /// Inclusive.
    pub last_lba: u64,
    pub name: String,
}

impl Partition {
    pub fn offset(&self) -> u64 {
        self.first_lba * SECTOR
    }
    pub fn size(&self) -> u64 {
        (self.last_lba - self.first_lba + 1) * SECTOR
    }
}

/// First and last LBA partitions may use on a disk of `sectors`.
pub fn usable(sectors: u64) -> (u64, u64) {
    (2 + ENTRY_SECTORS, sectors - 2 - ENTRY_SECTORS)
}

fn entry(p: &Partition) -> [u8; ENTRY_SIZE as usize] {
    let mut e = [0u8; ENTRY_SIZE as usize];
    e[0..16].copy_from_slice(&p.type_guid.to_bytes_le());
    e[16..32].copy_from_slice(&p.guid.to_bytes_le());
    e[32..40].copy_from_slice(&p.first_lba.to_le_bytes());
    e[40..48].copy_from_slice(&p.last_lba.to_le_bytes());
    for (i, u) in p.name.encode_utf16().take(36).enumerate() {
        e[56 + 2 * i..58 + 2 * i].copy_from_slice(&u.to_le_bytes());
    }
    e
}

fn header(
    sectors: u64,
    disk: uuid::Uuid,
    primary: bool,
    entries_crc: u32,
) -> [u8; SECTOR as usize] {
    let (first, last) = usable(sectors);
    let (current, backup, entries_lba) = if primary {
        (1, sectors - 1, 2)
    } else {
        (sectors - 1, 1, sectors - 1 - ENTRY_SECTORS)
    };
    let mut h = [0u8; SECTOR as usize];
    h[0..8].copy_from_slice(b"EFI PART");
    h[8..12].copy_from_slice(&0x0001_0000u32.to_le_bytes());
    h[12..16].copy_from_slice(&92u32.to_le_bytes());
    h[24..32].copy_from_slice(&current.to_le_bytes());
    h[32..40].copy_from_slice(&backup.to_le_bytes());
    h[40..48].copy_from_slice(&first.to_le_bytes());
    h[48..56].copy_from_slice(&last.to_le_bytes());
    h[56..72].copy_from_slice(&disk.to_bytes_le());
    h[72..80].copy_from_slice(&entries_lba.to_le_bytes());
    h[80..84].copy_from_slice(&ENTRIES.to_le_bytes());
    h[84..88].copy_from_slice(&ENTRY_SIZE.to_le_bytes());
    h[88..92].copy_from_slice(&entries_crc.to_le_bytes());
    let crc = crc32fast::hash(&h[..92]);
    h[16..20].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The protective MBR's partition table and signature (bytes 440..512; the boot code before is left as is).
pub fn protective_mbr(sectors: u64) -> [u8; 72] {
    let mut m = [0u8; 72];
    // 440..446: disk signature and reserved, zero. 446: the one partition, type 0xEE over the whole disk.
    let p = &mut m[6..22];
    p[0] = 0x00;
    p[1..4].copy_from_slice(&[0x00, 0x02, 0x00]);
    p[4] = 0xEE;
    p[5..8].copy_from_slice(&[0xFF, 0xFF, 0xFF]);
    p[8..12].copy_from_slice(&1u32.to_le_bytes());
    p[12..16].copy_from_slice(&(u32::try_from(sectors - 1).unwrap_or(u32::MAX)).to_le_bytes());
    m[70] = 0x55;
    m[71] = 0xAA;
    m
}

/// Writes the protective MBR table, both GPT headers and both entry arrays for `parts` onto a disk image of
/// `sectors` sectors. Partitions must lie in the usable range and not overlap.
pub fn write<W: Write + Seek>(
    out: &mut W,
    sectors: u64,
    disk: uuid::Uuid,
    parts: &[Partition],
) -> std::io::Result<()> {
    let (first, last) = usable(sectors);
    let mut sorted: Vec<&Partition> = parts.iter().collect();
    sorted.sort_by_key(|p| p.first_lba);
    for w in sorted.windows(2) {
        if w[0].last_lba >= w[1].first_lba {
            return Err(std::io::Error::other(format!(
                "partitions {} and {} overlap",
                w[0].name, w[1].name
            )));
        }
    }
    for p in parts {
        if p.first_lba < first || p.last_lba > last || p.first_lba > p.last_lba {
            return Err(std::io::Error::other(format!(
                "partition {} ({}..={}) is outside {first}..={last}",
                p.name, p.first_lba, p.last_lba
            )));
        }
    }
    if parts.len() > ENTRIES as usize {
        return Err(std::io::Error::other("more than 128 partitions"));
    }
    let mut entries = vec![0u8; (ENTRIES * ENTRY_SIZE) as usize];
    for (i, p) in parts.iter().enumerate() {
        entries[i * ENTRY_SIZE as usize..(i + 1) * ENTRY_SIZE as usize].copy_from_slice(&entry(p));
    }
    let crc = crc32fast::hash(&entries);
    out.seek(SeekFrom::Start(440))?;
    out.write_all(&protective_mbr(sectors))?;
    out.seek(SeekFrom::Start(SECTOR))?;
    out.write_all(&header(sectors, disk, true, crc))?;
    out.write_all(&entries)?;
    out.seek(SeekFrom::Start((sectors - 1 - ENTRY_SECTORS) * SECTOR))?;
    out.write_all(&entries)?;
    out.write_all(&header(sectors, disk, false, crc))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts() -> Vec<Partition> {
        let g = |s: &str| uuid::Uuid::parse_str(s).unwrap();
        vec![
            Partition {
                type_guid: g(BIOS_BOOT),
                guid: uuid::Uuid::from_u128(1),
                first_lba: 2048,
                last_lba: 4095,
                name: "bios".into(),
            },
            Partition {
                type_guid: g(EFI_SYSTEM),
                guid: uuid::Uuid::from_u128(2),
                first_lba: 4096,
                last_lba: 8191,
                name: "esp".into(),
            },
        ]
    }

    #[test]
    fn headers_and_entries_check_out() {
        let sectors = 16384;
        let mut disk = std::io::Cursor::new(vec![0u8; (sectors * SECTOR) as usize]);
        write(&mut disk, sectors, uuid::Uuid::from_u128(7), &parts()).unwrap();
        let d = disk.into_inner();
        assert_eq!(&d[510..512], &[0x55, 0xAA]);
        assert_eq!(d[446 + 4], 0xEE);
        for (lba, current, entries_lba) in
            [(1u64, 1u64, 2u64), (sectors - 1, sectors - 1, sectors - 33)]
        {
            let h = &d[(lba * SECTOR) as usize..(lba * SECTOR + 92) as usize];
            assert_eq!(&h[0..8], b"EFI PART");
            let mut zeroed = h.to_vec();
            zeroed[16..20].fill(0);
            assert_eq!(
                u32::from_le_bytes(h[16..20].try_into().unwrap()),
                crc32fast::hash(&zeroed)
            );
            assert_eq!(u64::from_le_bytes(h[24..32].try_into().unwrap()), current);
            assert_eq!(
                u64::from_le_bytes(h[72..80].try_into().unwrap()),
                entries_lba
            );
            let e = &d[(entries_lba * SECTOR) as usize..(entries_lba * SECTOR + 16384) as usize];
            assert_eq!(
                u32::from_le_bytes(h[88..92].try_into().unwrap()),
                crc32fast::hash(e)
            );
            // The ESP entry: type GUID in mixed-endian order.
            assert_eq!(&e[128..132], &[0x28, 0x73, 0x2a, 0xc1]);
            assert_eq!(
                u64::from_le_bytes(e[128 + 32..128 + 40].try_into().unwrap()),
                4096
            );
        }
    }

    #[test]
    fn overlaps_and_out_of_range_are_refused() {
        let mut p = parts();
        p[1].first_lba = 4000;
        let mut disk = std::io::Cursor::new(vec![0u8; 16384 * 512]);
        assert!(write(&mut disk, 16384, uuid::Uuid::nil(), &p)
            .unwrap_err()
            .to_string()
            .contains("overlap"));
        let mut p = parts();
        p[1].last_lba = 16384;
        assert!(write(&mut disk, 16384, uuid::Uuid::nil(), &p)
            .unwrap_err()
            .to_string()
            .contains("outside"));
    }
}
