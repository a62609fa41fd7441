//! tus uploads (the resumable REST upload API): their length, metadata and, once whole, their blob.

use rusqlite::{params, OptionalExtension};

use super::db::{digest_col, unreferenced, Meta, MetaError};
use super::images::{ImageKey, ImageRow};
use crate::digest::Digest;

/// A tus upload as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct TusRow {
    pub id: String,
    pub length: u64,
    pub metadata: Option<String>,
    /// Set once the last byte arrived: the content is this blob.
    pub digest: Option<Digest>,
    /// The name of the credential that made it; None for an upload made before creators were recorded.
    pub creator: Option<String>,
}

impl Meta {
    pub fn create_tus(
        &mut self,
        id: &str,
        length: u64,
        (metadata, creator): (Option<&str>, &str),
        now: i64,
    ) -> Result<(), MetaError> {
        self.conn.execute(
            "INSERT INTO tus_uploads(id, length, metadata, created, creator) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![id, length as i64, metadata, now, creator],
        )?;
        Ok(())
    }

    pub fn tus(&self, id: &str) -> Result<Option<TusRow>, MetaError> {
        Ok(self
            .conn
            .query_row(
                "SELECT id, length, metadata, digest, creator FROM tus_uploads WHERE id = ?1",
                params![id],
                |r| {
                    let digest: Option<String> = r.get(3)?;
                    Ok(TusRow {
                        id: r.get(0)?,
                        length: r.get::<_, i64>(1)? as u64,
                        metadata: r.get(2)?,
                        digest: digest.map(digest_col).transpose()?,
                        creator: r.get(4)?,
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

#[cfg(test)]
mod tests {
    use super::Meta;

    /// A database an agent made before tus uploads recorded their maker: opened, its upload has none (so any
    /// writer may go on with it), and new uploads record theirs.
    #[test]
    fn an_older_database_gains_the_creator_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.db");
        let old = rusqlite::Connection::open(&path).unwrap();
        old.execute_batch(
            "CREATE TABLE tus_uploads(id TEXT PRIMARY KEY, length INTEGER NOT NULL, metadata TEXT, digest TEXT,
                 created INTEGER NOT NULL);
             INSERT INTO tus_uploads(id, length, metadata, created) VALUES ('old', 5, NULL, 1);",
        )
        .unwrap();
        drop(old);
        let mut meta = Meta::open(&path).unwrap();
        assert_eq!(meta.tus("old").unwrap().unwrap().creator, None);
        meta.create_tus("new", 3, (None, "ci"), 2).unwrap();
        assert_eq!(
            meta.tus("new").unwrap().unwrap().creator.as_deref(),
            Some("ci")
        );
        drop(meta);
        // Opened again, nothing is added twice.
        let meta = Meta::open(&path).unwrap();
        assert_eq!(meta.tus("new").unwrap().unwrap().length, 3);
    }
}
