//! A repository's blob links and tags: which blobs a repository may serve, which manifest a tag names.

use rusqlite::{params, OptionalExtension};

use super::db::{digest_col, unreferenced, Meta, MetaError};
use crate::digest::Digest;

impl Meta {
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
}
