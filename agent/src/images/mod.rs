//! BPA images: binary, OS and container images uploaded for one cluster of one owner (Akraino ICN's BPA REST
//! agent). A record's content is uploaded resumably through a store upload session and, once complete and
//! verified, is a blob in the content store. Keys are (owner, cluster, kind, name): the original ignored owner
//! and cluster and let names collide. Knows nothing of HTTP.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::import::Imported;
use crate::store::{ImageRow, Store, StoreError};

mod checks;
mod sweep;

pub use foothold_names::MAX_NAME_LEN;

/// The kind of a record: one type with the image builder (`foothold-names`).
pub use foothold_names::ImageKind as Kind;

/// `s` as a record kind, or the REST API's error.
pub fn parse_kind(s: &str) -> Result<Kind, ImageError> {
    s.parse().map_err(|reason| ImageError::InvalidName {
        field: "image type",
        reason,
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub owner: String,
    pub cluster: String,
    pub kind: Kind,
    pub name: String,
}

impl Key {
    pub fn new(owner: &str, cluster: &str, kind: &str, name: &str) -> Result<Key, ImageError> {
        validate_name("owner", owner)?;
        validate_name("cluster name", cluster)?;
        validate_name("image_name", name)?;
        Ok(Key {
            owner: owner.to_owned(),
            cluster: cluster.to_owned(),
            kind: parse_kind(kind)?,
            name: name.to_owned(),
        })
    }

    fn tuple(&self) -> (&str, &str, &str, &str) {
        (&self.owner, &self.cluster, self.kind.as_str(), &self.name)
    }

    /// A `*.deb` binary record: a package for the apt repository, checked to be one when it completes.
    pub fn is_package(&self) -> bool {
        self.kind == Kind::Binary && self.name.ends_with(crate::apt::DEB_SUFFIX)
    }

    /// The upload-session owner: not a valid repository name, so it can never meet a registry session.
    fn session_owner(&self) -> String {
        format!(
            "images:{}/{}/{}/{}",
            self.owner,
            self.cluster,
            self.kind.as_str(),
            self.name
        )
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}/{}",
            self.owner,
            self.cluster,
            self.kind.as_str(),
            self.name
        )
    }
}

/// `/files/<owner>/<cluster>/<kind>/<name><CHECKSUM_SUFFIX>` serves the sha256sum line of `<name>`.
pub const CHECKSUM_SUFFIX: &str = ".sha256sum";

/// Names become path segments and file names elsewhere: no separators, no `.`/`..`, no control characters.
pub fn validate_name(field: &'static str, s: &str) -> Result<(), ImageError> {
    foothold_names::check_name(s).map_err(|reason| ImageError::InvalidName { field, reason })
}

