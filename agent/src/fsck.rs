//! `foothold-agent fsck`: re-hash every blob and check every reference the metadata makes. Read-only; safe to
//! run beside a live agent (SQLite WAL readers do not block the writer).

use std::fs;
use std::path::Path;

use crate::digest::{Algorithm, Digest};
use crate::store::blobs::hash_file;
use crate::store::Meta;

/// What `fsck` found (also its `-o json|yaml` report, with these fields in camelCase).
#[derive(Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub blobs_checked: u64,
    pub bytes_hashed: u64,
    pub unreferenced: u64,
    pub problems: Vec<String>,
}

pub fn check(root: &Path) -> anyhow::Result<Report> {
    use anyhow::Context as _;
    let db = root.join("foothold.db");
    anyhow::ensure!(
        db.exists(),
        "{} has no foothold.db: not a Foothold data directory",
        root.display()
    );
    let meta = Meta::open(&db).with_context(|| format!("opening {}", db.display()))?;
    let mut report = Report::default();
    let mut on_disk = std::collections::HashMap::new();
    for algorithm in Algorithm::ALL {
        let blob_dir = root.join("blobs").join(algorithm.name());
        if algorithm != Algorithm::Sha256 && !blob_dir.exists() {
            continue; // a store written before sha512 was supported
        }
        for entry in
            fs::read_dir(&blob_dir).with_context(|| format!("listing {}", blob_dir.display()))?
        {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(expected) = Digest::from_parts(algorithm, &name) else {
                report.problems.push(format!(
                    "{}: file name is not a {algorithm} digest",
                    entry.path().display()
                ));
                continue;
            };
            let (actual, size) = hash_file(&entry.path(), algorithm)
                .with_context(|| format!("hashing {}", entry.path().display()))?;
            report.blobs_checked += 1;
            report.bytes_hashed += size;
            if actual != expected {
                report.problems.push(format!(
                    "blob {expected} is corrupt: its content hashes to {actual}"
                ));
            }
            on_disk.insert(expected, size);
        }
    }
    let mut referenced = std::collections::HashSet::new();
    for (repo, digest, _) in meta.all_references()? {
        if !on_disk.contains_key(&digest) {
            report.problems.push(format!(
                "{repo}: {digest} is recorded but its file is missing"
            ));
        }
        referenced.insert(digest);
    }
    report.unreferenced = on_disk.keys().filter(|d| !referenced.contains(*d)).count() as u64;
    report.problems.extend(meta.dangling()?);
    Ok(report)
}
