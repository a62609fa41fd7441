//! The registry's upload sessions (the OCI distribution API's blob uploads).

use rusqlite::{params, OptionalExtension};

use super::db::{Meta, MetaError};

impl Meta {
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

    /// Every open session: (id, owner — a repository, or `images:…` / `tus:`).
    pub fn upload_sessions(&self) -> Result<Vec<(String, String)>, MetaError> {
        let mut stmt = self.conn.prepare("SELECT id, repo FROM uploads")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
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
}