#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{field} {reason}")]
    InvalidName { field: &'static str, reason: String },
    #[error("{0}")]
    InvalidRequest(String),
    #[error("image {0} does not exist")]
    NotFound(String),
    #[error("image {0} exists already")]
    Exists(String),
    #[error("Upload-Offset {got} does not match the image's offset {expected}")]
    OffsetMismatch { expected: u64, got: u64 },
    #[error("image {0} is already completely uploaded")]
    Complete(String),
    #[error("image {0} is not completely uploaded yet")]
    Incomplete(String),
    #[error("{0}")]
    TooLarge(String),
    #[error("upload does not match: expected sha256 {expected}, received content hashes to {actual}; the upload was discarded")]
    DigestMismatch { expected: String, actual: String },
    #[error("image {image}: {reason}; the upload was discarded and nothing was imported")]
    Archive { image: String, reason: String },
    #[error("{0}")]
    TusUnknown(String),
    #[error("{0}")]
    TusIncomplete(String),
    #[error("{0}")]
    Mismatch(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What clients send to create a record (ICN's field names).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewImage {
    pub image_name: String,
    /// Required, except when binding a tus upload (which knows its length).
    #[serde(default)]
    pub image_length: Option<u64>,
    #[serde(default)]
    pub sha256: Option<String>,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub description: Option<serde_json::Value>,
    /// A finished tus upload (its id, or its `/v1/uploads/<id>` URL) that becomes this record's content.
    #[serde(default)]
    pub tus_upload: Option<String>,
    #[serde(flatten)]
    pub echo: RecordEcho,
}

/// What ICN's clients send along because they send a whole record back (ICN's `sample.json`): it must agree
/// with the path, and on create describe an empty record. `Type` is how ICN's `post.json` spells `type` (Go's
/// JSON matches field names whatever their case).
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
pub struct RecordEcho {
    #[serde(default)]
    pub owner: Option<String>,
    #[serde(default)]
    pub cluster_name: Option<String>,
    #[serde(default, rename = "type", alias = "Type")]
    pub image_type: Option<String>,
    #[serde(default)]
    pub image_offset: Option<u64>,
    #[serde(default)]
    pub upload_complete: Option<bool>,
}

impl RecordEcho {
    /// Refuses an owner, cluster or type other than the path's (`kind`: `container_images` is `container`).
    pub fn agrees(&self, owner: &str, cluster: &str, kind: &str) -> Result<(), String> {
        let kind = kind.strip_suffix("_images").unwrap_or(kind);
        for (field, given, path) in [
            ("owner", &self.owner, owner),
            ("cluster_name", &self.cluster_name, cluster),
            ("type", &self.image_type, kind),
        ] {
            if let Some(g) = given {
                if g != path {
                    return Err(format!("{field} {g:?} is not the path's {path:?}"));
                }
            }
        }
        Ok(())
    }
}

/// A record as the API returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Record {
    /// ICN's fields naming where the record is: the path's owner and cluster, and its type without
    /// `_images` (`container`, `binary`, `os`).
    #[serde(default)]
    pub owner: String,
    #[serde(default)]
    pub cluster_name: String,
    #[serde(default, rename = "type")]
    pub short_type: String,
    pub image_name: String,
    pub image_type: String,
    pub image_length: u64,
    pub image_offset: u64,
    pub upload_complete: bool,
    /// The expected sha256 while uploading (if the client gave one); the content's sha256 once complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub description: Option<serde_json::Value>,
    /// container_images: the references and digests the archive was imported under.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub imported: Option<Vec<Imported>>,
}

pub(crate) fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn expected_digest(sha: &Option<String>) -> Option<Digest> {
    sha.as_ref()
        .and_then(|s| format!("sha256:{s}").parse().ok())
}

pub struct Images<'a> {
    store: &'a Arc<Store>,
    /// Largest image accepted, in bytes.
    pub max_length: u64,
}

impl<'a> Images<'a> {
    pub fn new(store: &'a Arc<Store>, max_length: u64) -> Self {
        Images { store, max_length }
    }

    async fn row(&self, key: &Key) -> Result<ImageRow, ImageError> {
        let k = key.clone();
        self.store
            .with_meta(move |m, _| Ok(m.image(k.tuple())?))
            .await?
            .ok_or_else(|| ImageError::NotFound(key.to_string()))
    }

    async fn record(&self, key: &Key, row: ImageRow) -> Result<Record, ImageError> {
        let offset = match (&row.digest, &row.upload_id) {
            (Some(_), _) => row.length,
            (None, Some(id)) => self.store.upload_offset(&key.session_owner(), id).await?,
            (None, None) => 0,
        };
        let imported: Option<Vec<Imported>> = row
            .imported
            .as_deref()
            .and_then(|i| serde_json::from_str(i).ok());
        // A container archive is complete once its import finished, not when its last byte arrived.
        let complete = row.digest.is_some() && (key.kind != Kind::Container || imported.is_some());
        let kind = key.kind.as_str();
        Ok(Record {
            owner: key.owner.clone(),
            cluster_name: key.cluster.clone(),
            short_type: kind.strip_suffix("_images").unwrap_or(kind).to_owned(),
            image_name: row.name,
            image_type: kind.to_owned(),
            image_length: row.length,
            image_offset: offset,
            upload_complete: complete,
            sha256: row.digest.map(|d| d.hex().to_owned()).or(row.sha256),
            description: row.description.and_then(|d| serde_json::from_str(&d).ok()),
            imported,
        })
    }

