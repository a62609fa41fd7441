//! Disk images are mostly holes: these read only the data of a sparse file. A hole reads as zeros, so it is
//! hashed from a buffer of zeros and skipped when copying into a file that was created sparse.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use anyhow::{Context as _, Result};
use sha2::{Digest, Sha256};

const CHUNK: usize = 1 << 20;

/// The `[start, end)` byte ranges of `file` that hold data, in order; the rest are holes. A file system
/// without SEEK_DATA reports the whole file as data.
pub fn data_ranges(file: &File) -> std::io::Result<Vec<(u64, u64)>> {
    let len = file.metadata()?.len();
    let fd = file.as_raw_fd();
    let mut ranges = Vec::new();
    let mut pos: u64 = 0;
    while pos < len {
        // SAFETY: lseek on a descriptor borrowed for this call; -1 and errno are checked.
        let data = unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_DATA) };
        if data < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ENXIO) => break, // a hole up to the end
                Some(libc::EINVAL) if pos == 0 => return Ok(vec![(0, len)]),
                _ => return Err(e),
            }
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) };
        if hole < 0 {
            return Err(std::io::Error::last_os_error());
        }
        ranges.push((data as u64, hole as u64));
        pos = hole as u64;
    }
    Ok(ranges)
}

/// The sha256 of a file, reading only its data ranges.
pub fn sha256(path: &Path) -> Result<String> {
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let len = f.metadata()?.len();
    let ranges =
        data_ranges(&f).with_context(|| format!("finding the data in {}", path.display()))?;
    let mut h = Sha256::new();
    let zeros = vec![0u8; CHUNK];
    let mut buf = vec![0u8; CHUNK];
    let mut at = 0;
    for (start, end) in ranges.into_iter().chain([(len, len)]) {
        while at < start {
            let n = CHUNK.min((start - at) as usize);
            h.update(&zeros[..n]);
            at += n as u64;
        }
        while at < end {
            let n = CHUNK.min((end - at) as usize);
            f.read_exact_at(&mut buf[..n], at)
                .with_context(|| format!("reading {}", path.display()))?;
            h.update(&buf[..n]);
            at += n as u64;
        }
    }
    Ok(hex::encode(h.finalize()))
}

/// Copies `from` into `image` at `offset`, data ranges only: `image` must read as zeros where `from` has holes
/// (a file extended with `set_len`).
pub fn copy_into(from: &Path, image: &File, offset: u64) -> Result<()> {
    let src = File::open(from).with_context(|| format!("opening {}", from.display()))?;
    let ranges =
        data_ranges(&src).with_context(|| format!("finding the data in {}", from.display()))?;
    let mut buf = vec![0u8; CHUNK];
    for (mut at, end) in ranges {
        while at < end {
            let n = CHUNK.min((end - at) as usize);
            src.read_exact_at(&mut buf[..n], at)
                .with_context(|| format!("reading {}", from.display()))?;
            image.write_all_at(&buf[..n], offset + at)?;
            at += n as u64;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A 64 MiB file: data at both ends and in the middle, holes between.
    fn sparse_file(dir: &Path) -> std::path::PathBuf {
        let part = dir.join("part.img");
        let f = File::create(&part).unwrap();
        f.set_len(64 << 20).unwrap();
        f.write_all_at(b"head", 0).unwrap();
        f.write_all_at(&[7u8; 5000], 20 << 20).unwrap();
        f.write_all_at(b"tail", (64 << 20) - 4).unwrap();
        part
    }

    #[test]
    fn the_hash_of_a_sparse_file_is_the_hash_of_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let part = sparse_file(dir.path());
        let ranges = data_ranges(&File::open(&part).unwrap()).unwrap();
        assert!(ranges.len() >= 2, "{ranges:?}");
        assert_eq!(
            sha256(&part).unwrap(),
            hex::encode(Sha256::digest(fs::read(&part).unwrap()))
        );
        // All hole, and empty.
        let hole = dir.path().join("hole");
        File::create(&hole).unwrap().set_len(3 << 20).unwrap();
        assert_eq!(
            sha256(&hole).unwrap(),
            hex::encode(Sha256::digest(vec![0u8; 3 << 20]))
        );
        let empty = dir.path().join("empty");
        File::create(&empty).unwrap();
        assert_eq!(sha256(&empty).unwrap(), hex::encode(Sha256::digest(b"")));
    }

    #[test]
    fn a_sparse_copy_keeps_the_holes_and_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let part = sparse_file(dir.path());
        let disk = dir.path().join("disk.img");
        let d = File::create(&disk).unwrap();
        d.set_len(128 << 20).unwrap();
        copy_into(&part, &d, 1 << 20).unwrap();
        drop(d);
        let got = fs::read(&disk).unwrap();
        let want = fs::read(&part).unwrap();
        assert_eq!(&got[1 << 20..(1 << 20) + want.len()], &want[..]);
        assert!(got[..1 << 20].iter().all(|&b| b == 0));
        use std::os::unix::fs::MetadataExt;
        let allocated = fs::metadata(&disk).unwrap().blocks() * 512;
        assert!(
            allocated < 8 << 20,
            "{allocated} bytes allocated for about 5 KiB written"
        );
    }
}
