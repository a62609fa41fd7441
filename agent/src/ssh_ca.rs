//! The site's SSH host CA: how a compute node proves to the installer that it is the host the appliance
//! provisioned, not whoever answers at its address.
//!
//! One directory (the appliance's `/etc/foothold/ssh-ca`) holds `ca`, an Ed25519 key made once (0600), and
//! `ca.pub`, its public half. `foothold-agent ssh-host-key` signs a node's host key with it: a host certificate
//! (`ssh-ed25519-cert-v01@openssh.com`) naming the node's host names and addresses as principals, delivered
//! with the node's config drive (cloud-init's `ssh_keys`, which also points sshd's `HostCertificate` at it).
//! The installer, given `ca.pub` (the BPA's Jobs get it as `SSH_HOST_CA`), asks hosts for certificates and
//! connects only to one whose certificate [`HostCa::check`] accepts: a plain key, another CA's certificate, an
//! expired one or one for other names is refused, naming the host and the key's fingerprint.
//!
//! The CA is never replaced here: nodes provisioned with its certificates are known by it. Its key is written
//! whole (temporary name, fsync, rename, fsync of the directory) before its public half.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use rand::TryRngCore as _;
use russh::keys::ssh_key::certificate::{Builder, CertType};
use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::ssh_key::public::KeyData;
use russh::keys::ssh_key::LineEnding;
use russh::keys::{Certificate, HashAlg, PrivateKey, PublicKey};

/// The longest a host certificate may live; a node provisioned again gets a new one.
pub const MAX_CERTIFICATE_LIFETIME: Duration = Duration::from_secs(397 * 86_400);
/// How far back a certificate's validity starts: a node whose clock is a little behind still accepts it.
const BACKDATE: Duration = Duration::from_secs(300);

/// The CA's two files in its directory.
pub struct Paths {
    pub key: PathBuf,
    pub public: PathBuf,
}

impl Paths {
    pub fn new(dir: &Path) -> Paths {
        Paths {
            key: dir.join("ca"),
            public: dir.join("ca.pub"),
        }
    }
}

/// 32 bytes from the operating system's random source.
fn random_bytes() -> Result<[u8; 32]> {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .map_err(|e| anyhow!("the operating system's random source: {e}"))?;
    Ok(bytes)
}

/// A new Ed25519 key with `comment`.
pub fn new_key(comment: &str) -> Result<PrivateKey> {
    let mut key = PrivateKey::from(Ed25519Keypair::from_seed(&random_bytes()?));
    key.set_comment(comment);
    Ok(key)
}

/// The site SSH CA in `dir`, made when both its files are missing (and `true` then). One without the other is
/// an error: the CA is never replaced here.
pub fn ensure(dir: &Path) -> Result<(PrivateKey, bool)> {
    let paths = Paths::new(dir);
    match (paths.key.exists(), paths.public.exists()) {
        (true, true) => {
            let text = std::fs::read_to_string(&paths.key)
                .with_context(|| format!("reading {}", paths.key.display()))?;
            let key = PrivateKey::from_openssh(&text)
                .map_err(|e| anyhow!("{}: not an OpenSSH private key: {e}", paths.key.display()))?;
            let public = read_public(&paths.public)?;
            if public.key_data() != key.public_key().key_data() {
                bail!(
                    "{} is not the public half of {}: the site SSH CA is never replaced here; restore the pair",
                    paths.public.display(),
                    paths.key.display()
                );
            }
            Ok((key, false))
        }
        (false, false) => {
            std::fs::create_dir_all(dir).with_context(|| format!("making {}", dir.display()))?;
            let key = new_key("foothold site SSH host CA")?;
            let private = key
                .to_openssh(LineEnding::LF)
                .map_err(|e| anyhow!("encoding the CA key: {e}"))?;
            write(&paths.key, private.as_bytes(), 0o600)?;
            let public = key
                .public_key()
                .to_openssh()
                .map_err(|e| anyhow!("encoding the CA's public key: {e}"))?;
            write(&paths.public, format!("{public}\n").as_bytes(), 0o644)?;
            Ok((key, true))
        }
        (key, _) => bail!(
            "{} is there but {} is not: the site SSH CA is never replaced here; restore the pair",
            if key { &paths.key } else { &paths.public }.display(),
            if key { &paths.public } else { &paths.key }.display(),
        ),
    }
}

fn read_public(path: &Path) -> Result<PublicKey> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    PublicKey::from_openssh(text.trim())
        .map_err(|e| anyhow!("{}: not an OpenSSH public key: {e}", path.display()))
}

