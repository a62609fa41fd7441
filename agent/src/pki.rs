//! The site's certificates: a site CA made once on the appliance, and the agent's serving certificate, which
//! that CA signs and `foothold-agent pki` renews.
//!
//! One directory (the appliance's `/etc/foothold/tls`) holds:
//! - `ca.pem` and `ca-key.pem`: the site CA (`CA:TRUE, pathlen:0`, key usage `keyCertSign, cRLSign`, ten
//!   years), what node images and clients trust. Made when both are missing; never replaced here, since every
//!   node trusts it: one without the other is an error, except a certificate made before the appliance (given
//!   in its image's spec), whose key [`import_ca_key`] takes from the operator's medium.
//! - `cert.pem` and `key.pem`: the agent's leaf (`CA:FALSE`, `serverAuth`, at most 397 days) followed by the
//!   CA, and its key. Issued again when missing, not the CA's, for other names, or past two-thirds of its life.
//!   The key is written before the certificate; the agent reloads the pair when they change and match
//!   (`http::serve`), so a renewal needs no restart.
//!
//! Every file is written whole (temporary name, fsync, rename, fsync of the directory); keys are 0600.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PublicKeyData as _, SerialNumber,
};
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

/// The site CA's life: nodes built with it trust it as long.
pub const CA_LIFETIME: Duration = Duration::from_secs(10 * 365 * 86_400);
/// The longest a serving certificate may live (what browsers and the CA/Browser Forum accept).
pub const MAX_LEAF_LIFETIME: Duration = Duration::from_secs(397 * 86_400);
/// How far a new certificate's `notBefore` lies in the past, for clients whose clocks are behind: an hour, or
/// a tenth of a shorter life (which would otherwise be two-thirds gone when issued).
fn backdate(lifetime: Duration) -> Duration {
    Duration::from_secs(3600).min(lifetime / 10)
}

