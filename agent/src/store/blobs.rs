//! Blob files in the OCI image layout (`<data>/blobs/<algorithm>/<hex>`). Owns durability: every blob is written to a
//! temp file in the same file system, fsynced, verified, renamed into place and the directory fsynced. It never
//! makes a file visible under a digest it does not hash to, and never holds a whole blob in memory.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use crate::digest::{Algorithm, Digest, Hasher};

/// Read and write buffer for hashing and copying; large enough to keep syscalls off the profile.
pub const IO_BUF: usize = 256 * 1024;

/// Chunk size when serving a blob: one read is in flight per download, so smaller chunks make a single
/// stream latency-bound; hyper holds a chunk or two per connection, which bounds memory under many streams.
pub const SERVE_CHUNK: usize = 256 * 1024;

#[derive(Debug, Clone)]
pub struct BlobFiles {
    root: PathBuf,
}

impl BlobFiles {
    /// Opens (creating if needed) the OCI layout skeleton under `root`.
    pub fn open(root: &Path) -> io::Result<Self> {
        for algorithm in Algorithm::ALL {
            fs::create_dir_all(root.join("blobs").join(algorithm.name()))?;
        }
        for dir in ["tmp", "uploads"] {
            fs::create_dir_all(root.join(dir))?;
        }
        let layout = root.join("oci-layout");
        if !layout.exists() {
            let files = BlobFiles {
                root: root.to_owned(),
            };
            let tmp = files.temp_path();
            write_durably(&tmp, &layout, br#"{"imageLayoutVersion":"1.0.0"}"#)?;
        }
        // Temp files are never referenced by anything: whatever a crash left there is garbage.
        for entry in fs::read_dir(root.join("tmp"))? {
            let _ = fs::remove_file(entry?.path());
        }
        Ok(BlobFiles {
            root: root.to_owned(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn blob_dir(&self, algorithm: Algorithm) -> PathBuf {
        self.root.join("blobs").join(algorithm.name())
    }

    pub fn path(&self, digest: &Digest) -> PathBuf {
        self.blob_dir(digest.algorithm()).join(digest.hex())
    }

    pub fn upload_path(&self, id: &str) -> PathBuf {
        self.root.join("uploads").join(id)
    }

    pub fn temp_path(&self) -> PathBuf {
        self.root
            .join("tmp")
            .join(uuid::Uuid::new_v4().simple().to_string())
    }

    /// Size of a stored blob, or None when absent.
    pub fn size(&self, digest: &Digest) -> io::Result<Option<u64>> {
        match fs::metadata(self.path(digest)) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Moves an already fsynced file whose content hashes to `digest` into place. If the blob exists the
    /// file is dropped: content addressing makes them identical.
    pub fn commit(&self, from: &Path, digest: &Digest) -> io::Result<()> {
        let to = self.path(digest);
        if to.exists() {
            fs::remove_file(from)?;
            return Ok(());
        }
        fs::rename(from, &to)?;
        sync_dir(&self.blob_dir(digest.algorithm()))
    }

    pub fn remove(&self, digest: &Digest) -> io::Result<()> {
        match fs::remove_file(self.path(digest)) {
            Ok(()) => sync_dir(&self.blob_dir(digest.algorithm())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Writes small content (manifests) durably under its digest of `algorithm`.
    pub fn put_bytes(&self, algorithm: Algorithm, bytes: &[u8]) -> io::Result<Digest> {
        let digest = Digest::of_bytes_with(algorithm, bytes);
        if self.path(&digest).exists() {
            return Ok(digest);
        }
        let tmp = self.temp_path();
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        self.commit(&tmp, &digest)?;
        Ok(digest)
    }

    /// Copies a reader into the store, verifying it against `expected`. Used by import; nothing is visible
    /// unless the digest matches.
    pub fn put_reader(&self, reader: impl Read, expected: &Digest) -> Result<u64, PutError> {
        if let Some(size) = self.size(expected)? {
            return Ok(size);
        }
        let tmp = self.temp_path();
        match self.write_temp(&tmp, reader, expected.algorithm()) {
            Ok((digest, size)) if &digest == expected => {
                self.commit(&tmp, expected)?;
                Ok(size)
            }
            Ok((actual, _)) => {
                let _ = fs::remove_file(&tmp);
                Err(PutError::Mismatch {
                    expected: expected.clone(),
                    actual,
                })
            }
            Err(e) => Err(e.into()),
        }
    }
}

impl BlobFiles {
    /// Copies a reader into the fsynced temp file `tmp`, hashing it; the file is removed on error.
    fn write_temp(
        &self,
        tmp: &Path,
        reader: impl Read,
        algorithm: Algorithm,
    ) -> io::Result<(Digest, u64)> {
        let result = (|| {
            let mut f = File::create(tmp)?;
            let (digest, size) = copy_hashing(reader, &mut f, algorithm.hasher())?;
            f.sync_all()?;
            Ok::<_, io::Error>((digest, size))
        })();
        if result.is_err() {
            let _ = fs::remove_file(tmp);
        }
        result
    }

    /// Copies a reader into the store under whatever its content hashes to. Returns the digest, the size and
    /// whether this call created the blob (false: it was there already). Used by archive import, which learns
    /// digests by reading; a blob stored this way stays invisible until metadata references it.
    pub fn put_hashing(
        &self,
        reader: impl Read,
        algorithm: Algorithm,
    ) -> io::Result<(Digest, u64, bool)> {
        let tmp = self.temp_path();
        match self.write_temp(&tmp, reader, algorithm) {
            Ok((digest, size)) => {
                let created = !self.path(&digest).exists();
                self.commit(&tmp, &digest)?;
                Ok((digest, size, created))
            }
            Err(e) => Err(e),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PutError {
    #[error("content hashes to {actual}, expected {expected}")]
    Mismatch { expected: Digest, actual: Digest },
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Hashes a file from the start.
pub fn hash_file(path: &Path, algorithm: Algorithm) -> io::Result<(Digest, u64)> {
    copy_hashing(File::open(path)?, &mut io::sink(), algorithm.hasher())
}

fn copy_hashing(
    mut reader: impl Read,
    out: &mut impl Write,
    mut hasher: Hasher,
) -> io::Result<(Digest, u64)> {
    let mut buf = vec![0u8; IO_BUF];
    let mut total = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n])?;
        total += n as u64;
    }
    Ok((hasher.finish(), total))
}

pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// temp file, fsync, rename, fsync the directory.
pub fn write_durably(tmp: &Path, to: &Path, bytes: &[u8]) -> io::Result<()> {
    write_durably_mode(tmp, to, bytes, 0o666)
}

/// [`write_durably`], the file made with `mode` (less the umask) from the start: a secret is never readable
/// by others, not even before a chmod.
pub fn write_durably_mode(tmp: &Path, to: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_durably_shared(tmp, to, bytes, mode, None)
}

/// [`write_durably_mode`], the file given to `group` (readable by it, if `mode` lets the group read) before it
/// is renamed into place: a service reading it through its group never sees it otherwise.
pub fn write_durably_shared(
    tmp: &Path,
    to: &Path,
    bytes: &[u8],
    mode: u32,
    group: Option<u32>,
) -> io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(tmp)?;
    if let Some(gid) = group {
        std::os::unix::fs::fchown(&f, None, Some(gid))?;
        // The umask may have taken the group's bit: `mode` says what the group and others get.
        f.set_permissions(fs::Permissions::from_mode(mode & 0o777))?;
    }
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    fs::rename(tmp, to)?;
    sync_dir(to.parent().unwrap_or(Path::new(".")))
}

/// How a range is read for serving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadPath {
    /// Chunks are slices of a read-only memory map of the blob: no copy into user space; the only copy left is
    /// the kernel's from the page cache into the socket (or into rustls' buffer under TLS).
    Mapped,
    /// Chunks are `pread` into fresh buffers: used when the file cannot be mapped.
    Copied,
    /// Chunks lent to the connection's writer, which sends them from the file with `sendfile`: no copy at all
    /// in the process (see `store::mapped::Lent`). The writer counts what it sends.
    Lent,
}

/// Streams `len` bytes of `file` from `start`, memory-mapped when the platform allows (`MAP_CHUNK` per mapping),
/// `pread` in `SERVE_CHUNK` chunks otherwise (see [`ReadPath`]).
///
/// Each mapped chunk is its own mapping, made resident on the blocking pool (`MADV_POPULATE_READ`) before it is
/// handed on and unmapped once sent (see `store::mapped`); given `lent`, the connection's writer sends them
/// with `sendfile`, and they are not made resident at all.
pub fn read_range(
    file: File,
    start: u64,
    len: u64,
    lent: Option<super::mapped::Lent>,
) -> (
    ReadPath,
    futures_util::stream::BoxStream<'static, io::Result<bytes::Bytes>>,
) {
    use futures_util::StreamExt;
    if !super::mapped::mappable(&file, start, len) {
        return (ReadPath::Copied, copied_chunks(file, start, len).boxed());
    }
    if let Some(lent) = lent {
        (
            ReadPath::Lent,
            super::mapped::lent_chunks(file, start, start + len, lent).boxed(),
        )
    } else {
        (
            ReadPath::Mapped,
            super::mapped::chunks(file, start, start + len).boxed(),
        )
    }
}

/// `len` bytes of `file` from `start`, each chunk read with `pread` on the blocking pool straight into the
/// buffer that is handed to the client: one copy per byte, and memory bounded by the chunk size per reader.
fn copied_chunks(
    file: File,
    start: u64,
    len: u64,
) -> impl futures_util::Stream<Item = io::Result<bytes::Bytes>> + Send {
    use std::os::unix::fs::FileExt;
    let file = std::sync::Arc::new(file);
    futures_util::stream::try_unfold((file, start, start + len), |(file, pos, end)| async move {
        if pos >= end {
            return Ok(None);
        }
        let want = (end - pos).min(SERVE_CHUNK as u64) as usize;
        let reader = file.clone();
        // Allocated here, on a runtime worker, not on one of the many blocking-pool threads: glibc gives each
        // thread its own arena, and buffers spread over dozens of arenas inflate RSS under concurrency.
        let mut buf = vec![0u8; want];
        let chunk = tokio::task::spawn_blocking(move || {
            let mut filled = 0;
            while filled < want {
                match reader.read_at(&mut buf[filled..], pos + filled as u64) {
                    Ok(0) => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "blob file shorter than its recorded size",
                        ))
                    }
                    Ok(n) => filled += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(bytes::Bytes::from(buf))
        })
        .await
        .map_err(io::Error::other)??;
        let next = pos + chunk.len() as u64;
        Ok(Some((chunk, (file, next, end))))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::TryStreamExt;
    use proptest::prelude::*;

    fn concat(
        chunks: impl futures_util::Stream<Item = io::Result<bytes::Bytes>>,
    ) -> io::Result<Vec<u8>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(
            chunks
                .map_ok(|c| {
                    assert!(c.len() <= SERVE_CHUNK.max(super::super::mapped::LENT_CHUNK));
                    c.to_vec()
                })
                .try_concat(),
        )
    }

    fn collect(file: File, start: u64, len: u64) -> (ReadPath, io::Result<Vec<u8>>) {
        let (path, chunks) = read_range(file, start, len, None);
        (path, concat(chunks))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Any range of any file comes back byte for byte from the mapped path, in chunks no larger than
        /// `SERVE_CHUNK`, and the copying path agrees with it.
        #[test]
        fn mapped_ranges_match_the_file(
            size in 1usize..(3 * super::super::mapped::MAP_CHUNK + 5000),
            a in any::<prop::sample::Index>(),
            b in any::<prop::sample::Index>(),
            seed in any::<u64>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("blob");
            let data: Vec<u8> = (0..size as u64).map(|i| (i.wrapping_mul(seed | 1) >> 3) as u8).collect();
            std::fs::write(&path, &data).unwrap();
            let (x, y) = (a.index(size), b.index(size));
            let (start, end) = (x.min(y), x.max(y) + 1);
            let (read, bytes) = collect(File::open(&path).unwrap(), start as u64, (end - start) as u64);
            prop_assert_eq!(read, ReadPath::Mapped);
            prop_assert_eq!(&bytes.unwrap()[..], &data[start..end]);
            let copied = concat(copied_chunks(File::open(&path).unwrap(), start as u64, (end - start) as u64));
            prop_assert_eq!(&copied.unwrap()[..], &data[start..end]);
        }
    }

    /// Lent chunks read back as the file's bytes (what any writer that does not use `sendfile` sends), each
    /// is found in the connection's [`Lent`](super::super::mapped::Lent) at its own offset in the file while it
    /// lives, and none is left there once the chunks are dropped.
    #[test]
    fn lent_chunks_name_their_place_in_the_file() {
        use futures_util::StreamExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blob");
        let lent_size = super::super::mapped::LENT_CHUNK;
        let data: Vec<u8> = (0..2 * lent_size + 12345)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        std::fs::write(&path, &data).unwrap();
        let lent = super::super::mapped::Lent::default();
        let start = 4097;
        let len = data.len() as u64 - start - 3;
        let (read, chunks) = read_range(File::open(&path).unwrap(), start, len, Some(lent.clone()));
        assert_eq!(read, ReadPath::Lent);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let chunks: Vec<bytes::Bytes> = rt.block_on(chunks.map(|c| c.unwrap()).collect::<Vec<_>>());
        assert_eq!(chunks.len(), 3);
        assert_eq!(lent.len(), 3);
        let mut at = start;
        for c in &chunks {
            assert_eq!(&c[..], &data[at as usize..at as usize + c.len()]);
            let (_, offset) = lent.find(c).expect("a lent chunk is found");
            assert_eq!(offset, at);
            // A slice inside the chunk (what is left after a partial write) is found at its own offset.
            let (_, inner) = lent.find(&c[100..]).unwrap();
            assert_eq!(inner, at + 100);
            at += c.len() as u64;
        }
        assert_eq!(at, start + len);
        assert!(lent.find(&data[..10]).is_none(), "other bytes are not lent");
        drop(chunks);
        assert_eq!(lent.len(), 0);
    }

    /// A file shorter than the range asked for (a damaged store) is an error, never short or padded output.
    #[test]
    fn a_short_file_is_an_error_not_a_short_body() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("blob");
        std::fs::write(&path, vec![1u8; 1000]).unwrap();
        let (read, bytes) = collect(File::open(&path).unwrap(), 500, 1000);
        assert_eq!(read, ReadPath::Copied);
        assert_eq!(bytes.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    }
}
