//! BPA's image records: the binary, OS and container images of a cluster, their uploads and imports.

use rusqlite::{params, OptionalExtension};

use super::db::{digest_col, unreferenced, Meta, MetaError};
use crate::digest::Digest;

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

/// A complete record of one kind, with where it belongs.
#[derive(Debug, Clone, PartialEq)]
pub struct CompleteImage {
    pub owner: String,
    pub cluster: String,
    pub name: String,
    pub digest: Digest,
    pub length: u64,
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

    /// Every complete record of `kind` whose name ends in `suffix`, across owners and clusters, ordered by
    /// owner, cluster and name.
    pub fn complete_images_named(
        &self,
        kind: &str,
        suffix: &str,
    ) -> Result<Vec<CompleteImage>, MetaError> {
        let mut stmt = self.conn.prepare(
            "SELECT owner, cluster, name, digest, length FROM images
             WHERE kind = ?1 AND digest IS NOT NULL AND substr(name, -length(?2)) = ?2
             ORDER BY owner, cluster, name",
        )?;
        let rows = stmt.query_map(params![kind, suffix], |r| {
            Ok(CompleteImage {
                owner: r.get(0)?,
                cluster: r.get(1)?,
                name: r.get(2)?,
                digest: digest_col(r.get(3)?)?,
                length: r.get::<_, i64>(4)? as u64,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
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