fn write(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    crate::apt::durable::write_file(path, bytes, mode)
        .with_context(|| format!("writing {}", path.display()))
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A host certificate for `host` signed by `ca`: valid from a few minutes before `now` for `lifetime` (at most
/// [`MAX_CERTIFICATE_LIFETIME`]), for `principals` (the names and addresses the installer reaches the host by;
/// at least one).
pub fn certify(
    ca: &PrivateKey,
    host: &KeyData,
    principals: &[String],
    lifetime: Duration,
    now: SystemTime,
) -> Result<Certificate> {
    if principals.is_empty() {
        bail!("a host certificate needs at least one principal: the host's name or address");
    }
    if lifetime > MAX_CERTIFICATE_LIFETIME {
        bail!(
            "a host certificate lives at most {} days",
            MAX_CERTIFICATE_LIFETIME.as_secs() / 86_400
        );
    }
    let after = unix(now).saturating_sub(BACKDATE.as_secs());
    let before = unix(now) + lifetime.as_secs();
    let mut b = Builder::new(random_bytes()?.to_vec(), host.clone(), after, before)
        .map_err(|e| anyhow!("{e}"))?;
    let serial = u64::from_be_bytes(random_bytes()?[..8].try_into().unwrap_or_default());
    b.serial(serial).map_err(|e| anyhow!("{e}"))?;
    b.cert_type(CertType::Host).map_err(|e| anyhow!("{e}"))?;
    b.key_id(principals[0].clone())
        .map_err(|e| anyhow!("{e}"))?;
    for p in principals {
        b.valid_principal(p.clone()).map_err(|e| anyhow!("{e}"))?;
    }
    b.sign(ca)
        .map_err(|e| anyhow!("signing the host certificate: {e}"))
}

/// The `#cloud-config` that installs `key` as the node's only host key with `cert` as its certificate
/// (cloud-init's `ssh_keys`; it deletes the image's host keys and sets sshd's `HostCertificate`). A node's
/// user data is one YAML mapping: these lines go beside the operator's own keys (`ssh_authorized_keys`, …).
pub fn cloud_config(key: &PrivateKey, cert: &Certificate) -> Result<String> {
    let private = key
        .to_openssh(LineEnding::LF)
        .map_err(|e| anyhow!("encoding the host key: {e}"))?;
    let public = key
        .public_key()
        .to_openssh()
        .map_err(|e| anyhow!("encoding the host key: {e}"))?;
    let cert = cert
        .to_openssh()
        .map_err(|e| anyhow!("encoding the certificate: {e}"))?;
    let mut out = String::from(
        "#cloud-config\n# The node's SSH host key and its certificate from the site SSH CA (foothold-agent ssh-host-key).\n\
         ssh_deletekeys: true\nssh_keys:\n  ed25519_private: |\n",
    );
    for line in private.lines() {
        out.push_str("    ");
        out.push_str(line);
        out.push('\n');
    }
    out.push_str(&format!(
        "  ed25519_public: {public}\n  ed25519_certificate: {cert}\n"
    ));
    Ok(out)
}

/// The site SSH CA as the installer holds hosts to it: its public key.
#[derive(Clone, Debug)]
pub struct HostCa {
    key: KeyData,
}

impl HostCa {
    /// The CA from its public key in OpenSSH's one-line form (`ca.pub`, or `SSH_HOST_CA`).
    pub fn parse(text: &str) -> Result<HostCa, String> {
        let key = PublicKey::from_openssh(text.trim())
            .map_err(|e| format!("not an OpenSSH public key ({e})"))?;
        Ok(HostCa {
            key: key.key_data().clone(),
        })
    }

    pub fn fingerprint(&self) -> String {
        self.key.fingerprint(HashAlg::Sha256).to_string()
    }

    /// Whether `cert` vouches for a host reached as any of `names` at `now`: a host certificate, signed by
    /// this CA, valid now, naming one of `names`. The reason when it does not.
    pub fn check(&self, cert: &Certificate, names: &[&str], now: SystemTime) -> Result<(), String> {
        if cert.signature_key() != &self.key {
            return Err(format!(
                "its certificate is signed by {}, not by the site SSH CA",
                cert.signature_key().fingerprint(HashAlg::Sha256)
            ));
        }
        if cert.cert_type() != CertType::Host {
            return Err("its certificate is a user certificate, not a host certificate".into());
        }
        let t = unix(now);
        if t < cert.valid_after() {
            return Err(format!(
                "its certificate is not valid before {} (Unix time; now {t})",
                cert.valid_after()
            ));
        }
        if t >= cert.valid_before() {
            return Err(format!(
                "its certificate expired at {} (Unix time; now {t})",
                cert.valid_before()
            ));
        }
        let fingerprint = self.key.fingerprint(HashAlg::Sha256);
        cert.validate_at(t, [&fingerprint])
            .map_err(|e| format!("its certificate does not verify: {e}"))?;
        if !cert
            .valid_principals()
            .iter()
            .any(|p| names.contains(&p.as_str()))
        {
            return Err(format!(
                "its certificate is for {:?}, not for {}",
                cert.valid_principals(),
                names.join(" or ")
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
