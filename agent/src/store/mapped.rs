//! Memory-mapped reads of blob files for serving: the only `unsafe` code in the agent, kept to this module.
//! A mapping is sound here because committed blob files are immutable: written whole under a temp name and
//! renamed into place, removed by unlinking (which leaves existing mappings intact), never truncated or
//! rewritten in place.
//!
//! Each chunk is its own small mapping, unmapped when the chunk has been sent: a response never holds more
//! than the chunks in flight, so many concurrent downloads of a large file do not pin the whole file in the
//! process.
//!
//! A chunk can also be *lent* to a connection's writer ([`Lent`]): then it is mapped but never touched, and the
//! writer, finding its address among the connection's lent chunks, sends it from the file with `sendfile`
//! (`http::sendfile`). Were any other code to read it, it would read the file's bytes through the mapping, so a
//! lent chunk is always correct, whoever writes it.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::sync::{Arc, Mutex};

/// Bytes per mapping: larger than the `pread` chunk, since each mapping costs an mmap, a populate and an
/// unmap (with its TLB flush) whatever its size; not larger, since mapped pages count as the process's
/// resident memory while a chunk is in flight (scripts/bench-registry.sh: 256 KiB was slow for one stream,
/// 1 MiB took 81 MiB RSS under 64 clients, 512 KiB met both targets).
pub(super) const MAP_CHUNK: usize = 512 << 10;

/// Bytes per lent mapping: a lent chunk is never made resident, so its size costs address space only, and a
/// larger one means fewer mappings, fewer trips to the blocking pool and longer `sendfile` calls.
pub(super) const LENT_CHUNK: usize = 8 << 20;

/// The chunks one connection's responses have lent to its writer and not yet dropped, by address: what lets
/// the writer tell a lent chunk from any other bytes it is given (headers, other bodies) and send it from the
/// file. An entry lives exactly as long as its mapping.
#[derive(Clone, Default)]
pub struct Lent(Arc<Mutex<Vec<Region>>>);

struct Region {
    addr: usize,
    len: usize,
    file: Arc<File>,
    offset: u64,
}

impl Lent {
    /// The file and the offset in it of `bytes`, when they lie within one lent chunk.
    pub fn find(&self, bytes: &[u8]) -> Option<(Arc<File>, u64)> {
        let (addr, len) = (bytes.as_ptr() as usize, bytes.len());
        let regions = self.0.lock().unwrap_or_else(|p| p.into_inner());
        regions
            .iter()
            .find(|r| addr >= r.addr && addr + len <= r.addr + r.len)
            .map(|r| (r.file.clone(), r.offset + (addr - r.addr) as u64))
    }

    fn add(&self, region: Region) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(region);
    }

    fn remove(&self, addr: usize) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|r| r.addr != addr);
    }

    /// How many chunks are lent now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// Whether `start..start + len` of `file` can be served from mappings: the file is at least that long and the
/// range is not empty.
pub(super) fn mappable(file: &File, start: u64, len: u64) -> bool {
    len > 0
        && file
            .metadata()
            .is_ok_and(|m| m.is_file() && m.len() >= start + len)
}

/// One chunk's mapping, owned by a `Bytes`: `skip` bytes of page alignment, then the chunk; `lent` names the
/// connection it is lent to.
struct MapChunk {
    map: memmap2::Mmap,
    skip: usize,
    lent: Option<Lent>,
}

impl Drop for MapChunk {
    /// Forgets the chunk before its mapping goes (the fields drop after this), so no writer can look up an
    /// address that is no longer mapped.
    fn drop(&mut self) {
        if let Some(lent) = &self.lent {
            lent.remove(self.map.as_ptr() as usize + self.skip);
        }
    }
}

impl AsRef<[u8]> for MapChunk {
    fn as_ref(&self) -> &[u8] {
        &self.map[self.skip..]
    }
}

