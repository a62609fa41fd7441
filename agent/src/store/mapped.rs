//! Memory-mapped reads of blob files for serving: the only `unsafe` code in the agent, kept to this module.
//! A mapping is sound here because committed blob files are immutable: written whole under a temp name and
//! renamed into place, removed by unlinking (which leaves existing mappings intact), never truncated or
//! rewritten in place.
//!
//! Each chunk is its own small mapping, unmapped when the chunk has been sent: a response never holds more
//! than the chunks in flight, so many concurrent downloads of a large file do not pin the whole file in the
//! process.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::sync::Arc;

/// Bytes per mapping: larger than the `pread` chunk, since each mapping costs an mmap, a populate and an
/// unmap (with its TLB flush) whatever its size; not larger, since mapped pages count as the process's
/// resident memory while a chunk is in flight (scripts/bench-registry.sh: 256 KiB was slow for one stream,
/// 1 MiB took 81 MiB RSS under 64 clients, 512 KiB met both targets).
pub(super) const MAP_CHUNK: usize = 512 << 10;

/// Whether `start..start + len` of `file` can be served from mappings: the file is at least that long and the
/// range is not empty.
pub(super) fn mappable(file: &File, start: u64, len: u64) -> bool {
    len > 0
        && file
            .metadata()
            .is_ok_and(|m| m.is_file() && m.len() >= start + len)
}

/// One chunk's mapping, owned by a `Bytes`: `skip` bytes of page alignment, then the chunk.
struct MapChunk {
    map: memmap2::Mmap,
    skip: usize,
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
    Ok(bytes::Bytes::from_owner(MapChunk { map, skip }))
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
