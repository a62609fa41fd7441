//! The database itself: its schema, the connection, errors, and the row helpers every table shares.

use std::collections::BTreeMap;
use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};

use crate::digest::Digest;

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS repo_blobs(
    repo TEXT NOT NULL, digest TEXT NOT NULL, size INTEGER NOT NULL,
    -- 1: a client deleted the blob while a manifest still referenced it; the link goes with the last such
    -- manifest (deferred deletion keeps "a tag never points at a manifest whose blobs are missing").
    delete_pending INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY(repo, digest));
CREATE INDEX IF NOT EXISTS repo_blobs_digest ON repo_blobs(digest);
CREATE TABLE IF NOT EXISTS manifests(
    repo TEXT NOT NULL, digest TEXT NOT NULL, media_type TEXT NOT NULL, size INTEGER NOT NULL,
    artifact_type TEXT, subject TEXT, annotations TEXT,
    PRIMARY KEY(repo, digest));
CREATE INDEX IF NOT EXISTS manifests_subject ON manifests(repo, subject);
CREATE INDEX IF NOT EXISTS manifests_digest ON manifests(digest);
CREATE TABLE IF NOT EXISTS manifest_refs(
    repo TEXT NOT NULL, manifest TEXT NOT NULL, target TEXT NOT NULL, kind TEXT NOT NULL,
    PRIMARY KEY(repo, manifest, target),
    FOREIGN KEY(repo, manifest) REFERENCES manifests(repo, digest) ON DELETE CASCADE);
CREATE INDEX IF NOT EXISTS manifest_refs_target ON manifest_refs(repo, target);
CREATE TABLE IF NOT EXISTS tags(
    repo TEXT NOT NULL, tag TEXT NOT NULL, digest TEXT NOT NULL,
    PRIMARY KEY(repo, tag),
    FOREIGN KEY(repo, digest) REFERENCES manifests(repo, digest) ON DELETE CASCADE);
-- BPA REST images (binary, OS and container images uploaded for a cluster). Content is a blob in
-- blobs/sha256 once the upload completes (digest set); until then upload_id names the upload session.
CREATE TABLE IF NOT EXISTS images(
    owner TEXT NOT NULL, cluster TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL,
    length INTEGER NOT NULL, sha256 TEXT, description TEXT, upload_id TEXT, digest TEXT,
    updated INTEGER NOT NULL,
    -- container_images: JSON list of what the archive import made visible; NULL while it has not finished.
    imported TEXT,
    PRIMARY KEY(owner, cluster, kind, name));
CREATE INDEX IF NOT EXISTS images_digest ON images(digest);
CREATE TABLE IF NOT EXISTS uploads(
    id TEXT PRIMARY KEY, repo TEXT NOT NULL, created INTEGER NOT NULL);
-- tus 1.0 uploads (/v1/uploads). The id is the store upload session's id while bytes arrive; once the last
-- byte is in, digest names the blob, which stays until the upload is deleted or bound to an image record.
-- creator: the name of the credential that made it, the only writer (but admins) it answers; NULL for an
-- upload made before creators were recorded.
CREATE TABLE IF NOT EXISTS tus_uploads(
    id TEXT PRIMARY KEY, length INTEGER NOT NULL, metadata TEXT, digest TEXT, created INTEGER NOT NULL,
    creator TEXT);
CREATE INDEX IF NOT EXISTS tus_uploads_digest ON tus_uploads(digest);
"#;

#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    #[error("metadata database: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("{kind} {digest} is not in repository {repo}")]
    Missing {
        repo: String,
        digest: Digest,
        kind: &'static str,
    },
    #[error("the descriptor of {kind} {digest} says {declared} bytes; it has {actual}")]
    WrongSize {
        digest: Digest,
        kind: &'static str,
        declared: u64,
        actual: u64,
    },
    #[error("{target} is still referenced by manifest {by} in repository {repo}")]
    InUse {
        repo: String,
        target: Digest,
        by: Digest,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct ManifestRow {
    pub digest: Digest,
    pub media_type: String,
    pub size: u64,
    pub artifact_type: Option<String>,
    pub annotations: Option<BTreeMap<String, String>>,
}

pub struct Meta {
    pub(super) conn: Connection,
}

pub(super) fn digest_col(s: String) -> rusqlite::Result<Digest> {
    s.parse().map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
    })
}

impl Meta {
    pub fn open(path: &Path) -> Result<Self, MetaError> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.execute_batch(SCHEMA)?;
        let has_imported = conn
            .prepare("SELECT 1 FROM pragma_table_info('images') WHERE name = 'imported'")?
            .exists([])?;
        if !has_imported {
            conn.execute_batch("ALTER TABLE images ADD COLUMN imported TEXT")?;
        }
        let has_creator = conn
            .prepare("SELECT 1 FROM pragma_table_info('tus_uploads') WHERE name = 'creator'")?
            .exists([])?;
        if !has_creator {
            conn.execute_batch("ALTER TABLE tus_uploads ADD COLUMN creator TEXT")?;
        }
        Ok(Meta { conn })
    }
}

pub(super) fn unreferenced(tx: &Connection, digest: &Digest) -> rusqlite::Result<bool> {
    let d = digest.to_string();
    let used = tx
        .query_row(
            "SELECT 1 FROM repo_blobs WHERE digest = ?1 UNION ALL SELECT 1 FROM manifests WHERE digest = ?1
             UNION ALL SELECT 1 FROM images WHERE digest = ?1 UNION ALL SELECT 1 FROM tus_uploads WHERE digest = ?1
             LIMIT 1",
            params![d],
            |_| Ok(()),
        )
        .optional()?;
    Ok(used.is_none())
}

impl Meta {
    /// Whether nothing (repository link, manifest, image record, tus upload) references the blob.
    pub fn blob_unreferenced(&self, digest: &Digest) -> Result<bool, MetaError> {
        Ok(unreferenced(&self.conn, digest)?)
    }
}
