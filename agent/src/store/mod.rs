//! The content store: blob files in OCI-layout form plus registry metadata. It owns every invariant about
//! stored content — nothing visible unless verified and durable, a tag never points at a manifest whose
//! references are missing — and knows nothing of HTTP.

pub mod blobs;
mod mapped;
pub mod meta;
mod uploads;

use std::collections::HashMap;
use std::fmt::Display;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::digest::{Digest, Hasher};
use crate::manifest::{self, ManifestError};
pub use blobs::BlobFiles;
use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
pub use mapped::Lent;
pub use meta::{ImageRow, ManifestRow, Meta, MetaError, TusRow};

/// Writes are batched to this size before they go to the blocking pool.
const WRITE_BATCH: usize = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("blob {0} is not in the repository")]
    BlobUnknown(Digest),
    #[error("manifest {0} is not in the repository")]
    ManifestUnknown(String),
    #[error("upload session {0} does not exist")]
    UploadUnknown(String),
    #[error("chunk starts at {got} but the upload is at offset {expected}")]
    OutOfOrder { expected: u64, got: u64 },
    #[error("content hashes to {actual}, not {expected}")]
    DigestMismatch { expected: Digest, actual: Digest },
    #[error("body carries {got} bytes, Content-Length said {expected}")]
    SizeMismatch { expected: u64, got: u64 },
    #[error("manifest is larger than {} bytes", manifest::MAX_MANIFEST_SIZE)]
    ManifestTooLarge,
    #[error("invalid manifest: {0}")]
    ManifestInvalid(#[from] ManifestError),
    #[error("manifest references {kind} {digest}, which is not in the repository")]
    ManifestBlobUnknown { digest: Digest, kind: &'static str },
    #[error("{target} is still referenced by manifest {by}")]
    InUse { target: Digest, by: Digest },
    #[error("the request body was cut off: {0}")]
    BodyInterrupted(String),
    #[error("the chunk was rejected and discarded")]
    ChunkRejected,
    #[error("{0}")]
    Import(String),
    #[error("storage is full")]
    StorageFull,
    #[error("{0} uploads are being written already; retry shortly")]
    TooManyUploads(usize),
    #[error("storage I/O: {0}")]
    Io(io::Error),
    #[error(transparent)]
    Meta(MetaError),
}

impl From<io::Error> for StoreError {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::StorageFull || e.raw_os_error() == Some(28) {
            StoreError::StorageFull
        } else {
            StoreError::Io(e)
        }
    }
}

impl From<MetaError> for StoreError {
    fn from(e: MetaError) -> Self {
        match e {
            MetaError::Missing { digest, kind, .. } => {
                StoreError::ManifestBlobUnknown { digest, kind }
            }
            MetaError::InUse { target, by, .. } => StoreError::InUse { target, by },
            e @ MetaError::WrongSize { .. } => {
                StoreError::ManifestInvalid(ManifestError::Shape(e.to_string()))
            }
            e => StoreError::Meta(e),
        }
    }
}

impl From<blobs::PutError> for StoreError {
    fn from(e: blobs::PutError) -> Self {
        match e {
            blobs::PutError::Mismatch { expected, actual } => {
                StoreError::DigestMismatch { expected, actual }
            }
            blobs::PutError::Io(e) => e.into(),
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A manifest reference: a tag or a digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    Tag(String),
    Digest(Digest),
}

impl Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reference::Tag(t) => f.write_str(t),
            Reference::Digest(d) => write!(f, "{d}"),
        }
    }
}

/// In-memory state of an upload session. `hasher` covers bytes `[0, offset)` when present; after a restart it
/// is None and the file is re-hashed when the upload finishes.
struct Session {
    pub(super) offset: u64,
    pub(super) hasher: Option<Hasher>,
}

pub struct Store {
    /// `<data>/lock`, exclusively locked while the store is open: one process at a time writes a data directory.
    _lock: File,
    files: BlobFiles,
    meta: Arc<Mutex<Meta>>,
    sessions: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Session>>>>,
    /// Counts changes of BPA image records' content (completed, bound, deleted), for watchers such as the
    /// Software reconciler.
    images_changed: tokio::sync::watch::Sender<u64>,
    /// Chunks being written at once, across every kind of upload (see [`Store::limit_uploads`]).
    writing: Arc<tokio::sync::Semaphore>,
    max_writing: usize,
    /// Chunks refused because `max_writing` were being written.
    uploads_refused: std::sync::atomic::AtomicU64,
}

/// Chunks written at once unless `serve --max-uploads` says otherwise.
pub const DEFAULT_MAX_UPLOADS: usize = 256;

