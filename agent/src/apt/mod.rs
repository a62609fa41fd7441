//! The signed apt repository nodes install Debian packages from: every completely uploaded `binary_images`
//! record named `*.deb`, of any owner and cluster, in one suite (`deb <agent>/apt foothold main`).
//!
//! On disk, beside the store (`<data>/apt/`): the signing key; `by-hash/SHA256/<hex>`, every `Packages` file
//! by content; and `snapshots/<id>/`, one `Release`, `InRelease`, `Release.gpg` and `Packages` per
//! architecture each, with `current` a symbolic link to one of them. A change of the packages writes the new
//! `Packages` files, then a new snapshot (each file synced), and only then swaps `current` with one rename: a
//! client never sees a `Release` naming a file that is not there. The release before stays, with its
//! `Packages` by hash, for clients that read it a moment before the swap.

pub mod deb;
pub(crate) mod durable;
pub mod index;
pub mod key;
mod openpgp;

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sha2::{Digest as _, Sha256};

use crate::digest::Digest;
use crate::store::Store;
use deb::Control;
pub use durable::write_file;
use index::{Indexed, Package, SUITE};

/// The `binary_images` records that are packages.
pub const DEB_SUFFIX: &str = ".deb";

const BINARY_KIND: &str = "binary_images";

/// The user id of the signing key.
const KEY_USER_ID: &str = "Foothold site apt repository <apt@foothold.invalid>";

pub struct Repo {
    dir: PathBuf,
    key: key::SigningKey,
    /// Control paragraphs read so far, by content (a `.deb` is read once).
    controls: Mutex<HashMap<Digest, Result<Control, String>>>,
    /// What the current snapshot serves under `pool/`: path to (digest, size).
    pool: Mutex<Arc<HashMap<String, (Digest, u64)>>>,
}

