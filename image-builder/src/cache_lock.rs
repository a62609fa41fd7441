//! One build or fetch at a time per cache directory. Two builds on one cache would otherwise race: one prunes
//! the root partition entry the other is copying, or both stage the same root file system. The lock is an
//! advisory `flock` on `<cache>/lock`, released by the kernel when the process exits however it exits, so a
//! killed build leaves nothing to clean up. The holder's pid is written into the file for the waiter's message.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Held while the cache is in use; dropping it releases the lock.
#[derive(Debug)]
pub struct CacheLock {
    _file: File,
}

/// The lock file of `cache`.
pub fn path(cache: &Path) -> PathBuf {
    cache.join("lock")
}

/// Takes the cache's lock, waiting (and saying so on standard error) while another process holds it.
pub fn lock(cache: &Path) -> Result<CacheLock> {
    std::fs::create_dir_all(cache).with_context(|| format!("creating {}", cache.display()))?;
    let lock_path = path(cache);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock_path)
        .with_context(|| format!("opening {}", lock_path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = match holder.trim() {
                "" => "another process".to_owned(),
                pid => format!("process {pid}"),
            };
            eprintln!(
                "foothold-build: waiting for the cache {} ({holder} is building or fetching with it)",
                cache.display()
            );
            file.lock()
                .with_context(|| format!("locking {}", lock_path.display()))?;
        }
        Err(TryLockError::Error(e)) => {
            return Err(e).with_context(|| format!("locking {}", lock_path.display()));
        }
    }
    file.set_len(0)
        .and_then(|()| file.seek(SeekFrom::Start(0)))
        .and_then(|_| writeln!(file, "{}", std::process::id()))
        .with_context(|| format!("writing {}", lock_path.display()))?;
    Ok(CacheLock { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_is_exclusive_names_its_holder_and_is_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let held = lock(&cache).unwrap();
        assert_eq!(
            std::fs::read_to_string(path(&cache)).unwrap(),
            format!("{}\n", std::process::id())
        );
        // flock locks belong to the open file description: a second open in this process contends too.
        let other = File::open(path(&cache)).unwrap();
        assert!(matches!(other.try_lock(), Err(TryLockError::WouldBlock)));
        drop(held);
        other.try_lock().unwrap();
    }
}