/// Rename-into-place and the metadata rows that make a file visible happen under the metadata lock, and so
/// does removing a file that no row references any more: a concurrent commit of the same digest can never be
/// undone by a collection.
fn locked(meta: &Mutex<Meta>) -> std::sync::MutexGuard<'_, Meta> {
    meta.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Store {
    /// Opens the store at `root` (created if missing), dropping temp files and upload files no session owns.
    ///
    /// Only one process may have a data directory open: a second `serve`, `import` or `add-file` is refused
    /// (it would empty `tmp/` under the first one's feet).
    pub fn open(root: &Path) -> Result<Self> {
        let lock = lock_data_dir(root)?;
        let files = BlobFiles::open(root)?;
        let mut meta = Meta::open(&root.join("foothold.db"))?;
        let ids = meta.upload_ids()?;
        for id in &ids {
            if !files.upload_path(id).exists() {
                meta.delete_upload(id)?;
            }
        }
        for entry in fs::read_dir(root.join("uploads"))? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !ids.contains(&name) {
                let _ = fs::remove_file(entry.path());
            }
        }
        Ok(Store {
            _lock: lock,
            files,
            meta: Arc::new(Mutex::new(meta)),
            sessions: Mutex::default(),
            images_changed: tokio::sync::watch::Sender::new(0),
            writing: Arc::new(tokio::sync::Semaphore::new(DEFAULT_MAX_UPLOADS)),
            max_writing: DEFAULT_MAX_UPLOADS,
            uploads_refused: Default::default(),
        })
    }

    /// At most `max` upload chunks (registry, REST, tus) are written at once; one more is refused with
    /// [`StoreError::TooManyUploads`] (each protocol's 429) rather than queued behind the others.
    pub fn limit_uploads(mut self, max: usize) -> Self {
        self.writing = Arc::new(tokio::sync::Semaphore::new(max.max(1)));
        self.max_writing = max.max(1);
        self
    }

    /// A place among the chunks being written at once, or [`StoreError::TooManyUploads`] (counted).
    fn writing_permit(&self) -> Result<tokio::sync::OwnedSemaphorePermit> {
        self.writing.clone().try_acquire_owned().map_err(|_| {
            self.uploads_refused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            StoreError::TooManyUploads(self.max_writing)
        })
    }

    /// The data directory the store lives in (its blobs, uploads and database).
    pub fn root(&self) -> &std::path::Path {
        self.files.root()
    }

    /// How many chunks were refused by [`Store::limit_uploads`].
    pub fn uploads_refused(&self) -> u64 {
        self.uploads_refused
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Tells watchers that an image record's content changed.
    pub(crate) fn image_records_changed(&self) {
        self.images_changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Changes whenever an image record's content changes (completed, bound to a tus upload, deleted).
    pub fn watch_image_records(&self) -> tokio::sync::watch::Receiver<u64> {
        self.images_changed.subscribe()
    }

    /// Writes a blob's file unlinked (an archive's entries): it may be collected before its import links it
    /// under the lock ([`Store::with_meta_blocking`]), which then fails cleanly.
    pub fn stage_blob(
        &self,
        reader: impl io::Read,
        algorithm: crate::digest::Algorithm,
    ) -> io::Result<(Digest, u64, bool)> {
        self.files.put_hashing(reader, algorithm)
    }

    /// Runs `f` with the metadata (and file commits) on the blocking pool.
    pub(crate) async fn with_meta<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Meta, &BlobFiles) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let meta = self.meta.clone();
        let files = self.files.clone();
        tokio::task::spawn_blocking(move || f(&mut locked(&meta), &files))
            .await
            .expect("metadata task panicked")
    }

    /// [`Store::with_meta`] outside the runtime (imports, fsck): files written and linked under one lock.
    pub fn with_meta_blocking<T>(&self, f: impl FnOnce(&mut Meta, &BlobFiles) -> T) -> T {
        f(&mut locked(&self.meta), &self.files)
    }

    pub async fn blob_size(&self, repo: &str, digest: &Digest) -> Result<Option<u64>> {
        let (repo, digest) = (repo.to_owned(), digest.clone());
        self.with_meta(move |m, _| Ok(m.blob_size(&repo, &digest)?))
            .await
    }

    /// Opens a blob for reading. The file handle stays valid even if the blob is deleted meanwhile.
    pub async fn open_blob(&self, repo: &str, digest: &Digest) -> Result<(File, u64)> {
        if self.blob_size(repo, digest).await?.is_none() {
            return Err(StoreError::BlobUnknown(digest.clone()));
        }
        let path = self.files.path(digest);
        let opened = tokio::task::spawn_blocking(move || {
            let f = File::open(path)?;
            let size = f.metadata()?.len();
            Ok::<_, io::Error>((f, size))
        })
        .await
        .expect("open task panicked");
        match opened {
            Ok(v) => Ok(v),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                tracing::error!(%digest, repo, "blob is linked but its file is missing; run fsck");
                Err(StoreError::BlobUnknown(digest.clone()))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes a blob from a repository; deferred while a manifest there still references it (see Meta).
    pub async fn delete_blob(&self, repo: &str, digest: &Digest) -> Result<()> {
        let (repo, digest) = (repo.to_owned(), digest.clone());
        self.with_meta(move |m, files| match m.unlink_blob(&repo, &digest)? {
            None => Err(StoreError::BlobUnknown(digest)),
            Some(orphans) => orphans
                .iter()
                .try_for_each(|d| files.remove(d))
                .map_err(Into::into),
        })
        .await
    }

    /// Cross-repository mount. With `from`, only a blob that repository holds; without, any stored blob
    /// (automatic content discovery: every repository here is readable anonymously anyway).
    pub async fn mount_blob(
        &self,
        repo: &str,
        digest: &Digest,
        from: Option<&str>,
    ) -> Result<bool> {
        let (repo, digest, from) = (repo.to_owned(), digest.clone(), from.map(str::to_owned));
        self.with_meta(move |m, files| {
            let size = match &from {
                Some(from) => m.blob_size(from, &digest)?,
                None => m.blob_size_anywhere(&digest)?,
            };
            match size {
                Some(size) if files.size(&digest)?.is_some() => {
                    m.link_blob(&repo, &digest, size)?;
                    Ok(true)
                }
                _ => Ok(false),
            }
        })
        .await
    }

    /// Monolithic upload: the whole blob in one body, verified against `expected` before it is visible.
    pub async fn put_blob<S, E>(
        &self,
        repo: &str,
        expected: &Digest,
        body: S,
        length: Option<u64>,
    ) -> Result<u64>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: Display,
    {
        // A monolithic upload is one chunk: it takes its place among those being written.
        let _permit = self.writing_permit()?;
        let tmp = self.files.temp_path();
        let file = File::create(&tmp)?;
        let (file, hasher, written, outcome) =
            write_stream(file, expected.algorithm().hasher(), body).await;
        let result = (|| {
            outcome?;
            file.sync_all()?;
            if let Some(expected) = length.filter(|&l| l != written) {
                return Err(StoreError::SizeMismatch {
                    expected,
                    got: written,
                });
            }
            let actual = hasher.finish();
            if &actual != expected {
                return Err(StoreError::DigestMismatch {
                    expected: expected.clone(),
                    actual,
                });
            }
            Ok(())
        })();
        drop(file);
        if let Err(e) = result {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        let (repo, digest) = (repo.to_owned(), expected.clone());
        self.with_meta(move |m, files| {
            files.commit(&tmp, &digest)?;
            m.link_blob(&repo, &digest, written)?;
            Ok(written)
        })
        .await
    }

    /// Stores a manifest under `reference`, also tagged `extra_tags` (the `?tag=` of a push by digest).
    /// Returns its digest and subject.
    pub async fn put_manifest(
        &self,
        repo: &str,
        reference: &Reference,
        extra_tags: &[String],
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<(Digest, Option<Digest>)> {
        if body.len() > manifest::MAX_MANIFEST_SIZE {
            return Err(StoreError::ManifestTooLarge);
        }
        // Named by the algorithm of the digest it is pushed by; pushed by tag, sha256.
        let algorithm = match reference {
            Reference::Digest(d) => d.algorithm(),
            Reference::Tag(_) => crate::digest::Algorithm::Sha256,
        };
        let digest = Digest::of_bytes_with(algorithm, &body);
        let mut tags = extra_tags.to_vec();
        match reference {
            Reference::Digest(d) if *d != digest => {
                return Err(StoreError::DigestMismatch {
                    expected: d.clone(),
                    actual: digest,
                })
            }
            Reference::Digest(_) => {}
            Reference::Tag(t) => tags.push(t.clone()),
        }
        let parsed = manifest::parse(content_type, &body)?;
        let subject = parsed.subject.clone();
        let repo = repo.to_owned();
        let d = digest.clone();
        self.with_meta(move |m, files| {
            m.check_references(&repo, &parsed, false)?; // before the file is written: a refused manifest leaves nothing
            files.put_bytes(algorithm, &body)?;
            let tags: Vec<&str> = tags.iter().map(String::as_str).collect();
            m.put_manifest(&repo, &d, body.len() as u64, &parsed, &tags, false)?;
            Ok(())
        })
        .await?;
        Ok((digest, subject))
    }

    pub async fn resolve(&self, repo: &str, reference: &Reference) -> Result<ManifestRow> {
        let (repo, reference) = (repo.to_owned(), reference.clone());
        self.with_meta(move |m, _| {
            let digest = match &reference {
                Reference::Digest(d) => d.clone(),
                Reference::Tag(t) => m
                    .resolve_tag(&repo, t)?
                    .ok_or_else(|| StoreError::ManifestUnknown(reference.to_string()))?,
            };
            m.manifest(&repo, &digest)?
                .ok_or_else(|| StoreError::ManifestUnknown(reference.to_string()))
        })
        .await
    }

    /// The manifest's row and bytes (manifests are small: at most 4 MiB).
    pub async fn get_manifest(
        &self,
        repo: &str,
        reference: &Reference,
    ) -> Result<(ManifestRow, Bytes)> {
        let row = self.resolve(repo, reference).await?;
        let bytes = tokio::fs::read(self.files.path(&row.digest)).await?;
        Ok((row, Bytes::from(bytes)))
    }

    pub async fn delete_manifest(&self, repo: &str, reference: &Reference) -> Result<()> {
        let (repo, reference) = (repo.to_owned(), reference.clone());
        self.with_meta(move |m, files| match &reference {
            Reference::Tag(t) => {
                if m.delete_tag(&repo, t)? {
                    Ok(())
                } else {
                    Err(StoreError::ManifestUnknown(t.clone()))
                }
            }
            Reference::Digest(d) => match m.delete_manifest(&repo, d)? {
                None => Err(StoreError::ManifestUnknown(d.to_string())),
                Some(orphans) => orphans
                    .iter()
                    .try_for_each(|d| files.remove(d))
                    .map_err(Into::into),
            },
        })
        .await
    }

    pub async fn tags(
        &self,
        repo: &str,
        last: Option<String>,
        n: Option<usize>,
    ) -> Result<Option<Vec<String>>> {
        let repo = repo.to_owned();
        self.with_meta(move |m, _| {
            if !m.repo_exists(&repo)? {
                return Ok(None);
            }
            Ok(Some(m.tags(&repo, last.as_deref(), n)?))
        })
        .await
    }

    pub async fn repositories(
        &self,
        last: Option<String>,
        n: Option<usize>,
    ) -> Result<Vec<String>> {
        self.with_meta(move |m, _| Ok(m.repositories(last.as_deref(), n)?))
            .await
    }

    pub async fn referrers(&self, repo: &str, subject: &Digest) -> Result<Vec<ManifestRow>> {
        let (repo, subject) = (repo.to_owned(), subject.clone());
        self.with_meta(move |m, _| Ok(m.referrers(&repo, &subject)?))
            .await
    }

    pub fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.files.path(digest)
    }
}

/// Takes `<root>/lock` (created empty if missing) for this process. The file stays empty: the image builder's
/// data partition holds it, and a pid there would make two builds differ.
fn lock_data_dir(root: &Path) -> Result<File> {
    fs::create_dir_all(root)?;
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(root.join("lock"))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(fs::TryLockError::WouldBlock) => Err(StoreError::Io(io::Error::new(
            io::ErrorKind::WouldBlock,
            format!(
                "data directory {} is in use by another foothold-agent process (`fuser {}/lock` names it): stop it first",
                root.display(),
                root.display()
            ),
        ))),
        Err(fs::TryLockError::Error(e)) => Err(e.into()),
    }
}

/// Streams a body into `file`, hashing as it goes; writes happen on the blocking pool in batches. Returns the
/// file, hasher and the byte count actually written even when the body fails midway.
pub(super) async fn write_stream<S, E>(
    mut file: File,
    mut hasher: Hasher,
    mut body: S,
) -> (File, Hasher, u64, Result<()>)
where
    S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
    E: Display,
{
    let mut written = 0u64;
    let mut buf = BytesMut::with_capacity(WRITE_BATCH);
    let mut outcome = Ok(());
    loop {
        let next = body.next().await;
        let done = match next {
            Some(Ok(chunk)) => {
                buf.extend_from_slice(&chunk);
                false
            }
            Some(Err(e)) => {
                outcome = Err(StoreError::BodyInterrupted(e.to_string()));
                true
            }
            None => true,
        };
        if buf.len() >= WRITE_BATCH || (done && !buf.is_empty()) {
            let batch = buf.split().freeze();
            let res = tokio::task::spawn_blocking(move || {
                hasher.update(&batch);
                let r = file.write_all(&batch);
                (file, hasher, batch.len(), r)
            })
            .await
            .expect("write task panicked");
            file = res.0;
            hasher = res.1;
            if let Err(e) = res.3 {
                return (file, hasher, written, Err(e.into()));
            }
            written += res.2 as u64;
        }
        if done {
            return (file, hasher, written, outcome);
        }
    }
}