/// The files of a PKI directory.
#[derive(Clone, Debug)]
pub struct Paths {
    pub ca: PathBuf,
    pub ca_key: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Paths {
    pub fn new(dir: &Path) -> Paths {
        Paths {
            ca: dir.join("ca.pem"),
            ca_key: dir.join("ca-key.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        }
    }
}

/// What [`ensure`] did.
#[derive(Debug, PartialEq)]
pub struct Report {
    /// Whether the site CA was made now.
    pub ca_made: bool,
    pub ca_expires: SystemTime,
    /// Why the serving certificate was issued now, or `None` if it was kept.
    pub issued: Option<String>,
    pub expires: SystemTime,
    /// When [`ensure`] will issue it again: two-thirds into its life.
    pub renew_after: SystemTime,
}

/// A certificate's validity, and what [`ensure`] compares.
#[derive(Clone, Debug, PartialEq)]
pub struct CertInfo {
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    pub is_ca: bool,
    /// DNS names and IP addresses, as text.
    pub names: BTreeSet<String>,
}

impl CertInfo {
    /// Two-thirds into the validity: when a renewal is due.
    pub fn renew_after(&self) -> SystemTime {
        let life = self
            .not_after
            .duration_since(self.not_before)
            .unwrap_or_default();
        self.not_before + life * 2 / 3
    }
}

/// Makes the site CA if there is none, and issues the serving certificate for `names` (DNS names or IP
/// addresses; the first is its common name) if it is due, valid for `lifetime` from `now`.
pub fn ensure(
    paths: &Paths,
    names: &[String],
    lifetime: Duration,
    now: SystemTime,
) -> Result<Report> {
    if names.is_empty() {
        bail!("a serving certificate needs at least one name");
    }
    if lifetime.is_zero() || lifetime > MAX_LEAF_LIFETIME {
        bail!(
            "a serving certificate's lifetime must be between 1 s and 397 days, not {} s",
            lifetime.as_secs()
        );
    }
    let ca = site_ca(paths, &names[0], now)?;
    let (_, ca_cert) = X509Certificate::from_der(&ca.der)
        .map_err(|e| anyhow!("{}: not a certificate: {e}", paths.ca.display()))?;
    let ca_expires = info(&ca_cert)
        .with_context(|| format!("{}", paths.ca.display()))?
        .not_after;
    let wanted: BTreeSet<String> = names.iter().map(|n| normalise(n)).collect();
    let current = if ca.made {
        Err("the site CA is new".to_string())
    } else {
        current(paths, &ca_cert, &wanted, now)
    };
    let reason = match current {
        Ok(kept) => {
            return Ok(Report {
                ca_made: false,
                ca_expires,
                issued: None,
                expires: kept.not_after,
                renew_after: kept.renew_after(),
            })
        }
        Err(reason) => reason,
    };
    let issuer = Issuer::from_ca_cert_der(&ca.der.clone().into(), &ca.key)
        .map_err(|e| anyhow!("{}: {e}", paths.ca.display()))?;
    let (leaf_der, leaf_pem, key_pem) = issue_leaf(&issuer, names, lifetime, now)?;
    let (_, leaf) = X509Certificate::from_der(&leaf_der)
        .map_err(|e| anyhow!("the certificate just issued: {e}"))?;
    let leaf = info(&leaf)?;
    write(&paths.key, key_pem.as_bytes(), 0o600)?;
    let ca_pem = ca.pem.trim_end();
    write(
        &paths.cert,
        format!("{leaf_pem}{ca_pem}\n").as_bytes(),
        0o644,
    )?;
    Ok(Report {
        ca_made: ca.made,
        ca_expires,
        issued: Some(reason),
        expires: leaf.not_after,
        renew_after: leaf.renew_after(),
    })
}

/// The site CA as [`site_ca`] finds or makes it.
struct SiteCa {
    /// Its certificate, as in `ca.pem`.
    pem: String,
    der: Vec<u8>,
    key: KeyPair,
    /// Whether it was made now.
    made: bool,
}

/// The label of the file system an operator brings a site CA's key on (`ca-key.pem` at its top), when the CA
/// was made before the appliance and only its certificate is in the image.
pub const CA_KEY_LABEL: &str = "FOOTHOLD-CA";

/// Takes the site CA's key from `file` when `ca.pem` is there without it (a CA made before the appliance,
/// whose image carries the certificate only): checked against the certificate, then written as `ca-key.pem`
/// (0600). Returns whether it was taken; a key already in place is left as it is (and [`ensure`] checks it).
pub fn import_ca_key(paths: &Paths, file: &Path) -> Result<bool> {
    if paths.ca_key.exists() || !paths.ca.exists() {
        return Ok(false);
    }
    let key_pem =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let key = KeyPair::from_pem(&key_pem)
        .map_err(|e| anyhow!("{}: not a private key: {e}", file.display()))?;
    let pem = std::fs::read_to_string(&paths.ca)
        .with_context(|| format!("reading {}", paths.ca.display()))?;
    let der = pem_certs(&pem)
        .with_context(|| format!("{}", paths.ca.display()))?
        .remove(0);
    let (_, cert) = X509Certificate::from_der(&der)
        .map_err(|e| anyhow!("{}: not a certificate: {e}", paths.ca.display()))?;
    if cert.public_key().raw != key.subject_public_key_info().as_slice() {
        bail!(
            "{} is not the key of the site CA {} ({})",
            file.display(),
            paths.ca.display(),
            cert.subject()
        );
    }
    write(&paths.ca_key, key.serialize_pem().as_bytes(), 0o600)?;
    Ok(true)
}

/// The site CA, made now if neither of its files exists. Its name has the appliance's (`host`) and a random part: certificates of another site's CA, even of the
/// same host name, are then of an unknown issuer, not a bad signature.
fn site_ca(paths: &Paths, host: &str, now: SystemTime) -> Result<SiteCa> {
    match (paths.ca.exists(), paths.ca_key.exists()) {
        (true, true) => {
            let pem = std::fs::read_to_string(&paths.ca)
                .with_context(|| format!("reading {}", paths.ca.display()))?;
            let key_pem = std::fs::read_to_string(&paths.ca_key)
                .with_context(|| format!("reading {}", paths.ca_key.display()))?;
            let key = KeyPair::from_pem(&key_pem)
                .map_err(|e| anyhow!("{}: not a private key: {e}", paths.ca_key.display()))?;
            let der = pem_certs(&pem)
                .with_context(|| format!("{}", paths.ca.display()))?
                .remove(0);
            let (_, cert) = X509Certificate::from_der(&der)
                .map_err(|e| anyhow!("{}: not a certificate: {e}", paths.ca.display()))?;
            if !info(&cert)?.is_ca {
                bail!("{}: not a CA certificate (CA:FALSE)", paths.ca.display());
            }
            if cert.public_key().raw != key.subject_public_key_info().as_slice() {
                bail!(
                    "{} is not the key of {}",
                    paths.ca_key.display(),
                    paths.ca.display()
                );
            }
            Ok(SiteCa {
                pem,
                der,
                key,
                made: false,
            })
        }
        (false, false) => {
            let key = KeyPair::generate().context("generating the site CA's key")?;
            let mut params = CertificateParams::default();
            params.distinguished_name = rcgen::DistinguishedName::new();
            params.distinguished_name.push(
                DnType::CommonName,
                format!("Foothold site CA {host} {:08x}", rand::random::<u32>()),
            );
            params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
            params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
            params.not_before = (now - backdate(CA_LIFETIME)).into();
            params.not_after = (now + CA_LIFETIME).into();
            params.serial_number = Some(serial());
            let cert = params
                .self_signed(&key)
                .context("signing the site CA's certificate")?;
            write(&paths.ca_key, key.serialize_pem().as_bytes(), 0o600)?;
            write(&paths.ca, cert.pem().as_bytes(), 0o644)?;
            Ok(SiteCa {
                pem: cert.pem(),
                der: cert.der().to_vec(),
                key,
                made: true,
            })
        }
        (true, false) => bail!(
            "{} exists but {} does not: a site CA made before the appliance (components.siteCa of the image's \
             spec) takes its key from a file system labelled {CA_KEY_LABEL} holding ca-key.pem, plugged in at boot, \
             or from `foothold-agent pki --ca-key FILE`; restore it if it was lost (nodes trust this CA)",
            paths.ca.display(),
            paths.ca_key.display()
        ),
        (ca, _) => {
            let (have, missing) = if ca {
                (&paths.ca, &paths.ca_key)
            } else {
                (&paths.ca_key, &paths.ca)
            };
            bail!(
                "{} exists but {} does not: the site CA is half there; restore the missing file (nodes trust this CA) \
                 or remove both to make a new CA",
                have.display(),
                missing.display()
            )
        }
    }
}

/// The serving certificate in place, if it is to be kept; else why it must be issued again.
fn current(
    paths: &Paths,
    ca: &X509Certificate<'_>,
    wanted: &BTreeSet<String>,
    now: SystemTime,
) -> Result<CertInfo, String> {
    let (Ok(cert_pem), Ok(key_pem)) = (
        std::fs::read_to_string(&paths.cert),
        std::fs::read_to_string(&paths.key),
    ) else {
        return Err("there is none".into());
    };
    let Ok(key) = KeyPair::from_pem(&key_pem) else {
        return Err(format!("{} is not a private key", paths.key.display()));
    };
    let der = match pem_certs(&cert_pem) {
        Ok(mut certs) => certs.remove(0),
        Err(e) => return Err(format!("{}: {e}", paths.cert.display())),
    };
    let Ok((_, leaf)) = X509Certificate::from_der(&der) else {
        return Err(format!("{} is not a certificate", paths.cert.display()));
    };
    let Ok(leaf_info) = info(&leaf) else {
        return Err(format!(
            "{}'s extensions are unreadable",
            paths.cert.display()
        ));
    };
    if leaf.public_key().raw != key.subject_public_key_info().as_slice() {
        return Err(format!("{} is not its key", paths.key.display()));
    }
    if leaf_info.is_ca || leaf.verify_signature(Some(ca.public_key())).is_err() {
        return Err("it is not the site CA's (an older self-signed one)".into());
    }
    if &leaf_info.names != wanted {
        return Err(format!(
            "its names changed ({} → {})",
            Vec::from_iter(leaf_info.names.iter().cloned()).join(","),
            Vec::from_iter(wanted.iter().cloned()).join(",")
        ));
    }
    if now >= leaf_info.not_after {
        return Err("it expired".into());
    }
    if now >= leaf_info.renew_after() {
        return Err("it is past two-thirds of its life".into());
    }
    Ok(leaf_info)
}

/// A serving certificate for `names` signed by `issuer` (DER and PEM), and its new key (PEM).
fn issue_leaf(
    issuer: &Issuer<'_, &KeyPair>,
    names: &[String],
    lifetime: Duration,
    now: SystemTime,
) -> Result<(Vec<u8>, String, String)> {
    let key = KeyPair::generate().context("generating the serving certificate's key")?;
    let mut params = CertificateParams::new(names.to_vec())
        .map_err(|e| anyhow!("names {}: {e}", names.join(",")))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, names[0].as_str());
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = (now - backdate(lifetime)).into();
    params.not_after = (now + lifetime).into();
    params.serial_number = Some(serial());
    let cert = params
        .signed_by(&key, issuer)
        .context("signing the serving certificate")?;
    Ok((cert.der().to_vec(), cert.pem(), key.serialize_pem()))
}

/// A random positive 128-bit serial number.
fn serial() -> SerialNumber {
    let mut bytes: [u8; 16] = rand::random();
    bytes[0] &= 0x7f;
    bytes[0] |= 0x01;
    SerialNumber::from_slice(&bytes)
}

/// The first certificate of the PEM file at `path`.
pub fn read_cert(path: &Path) -> Result<CertInfo> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let der = pem_certs(&text)
        .with_context(|| format!("{}", path.display()))?
        .remove(0);
    let (_, cert) = X509Certificate::from_der(&der)
        .map_err(|e| anyhow!("{}: not a certificate: {e}", path.display()))?;
    info(&cert).with_context(|| format!("{}", path.display()))
}

/// The DER of every certificate in a PEM text (at least one).
pub fn pem_certs(text: &str) -> Result<Vec<Vec<u8>>> {
    let certs: Vec<Vec<u8>> = rustls::pki_types::pem::PemObject::pem_slice_iter(text.as_bytes())
        .collect::<Result<Vec<rustls::pki_types::CertificateDer<'static>>, _>>()
        .map_err(|e| anyhow!("not PEM certificates: {e}"))?
        .into_iter()
        .map(|c| c.to_vec())
        .collect();
    if certs.is_empty() {
        bail!("no certificate in it");
    }
    Ok(certs)
}

fn info(cert: &X509Certificate<'_>) -> Result<CertInfo> {
    let time = |t: i64| UNIX_EPOCH + Duration::from_secs(t.max(0) as u64);
    let is_ca = cert
        .basic_constraints()
        .map_err(|e| anyhow!("basicConstraints: {e}"))?
        .is_some_and(|bc| bc.value.ca);
    let mut names = BTreeSet::new();
    if let Some(san) = cert
        .subject_alternative_name()
        .map_err(|e| anyhow!("subjectAltName: {e}"))?
    {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(n) => {
                    names.insert(n.to_string());
                }
                GeneralName::IPAddress(bytes) => {
                    if let Some(ip) = ip_from(bytes) {
                        names.insert(ip.to_string());
                    }
                }
                _ => {}
            }
        }
    }
    Ok(CertInfo {
        not_before: time(cert.validity().not_before.timestamp()),
        not_after: time(cert.validity().not_after.timestamp()),
        is_ca,
        names,
    })
}