/// What [`Repo::publish`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub packages: usize,
    /// False when the packages were those of the current snapshot already.
    pub changed: bool,
    /// Records named `*.deb` that are not packages, with the reason.
    pub skipped: Vec<(String, String)>,
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl Repo {
    /// The repository of the data directory `data` (`<data>/apt`), its key made if there is none.
    pub fn open(data: &Path) -> io::Result<Repo> {
        let dir = data.join("apt");
        for sub in ["by-hash/SHA256", "snapshots"] {
            fs::create_dir_all(dir.join(sub))?;
        }
        let key = key::SigningKey::load_or_create(&dir, KEY_USER_ID)?;
        Ok(Repo {
            dir,
            key,
            controls: Mutex::default(),
            pool: Mutex::default(),
        })
    }

    pub fn public_key(&self) -> &str {
        self.key.public_armored()
    }

    pub fn fingerprint(&self) -> String {
        self.key.fingerprint()
    }

    /// A file of the current snapshot, by its path under `dists/<suite>/` (`InRelease`,
    /// `main/binary-amd64/Packages`...), and a strong validator of its content; by-hash paths resolve to any
    /// `Packages` still kept. The snapshot is resolved once, so path and validator always agree (a `current`
    /// file's modification time could not tell two snapshots written in one second apart).
    pub fn dists_file(&self, rel: &str) -> Option<(PathBuf, String)> {
        if let Some((_, hex)) = rel.rsplit_once("/by-hash/SHA256/") {
            let valid = hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit());
            let path = self.dir.join("by-hash/SHA256").join(hex);
            return (valid && path.is_file()).then(|| (path, format!("\"sha256:{hex}\"")));
        }
        let known = matches!(rel, "InRelease" | "Release" | "Release.gpg")
            || rel
                .strip_prefix("main/binary-")
                .and_then(|r| r.strip_suffix("/Packages"))
                .is_some_and(|arch| {
                    !arch.is_empty() && arch.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                });
        if !known {
            return None;
        }
        let snapshot = fs::read_link(self.dir.join("current")).ok()?;
        let id = snapshot.file_name()?.to_string_lossy().into_owned();
        let flat = rel.replace('/', "_");
        let path = self.dir.join("snapshots").join(&id).join(&flat);
        path.is_file().then(|| (path, format!("\"{id}/{flat}\"")))
    }

    /// The `.deb` served at `pool/<rel>`: its digest and size.
    pub fn pool_file(&self, rel: &str) -> Option<(Digest, u64)> {
        let pool = self.pool.lock().unwrap_or_else(|p| p.into_inner()).clone();
        pool.get(&format!("pool/{rel}")).cloned()
    }

    /// Makes the repository hold exactly the complete `*.deb` records of `store`; returns what it did.
    pub async fn sync(self: &Arc<Repo>, store: &Arc<Store>) -> io::Result<Published> {
        let debs = store
            .with_meta(|m, _| Ok(m.complete_images_named(BINARY_KIND, DEB_SUFFIX)?))
            .await
            .map_err(io::Error::other)?;
        let paths: Vec<(String, Digest, u64, PathBuf)> = debs
            .into_iter()
            .map(|r| {
                let path = store.blob_path(&r.digest);
                let record = format!("{}/{}/{}", r.owner, r.cluster, r.name);
                (record, r.digest, r.length, path)
            })
            .collect();
        let repo = self.clone();
        tokio::task::spawn_blocking(move || repo.publish(&paths, std::time::SystemTime::now()))
            .await
            .unwrap_or_else(|e| Err(io::Error::other(format!("the publish task failed: {e}"))))
    }

    /// Builds the repository of `debs` ((record, digest, size, content path)) and makes it current.
    pub fn publish(
        &self,
        debs: &[(String, Digest, u64, PathBuf)],
        now: std::time::SystemTime,
    ) -> io::Result<Published> {
        let mut packages = Vec::new();
        let mut skipped = Vec::new();
        let mut pool = HashMap::new();
        for (record, digest, size, path) in debs {
            let control = self.control(digest, path);
            match control {
                Ok(control) => {
                    // Named as Debian's archive names it, whatever the record is called (a name apt saved,
                    // `zlib1g_1%3a1.2.13…`, would be another path once apt quotes it).
                    let filename = index::pool_path(digest.hex(), &control.file_name());
                    pool.insert(filename.clone(), (digest.clone(), *size));
                    packages.push(Package {
                        control,
                        filename,
                        size: *size,
                        sha256: digest.hex().to_owned(),
                    });
                }
                Err(reason) => skipped.push((record.clone(), reason)),
            }
        }
        let archs = index::architectures(&packages);
        let mut files = Vec::new();
        for arch in &archs {
            let text = index::packages_file(&packages, arch);
            let sha256 = sha256_hex(text.as_bytes());
            let by_hash = self.dir.join("by-hash/SHA256").join(&sha256);
            if !by_hash.is_file() {
                write_file(&by_hash, text.as_bytes(), 0o644)?;
            }
            files.push(Indexed {
                path: index::packages_path(arch),
                size: text.len() as u64,
                sha256,
            });
        }
        let current = fs::read_to_string(self.dir.join("current/Release")).ok();
        let changed = current.as_deref().map(index::release_files) != Some(files.clone());
        if changed {
            self.write_snapshot(&files, &archs, now)?;
        }
        *self.pool.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(pool);
        Ok(Published {
            packages: packages.len(),
            changed,
            skipped,
        })
    }

    fn control(&self, digest: &Digest, path: &Path) -> Result<Control, String> {
        if let Some(c) = self
            .controls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(digest)
        {
            return c.clone();
        }
        let c = fs::File::open(path)
            .map_err(|e| e.to_string())
            .and_then(|f| deb::read_control(io::BufReader::new(f)));
        self.controls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(digest.clone(), c.clone());
        c
    }

    /// Writes a snapshot naming `files` and swaps `current` to it; keeps the one before, removes older ones and
    /// the `Packages` only they named.
    fn write_snapshot(
        &self,
        files: &[Indexed],
        archs: &[String],
        now: std::time::SystemTime,
    ) -> io::Result<()> {
        let release = index::release(files, archs, &httpdate::fmt_http_date(now));
        let in_release = self.key.clearsign(&release);
        let release_gpg = self.key.detached(release.as_bytes());
        let id = sha256_hex(release.as_bytes());
        let snapshots = self.dir.join("snapshots");
        let snapshot = snapshots.join(&id);
        let staging = snapshots.join(format!(".{id}.tmp"));
        let _ = fs::remove_dir_all(&staging);
        fs::create_dir_all(&staging)?;
        write_file(&staging.join("Release"), release.as_bytes(), 0o644)?;
        write_file(&staging.join("InRelease"), in_release.as_bytes(), 0o644)?;
        write_file(&staging.join("Release.gpg"), release_gpg.as_bytes(), 0o644)?;
        for f in files {
            let text = fs::read(self.dir.join("by-hash/SHA256").join(&f.sha256))?;
            write_file(&staging.join(f.path.replace('/', "_")), &text, 0o644)?;
        }
        fs::rename(&staging, &snapshot)?;
        fs::File::open(&snapshots)?.sync_all()?;
        let previous = fs::read_link(self.dir.join("current")).ok();
        let link_tmp = self.dir.join(".current.tmp");
        let _ = fs::remove_file(&link_tmp);
        std::os::unix::fs::symlink(Path::new("snapshots").join(&id), &link_tmp)?;
        fs::rename(&link_tmp, self.dir.join("current"))?;
        fs::File::open(&self.dir)?.sync_all()?;
        tracing::info!(snapshot = %id, suite = SUITE, "apt repository published");
        self.prune(&id, previous.as_deref())
    }

    fn prune(&self, current: &str, previous: Option<&Path>) -> io::Result<()> {
        let keep: HashSet<String> = std::iter::once(current.to_owned())
            .chain(
                previous
                    .and_then(|p| p.file_name())
                    .map(|n| n.to_string_lossy().into_owned()),
            )
            .collect();
        let snapshots = self.dir.join("snapshots");
        let mut named = HashSet::new();
        for entry in fs::read_dir(&snapshots)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if keep.contains(&name) {
                let release = fs::read_to_string(snapshots.join(&name).join("Release"))?;
                named.extend(index::release_files(&release).into_iter().map(|f| f.sha256));
            } else {
                fs::remove_dir_all(snapshots.join(&name))?;
            }
        }
        for entry in fs::read_dir(self.dir.join("by-hash/SHA256"))? {
            let entry = entry?;
            if !named.contains(&*entry.file_name().to_string_lossy()) {
                fs::remove_file(entry.path())?;
            }
        }
        Ok(())
    }
}

