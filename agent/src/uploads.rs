//! tus uploads as a service (the HTTP side is `http::tus`): a session in the store per upload, bytes appended
//! at the offset the client names, a chunk that does not match its checksum cut off again, and on the last
//! byte the content hashed into a blob that stays until the upload is terminated or bound to an image record
//! (see `images`). Nothing here knows HTTP.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::Stream;
use sha2::{Digest as _, Sha256};

pub use crate::auth::Uploader;
use crate::images::{capped, now};
use crate::store::{Store, StoreError};

/// The session owner of tus uploads: not a repository name, so registry sessions never meet them.
pub const OWNER: &str = "tus:";

#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("upload {0} does not exist")]
    Unknown(String),
    #[error("Upload-Offset {got} does not match the upload's offset {expected}")]
    OffsetMismatch { expected: u64, got: u64 },
    #[error("Upload-Length {length} exceeds the limit of {limit} bytes")]
    TooLong { length: u64, limit: u64 },
    #[error("the body at offset {start} runs past Upload-Length {length}")]
    PastLength { start: u64, length: u64 },
    #[error("the chunk does not match Upload-Checksum; it was discarded")]
    ChecksumMismatch,
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for UploadError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::UploadUnknown(id) => UploadError::Unknown(id),
            StoreError::OutOfOrder { expected, got } => {
                UploadError::OffsetMismatch { expected, got }
            }
            e => UploadError::Store(e),
        }
    }
}

type Result<T, E = UploadError> = std::result::Result<T, E>;

/// An upload as a client sees it.
pub struct Upload {
    pub length: u64,
    pub offset: u64,
    pub metadata: Option<String>,
    pub finished: bool,
}

pub struct Uploads<'a> {
    store: &'a Store,
    max_length: u64,
    /// Who asks; None for the agent itself (the expiry sweep), which sees every upload.
    by: Option<Uploader<'a>>,
}

impl<'a> Uploads<'a> {
    pub fn new(store: &'a Store, max_length: u64) -> Self {
        Uploads {
            store,
            max_length,
            by: None,
        }
    }

    /// The uploads as `by` sees them: it makes uploads as its own, and only those it may see exist.
    pub fn seen_by(self, by: Uploader<'a>) -> Self {
        Uploads {
            by: Some(by),
            ..self
        }
    }

    /// A new upload of `length` bytes with the client's raw `Upload-Metadata`; its id.
    pub async fn create(&self, length: u64, metadata: Option<String>) -> Result<String> {
        if length > self.max_length {
            return Err(UploadError::TooLong {
                length,
                limit: self.max_length,
            });
        }
        let id = self.store.start_upload(OWNER).await?;
        let i = id.clone();
        let creator = self.by.map_or("-", |b| b.name).to_owned();
        self.store
            .with_meta(move |m, _| {
                Ok(m.create_tus(&i, length, (metadata.as_deref(), &creator), now())?)
            })
            .await?;
        if length == 0 {
            self.finish(&id).await?;
        }
        tracing::info!(upload = id, length, "tus upload created");
        Ok(id)
    }

    pub async fn get(&self, id: &str) -> Result<Upload> {
        let i = id.to_owned();
        let row = self
            .store
            .with_meta(move |m, _| Ok(m.tus(&i)?))
            .await?
            .filter(|row| self.by.is_none_or(|by| by.may_see(row.creator.as_deref())))
            .ok_or_else(|| UploadError::Unknown(id.to_owned()))?;
        let offset = match row.digest {
            Some(_) => row.length,
            None => self.store.upload_offset(OWNER, &row.id).await?,
        };
        Ok(Upload {
            length: row.length,
            offset,
            metadata: row.metadata,
            finished: row.digest.is_some(),
        })
    }

