//! I/O adapters for downloads (the idiom of coreos-installer's `io` module): a writer that hashes and counts
//! what passes through it on the way to its file, and a partial download that knows how much it holds and the
//! hash of it, resumes or restarts, and becomes a cache entry only when its digest is the one pinned. The
//! download loops (`fetch`, `images`) only move bytes.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256, Sha512};

use crate::progress::Bytes;

/// A running hash of one of the digest algorithms OCI registers: content is named `<algorithm>:<hex>`.
#[derive(Clone)]
pub enum Hasher {
    Sha256(Sha256),
    Sha512(Sha512),
}

impl Hasher {
    pub fn sha256() -> Hasher {
        Hasher::Sha256(Sha256::new())
    }

    /// A hasher for `algorithm` (`sha256` or `sha512`); `None` for any other.
    pub fn of(algorithm: &str) -> Option<Hasher> {
        match algorithm {
            "sha256" => Some(Hasher::sha256()),
            "sha512" => Some(Hasher::Sha512(Sha512::new())),
            _ => None,
        }
    }

    /// A fresh hasher of the same algorithm.
    fn restarted(&self) -> Hasher {
        match self {
            Hasher::Sha256(_) => Hasher::Sha256(Sha256::new()),
            Hasher::Sha512(_) => Hasher::Sha512(Sha512::new()),
        }
    }

    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(bytes),
            Hasher::Sha512(h) => h.update(bytes),
        }
    }

    /// The hash, in lower-case hex.
    pub fn hex(self) -> String {
        match self {
            Hasher::Sha256(h) => hex::encode(h.finalize()),
            Hasher::Sha512(h) => hex::encode(h.finalize()),
        }
    }
}

impl Write for Hasher {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Passes writes to `inner`, hashing them and advancing `bar` by what `inner` took.
pub struct HashingWriter<'a, W> {
    inner: W,
    hasher: &'a mut Hasher,
    bar: &'a Bytes,
    written: u64,
}

impl<'a, W: Write> HashingWriter<'a, W> {
    pub fn new(inner: W, hasher: &'a mut Hasher, bar: &'a Bytes) -> Self {
        HashingWriter {
            inner,
            hasher,
            bar,
            written: 0,
        }
    }

    /// The bytes written through this writer.
    pub fn written(&self) -> u64 {
        self.written
    }
}

impl<W: Write> Write for HashingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bar.inc(n as u64);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A download under way at `path`: the bytes already there and their running hash.
pub struct Partial {
    path: PathBuf,
    hasher: Hasher,
    have: u64,
}

impl Partial {
    /// The partial file at `path`, hashed with sha256 (none there: empty).
    pub fn open(path: &Path) -> io::Result<Partial> {
        Partial::open_with(path, Hasher::sha256())
    }

    /// The partial file at `path`, hashed with `hasher`'s algorithm.
    pub fn open_with(path: &Path, hasher: Hasher) -> io::Result<Partial> {
        let mut hasher = hasher;
        let have = match File::open(path) {
            Ok(mut f) => io::copy(&mut f, &mut hasher)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e),
        };
        Ok(Partial {
            path: path.to_owned(),
            hasher,
            have,
        })
    }

    /// The bytes already downloaded: where a resumed request starts.
    pub fn have(&self) -> u64 {
        self.have
    }

    /// The file to write the rest to: appended to when the server `resumed` at [`Partial::have`], otherwise
    /// emptied, with the hash started again.
    pub fn file(&mut self, resumed: bool) -> io::Result<File> {
        if resumed {
            OpenOptions::new().append(true).open(&self.path)
        } else {
            self.hasher = self.hasher.restarted();
            self.have = 0;
            File::create(&self.path)
        }
    }

    /// A writer into `file` that hashes into this download and advances `bar`.
    pub fn writer<'a>(
        &'a mut self,
        file: &'a mut File,
        bar: &'a Bytes,
    ) -> HashingWriter<'a, &'a mut File> {
        HashingWriter::new(file, &mut self.hasher, bar)
    }

    /// Compares the whole content's hash with `want_hex`: the same, the download is published as `dest`
    /// (synced, renamed, the rename synced); different, it is removed and the hash it had is the error.
    pub fn finish(self, want_hex: &str, dest: &Path) -> anyhow::Result<Result<(), String>> {
        let got = self.hasher.hex();
        if got != want_hex {
            fs::remove_file(&self.path)?;
            return Ok(Err(got));
        }
        crate::files::publish(&self.path, dest)?;
        Ok(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }

    #[test]
    fn a_resumed_download_hashes_what_it_had_and_what_came_and_is_published_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (partial, dest) = (dir.path().join("x.partial"), dir.path().join("x"));
        fs::write(&partial, b"hello ").unwrap();
        let mut p = Partial::open(&partial).unwrap();
        assert_eq!(p.have(), 6);
        let mut f = p.file(true).unwrap();
        let bar = Bytes::none();
        let mut w = p.writer(&mut f, &bar);
        w.write_all(b"world").unwrap();
        assert_eq!(w.written(), 5);
        drop(f);
        assert_eq!(p.finish(&sha(b"hello world"), &dest).unwrap(), Ok(()));
        assert_eq!(fs::read(&dest).unwrap(), b"hello world");
        assert!(!partial.exists());
    }

    #[test]
    fn a_restarted_download_forgets_what_it_had_and_a_wrong_digest_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (partial, dest) = (dir.path().join("x.partial"), dir.path().join("x"));
        fs::write(&partial, b"stale bytes").unwrap();
        let mut p = Partial::open(&partial).unwrap();
        let mut f = p.file(false).unwrap();
        assert_eq!(p.have(), 0);
        let bar = Bytes::none();
        p.writer(&mut f, &bar).write_all(b"fresh").unwrap();
        drop(f);
        assert_eq!(fs::read(&partial).unwrap(), b"fresh");
        let wrong = sha(b"something else");
        assert_eq!(p.finish(&wrong, &dest).unwrap(), Err(sha(b"fresh")));
        assert!(!partial.exists() && !dest.exists());
        // No partial file at all: an empty download.
        assert_eq!(Partial::open(&partial).unwrap().have(), 0);
    }

    #[test]
    fn a_sha512_download_is_checked_against_its_sha512() {
        let dir = tempfile::tempdir().unwrap();
        let (partial, dest) = (dir.path().join("x.partial"), dir.path().join("x"));
        fs::write(&partial, b"half ").unwrap();
        let mut p = Partial::open_with(&partial, Hasher::of("sha512").unwrap()).unwrap();
        let mut f = p.file(true).unwrap();
        let bar = Bytes::none();
        p.writer(&mut f, &bar).write_all(b"and half").unwrap();
        drop(f);
        let want = hex::encode(Sha512::digest(b"half and half"));
        assert_eq!(p.finish(&want, &dest).unwrap(), Ok(()));
        assert_eq!(fs::read(&dest).unwrap(), b"half and half");
        // Restarted, the hash starts again with the same algorithm.
        fs::write(&partial, b"stale").unwrap();
        let mut p = Partial::open_with(&partial, Hasher::of("sha512").unwrap()).unwrap();
        let mut f = p.file(false).unwrap();
        p.writer(&mut f, &bar).write_all(b"fresh").unwrap();
        drop(f);
        let got = p.finish("00", &dest).unwrap();
        assert_eq!(got, Err(hex::encode(Sha512::digest(b"fresh"))));
        assert!(Hasher::of("md5").is_none());
    }
}