/// The deb822 `.sources` entry (apt ≥ 2.3; bookworm has 2.6) for the repository at `endpoint` (the agent's
/// URL as nodes reach it), the key inline under `Signed-By` so that one file is all a node needs.
pub fn sources_entry(endpoint: &str, public_armored: &str) -> String {
    let mut out = format!(
        "Types: deb\nURIs: {}/apt\nSuites: {SUITE}\nComponents: {}\nSigned-By:\n",
        endpoint.trim_end_matches('/'),
        index::COMPONENT
    );
    for line in public_armored.trim_end().lines() {
        out.push(' ');
        out.push_str(if line.trim().is_empty() { "." } else { line });
        out.push('\n');
    }
    out
}

/// Publishes the repository before the agent answers its first request, then keeps it in step with the
/// records: once after every change of image records.
pub async fn follow(repo: Arc<Repo>, store: Arc<Store>) -> impl std::future::Future<Output = ()> {
    // Subscribed before the first publish, so that a change during it is not missed.
    let mut changes = store.watch_image_records();
    publish_logged(&repo, &store).await;
    async move {
        while changes.changed().await.is_ok() {
            publish_logged(&repo, &store).await;
        }
    }
}

async fn publish_logged(repo: &Arc<Repo>, store: &Arc<Store>) {
    match repo.sync(store).await {
        Ok(p) => {
            for (record, reason) in &p.skipped {
                tracing::warn!(
                    record,
                    reason,
                    "a .deb record is not a package; left out of the apt repository"
                );
            }
        }
        Err(e) => tracing::error!(error = %e, "publishing the apt repository failed"),
    }
}

#[cfg(test)]
mod tests;