    /// Appends `body` at `start`, which must be the upload's offset; with `checksum` (a sha256), a body that
    /// does not match it is cut off again. Returns the new offset; the last byte finishes the upload.
    pub async fn append<S, E>(
        &self,
        id: &str,
        start: u64,
        body: S,
        checksum: Option<[u8; 32]>,
    ) -> Result<u64>
    where
        S: Stream<Item = Result<Bytes, E>> + Send + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        let upload = self.get(id).await?;
        if start != upload.offset {
            return Err(UploadError::OffsetMismatch {
                expected: upload.offset,
                got: start,
            });
        }
        if upload.finished {
            // Finished: an empty PATCH at the end is a harmless repeat.
            return Ok(upload.offset);
        }
        let (limited, overflow) = capped(body, upload.length - upload.offset);
        let hasher = Arc::new(std::sync::Mutex::new(Sha256::new()));
        let chunk_hash = hasher.clone();
        let hash_chunks = checksum.is_some();
        let hashing = futures_util::StreamExt::map(limited, move |c| {
            if let (true, Ok(bytes)) = (hash_chunks, &c) {
                chunk_hash.lock().expect("hasher").update(bytes);
            }
            c
        });
        // With a checksum only a whole chunk that matches it stays.
        let verify = move |whole: bool| match &checksum {
            None => true,
            Some(want) => {
                let got = std::mem::take(&mut *hasher.lock().expect("hasher")).finalize();
                whole && got.as_slice() == want.as_slice()
            }
        };
        let appended = self
            .store
            .append_upload_checked(OWNER, id, Some(start), Box::pin(hashing), verify)
            .await;
        if overflow.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(UploadError::PastLength {
                start,
                length: upload.length,
            });
        }
        let offset = match appended {
            Err(StoreError::ChunkRejected) => return Err(UploadError::ChecksumMismatch),
            r => r?,
        };
        if offset == upload.length {
            self.finish(id).await?;
        }
        Ok(offset)
    }

    /// The last byte arrived: hash the content into a blob the tus row references.
    async fn finish(&self, id: &str) -> Result<()> {
        let i = id.to_owned();
        let (digest, size) = self
            .store
            .complete_upload(OWNER, id, None, move |m, digest, _| {
                Ok(m.complete_tus(&i, digest)?)
            })
            .await?;
        tracing::info!(upload = id, %digest, size, "tus upload finished");
        Ok(())
    }

    /// Ends the upload: its session, or its content unless an image record holds it.
    /// For the expiry sweep: upload `id` holds `size` bytes. Finishes it when they are all of it (an agent
    /// stopped during the final hash left it so); otherwise, with `expired`, terminates it. Returns whether
    /// bytes were freed.
    pub async fn sweep(&self, id: &str, size: u64, expired: bool) -> Result<bool> {
        let upload = match self.get(id).await {
            Ok(u) => u,
            // A session with no tus row: the agent was killed between the two. Expired, it goes.
            Err(UploadError::Unknown(_)) if expired => {
                self.store.cancel_upload(OWNER, id).await?;
                return Ok(true);
            }
            Err(UploadError::Unknown(_)) => return Ok(false),
            Err(e) => return Err(e),
        };
        if upload.finished {
            return Ok(false);
        }
        if size == upload.length {
            self.finish(id).await?;
            return Ok(false);
        }
        if !expired {
            return Ok(false);
        }
        self.terminate(id).await?;
        tracing::info!(upload = id, bytes = size, "abandoned tus upload expired");
        Ok(true)
    }

    pub async fn terminate(&self, id: &str) -> Result<()> {
        let upload = self.get(id).await?;
        if !upload.finished {
            match self.store.cancel_upload(OWNER, id).await {
                Ok(()) | Err(StoreError::UploadUnknown(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let i = id.to_owned();
        self.store
            .with_meta(move |m, files| {
                if let Some((row, true)) = m.delete_tus(&i)? {
                    files.remove(row.digest.as_ref().expect("orphan has a digest"))?;
                }
                Ok(())
            })
            .await?;
        tracing::info!(upload = id, "tus upload terminated");
        Ok(())
    }
}
