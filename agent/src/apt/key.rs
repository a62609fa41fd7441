//! The apt repository's OpenPGP key: made once per data directory (at the first `serve`, which on the
//! appliance is its first boot), kept beside the store, and used to sign each `Release` (`InRelease`, a
//! clearsigned copy, and `Release.gpg`, a detached signature). An Ed25519 primary key that certifies and signs
//! ([`super::openpgp`]), which apt on bookworm (gpgv, `tests/http/apt.rs`) and the node images' apt on trixie
//! (`tests/node_image.rs`) accept.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::openpgp::Key;

/// The secret key, binary (a transferable secret key, unencrypted), readable by the agent only.
const SECRET_FILE: &str = "signing-key.pgp";
/// The public key, armored: what `apt-source` prints and `/apt/foothold.asc` serves.
pub const PUBLIC_FILE: &str = "foothold.asc";

pub struct SigningKey {
    secret: Key,
    public_armored: String,
}

/// Now, as a key's or a signature's creation time.
fn now() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}

impl SigningKey {
    /// The key kept in `dir`, made (and written, secret file first) when there is none.
    pub fn load_or_create(dir: &Path, user_id: &str) -> io::Result<SigningKey> {
        let secret_path = dir.join(SECRET_FILE);
        let secret = match std::fs::read(&secret_path) {
            Ok(bytes) => Key::from_secret_bytes(&bytes)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", secret_path.display())))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let secret = Key::generate(user_id, now())?;
                super::durable::write_file(&secret_path, &secret.secret_bytes(), 0o600)?;
                tracing::info!(fingerprint = %secret.fingerprint_hex(), "apt signing key made");
                secret
            }
            Err(e) => return Err(e),
        };
        let public_armored = secret.public_armored();
        let public_path = public_path(dir);
        if std::fs::read_to_string(&public_path).ok().as_deref() != Some(&public_armored) {
            super::durable::write_file(&public_path, public_armored.as_bytes(), 0o644)?;
        }
        Ok(SigningKey {
            secret,
            public_armored,
        })
    }

    pub fn fingerprint(&self) -> String {
        self.secret.fingerprint_hex()
    }

    pub fn public_armored(&self) -> &str {
        &self.public_armored
    }

    /// The public key's packets, unarmored (a keyring for gpgv).
    #[cfg(test)]
    pub(crate) fn public_bytes(&self) -> Vec<u8> {
        self.secret.public_bytes()
    }

    /// `text` clearsigned (an `InRelease`). The line end before the signature belongs to the framing, not the
    /// text (RFC 9580 §7.1): a text that ends in one is signed without it, or the file would have a blank line
    /// there, which apt's splitter refuses.
    pub fn clearsign(&self, text: &str) -> String {
        self.secret.clearsign(text, now())
    }

    /// A detached, armored signature of `bytes` (a `Release.gpg`).
    pub fn detached(&self, bytes: &[u8]) -> String {
        self.secret.detached(bytes, now())
    }
}

/// Where `dir`'s public key is.
pub fn public_path(dir: &Path) -> PathBuf {
    dir.join(PUBLIC_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apt::openpgp::tests::gpgv;

    #[test]
    fn a_key_is_made_once_and_its_signatures_verify() {
        let dir = tempfile::tempdir().unwrap();
        let key =
            SigningKey::load_or_create(dir.path(), "Foothold test <apt@foothold.invalid>").unwrap();
        let again = SigningKey::load_or_create(dir.path(), "ignored").unwrap();
        assert_eq!(key.fingerprint(), again.fingerprint());
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.path().join(SECRET_FILE))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(
            std::fs::read_to_string(public_path(dir.path())).unwrap(),
            key.public_armored()
        );
        let ring = key.public_bytes();
        let valid = format!("VALIDSIG {} ", key.fingerprint());
        let work = tempfile::tempdir().unwrap();
        let text = "Origin: Foothold\nSHA256:\n abc 1 main/binary-amd64/Packages\n";
        let signed = key.clearsign(text);
        let status = gpgv(&ring, work.path(), &[("InRelease", signed.as_bytes())]).unwrap();
        assert!(status.contains(&valid), "{status}");
        // What is written keeps LF, with no blank line before the signature.
        assert!(!signed.contains('\r'));
        assert!(
            signed.contains("Packages\n-----BEGIN PGP SIGNATURE-----\n"),
            "{signed}"
        );
        let sig = key.detached(text.as_bytes());
        let release = [
            ("Release.gpg", sig.as_bytes()),
            ("Release", text.as_bytes()),
        ];
        let status = gpgv(&ring, work.path(), &release).unwrap();
        assert!(status.contains(&valid), "{status}");
        let tampered = [
            ("Release.gpg", sig.as_bytes()),
            ("Release", &b"tampered"[..]),
        ];
        assert!(gpgv(&ring, work.path(), &tampered).is_err());
    }
}
