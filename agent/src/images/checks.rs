//! What a record's content must be beyond its bytes: a container archive is imported into the registry (and
//! the import resumed after a restart), a `*.deb` binary record must be a Debian package.

use super::{now, ImageError, Images, Key, Kind};
use crate::archive::{self, ArchiveError};
use crate::digest::Digest;
use crate::import::Imported;

impl Images<'_> {
    /// Imports a container archive blob into the registry; returns what became visible.
    pub(super) async fn import_archive(
        &self,
        key: &Key,
        digest: &Digest,
    ) -> Result<Vec<Imported>, ImageError> {
        let store = self.store.clone();
        let path = self.store.blob_path(digest);
        let out = tokio::task::spawn_blocking(move || archive::import_archive(&store, &path))
            .await
            .expect("import task");
        match out {
            Ok(imported) => {
                for i in &imported {
                    tracing::info!(image = %key, repo = i.repo, tag = i.tag, digest = %i.digest, "archive image imported");
                }
                Ok(imported)
            }
            Err(ArchiveError::Invalid(reason)) => {
                tracing::warn!(image = %key, %reason, "container archive refused");
                Err(ImageError::Archive {
                    image: key.to_string(),
                    reason,
                })
            }
            Err(ArchiveError::Store(e)) => Err(e.into()),
        }
    }

    /// Checks that a `*.deb` binary record's content is a Debian package (the apt repository serves it).
    pub(super) async fn check_package(&self, key: &Key, digest: &Digest) -> Result<(), ImageError> {
        let path = self.store.blob_path(digest);
        let read = tokio::task::spawn_blocking(move || {
            std::fs::File::open(&path)
                .map_err(|e| e.to_string())
                .and_then(|f| crate::apt::deb::read_control(std::io::BufReader::new(f)))
        })
        .await
        .unwrap_or_else(|e| Err(format!("reading the package failed: {e}")));
        match read {
            Ok(control) => {
                tracing::info!(image = %key, package = control.package, version = control.version, "package uploaded");
                Ok(())
            }
            Err(reason) => {
                tracing::warn!(image = %key, %reason, "package refused");
                Err(ImageError::Archive {
                    image: key.to_string(),
                    reason,
                })
            }
        }
    }

    /// Imports the record's archive and records what it made visible.
    pub(super) async fn import(&self, key: &Key, digest: &Digest) -> Result<(), ImageError> {
        let imported = self.import_archive(key, digest).await?;
        let json = serde_json::to_string(&imported).expect("imports serialise");
        let k = key.clone();
        self.store
            .with_meta(move |m, _| Ok(m.set_image_imported(k.tuple(), &json, now())?))
            .await?;
        Ok(())
    }

    /// Finishes imports the agent was stopped in the middle of (content arrived, import not recorded).
    pub async fn resume_imports(&self) -> Result<(), ImageError> {
        let pending = self
            .store
            .with_meta(|m, _| Ok(m.pending_imports()?))
            .await?;
        for (owner, cluster, name) in pending {
            let key = Key::new(&owner, &cluster, Kind::Container.as_str(), &name)?;
            let row = self.row(&key).await?;
            let digest = row.digest.expect("pending imports have content");
            tracing::info!(image = %key, "resuming an interrupted archive import");
            if let Err(e) = self.import(&key, &digest).await {
                tracing::warn!(image = %key, error = %e, "interrupted archive import failed; the upload starts over");
                self.restart_upload(&key).await?;
            }
        }
        Ok(())
    }
}
