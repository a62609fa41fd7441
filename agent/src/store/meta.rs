//! Registry metadata in SQLite: repository blob links, manifests and what they reference, tags, upload
//! sessions. SQLite (bundled) rather than redb because the invariants are relational — a tag references a
//! manifest (foreign key), a manifest's references must be linked in its repository, referrers are an index
//! on `subject` — and transactions with those checks inside are one SQL statement each; the file is also
//! inspectable with the stock `sqlite3` shell at a remote site. WAL + synchronous=FULL: a committed
//! transaction survives power loss.
//!
//! Invariant kept here: a tag never points at a manifest whose blobs (or child manifests) are not linked.

use std::collections::BTreeMap;
use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};

use crate::digest::Digest;
use crate::manifest::{ParsedManifest, RefKind};

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
CREATE TABLE IF NOT EXISTS tus_uploads(
    id TEXT PRIMARY KEY, length INTEGER NOT NULL, metadata TEXT, digest TEXT, created INTEGER NOT NULL);
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
    conn: Connection,
}

fn digest_col(s: String) -> rusqlite::Result<Digest> {
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
        Ok(Meta { conn })
    }

    pub fn link_blob(&mut self, repo: &str, digest: &Digest, size: u64) -> Result<(), MetaError> {
        self.conn.execute(
            "INSERT INTO repo_blobs(repo, digest, size) VALUES (?1, ?2, ?3)
             ON CONFLICT(repo, digest) DO UPDATE SET delete_pending = 0",
            params![repo, digest.to_string(), size as i64],
        )?;
        Ok(())
    }

    pub fn blob_size(&self, repo: &str, digest: &Digest) -> Result<Option<u64>, MetaError> {
        Ok(self
            .conn
            .query_row(
                "SELECT size FROM repo_blobs WHERE repo = ?1 AND digest = ?2",
                params![repo, digest.to_string()],
                |r| r.get::<_, i64>(0),
            )
            .optional()?
            .map(|s| s as u64))
    }

    /// Any repository holding this blob (for automatic cross-repository mount).
    pub fn blob_size_anywhere(&self, digest: &Digest) -> Result<Option<u64>, MetaError> {
        Ok(self
            .conn
            .query_row(
                "SELECT size FROM repo_blobs WHERE digest = ?1 LIMIT 1",
                params![digest.to_string()],
                |r| r.get::<_, i64>(0),
            )
            .optional()?
            .map(|s| s as u64))
    }

    /// Unlinks a blob from a repository. While a manifest of the repository references it the unlink is
    /// deferred (marked pending) so the tag invariant holds. Returns None if the blob is not linked, else
    /// the digests whose files are now unreferenced everywhere (the caller removes them).
    pub fn unlink_blob(
        &mut self,
        repo: &str,
        digest: &Digest,
    ) -> Result<Option<Vec<Digest>>, MetaError> {
        let tx = self.conn.transaction()?;
        let d = digest.to_string();
        if tx
            .query_row(
                "SELECT 1 FROM repo_blobs WHERE repo = ?1 AND digest = ?2",
                params![repo, d],
                |_| Ok(()),
            )
            .optional()?
            .is_none()
        {
            return Ok(None);
        }
        let in_use = tx
            .query_row(
                "SELECT 1 FROM manifest_refs WHERE repo = ?1 AND target = ?2 LIMIT 1",
                params![repo, d],
                |_| Ok(()),
            )
            .optional()?
            .is_some();
        if in_use {
            tx.execute(
                "UPDATE repo_blobs SET delete_pending = 1 WHERE repo = ?1 AND digest = ?2",
                params![repo, d],
            )?;
            tx.commit()?;
            return Ok(Some(Vec::new()));
        }
        tx.execute(
            "DELETE FROM repo_blobs WHERE repo = ?1 AND digest = ?2",
            params![repo, d],
        )?;
        let orphans = if unreferenced(&tx, digest)? {
            vec![digest.clone()]
        } else {
            Vec::new()
        };
        tx.commit()?;
        Ok(Some(orphans))
    }

    /// Errors with Missing unless every blob the manifest references is linked in `repo`. The manifests an
    /// index lists need not be: a mirror may carry some platforms of a multi-platform image (the image builder
    /// keeps `linux/amd64` of an index pinned by digest), and a client asking for another platform gets
    /// MANIFEST_UNKNOWN for it.
    pub fn check_references(&self, repo: &str, parsed: &ParsedManifest) -> Result<(), MetaError> {
        for (target, kind) in &parsed.references {
            let (sql, what) = match kind {
                RefKind::Blob => (
                    "SELECT 1 FROM repo_blobs WHERE repo = ?1 AND digest = ?2",
                    "blob",
                ),
                RefKind::Manifest => continue,
            };
            if self
                .conn
                .query_row(sql, params![repo, target.to_string()], |_| Ok(()))
                .optional()?
                .is_none()
            {
                return Err(MetaError::Missing {
                    repo: repo.into(),
                    digest: target.clone(),
                    kind: what,
                });
            }
        }
        Ok(())
    }

    /// Records a manifest (and optionally a tag); the caller has checked its references under the same lock.
    pub fn put_manifest(
        &mut self,
        repo: &str,
        digest: &Digest,
        size: u64,
        parsed: &ParsedManifest,
        tag: Option<&str>,
    ) -> Result<(), MetaError> {
        self.check_references(repo, parsed)?;
        let tx = self.conn.transaction()?;
        let d = digest.to_string();
        let annotations = parsed
            .annotations
            .as_ref()
            .map(|a| serde_json::to_string(a).expect("string map serialises"));
        // An upsert, not INSERT OR REPLACE: REPLACE deletes the row first and the cascade would drop its tags.
        tx.execute(
            "INSERT INTO manifests(repo, digest, media_type, size, artifact_type, subject, annotations)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT(repo, digest) DO UPDATE SET media_type = excluded.media_type, size = excluded.size,
               artifact_type = excluded.artifact_type, subject = excluded.subject, annotations = excluded.annotations",
            params![
                repo,
                d,
                parsed.media_type,
                size as i64,
                parsed.artifact_type,
                parsed.subject.as_ref().map(|s| s.to_string()),
                annotations
            ],
        )?;
        tx.execute(
            "DELETE FROM manifest_refs WHERE repo = ?1 AND manifest = ?2",
            params![repo, d],
        )?;
        for (target, kind) in &parsed.references {
            let kind = match kind {
                RefKind::Blob => "blob",
                RefKind::Manifest => "manifest",
            };
            tx.execute(
                "INSERT OR IGNORE INTO manifest_refs(repo, manifest, target, kind) VALUES (?1, ?2, ?3, ?4)",
                params![repo, d, target.to_string(), kind],
            )?;
        }
        if let Some(tag) = tag {
            tx.execute(
                "INSERT OR REPLACE INTO tags(repo, tag, digest) VALUES (?1, ?2, ?3)",
                params![repo, tag, d],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    pub fn manifest(&self, repo: &str, digest: &Digest) -> Result<Option<ManifestRow>, MetaError> {
        self.conn
            .query_row(
                "SELECT digest, media_type, size, artifact_type, annotations FROM manifests WHERE repo = ?1 AND digest = ?2",
                params![repo, digest.to_string()],
                manifest_row,
            )
            .optional()
            .map_err(Into::into)
    }

    pub fn resolve_tag(&self, repo: &str, tag: &str) -> Result<Option<Digest>, MetaError> {
        self.conn
            .query_row(
                "SELECT digest FROM tags WHERE repo = ?1 AND tag = ?2",
                params![repo, tag],
                |r| digest_col(r.get(0)?),
            )
            .optional()
            .map_err(Into::into)
    }

    pub fn delete_tag(&mut self, repo: &str, tag: &str) -> Result<bool, MetaError> {
        Ok(self.conn.execute(
            "DELETE FROM tags WHERE repo = ?1 AND tag = ?2",
            params![repo, tag],
        )? > 0)
    }

    /// Deletes a manifest and the tags pointing at it; refused while an index in the repository lists it.
    /// Blob links whose deletion was deferred go too once nothing references them. Returns None if absent,
    /// else the digests whose files are now unreferenced everywhere.
    pub fn delete_manifest(
        &mut self,
        repo: &str,
        digest: &Digest,
    ) -> Result<Option<Vec<Digest>>, MetaError> {
        let tx = self.conn.transaction()?;
        let d = digest.to_string();
        let by: Option<String> = tx
            .query_row(
                "SELECT manifest FROM manifest_refs WHERE repo = ?1 AND target = ?2 AND kind = 'manifest' LIMIT 1",
                params![repo, d],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(by) = by {
            return Err(MetaError::InUse {
                repo: repo.into(),
                target: digest.clone(),
                by: digest_col(by)?,
            });
        }
        let targets: Vec<String> = tx
            .prepare("SELECT target FROM manifest_refs WHERE repo = ?1 AND manifest = ?2 AND kind = 'blob'")?
            .query_map(params![repo, d], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        // tags and manifest_refs go with it (ON DELETE CASCADE).
        let n = tx.execute(
            "DELETE FROM manifests WHERE repo = ?1 AND digest = ?2",
            params![repo, d],
        )?;
        if n == 0 {
            return Ok(None);
        }
        let mut orphans = Vec::new();
        if unreferenced(&tx, digest)? {
            orphans.push(digest.clone());
        }
        for t in targets {
            let released = tx.execute(
                "DELETE FROM repo_blobs WHERE repo = ?1 AND digest = ?2 AND delete_pending = 1
                 AND NOT EXISTS (SELECT 1 FROM manifest_refs WHERE repo = ?1 AND target = ?2)",
                params![repo, t],
            )?;
            let t = digest_col(t)?;
            if released > 0 && unreferenced(&tx, &t)? {
                orphans.push(t);
            }
        }
        tx.commit()?;
        Ok(Some(orphans))
    }

    /// Tags in lexical order after `last`, at most `n`.
    pub fn tags(
        &self,
        repo: &str,
        last: Option<&str>,
        n: Option<usize>,
    ) -> Result<Vec<String>, MetaError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT tag FROM tags WHERE repo = ?1 AND tag > ?2 ORDER BY tag LIMIT ?3",
        )?;
        let limit = n.map(|n| n as i64).unwrap_or(-1);
        let rows = stmt.query_map(params![repo, last.unwrap_or(""), limit], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn repo_exists(&self, repo: &str) -> Result<bool, MetaError> {
        let found = self
            .conn
            .query_row(
                "SELECT 1 FROM manifests WHERE repo = ?1 UNION ALL SELECT 1 FROM repo_blobs WHERE repo = ?1 LIMIT 1",
                params![repo],
                |_| Ok(()),
            )
            .optional()?;
        Ok(found.is_some())
    }

    pub fn repositories(
        &self,
        last: Option<&str>,
        n: Option<usize>,
    ) -> Result<Vec<String>, MetaError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT repo FROM (SELECT repo FROM manifests UNION SELECT repo FROM repo_blobs) WHERE repo > ?1 ORDER BY repo LIMIT ?2",
        )?;
        let limit = n.map(|n| n as i64).unwrap_or(-1);
        let rows = stmt.query_map(params![last.unwrap_or(""), limit], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn referrers(&self, repo: &str, subject: &Digest) -> Result<Vec<ManifestRow>, MetaError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT digest, media_type, size, artifact_type, annotations FROM manifests
             WHERE repo = ?1 AND subject = ?2 ORDER BY digest",
        )?;
        let rows = stmt.query_map(params![repo, subject.to_string()], manifest_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn create_upload(&mut self, id: &str, repo: &str, now: i64) -> Result<(), MetaError> {
        self.conn.execute(
            "INSERT INTO uploads(id, repo, created) VALUES (?1, ?2, ?3)",
            params![id, repo, now],
        )?;
        Ok(())
    }

    pub fn upload_repo(&self, id: &str) -> Result<Option<String>, MetaError> {
        Ok(self
            .conn
            .query_row("SELECT repo FROM uploads WHERE id = ?1", params![id], |r| {
                r.get(0)
            })
            .optional()?)
    }

    pub fn delete_upload(&mut self, id: &str) -> Result<bool, MetaError> {
        Ok(self
            .conn
            .execute("DELETE FROM uploads WHERE id = ?1", params![id])?
            > 0)
    }

    pub fn upload_ids(&self) -> Result<Vec<String>, MetaError> {
        let mut stmt = self.conn.prepare("SELECT id FROM uploads")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn upload_count(&self) -> Result<u64, MetaError> {
        Ok(self
            .conn
            .query_row("SELECT count(*) FROM uploads", [], |r| r.get::<_, i64>(0))?
            as u64)
    }

    /// Every digest the metadata says must exist as a file, with who needs it (for fsck).
    pub fn all_references(&self) -> Result<Vec<(String, Digest, String)>, MetaError> {
        let mut out = Vec::new();
        let mut stmt = self.conn.prepare(
            "SELECT repo, digest FROM repo_blobs UNION ALL SELECT repo, digest FROM manifests
             UNION ALL SELECT 'image ' || owner || '/' || cluster || '/' || kind || '/' || name, digest
               FROM images WHERE digest IS NOT NULL
             UNION ALL SELECT 'tus upload ' || id, digest FROM tus_uploads WHERE digest IS NOT NULL",
        )?;
        for row in stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, digest_col(r.get(1)?)?)))? {
            let (repo, digest) = row?;
            out.push((repo, digest, "linked".to_owned()));
        }
        Ok(out)
    }

    /// Consistency problems inside the metadata itself (for fsck): dangling blob references and tags. An index's
    /// absent manifests are not problems (see `check_references`).
    pub fn dangling(&self) -> Result<Vec<String>, MetaError> {
        let mut problems = Vec::new();
        let mut stmt = self.conn.prepare(
            "SELECT r.repo, r.manifest, r.target, r.kind FROM manifest_refs r WHERE
               r.kind = 'blob' AND NOT EXISTS (SELECT 1 FROM repo_blobs b WHERE b.repo = r.repo AND b.digest = r.target)",
        )?;
        for row in stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
            ))
        })? {
            let (repo, manifest, target, kind) = row?;
            problems.push(format!("{repo}: manifest {manifest} references {kind} {target}, which is not in the repository"));
        }
        let mut stmt = self.conn.prepare(
            "SELECT t.repo, t.tag, t.digest FROM tags t WHERE NOT EXISTS (SELECT 1 FROM manifests m WHERE m.repo = t.repo AND m.digest = t.digest)",
        )?;
        for row in stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })? {
            let (repo, tag, digest) = row?;
            problems.push(format!(
                "{repo}:{tag} points at manifest {digest}, which is not in the repository"
            ));
        }
        let fk: Vec<String> = self
            .conn
            .prepare("PRAGMA foreign_key_check")?
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<Result<_, _>>()?;
        problems.extend(
            fk.into_iter()
                .map(|t| format!("foreign key violation in table {t}")),
        );
        let integrity: String = self
            .conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
        if integrity != "ok" {
            problems.push(format!("sqlite integrity_check: {integrity}"));
        }
        Ok(problems)
    }
}

