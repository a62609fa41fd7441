//! BPA images: binary, OS and container images uploaded for one cluster of one owner (Akraino ICN's BPA REST
//! agent). A record's content is uploaded resumably through a store upload session and, once complete and
//! verified, is a blob in the content store. Keys are (owner, cluster, kind, name): the original ignored owner
//! and cluster and let names collide. Knows nothing of HTTP.

use std::fmt;
use std::str::FromStr;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::store::{ImageRow, Store, StoreError};

pub const MAX_NAME_LEN: usize = 255;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Binary,
    Os,
    Container,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Binary => "binary_images",
            Kind::Os => "os_images",
            Kind::Container => "container_images",
        }
    }
}

impl FromStr for Kind {
    type Err = ImageError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "binary_images" => Ok(Kind::Binary),
            "os_images" => Ok(Kind::Os),
            "container_images" => Ok(Kind::Container),
            other => Err(ImageError::InvalidName {
                field: "image type",
                reason: format!("{other:?} is not binary_images, os_images or container_images"),
            }),
        }
    }
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
            kind: kind.parse()?,
            name: name.to_owned(),
        })
    }

    fn tuple(&self) -> (&str, &str, &str, &str) {
        (&self.owner, &self.cluster, self.kind.as_str(), &self.name)
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

/// Names become path segments and file names elsewhere: no separators, no `.`/`..`, no control characters.
pub fn validate_name(field: &'static str, s: &str) -> Result<(), ImageError> {
    let reason = if s.is_empty() {
        Some("is empty".to_owned())
    } else if s.len() > MAX_NAME_LEN {
        Some(format!("is longer than {MAX_NAME_LEN} bytes"))
    } else if s == "." || s == ".." {
        Some("is a relative path component".to_owned())
    } else if s.contains(['/', '\\']) {
        Some("contains a path separator".to_owned())
    } else if s.chars().any(char::is_control) {
        Some("contains a control character".to_owned())
    } else {
        None
    };
    match reason {
        Some(reason) => Err(ImageError::InvalidName {
            field,
            reason: format!("{s:?} {reason}"),
        }),
        None => Ok(()),
    }
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
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What clients send to create a record (ICN's field names).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewImage {
    pub image_name: String,
    pub image_length: u64,
    #[serde(default)]
    pub sha256: Option<String>,
    #[serde(default)]
    pub description: Option<serde_json::Value>,
}

/// A record as the API returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub image_name: String,
    pub image_type: String,
    pub image_length: u64,
    pub image_offset: u64,
    pub upload_complete: bool,
    /// The expected sha256 while uploading (if the client gave one); the content's sha256 once complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<serde_json::Value>,
}

fn now() -> i64 {
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
    store: &'a Store,
    /// Largest image accepted, in bytes.
    pub max_length: u64,
}

impl<'a> Images<'a> {
    pub fn new(store: &'a Store, max_length: u64) -> Self {
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
        Ok(Record {
            image_name: row.name,
            image_type: key.kind.as_str().to_owned(),
            image_length: row.length,
            image_offset: offset,
            upload_complete: row.digest.is_some(),
            sha256: row.digest.map(|d| d.hex().to_owned()).or(row.sha256),
            description: row.description.and_then(|d| serde_json::from_str(&d).ok()),
        })
    }

    pub async fn create(
        &self,
        owner: &str,
        cluster: &str,
        kind: &str,
        new: NewImage,
    ) -> Result<Record, ImageError> {
        let key = Key::new(owner, cluster, kind, &new.image_name)?;
        if new.image_length > self.max_length {
            return Err(ImageError::TooLarge(format!(
                "image_length {} exceeds the limit of {} bytes",
                new.image_length, self.max_length
            )));
        }
        let sha256 = match new.sha256 {
            Some(s) if format!("sha256:{s}").parse::<Digest>().is_err() => {
                return Err(ImageError::InvalidRequest(format!(
                    "sha256 {s:?} is not 64 lowercase hex digits"
                )))
            }
            s => s,
        };
        let id = self.store.start_upload(&key.session_owner()).await?;
        let row = ImageRow {
            name: key.name.clone(),
            length: new.image_length,
            sha256,
            description: new.description.map(|d| d.to_string()),
            upload_id: Some(id.clone()),
            digest: None,
            updated: now(),
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
        tracing::info!(image = %key, length = new.image_length, "image record created");
        if new.image_length == 0 {
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
        S: Stream<Item = Result<Bytes, E>> + Unpin + Send,
        E: fmt::Display,
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
        let overflow = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = overflow.clone();
        let mut left = remaining;
        let limited = body.map(move |chunk| match chunk {
            Ok(c) if (c.len() as u64) <= left => {
                left -= c.len() as u64;
                Ok(c)
            }
            Ok(_) => {
                flag.store(true, std::sync::atomic::Ordering::Relaxed);
                Err("the body runs past image_length".to_owned())
            }
            Err(e) => Err(e.to_string()),
        });
        let appended = self
            .store
            .append_upload(&key.session_owner(), &id, Some(offset), Box::pin(limited))
            .await;
        if overflow.load(std::sync::atomic::Ordering::Relaxed) {
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
                Ok(())
            }
            Err(StoreError::DigestMismatch { expected, actual }) => {
                // The upload is discarded; the record stays, with a fresh session at offset 0, so the client
                // can upload again without re-creating it.
                let new_id = self.store.start_upload(&key.session_owner()).await?;
                let k = key.clone();
                self.store
                    .with_meta(move |m, _| {
                        m.replace_image_upload(k.tuple(), &new_id, now())?;
                        Ok(())
                    })
                    .await?;
                tracing::warn!(image = %key, %expected, %actual, "image upload discarded: sha256 mismatch");
                Err(ImageError::DigestMismatch {
                    expected: expected.hex().to_owned(),
                    actual: actual.hex().to_owned(),
                })
            }
            Err(e) => Err(e.into()),
        }
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
