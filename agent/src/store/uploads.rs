//! The registry's blob upload sessions (the OCI distribution API's POST, PATCH, PUT and DELETE on
//! `/blobs/uploads/`): their files under the store, an in-memory hash of what arrived so far, the row that
//! names their repository, and the blob they become.

use std::fmt::Display;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::sync::Arc;

use super::{blobs, write_stream, Meta, Result, Session, Store, StoreError};
use crate::digest::{Algorithm, Digest};
use bytes::Bytes;
use futures_util::Stream;

impl Store {
    pub async fn start_upload(&self, repo: &str) -> Result<String> {
        let id = uuid::Uuid::new_v4().to_string();
        let path = self.files.upload_path(&id);
        let (repo, id2) = (repo.to_owned(), id.clone());
        self.with_meta(move |m, files| {
            File::create(&path)?.sync_all()?;
            blobs::sync_dir(&files.root().join("uploads"))?;
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0);
            m.create_upload(&id2, &repo, now)?;
            Ok(())
        })
        .await?;
        self.sessions.lock().expect("sessions lock").insert(
            id.clone(),
            Arc::new(tokio::sync::Mutex::new(Session {
                offset: 0,
                hasher: Some(Algorithm::Sha256.hasher()),
            })),
        );
        Ok(id)
    }

    /// The session, loaded from disk after a restart. Errors with UploadUnknown unless it belongs to `repo`.
    async fn session(&self, repo: &str, id: &str) -> Result<Arc<tokio::sync::Mutex<Session>>> {
        let owner = {
            let id = id.to_owned();
            self.with_meta(move |m, _| Ok(m.upload_repo(&id)?)).await?
        };
        if owner.as_deref() != Some(repo) {
            return Err(StoreError::UploadUnknown(id.to_owned()));
        }
        let existing = self
            .sessions
            .lock()
            .expect("sessions lock")
            .get(id)
            .cloned();
        if let Some(s) = existing {
            return Ok(s);
        }
        let offset = match fs::metadata(self.files.upload_path(id)) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::UploadUnknown(id.to_owned()))
            }
            Err(e) => return Err(e.into()),
        };
        let mut sessions = self.sessions.lock().expect("sessions lock");
        Ok(sessions
            .entry(id.to_owned())
            .or_insert_with(|| {
                Arc::new(tokio::sync::Mutex::new(Session {
                    offset,
                    hasher: None,
                }))
            })
            .clone())
    }

    /// The session's offset. While a chunk is being written (the session is locked) this is what has reached
    /// the file so far, which is also what a restarted agent would report: status never waits for a chunk.
    pub async fn upload_offset(&self, repo: &str, id: &str) -> Result<u64> {
        let s = self.session(repo, id).await?;
        if let Ok(held) = s.try_lock() {
            return Ok(held.offset);
        }
        let path = self.files.upload_path(id);
        Ok(tokio::task::spawn_blocking(move || fs::metadata(path))
            .await
            .expect("stat task")?
            .len())
    }

    /// Appends a chunk. `start`, when the client says where the chunk begins, must equal the current offset.
    /// What arrived before a body error is kept (durably) so the client can resume; the error is returned.
    pub async fn append_upload<S, E>(
        &self,
        repo: &str,
        id: &str,
        start: Option<u64>,
        body: S,
    ) -> Result<u64>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin + Send + 'static,
        E: Display + Send + 'static,
    {
        self.append_upload_checked(repo, id, start, body, |_| true)
            .await
    }

    /// Like `append_upload`, but once the body has ended `accept` decides (under the session lock) whether the
    /// chunk stays; it is told whether the body arrived whole. When it says no, the upload is cut back to where
    /// the chunk began, and the body's error (or `ChunkRejected`) is returned. tus's checksum extension
    /// verifies each chunk this way: a chunk cut off midway cannot be verified, so none of it is kept.
    ///
    /// The write runs as its own task: a client that goes away mid-chunk (its request future dropped) still
    /// leaves the session at the offset of what reached the file, never behind it.
    pub async fn append_upload_checked<S, E>(
        &self,
        repo: &str,
        id: &str,
        start: Option<u64>,
        body: S,
        accept: impl FnOnce(bool) -> bool + Send + 'static,
    ) -> Result<u64>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin + Send + 'static,
        E: Display + Send + 'static,
    {
        let session = self.session(repo, id).await?;
        let path = self.files.upload_path(id);
        let permit = self.writing_permit()?;
        tokio::spawn(async move {
            let _permit = permit;
            let mut s = session.lock_owned().await;
            if let Some(start) = start.filter(|&st| st != s.offset) {
                return Err(StoreError::OutOfOrder {
                    expected: s.offset,
                    got: start,
                });
            }
            let mut file = OpenOptions::new().write(true).open(&path)?;
            file.set_len(s.offset)?; // drop bytes past the acknowledged offset (possible only after a crash)
            io::Seek::seek(&mut file, io::SeekFrom::Start(s.offset))?;
            let incremental = s.hasher.take();
            let before = incremental.clone();
            let tracking = incremental.is_some();
            let (file, hasher, written, outcome) =
                write_stream(file, incremental.unwrap_or_default(), body).await;
            if !accept(outcome.is_ok()) {
                let begin = s.offset;
                let cut = tokio::task::spawn_blocking(move || {
                    file.set_len(begin)?;
                    file.sync_all()
                })
                .await
                .expect("truncate task");
                s.hasher = before;
                cut?;
                outcome?;
                return Err(StoreError::ChunkRejected);
            }
            let synced = tokio::task::spawn_blocking(move || file.sync_all())
                .await
                .expect("fsync task");
            s.offset += written;
            // A failed write may have hashed bytes it did not store: fall back to re-hashing the file at the end.
            let write_failed =
                matches!(outcome, Err(ref e) if !matches!(e, StoreError::BodyInterrupted(_)));
            s.hasher = (tracking && !write_failed).then_some(hasher);
            synced?;
            outcome?;
            Ok(s.offset)
        })
        .await
        .expect("append task panicked")
    }

    /// Appends the final chunk (if any; `start` as for `append_upload`), verifies the digest and makes the blob visible. On mismatch the
    /// session is discarded, as the spec requires the client to start over.
    pub async fn finish_upload<S, E>(
        &self,
        repo: &str,
        id: &str,
        start: Option<u64>,
        expected: &Digest,
        body: S,
    ) -> Result<u64>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin + Send + 'static,
        E: Display + Send + 'static,
    {
        self.append_upload(repo, id, start, body).await?;
        let link = repo.to_owned();
        let (_, size) = self
            .complete_upload(repo, id, Some(expected.clone()), move |m, digest, size| {
                Ok(m.link_blob(&link, digest, size)?)
            })
            .await?;
        Ok(size)
    }

    /// Ends an upload session: hashes what it holds (with `expected`'s algorithm, else sha256), checks it
    /// against `expected` (if any), moves it into the blob store and lets `record` write what now references the blob — all under the metadata lock, so the
    /// blob is never visible unreferenced. The session is gone afterwards, whatever the outcome.
    pub async fn complete_upload(
        &self,
        owner: &str,
        id: &str,
        expected: Option<Digest>,
        record: impl FnOnce(&mut Meta, &Digest, u64) -> Result<()> + Send + 'static,
    ) -> Result<(Digest, u64)> {
        let session = self.session(owner, id).await?;
        let mut s = session.lock().await;
        let path = self.files.upload_path(id);
        let size = s.offset;
        let algorithm = expected
            .as_ref()
            .map_or(Algorithm::Sha256, Digest::algorithm);
        // The running hash is sha256; content named by another algorithm is hashed once, here.
        let actual = match s.hasher.take().filter(|h| h.algorithm() == algorithm) {
            Some(h) => h.finish(),
            None => {
                let p = path.clone();
                tokio::task::spawn_blocking(move || blobs::hash_file(&p, algorithm))
                    .await
                    .expect("hash task")?
                    .0
            }
        };
        let id = id.to_owned();
        self.sessions.lock().expect("sessions lock").remove(&id);
        drop(s);
        self.with_meta(move |m, files| {
            m.delete_upload(&id)?;
            if let Some(expected) = expected.filter(|e| *e != actual) {
                let _ = fs::remove_file(&path);
                return Err(StoreError::DigestMismatch { expected, actual });
            }
            files.commit(&path, &actual)?;
            record(m, &actual, size)?;
            Ok((actual, size))
        })
        .await
    }

    pub async fn cancel_upload(&self, repo: &str, id: &str) -> Result<()> {
        let session = self.session(repo, id).await?;
        let _held = session.lock().await;
        self.sessions.lock().expect("sessions lock").remove(id);
        let id = id.to_owned();
        self.with_meta(move |m, files| {
            m.delete_upload(&id)?;
            match fs::remove_file(files.upload_path(&id)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e.into()),
                _ => Ok(()),
            }
        })
        .await
    }

    /// The size and last change of a session's file (what arrived, and when the last of it did).
    pub async fn upload_file_state(&self, id: &str) -> Result<(u64, std::time::SystemTime)> {
        let path = self.files.upload_path(id);
        let m = tokio::task::spawn_blocking(move || fs::metadata(path))
            .await
            .expect("stat task")?;
        Ok((m.len(), m.modified()?))
    }

    pub async fn upload_count(&self) -> Result<u64> {
        self.with_meta(|m, _| Ok(m.upload_count()?)).await
    }
}