/// One BPA image record as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageRow {
    pub name: String,
    pub length: u64,
    pub sha256: Option<String>,
    pub description: Option<String>,
    pub upload_id: Option<String>,
    pub digest: Option<Digest>,
    pub updated: i64,
    /// container_images: what the archive import made visible (JSON), once it finished.
    pub imported: Option<String>,
}

/// (owner, cluster, kind, name)
pub type ImageKey<'a> = (&'a str, &'a str, &'a str, &'a str);

const IMAGE_COLUMNS: &str =
    "name, length, sha256, description, upload_id, digest, updated, imported";

fn image_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ImageRow> {
    image_row_at(r, 0)
}

/// An ImageRow from IMAGE_COLUMNS starting at column `at`.
fn image_row_at(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<ImageRow> {
    let digest: Option<String> = r.get(at + 5)?;
    Ok(ImageRow {
        name: r.get(at)?,
        length: r.get::<_, i64>(at + 1)? as u64,
        sha256: r.get(at + 2)?,
        description: r.get(at + 3)?,
        upload_id: r.get(at + 4)?,
        digest: digest.map(digest_col).transpose()?,
        updated: r.get(at + 6)?,
        imported: r.get(at + 7)?,
    })
}

impl Meta {
    /// Creates a record; false when one with this key exists already.
    pub fn create_image(&mut self, k: ImageKey<'_>, row: &ImageRow) -> Result<bool, MetaError> {
        let n = self.conn.execute(
            "INSERT OR IGNORE INTO images(owner, cluster, kind, name, length, sha256, description, upload_id, updated)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![k.0, k.1, k.2, k.3, row.length as i64, row.sha256, row.description, row.upload_id, row.updated],
        )?;
        Ok(n == 1)
    }

    pub fn image(&self, k: ImageKey<'_>) -> Result<Option<ImageRow>, MetaError> {
        let sql = format!("SELECT {IMAGE_COLUMNS} FROM images WHERE owner = ?1 AND cluster = ?2 AND kind = ?3 AND name = ?4");
        Ok(self
            .conn
            .query_row(&sql, params![k.0, k.1, k.2, k.3], image_row)
            .optional()?)
    }

    /// Records of one cluster, by kind (all kinds when None), ordered by kind and name.
    pub fn images(
        &self,
        owner: &str,
        cluster: &str,
        kind: Option<&str>,
    ) -> Result<Vec<(String, ImageRow)>, MetaError> {
        let sql = format!(
            "SELECT kind, {IMAGE_COLUMNS} FROM images WHERE owner = ?1 AND cluster = ?2 AND (?3 IS NULL OR kind = ?3) ORDER BY kind, name"
        );
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map(params![owner, cluster, kind], |r| {
            Ok((r.get::<_, String>(0)?, image_row_at(r, 1)?))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn set_image_description(
        &mut self,
        k: ImageKey<'_>,
        description: Option<&str>,
        now: i64,
    ) -> Result<bool, MetaError> {
        Ok(self.conn.execute(
            "UPDATE images SET description = ?5, updated = ?6 WHERE owner = ?1 AND cluster = ?2 AND kind = ?3 AND name = ?4",
            params![k.0, k.1, k.2, k.3, description, now],
        )? == 1)
    }

    /// Marks the upload complete with its content digest; the upload session is gone.
    pub fn complete_image(
        &mut self,
        k: ImageKey<'_>,
        digest: &Digest,
        now: i64,
    ) -> Result<(), MetaError> {
        self.conn.execute(
            "UPDATE images SET digest = ?5, upload_id = NULL, updated = ?6 WHERE owner = ?1 AND cluster = ?2 AND kind = ?3 AND name = ?4",
            params![k.0, k.1, k.2, k.3, digest.to_string(), now],
        )?;
        Ok(())
    }

    /// Records what a container archive's import made visible.
    pub fn set_image_imported(
        &mut self,
        k: ImageKey<'_>,
        imported: &str,
        now: i64,
    ) -> Result<(), MetaError> {
        self.conn.execute(
            "UPDATE images SET imported = ?5, updated = ?6 WHERE owner = ?1 AND cluster = ?2 AND kind = ?3 AND name = ?4",
            params![k.0, k.1, k.2, k.3, imported, now],
        )?;
        Ok(())
    }

    /// container_images records whose content arrived but whose import has not finished (the agent stopped
    /// in between): (owner, cluster, name).
    pub fn pending_imports(&self) -> Result<Vec<(String, String, String)>, MetaError> {
        let mut stmt = self.conn.prepare(
            "SELECT owner, cluster, name FROM images WHERE kind = 'container_images' AND digest IS NOT NULL AND imported IS NULL",
        )?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// After a verification failure: the record starts over with a new upload session.
    pub fn replace_image_upload(
        &mut self,
        k: ImageKey<'_>,
        upload_id: &str,
        now: i64,
    ) -> Result<(), MetaError> {
        self.conn.execute(
            "UPDATE images SET upload_id = ?5, digest = NULL, imported = NULL, updated = ?6 WHERE owner = ?1 AND cluster = ?2 AND kind = ?3 AND name = ?4",
            params![k.0, k.1, k.2, k.3, upload_id, now],
        )?;
        Ok(())
    }

    /// Removes a record. Returns it, and whether its content is now unreferenced everywhere.
    pub fn delete_image(&mut self, k: ImageKey<'_>) -> Result<Option<(ImageRow, bool)>, MetaError> {
        let tx = self.conn.transaction()?;
        let sql = format!("SELECT {IMAGE_COLUMNS} FROM images WHERE owner = ?1 AND cluster = ?2 AND kind = ?3 AND name = ?4");
        let Some(row) = tx
            .query_row(&sql, params![k.0, k.1, k.2, k.3], image_row)
            .optional()?
        else {
            return Ok(None);
        };
        tx.execute(
            "DELETE FROM images WHERE owner = ?1 AND cluster = ?2 AND kind = ?3 AND name = ?4",
            params![k.0, k.1, k.2, k.3],
        )?;
        let orphan = match &row.digest {
            Some(d) => unreferenced(&tx, d)?,
            None => false,
        };
        tx.commit()?;
        Ok(Some((row, orphan)))
    }
}

fn manifest_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ManifestRow> {
    let annotations: Option<String> = r.get(4)?;
    Ok(ManifestRow {
        digest: digest_col(r.get(0)?)?,
        media_type: r.get(1)?,
        size: r.get::<_, i64>(2)? as u64,
        artifact_type: r.get(3)?,
        annotations: annotations.and_then(|a| serde_json::from_str(&a).ok()),
    })
}

fn unreferenced(tx: &Connection, digest: &Digest) -> rusqlite::Result<bool> {
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

/// A tus upload as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct TusRow {
    pub id: String,
    pub length: u64,
    pub metadata: Option<String>,
    /// Set once the last byte arrived: the content is this blob.
    pub digest: Option<Digest>,
}

impl Meta {
    pub fn create_tus(
        &mut self,
        id: &str,
        length: u64,
        metadata: Option<&str>,
        now: i64,
    ) -> Result<(), MetaError> {
        self.conn.execute(
            "INSERT INTO tus_uploads(id, length, metadata, created) VALUES (?1, ?2, ?3, ?4)",
            params![id, length as i64, metadata, now],
        )?;
        Ok(())
    }

    pub fn tus(&self, id: &str) -> Result<Option<TusRow>, MetaError> {
        Ok(self
            .conn
            .query_row(
                "SELECT id, length, metadata, digest FROM tus_uploads WHERE id = ?1",
                params![id],
                |r| {
                    let digest: Option<String> = r.get(3)?;
                    Ok(TusRow {
                        id: r.get(0)?,
                        length: r.get::<_, i64>(1)? as u64,
                        metadata: r.get(2)?,
                        digest: digest.map(digest_col).transpose()?,
                    })
                },
            )
            .optional()?)
    }

    pub fn complete_tus(&mut self, id: &str, digest: &Digest) -> Result<(), MetaError> {
        self.conn.execute(
            "UPDATE tus_uploads SET digest = ?2 WHERE id = ?1",
            params![id, digest.to_string()],
        )?;
        Ok(())
    }

    /// Removes a tus upload. Returns it, and whether its content is now unreferenced everywhere.
    pub fn delete_tus(&mut self, id: &str) -> Result<Option<(TusRow, bool)>, MetaError> {
        let Some(row) = self.tus(id)? else {
            return Ok(None);
        };
        let tx = self.conn.transaction()?;
        tx.execute("DELETE FROM tus_uploads WHERE id = ?1", params![id])?;
        let orphan = match &row.digest {
            Some(d) => unreferenced(&tx, d)?,
            None => false,
        };
        tx.commit()?;
        Ok(Some((row, orphan)))
    }

    /// Binds a finished tus upload to a new, complete image record in one transaction: the upload is gone
    /// and the record owns its content. False when a record with this key exists already.
    pub fn bind_tus(
        &mut self,
        id: &str,
        k: ImageKey<'_>,
        row: &ImageRow,
    ) -> Result<bool, MetaError> {
        let tx = self.conn.transaction()?;
        let n = tx.execute(
            "INSERT OR IGNORE INTO images(owner, cluster, kind, name, length, sha256, description, upload_id, digest, updated, imported)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, ?8, ?9, ?10)",
            params![k.0, k.1, k.2, k.3, row.length as i64, row.sha256, row.description,
                    row.digest.as_ref().map(|d| d.to_string()), row.updated, row.imported],
        )?;
        if n != 1 {
            return Ok(false);
        }
        tx.execute("DELETE FROM tus_uploads WHERE id = ?1", params![id])?;
        tx.commit()?;
        Ok(true)
    }
}
