//! What the expiry sweep (`crate::expiry`) asks of image records: which record an upload session belongs to,
//! and completing or freeing its upload.

use super::{ImageError, Images, Key};

impl Images<'_> {
    /// The record behind an upload session owner (`images:<owner>/<cluster>/<kind>/<name>`), if it is one.
    pub fn key_of_session(owner: &str) -> Option<Key> {
        let rest = owner.strip_prefix("images:")?;
        let mut parts = rest.splitn(4, '/');
        let (o, c, k, n) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        Key::new(o, c, k, n).ok()
    }

    /// For the expiry sweep: the record's upload `id`, which holds `size` bytes. Completes the record when
    /// they are all of it (an agent stopped during the final hash left it so); otherwise, with `expired`,
    /// frees them: the record stays, back at offset 0. A session no record uses (an agent killed between
    /// starting it and writing the record, or a record since deleted) is an orphan: expired, it is cancelled.
    /// Returns whether bytes were freed.
    pub async fn sweep_upload(
        &self,
        key: &Key,
        id: &str,
        size: u64,
        expired: bool,
    ) -> Result<bool, ImageError> {
        let row = match self.row(key).await {
            Ok(row) => Some(row).filter(|r| r.upload_id.as_deref() == Some(id)),
            Err(ImageError::NotFound(_)) => None,
            Err(e) => return Err(e),
        };
        let Some(row) = row.filter(|r| r.digest.is_none()) else {
            if expired {
                self.store.cancel_upload(&key.session_owner(), id).await?;
                tracing::info!(image = %key, upload = id, bytes = size, "an orphaned upload session expired");
                return Ok(true);
            }
            return Ok(false);
        };
        if size == row.length {
            tracing::info!(image = %key, "completing an upload whose bytes had all arrived");
            self.complete(key, id, &row.sha256).await?;
            return Ok(false);
        }
        if !expired {
            return Ok(false);
        }
        self.store.cancel_upload(&key.session_owner(), id).await?;
        self.restart_upload(key).await?;
        tracing::info!(image = %key, bytes = size, "abandoned upload expired; the record is back at offset 0");
        Ok(true)
    }
}