/// `start..end` of `file` in chunks of at most `MAP_CHUNK` bytes, each mapped and made resident on the
/// blocking pool before it is handed on.
pub(super) fn chunks(
    file: File,
    start: u64,
    end: u64,
) -> impl futures_util::Stream<Item = io::Result<bytes::Bytes>> + Send {
    let file = Arc::new(file);
    futures_util::stream::try_unfold((file, start), move |(file, pos)| async move {
        if pos >= end {
            return Ok(None);
        }
        let want = (end - pos).min(MAP_CHUNK as u64) as usize;
        let f = file.clone();
        let chunk = tokio::task::spawn_blocking(move || map_chunk(&f, pos, want))
            .await
            .map_err(io::Error::other)??;
        Ok(Some((chunk, (file, pos + want as u64))))
    })
}

/// `start..end` of `file` in chunks of at most `LENT_CHUNK` bytes, each lent to `lent`'s writer: mapped but
/// not made resident, its pages read into the page cache on the blocking pool (so `sendfile` on a runtime
/// thread finds them there), the next chunk prepared while the writer sends this one.
pub(super) fn lent_chunks(
    file: File,
    start: u64,
    end: u64,
    lent: Lent,
) -> impl futures_util::Stream<Item = io::Result<bytes::Bytes>> + Send {
    use futures_util::StreamExt as _;
    let file = Arc::new(file);
    let starts = (start..end).step_by(LENT_CHUNK);
    futures_util::stream::iter(starts)
        .map(move |pos| {
            let (file, lent) = (file.clone(), lent.clone());
            let want = (end - pos).min(LENT_CHUNK as u64) as usize;
            async move {
                tokio::task::spawn_blocking(move || lend_chunk(file, pos, want, lent))
                    .await
                    .map_err(io::Error::other)?
            }
        })
        .buffered(2)
}

fn lend_chunk(file: Arc<File>, pos: u64, len: usize, lent: Lent) -> io::Result<bytes::Bytes> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: readahead only reads the file into the page cache; the descriptor is open for the call.
    let read = unsafe { libc::readahead(file.as_raw_fd(), pos as libc::off64_t, len) };
    if read != 0 {
        let e = io::Error::last_os_error();
        // EINVAL: a file system that cannot read ahead; sendfile reads the pages itself then.
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e);
        }
    }
    let skip = (pos % page_size()) as usize;
    // SAFETY: as in `map_chunk`.
    let map = unsafe {
        memmap2::MmapOptions::new()
            .offset(pos - skip as u64)
            .len(skip + len)
            .map(&*file)?
    };
    lent.add(Region {
        addr: map.as_ptr() as usize + skip,
        len,
        file,
        offset: pos,
    });
    Ok(bytes::Bytes::from_owner(MapChunk {
        map,
        skip,
        lent: Some(lent),
    }))
}

fn map_chunk(file: &File, pos: u64, len: usize) -> io::Result<bytes::Bytes> {
    let skip = (pos % page_size()) as usize;
    // SAFETY: read-only, and the store never truncates or rewrites a committed blob file in place (see the
    // module documentation), so the mapped bytes stay valid for the mapping's lifetime.
    let map = unsafe {
        memmap2::MmapOptions::new()
            .offset(pos - skip as u64)
            .len(skip + len)
            .map(file)?
    };
    populate(&map, skip, len)?;
    Ok(bytes::Bytes::from_owner(MapChunk {
        map,
        skip,
        lent: None,
    }))
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|&s| s > 0).unwrap_or(4096)
}

/// Makes `len` mapped bytes from `off` resident, reading them from disk now, on the calling (blocking-pool)
/// thread, so the runtime threads that write them to sockets never wait for the disk, and a read error is an
/// `io::Error` here rather than a fault in a writer.
fn populate(map: &memmap2::Mmap, off: usize, len: usize) -> io::Result<()> {
    match map.advise_range(memmap2::Advice::PopulateRead, off, len) {
        Ok(()) => Ok(()),
        // Kernels before 5.14 do not know the advice: fault the pages in by reading one byte of each.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            let step = page_size() as usize;
            let mut at = off;
            while at < off + len {
                std::hint::black_box(map[at]);
                at += step;
            }
            Ok(())
        }
        // EFAULT: the file's pages could not be read (an I/O error).
        Err(e) if e.raw_os_error() == Some(libc::EFAULT) => Err(io::Error::other(format!(
            "reading the blob file failed while mapping it: {e}"
        ))),
        Err(e) => Err(e),
    }
}
