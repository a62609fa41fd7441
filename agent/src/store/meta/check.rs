//! The consistency check (`foothold-agent check`): what references what is missing, and SQLite's own check.

use super::db::{Meta, MetaError};

impl Meta {
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
