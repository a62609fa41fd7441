//! The apt repository's OpenPGP key: made once per data directory (at the first `serve`, which on the
//! appliance is its first boot), kept beside the store, and used to sign each `Release` (`InRelease`, a
//! clearsigned copy, and `Release.gpg`, a detached signature). An Ed25519 primary key that certifies and signs,
//! which apt's gpgv on bookworm accepts (`tests/http/apt.rs`); trixie's sqv is not tried yet.

use std::io;
use std::path::{Path, PathBuf};

use pgp::composed::{
    ArmorOptions, CleartextSignedMessage, Deserializable, DetachedSignature, EncryptionCaps,
    KeyType, SecretKeyParamsBuilder, SignedPublicKey, SignedSecretKey,
};
use pgp::crypto::hash::HashAlgorithm;
use pgp::ser::Serialize as _;
use pgp::types::{KeyDetails as _, Password};

/// The secret key, binary, readable by the agent only.
const SECRET_FILE: &str = "signing-key.pgp";
/// The public key, armored: what `apt-source` prints and `/apt/foothold.asc` serves.
pub const PUBLIC_FILE: &str = "foothold.asc";

pub struct SigningKey {
    secret: SignedSecretKey,
    public_armored: String,
}

fn other(what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

impl SigningKey {
    /// The key kept in `dir`, made (and written, secret file first) when there is none.
    pub fn load_or_create(dir: &Path, user_id: &str) -> io::Result<SigningKey> {
        let secret_path = dir.join(SECRET_FILE);
        let secret = match std::fs::read(&secret_path) {
            Ok(bytes) => SignedSecretKey::from_bytes(&bytes[..])
                .map_err(|e| other(&secret_path.display().to_string(), e))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let secret = generate(user_id)?;
                let bytes = secret
                    .to_bytes()
                    .map_err(|e| other("serialising the key", e))?;
                super::durable::write_file(&secret_path, &bytes, 0o600)?;
                tracing::info!(fingerprint = %secret.fingerprint(), "apt signing key made");
                secret
            }
            Err(e) => return Err(e),
        };
        let public_armored = SignedPublicKey::from(secret.clone())
            .to_armored_string(ArmorOptions::default())
            .map_err(|e| other("armoring the public key", e))?;
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
        self.secret.fingerprint().to_string()
    }

    pub fn public_armored(&self) -> &str {
        &self.public_armored
    }

    /// `text` clearsigned (an `InRelease`). The line end before the signature belongs to the framing, not the
    /// text (RFC 9580 §7.1): a text that ends in one is signed without it, or the file would have a blank line
    /// there, which apt's splitter refuses.
    pub fn clearsign(&self, text: &str) -> io::Result<String> {
        let text = text.strip_suffix('\n').unwrap_or(text);
        CleartextSignedMessage::sign(
            rand_08::thread_rng(),
            text,
            &self.secret.primary_key,
            &Password::empty(),
        )
        .and_then(|m| m.to_armored_string(ArmorOptions::default()))
        .map_err(|e| other("signing", e))
    }

    /// A detached, armored signature of `bytes` (a `Release.gpg`).
    pub fn detached(&self, bytes: &[u8]) -> io::Result<String> {
        DetachedSignature::sign_binary_data(
            rand_08::thread_rng(),
            &self.secret.primary_key,
            &Password::empty(),
            HashAlgorithm::Sha512,
            bytes,
        )
        .and_then(|s| s.to_armored_string(ArmorOptions::default()))
        .map_err(|e| other("signing", e))
    }
}

/// Where `dir`'s public key is.
pub fn public_path(dir: &Path) -> PathBuf {
    dir.join(PUBLIC_FILE)
}

fn generate(user_id: &str) -> io::Result<SignedSecretKey> {
    let params = SecretKeyParamsBuilder::default()
        .key_type(KeyType::Ed25519Legacy)
        .can_certify(true)
        .can_sign(true)
        .can_encrypt(EncryptionCaps::None)
        .primary_user_id(user_id.to_owned())
        .build()
        .map_err(|e| other("key parameters", e))?;
    params
        .generate(rand_08::thread_rng())
        .map_err(|e| other("generating the key", e))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let public = SignedPublicKey::from_string(key.public_armored())
            .unwrap()
            .0;
        let text = "Origin: Foothold\nSHA256:\n abc 1 main/binary-amd64/Packages\n";
        let signed = key.clearsign(text).unwrap();
        let (msg, _) = CleartextSignedMessage::from_string(&signed).unwrap();
        msg.verify(&public).unwrap();
        // What was signed is the text with CRLF line ends (RFC 9580 §7.2) and without its last one; what is
        // written keeps LF, with no blank line before the signature.
        assert_eq!(msg.signed_text() + "\r\n", text.replace('\n', "\r\n"));
        assert!(!signed.contains('\r'));
        assert!(
            signed.contains("Packages\n-----BEGIN PGP SIGNATURE-----\n"),
            "{signed}"
        );
        let sig = key.detached(text.as_bytes()).unwrap();
        let (sig, _) = DetachedSignature::from_string(&sig).unwrap();
        sig.verify(&public, text.as_bytes()).unwrap();
        assert!(sig.verify(&public, b"tampered").is_err());
    }
}