    /// A new record `new` of `(owner, cluster, kind)`, made by `by` (a tus upload it binds must be one `by`
    /// may see).
    pub async fn create(
        &self,
        (owner, cluster, kind): (&str, &str, &str),
        new: NewImage,
        by: crate::auth::Uploader<'_>,
    ) -> Result<Record, ImageError> {
        let key = Key::new(owner, cluster, kind, &new.image_name)?;
        if new.image_name.ends_with(CHECKSUM_SUFFIX) {
            // `/files/.../<name>.sha256sum` is the checksum of `<name>`: such a record could never be downloaded.
            return Err(ImageError::InvalidName {
                field: "image_name",
                reason: format!("must not end in {CHECKSUM_SUFFIX:?} (that name serves the checksum of the record without it)"),
            });
        }
        let sha256 = match new.sha256 {
            Some(s) if format!("sha256:{s}").parse::<Digest>().is_err() => {
                return Err(ImageError::InvalidRequest(format!(
                    "sha256 {s:?} is not 64 lowercase hex digits"
                )))
            }
            s => s,
        };
        let empty = Digest::of_bytes(b"");
        if let Some(s) = sha256
            .as_deref()
            .filter(|s| new.image_length == Some(0) && *s != empty.hex())
        {
            // Empty content is complete as soon as it is created: refuse a checksum it can never have up front,
            // rather than leave a record that can never complete.
            return Err(ImageError::DigestMismatch {
                expected: s.to_owned(),
                actual: empty.hex().to_owned(),
            });
        }
        if let Some(tus) = &new.tus_upload {
            let id = tus.rsplit('/').next().unwrap_or(tus).to_owned();
            return self
                .bind(&key, (&id, by), new.image_length, sha256, new.description)
                .await;
        }
        let image_length = new.image_length.ok_or_else(|| {
            ImageError::InvalidRequest(
                "image_length is required (unless tus_upload is given)".into(),
            )
        })?;
        if image_length > self.max_length {
            return Err(ImageError::TooLarge(format!(
                "image_length {image_length} exceeds the limit of {} bytes",
                self.max_length
            )));
        }
        let id = self.store.start_upload(&key.session_owner()).await?;
        let row = ImageRow {
            name: key.name.clone(),
            length: image_length,
            sha256,
            description: new.description.map(|d| d.to_string()),
            upload_id: Some(id.clone()),
            digest: None,
            updated: now(),
            imported: None,
        };
        let (k, r) = (key.clone(), row.clone());
        let created = self
            .store
            .with_meta(move |m, _| Ok(m.create_image(k.tuple(), &r)?))
            .await?;
        if !created {
            self.store.cancel_upload(&key.session_owner(), &id).await?;
            return Err(ImageError::Exists(key.to_string()));
        }
        tracing::info!(image = %key, length = image_length, "image record created");
        if image_length == 0 {
            self.complete(&key, &id, &row.sha256).await?;
        }
        self.get(&key).await
    }

    pub async fn get(&self, key: &Key) -> Result<Record, ImageError> {
        let row = self.row(key).await?;
        self.record(key, row).await
    }

    pub async fn list(
        &self,
        owner: &str,
        cluster: &str,
        kind: Option<Kind>,
    ) -> Result<Vec<Record>, ImageError> {
        validate_name("owner", owner)?;
        validate_name("cluster name", cluster)?;
        let (o, c) = (owner.to_owned(), cluster.to_owned());
        let rows = self
            .store
            .with_meta(move |m, _| Ok(m.images(&o, &c, kind.map(Kind::as_str))?))
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for (kind, row) in rows {
            let key = Key::new(owner, cluster, &kind, &row.name)?;
            out.push(self.record(&key, row).await?);
        }
        Ok(out)
    }

    /// Replaces the description (the only mutable metadata: name, length and sha256 define the upload).
    pub async fn update(
        &self,
        key: &Key,
        description: Option<serde_json::Value>,
    ) -> Result<Record, ImageError> {
        let k = key.clone();
        let d = description.map(|d| d.to_string());
        let found = self
            .store
            .with_meta(move |m, _| Ok(m.set_image_description(k.tuple(), d.as_deref(), now())?))
            .await?;
        if !found {
            return Err(ImageError::NotFound(key.to_string()));
        }
        self.get(key).await
    }

