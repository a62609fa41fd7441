//! Expiry of abandoned uploads: registry upload sessions, BPA image records' uploads and tus uploads whose
//! file has not grown for the TTL are freed — a registry session or tus upload is gone, an image record stays
//! and starts again at offset 0. The same sweep completes an upload whose bytes have all arrived but which
//! never finished (the agent stopped during the final hash). It runs at start and then every tenth of the
//! TTL (between a second and five minutes); `/metrics` shows what is pending and what was reclaimed.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::images::Images;
use crate::metrics::{Metrics, UploadKind};
use crate::store::Store;
use crate::uploads::{self, Uploads};

/// How long an upload may go without a byte before it is freed, by default.
pub const DEFAULT_TTL: Duration = Duration::from_secs(24 * 3600);

/// How long a full upload must have been still before the sweep completes it.
const SETTLE: Duration = Duration::from_secs(5);

/// How often the sweep runs for `ttl`.
pub fn period(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_secs(1), Duration::from_secs(300))
}

/// When an upload last changed at `modified` expires.
pub fn expires_at(modified: SystemTime, ttl: Duration) -> SystemTime {
    modified + ttl
}

/// One pass over every open upload session.
pub async fn sweep(store: &Arc<Store>, ttl: Duration, max_image_length: u64, metrics: &Metrics) {
    let sessions = match store.with_meta(|m, _| Ok(m.upload_sessions()?)).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "upload sweep: listing sessions");
            return;
        }
    };
    let now = SystemTime::now();
    let mut pending = [(0u64, 0u64); 3];
    for (id, owner) in sessions {
        let (size, modified) = match store.upload_file_state(&id).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(upload = id, error = %e, "upload sweep: no file for a session");
                continue;
            }
        };
        let key = Images::key_of_session(&owner);
        let kind = if owner == uploads::OWNER {
            UploadKind::Tus
        } else if key.is_some() {
            UploadKind::Rest
        } else {
            UploadKind::Registry
        };
        let expired = now >= expires_at(modified, ttl);
        // A full upload is completed only once it has been still a moment: its client may be completing it.
        let settled = now >= modified + SETTLE.min(ttl);
        if !settled {
            let p = &mut pending[kind as usize];
            p.0 += 1;
            p.1 += size;
            continue;
        }
        let freed = if kind == UploadKind::Tus {
            let r = Uploads::new(store, max_image_length)
                .sweep(&id, size, expired)
                .await;
            r.map_err(|e| e.to_string())
        } else if let Some(key) = &key {
            let r = Images::new(store, max_image_length)
                .sweep_upload(key, &id, size, expired)
                .await;
            r.map_err(|e| e.to_string())
        } else {
            let r = if expired {
                store.cancel_upload(&owner, &id).await.map(|()| true)
            } else {
                Ok(false)
            };
            r.map_err(|e| e.to_string())
        };
        match freed {
            Ok(true) => metrics.upload_expired(kind, size),
            Ok(false) => {
                let p = &mut pending[kind as usize];
                p.0 += 1;
                p.1 += size;
            }
            Err(e) => tracing::warn!(upload = id, error = %e, "upload sweep"),
        }
    }
    metrics.set_uploads_pending(pending);
}

/// Sweeps at start and then every [`period`], for as long as the process runs.
pub async fn run(store: Arc<Store>, ttl: Duration, max_image_length: u64, metrics: Arc<Metrics>) {
    let mut tick = tokio::time::interval(period(ttl));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        sweep(&store, ttl, max_image_length, &metrics).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sessions whose record or tus row never came to be (the agent killed between the two writes) are
    /// orphans: the sweep frees them once expired, and leaves them alone before.
    #[tokio::test]
    async fn orphaned_sessions_are_freed_once_expired() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        let metrics = Metrics::default();
        let rest = store
            .start_upload("images:acme/edge-1/os_images/ghost")
            .await
            .unwrap();
        let tus = store.start_upload(uploads::OWNER).await.unwrap();
        for id in [&rest, &tus] {
            std::fs::write(dir.path().join("uploads").join(id), [7u8; 100]).unwrap();
        }
        sweep(&store, Duration::from_secs(3600), 1 << 30, &metrics).await;
        assert_eq!(store.upload_count().await.unwrap(), 2, "not expired yet");
        sweep(&store, Duration::ZERO, 1 << 30, &metrics).await;
        assert_eq!(store.upload_count().await.unwrap(), 0);
        let text = metrics.render(0);
        assert!(
            text.contains("foothold_upload_bytes_reclaimed_total 200"),
            "{text}"
        );
        assert!(
            text.contains(r#"foothold_uploads_expired_total{kind="rest"} 1"#)
                && text.contains(r#"foothold_uploads_expired_total{kind="tus"} 1"#),
            "{text}"
        );
    }

    #[test]
    fn the_sweep_runs_often_enough_for_its_ttl() {
        assert_eq!(period(DEFAULT_TTL), Duration::from_secs(300));
        assert_eq!(period(Duration::from_secs(60)), Duration::from_secs(6));
        assert_eq!(period(Duration::from_secs(2)), Duration::from_secs(1));
    }
}