fn ip_from(bytes: &[u8]) -> Option<IpAddr> {
    match bytes.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(bytes).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(bytes).ok()?)),
        _ => None,
    }
}

/// A name as the certificate shows it: an IP address in its canonical text.
fn normalise(name: &str) -> String {
    match name.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => name.to_string(),
    }
}

/// The names of an OpenSSL `subjectAltName` list (`DNS:a,IP:10.0.0.1`), as the builder writes
/// `/etc/foothold/tls-names`.
pub fn parse_san_list(text: &str) -> Result<Vec<String>> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|entry| match entry.split_once(':') {
            Some(("DNS", name)) if !name.is_empty() => Ok(name.to_string()),
            Some(("IP", ip)) => ip
                .parse::<IpAddr>()
                .map(|ip| ip.to_string())
                .map_err(|_| anyhow!("{entry:?}: not an IP address")),
            _ => Err(anyhow!("{entry:?}: expected DNS:<name> or IP:<address>")),
        })
        .collect()
}

/// A lifetime as `<n>d`, `<n>h`, `<n>m` or `<n>s`.
pub fn parse_lifetime(text: &str) -> Result<Duration, String> {
    let (n, unit) = text.split_at(text.len().saturating_sub(1));
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{text:?}: expected a number and d, h, m or s (e.g. 397d)"))?;
    let secs = match unit {
        "d" => n * 86_400,
        "h" => n * 3600,
        "m" => n * 60,
        "s" => n,
        _ => {
            return Err(format!(
                "{text:?}: expected a number and d, h, m or s (e.g. 397d)"
            ))
        }
    };
    Ok(Duration::from_secs(secs))
}

fn write(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    crate::apt::durable::write_file(path, bytes, mode)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests;