    /// Appends `body` at `offset`. The last byte completes the upload: the content is verified against the
    /// record's sha256 (always computed and recorded) and becomes a blob. A body cut off midway keeps what
    /// arrived, durably; the caller reports the error and the client resumes from `image_offset`.
    pub async fn append<S, E>(
        &self,
        key: &Key,
        offset: u64,
        length: Option<u64>,
        body: S,
    ) -> Result<Record, ImageError>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin + Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        let row = self.row(key).await?;
        let Some(id) = row.upload_id.clone().filter(|_| row.digest.is_none()) else {
            return Err(ImageError::Complete(key.to_string()));
        };
        let current = self.store.upload_offset(&key.session_owner(), &id).await?;
        if offset != current {
            return Err(ImageError::OffsetMismatch {
                expected: current,
                got: offset,
            });
        }
        let remaining = row.length - current;
        if let Some(len) = length.filter(|&l| l > remaining) {
            return Err(ImageError::TooLarge(format!(
                "a {len}-byte chunk at offset {offset} passes the image_length {}",
                row.length
            )));
        }
        // A chunked body that runs past image_length stops there with an error; what fit is kept.
        let (limited, overflow) = capped(body, remaining);
        let appended = self
            .store
            .append_upload(&key.session_owner(), &id, Some(offset), Box::pin(limited))
            .await;
        if overflow.load(std::sync::atomic::Ordering::Relaxed) {
            // What fit filled the image: it is complete all the same (else it would sit full but never done).
            let now = match appended {
                Ok(o) => o,
                Err(_) => self.store.upload_offset(&key.session_owner(), &id).await?,
            };
            if now == row.length {
                self.complete(key, &id, &row.sha256).await?;
            }
            return Err(ImageError::TooLarge(format!(
                "the body at offset {offset} runs past image_length {}",
                row.length
            )));
        }
        let new_offset = match appended {
            Ok(o) => o,
            // Lost a race with another PATCH of the same record, or the record was deleted meanwhile.
            Err(StoreError::OutOfOrder { expected, got }) => {
                return Err(ImageError::OffsetMismatch { expected, got })
            }
            Err(StoreError::UploadUnknown(_)) => return Err(ImageError::NotFound(key.to_string())),
            Err(e) => return Err(e.into()),
        };
        if new_offset == row.length {
            self.complete(key, &id, &row.sha256).await?;
        }
        self.get(key).await
    }

    async fn complete(
        &self,
        key: &Key,
        id: &str,
        sha256: &Option<String>,
    ) -> Result<(), ImageError> {
        let k = key.clone();
        let done = self
            .store
            .complete_upload(
                &key.session_owner(),
                id,
                expected_digest(sha256),
                move |m, digest, _| Ok(m.complete_image(k.tuple(), digest, now())?),
            )
            .await;
        match done {
            Ok((digest, size)) => {
                tracing::info!(image = %key, %digest, size, "image upload complete");
                let checked = if key.kind == Kind::Container {
                    self.import(key, &digest).await
                } else if key.is_package() {
                    self.check_package(key, &digest).await
                } else {
                    Ok(())
                };
                if let Err(e) = checked {
                    self.restart_upload(key).await?;
                    return Err(e);
                }
                self.store.image_records_changed();
                Ok(())
            }
            Err(StoreError::DigestMismatch { expected, actual }) => {
                self.restart_upload(key).await?;
                tracing::warn!(image = %key, %expected, %actual, "image upload discarded: sha256 mismatch");
                Err(ImageError::DigestMismatch {
                    expected: expected.hex().to_owned(),
                    actual: actual.hex().to_owned(),
                })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Discards a record's content: it starts over with a fresh session at offset 0, so the client can
    /// upload again without re-creating it.
    async fn restart_upload(&self, key: &Key) -> Result<(), ImageError> {
        let new_id = self.store.start_upload(&key.session_owner()).await?;
        let k = key.clone();
        self.store
            .with_meta(move |m, files| {
                let old = m.image(k.tuple())?.and_then(|r| r.digest);
                m.replace_image_upload(k.tuple(), &new_id, now())?;
                if let Some(d) = old.filter(|d| m.blob_unreferenced(d).unwrap_or(false)) {
                    files.remove(&d)?;
                }
                Ok(())
            })
            .await?;
        Ok(())
    }

    /// Creates a complete record whose content is a finished tus upload; the upload is consumed. A container
    /// archive is imported first: if that fails, the tus upload stays as it was.
    async fn bind(
        &self,
        key: &Key,
        (id, by): (&str, crate::auth::Uploader<'_>),
        length: Option<u64>,
        sha256: Option<String>,
        description: Option<serde_json::Value>,
    ) -> Result<Record, ImageError> {
        let tus_id = id.to_owned();
        let tus = self
            .store
            .with_meta(move |m, _| Ok(m.tus(&tus_id)?))
            .await?
            .filter(|row| by.may_see(row.creator.as_deref()))
            .ok_or_else(|| ImageError::TusUnknown(format!("tus upload {id:?} does not exist")))?;
        let digest = tus.digest.clone().ok_or_else(|| {
            ImageError::TusIncomplete(format!("tus upload {id} is not finished yet"))
        })?;
        if let Some(l) = length.filter(|&l| l != tus.length) {
            return Err(ImageError::Mismatch(format!(
                "image_length {l} differs from tus upload {id}'s length {}",
                tus.length
            )));
        }
        if let Some(s) = sha256.as_deref().filter(|s| *s != digest.hex()) {
            return Err(ImageError::Mismatch(format!(
                "expected sha256 {s}, tus upload {id} hashes to {}",
                digest.hex()
            )));
        }
        let k = key.clone();
        if self
            .store
            .with_meta(move |m, _| Ok(m.image(k.tuple())?))
            .await?
            .is_some()
        {
            return Err(ImageError::Exists(key.to_string()));
        }
        let imported = if key.kind == Kind::Container {
            let list = self.import_archive(key, &digest).await?;
            Some(serde_json::to_string(&list).expect("imports serialise"))
        } else {
            if key.is_package() {
                self.check_package(key, &digest).await?;
            }
            None
        };
        let row = ImageRow {
            name: key.name.clone(),
            length: tus.length,
            sha256: Some(digest.hex().to_owned()),
            description: description.map(|d| d.to_string()),
            upload_id: None,
            digest: Some(digest),
            updated: now(),
            imported,
        };
        let (k, tus_id) = (key.clone(), id.to_owned());
        let bound = self
            .store
            .with_meta(move |m, _| Ok(m.bind_tus(&tus_id, k.tuple(), &row)?))
            .await?;
        if !bound {
            return Err(ImageError::Exists(key.to_string()));
        }
        tracing::info!(image = %key, tus = id, "tus upload bound to image record");
        self.store.image_records_changed();
        self.get(key).await
    }

    /// Deletes the record, its upload session, and its content unless something else references it.
    pub async fn delete(&self, key: &Key) -> Result<(), ImageError> {
        let k = key.clone();
        let deleted = self
            .store
            .with_meta(move |m, files| {
                let out = m.delete_image(k.tuple())?;
                if let Some((row, true)) = &out {
                    files.remove(row.digest.as_ref().expect("orphan has a digest"))?;
                }
                Ok(out)
            })
            .await?;
        let Some((row, _)) = deleted else {
            return Err(ImageError::NotFound(key.to_string()));
        };
        self.store.image_records_changed();
        if let Some(id) = row.upload_id {
            match self.store.cancel_upload(&key.session_owner(), &id).await {
                Ok(()) | Err(StoreError::UploadUnknown(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        tracing::info!(image = %key, "image deleted");
        Ok(())
    }

    /// The completed content: open file, size, digest, and last change (seconds since the epoch).
    pub async fn content(
        &self,
        key: &Key,
    ) -> Result<(std::fs::File, u64, Digest, i64), ImageError> {
        let row = self.row(key).await?;
        let digest = row
            .digest
            .ok_or_else(|| ImageError::Incomplete(key.to_string()))?;
        let path = self.store.blob_path(&digest);
        let file = tokio::task::spawn_blocking(move || std::fs::File::open(path))
            .await
            .expect("open task")
            .map_err(StoreError::from)?;
        Ok((file, row.length, digest, row.updated))
    }
}

/// A body stream that ends with an error once it would pass `limit` bytes; the flag tells that it did.
pub(crate) fn capped<S, E>(
    body: S,
    limit: u64,
) -> (
    impl Stream<Item = Result<Bytes, String>>,
    Arc<std::sync::atomic::AtomicBool>,
)
where
    S: Stream<Item = Result<Bytes, E>>,
    E: fmt::Display,
{
    let overflow = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = overflow.clone();
    let mut left = limit;
    let limited = body.map(move |chunk| match chunk {
        Ok(c) if (c.len() as u64) <= left => {
            left -= c.len() as u64;
            Ok(c)
        }
        Ok(_) => {
            flag.store(true, std::sync::atomic::Ordering::Relaxed);
            Err("the body runs past the declared length".to_owned())
        }
        Err(e) => Err(e.to_string()),
    });
    (limited, overflow)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in [
            "ubuntu-22.04.img",
            "a",
            "k8s v1.30 (patched)",
            &"x".repeat(255),
        ] {
            assert!(validate_name("image_name", good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "..\\x",
            "a\nb",
            "tab\there",
            &"x".repeat(256),
        ] {
            assert!(validate_name("image_name", bad).is_err(), "{bad:?}");
        }
        assert!("os_images".parse::<Kind>().is_ok());
        assert!("images".parse::<Kind>().is_err());
    }
}
