//! Manifests and what they reference (blobs, child manifests, a subject for the referrers API).

use rusqlite::{params, OptionalExtension};

use super::db::{digest_col, unreferenced, ManifestRow, Meta, MetaError};
use crate::digest::Digest;
use crate::manifest::{ParsedManifest, RefKind};

impl Meta {
    /// Errors with Missing unless every blob the manifest references is linked in `repo`. The manifests an
    /// index lists need not be: a mirror may carry some platforms of a multi-platform image (the image builder
    /// keeps `linux/amd64` of an index pinned by digest), and a client asking for another platform gets
    /// MANIFEST_UNKNOWN for it.
    pub fn check_references(
        &self,
        repo: &str,
        parsed: &ParsedManifest,
        absent_children_ok: bool,
    ) -> Result<(), MetaError> {
        for (target, kind, declared) in &parsed.references {
            let (sql, what) = match kind {
                RefKind::Blob => (
                    "SELECT size FROM repo_blobs WHERE repo = ?1 AND digest = ?2",
                    "blob",
                ),
                RefKind::Manifest => (
                    "SELECT size FROM manifests WHERE repo = ?1 AND digest = ?2",
                    "manifest",
                ),
            };
            let size: Option<i64> = self
                .conn
                .query_row(sql, params![repo, target.to_string()], |r| r.get(0))
                .optional()?;
            match size {
                None if *kind == RefKind::Manifest && absent_children_ok => {}
                None => {
                    return Err(MetaError::Missing {
                        repo: repo.into(),
                        digest: target.clone(),
                        kind: what,
                    })
                }
                Some(actual) if actual as u64 != *declared => {
                    return Err(MetaError::WrongSize {
                        digest: target.clone(),
                        kind: what,
                        declared: *declared,
                        actual: actual as u64,
                    })
                }
                Some(_) => {}
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
        tags: &[&str],
        absent_children_ok: bool,
    ) -> Result<(), MetaError> {
        self.check_references(repo, parsed, absent_children_ok)?;
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
        for (target, kind, _) in &parsed.references {
            let kind = match kind {
                RefKind::Blob => "blob",
                RefKind::Manifest => "manifest",
            };
            tx.execute(
                "INSERT OR IGNORE INTO manifest_refs(repo, manifest, target, kind) VALUES (?1, ?2, ?3, ?4)",
                params![repo, d, target.to_string(), kind],
            )?;
        }
        for tag in tags {
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

    pub fn referrers(&self, repo: &str, subject: &Digest) -> Result<Vec<ManifestRow>, MetaError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT digest, media_type, size, artifact_type, annotations FROM manifests
             WHERE repo = ?1 AND subject = ?2 ORDER BY digest",
        )?;
        let rows = stmt.query_map(params![repo, subject.to_string()], manifest_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
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
}

pub(super) fn manifest_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ManifestRow> {
    let annotations: Option<String> = r.get(4)?;
    Ok(ManifestRow {
        digest: digest_col(r.get(0)?)?,
        media_type: r.get(1)?,
        size: r.get::<_, i64>(2)? as u64,
        artifact_type: r.get(3)?,
        annotations: annotations.and_then(|a| serde_json::from_str(&a).ok()),
    })
}
