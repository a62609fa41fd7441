//! The part of OpenPGP (RFC 9580: v4 keys and signatures) the apt repository's key needs: an Ed25519 key (the
//! `EdDSALegacy` algorithm, 22, which apt's verifiers accept), its transferable secret and public keys, and v4
//! signatures of binary data (`Release.gpg`) and of cleartext (`InRelease`), hashed with SHA-512. Made with
//! ring, which rustls brings: an OpenPGP library brought a second generation of RustCrypto (about 120 crates)
//! into the agent's build for this. Checked by GnuPG's gpgv (the unit tests), and by apt itself
//! (`tests/http/apt.rs` on bookworm, `tests/node_image.rs` on a trixie node).

use std::io;

use base64::Engine as _;
use ring::digest;
use ring::rand::{SecureRandom as _, SystemRandom};
use ring::signature::{Ed25519KeyPair, KeyPair as _};

const ALGORITHM_EDDSA_LEGACY: u8 = 22;
/// Ed25519's curve OID (1.3.6.1.4.1.11591.15.1), as a key packet writes it.
const ED25519_OID: [u8; 9] = [0x2b, 0x06, 0x01, 0x04, 0x01, 0xda, 0x47, 0x0f, 0x01];
const HASH_SHA512: u8 = 10;
const TAG_SIGNATURE: u8 = 2;
const TAG_SECRET_KEY: u8 = 5;
const TAG_PUBLIC_KEY: u8 = 6;
const TAG_USER_ID: u8 = 13;
const SIGNATURE_BINARY: u8 = 0x00;
const SIGNATURE_TEXT: u8 = 0x01;
const SIGNATURE_POSITIVE_CERTIFICATION: u8 = 0x13;
const SUBPACKET_CREATED: u8 = 2;
const SUBPACKET_ISSUER: u8 = 16;
const SUBPACKET_KEY_FLAGS: u8 = 27;
const SUBPACKET_ISSUER_FINGERPRINT: u8 = 33;
/// Key flags: certifies other keys (its user ID) and signs data.
const FLAGS_CERTIFY_SIGN: u8 = 0x03;

fn invalid(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

/// An Ed25519 signing key with its creation time and user ID.
pub struct Key {
    pair: Ed25519KeyPair,
    seed: [u8; 32],
    created: u32,
    user_id: String,
}

impl Key {
    /// A new key created at `created` (Unix time) from the system's random source.
    pub fn generate(user_id: &str, created: u32) -> io::Result<Key> {
        let mut seed = [0u8; 32];
        SystemRandom::new()
            .fill(&mut seed)
            .map_err(|_| io::Error::other("no random bytes for the key"))?;
        Key::from_seed(seed, created, user_id.to_owned())
    }

    fn from_seed(seed: [u8; 32], created: u32, user_id: String) -> io::Result<Key> {
        let pair = Ed25519KeyPair::from_seed_unchecked(&seed)
            .map_err(|e| invalid(format!("the Ed25519 seed: {e}")))?;
        Ok(Key {
            pair,
            seed,
            created,
            user_id,
        })
    }

    /// The key of a transferable secret key (an unencrypted Ed25519 secret-key packet, then its user ID), as
    /// [`Key::secret_bytes`] and earlier agents (the `pgp` crate) wrote it.
    pub fn from_secret_bytes(bytes: &[u8]) -> io::Result<Key> {
        let packets = packets(bytes)?;
        let Some(&(TAG_SECRET_KEY, body)) = packets.first() else {
            return Err(invalid(
                "not an OpenPGP secret key: no secret-key packet first",
            ));
        };
        let user_id = packets
            .iter()
            .find(|(tag, _)| *tag == TAG_USER_ID)
            .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default();
        let mut r = Reader(body);
        if r.byte()? != 4 {
            return Err(invalid("only v4 keys are read"));
        }
        let created = u32::from_be_bytes(r.take(4)?.try_into().unwrap());
        if r.byte()? != ALGORITHM_EDDSA_LEGACY {
            return Err(invalid("only Ed25519 (EdDSALegacy) keys are read"));
        }
        let oid_len = r.byte()? as usize;
        if r.take(oid_len)? != ED25519_OID {
            return Err(invalid("the key's curve is not Ed25519"));
        }
        let public = r.mpi()?.to_vec();
        if r.byte()? != 0 {
            return Err(invalid("the secret key is encrypted"));
        }
        let secret = r.mpi()?;
        let checksum = u16::from_be_bytes(r.take(2)?.try_into().unwrap());
        if secret.len() > 32 {
            return Err(invalid("the Ed25519 secret is longer than 32 bytes"));
        }
        let mut seed = [0u8; 32];
        seed[32 - secret.len()..].copy_from_slice(secret);
        let mut mpi_bytes = Vec::new();
        mpi(&mut mpi_bytes, secret);
        let sum = mpi_bytes
            .iter()
            .fold(0u16, |s, b| s.wrapping_add(*b as u16));
        if sum != checksum {
            return Err(invalid("the secret key's checksum does not match"));
        }
        let key = Key::from_seed(seed, created, user_id)?;
        if public != key.public_point() {
            return Err(invalid("the public key does not belong to the secret key"));
        }
        Ok(key)
    }

    /// `0x40` and the Ed25519 public key: the point as the key packet holds it.
    fn public_point(&self) -> Vec<u8> {
        let mut point = vec![0x40];
        point.extend_from_slice(self.pair.public_key().as_ref());
        point
    }

    /// The public-key packet's body.
    fn public_body(&self) -> Vec<u8> {
        let mut body = vec![4];
        body.extend_from_slice(&self.created.to_be_bytes());
        body.push(ALGORITHM_EDDSA_LEGACY);
        body.push(ED25519_OID.len() as u8);
        body.extend_from_slice(&ED25519_OID);
        mpi(&mut body, &self.public_point());
        body
    }

    /// The v4 fingerprint: SHA-1 of the public key as signatures hash it.
    pub fn fingerprint(&self) -> [u8; 20] {
        let body = self.public_body();
        let mut ctx = digest::Context::new(&digest::SHA1_FOR_LEGACY_USE_ONLY);
        ctx.update(&key_hash_prefix(&body));
        ctx.update(&body);
        ctx.finish().as_ref().try_into().unwrap()
    }

    /// The fingerprint as GnuPG prints it: 40 hex digits, upper case.
    pub fn fingerprint_hex(&self) -> String {
        hex::encode_upper(self.fingerprint())
    }

    /// The transferable secret key: the secret-key packet, the user ID and its self-signature.
    pub fn secret_bytes(&self) -> Vec<u8> {
        let mut body = self.public_body();
        body.push(0); // not encrypted
        let start = body.len();
        mpi(&mut body, &self.seed);
        let sum = body[start..]
            .iter()
            .fold(0u16, |s, b| s.wrapping_add(*b as u16));
        body.extend_from_slice(&sum.to_be_bytes());
        let mut out = packet(TAG_SECRET_KEY, &body);
        out.extend(self.user_id_and_certification());
        out
    }

    /// The transferable public key: the public-key packet, the user ID and its self-signature.
    pub fn public_bytes(&self) -> Vec<u8> {
        let mut out = packet(TAG_PUBLIC_KEY, &self.public_body());
        out.extend(self.user_id_and_certification());
        out
    }

    /// The transferable public key, armored: what apt's `signed-by` names.
    pub fn public_armored(&self) -> String {
        armor("PUBLIC KEY BLOCK", &self.public_bytes())
    }

    fn user_id_and_certification(&self) -> Vec<u8> {
        let body = self.public_body();
        let uid = self.user_id.as_bytes();
        let mut hashed = key_hash_prefix(&body);
        hashed.extend_from_slice(&body);
        hashed.push(0xb4);
        hashed.extend_from_slice(&(uid.len() as u32).to_be_bytes());
        hashed.extend_from_slice(uid);
        let mut out = packet(TAG_USER_ID, uid);
        out.extend(self.signature(
            SIGNATURE_POSITIVE_CERTIFICATION,
            self.created,
            &hashed,
            Some(FLAGS_CERTIFY_SIGN),
        ));
        out
    }

    /// A v4 signature packet of type `kind` over `data` made at `created`.
    fn signature(&self, kind: u8, created: u32, data: &[u8], flags: Option<u8>) -> Vec<u8> {
        let fingerprint = self.fingerprint();
        let mut hashed = Vec::new();
        let mut issuer = vec![4];
        issuer.extend_from_slice(&fingerprint);
        subpacket(&mut hashed, SUBPACKET_ISSUER_FINGERPRINT, &issuer);
        subpacket(&mut hashed, SUBPACKET_CREATED, &created.to_be_bytes());
        if let Some(flags) = flags {
            subpacket(&mut hashed, SUBPACKET_KEY_FLAGS, &[flags]);
        }
        let mut body = vec![4, kind, ALGORITHM_EDDSA_LEGACY, HASH_SHA512];
        body.extend_from_slice(&(hashed.len() as u16).to_be_bytes());
        body.extend_from_slice(&hashed);
        let mut ctx = digest::Context::new(&digest::SHA512);
        ctx.update(data);
        ctx.update(&body);
        ctx.update(&[4, 0xff]);
        ctx.update(&(body.len() as u32).to_be_bytes());
        let hash = ctx.finish();
        // The issuer's key ID unhashed too, for verifiers older than the fingerprint subpacket.
        let mut unhashed = Vec::new();
        subpacket(&mut unhashed, SUBPACKET_ISSUER, &fingerprint[12..]);
        body.extend_from_slice(&(unhashed.len() as u16).to_be_bytes());
        body.extend_from_slice(&unhashed);
        body.extend_from_slice(&hash.as_ref()[..2]);
        let signature = self.pair.sign(hash.as_ref());
        let (r, s) = signature.as_ref().split_at(32);
        mpi(&mut body, r);
        mpi(&mut body, s);
        packet(TAG_SIGNATURE, &body)
    }

    /// A detached signature of `data` made at `created`, armored (`Release.gpg`).
    pub fn detached(&self, data: &[u8], created: u32) -> String {
        armor(
            "SIGNATURE",
            &self.signature(SIGNATURE_BINARY, created, data, None),
        )
    }

    /// `text` in the cleartext signature framework (`InRelease`), signed at `created`. Its last line end belongs
    /// to the framing (RFC 9580 §7.1): a text that ends in one is signed without it. Signed as canonical text:
    /// CRLF line ends, trailing spaces and tabs left out; lines that begin with `-` are dash-escaped.
    pub fn clearsign(&self, text: &str, created: u32) -> String {
        let text = text.strip_suffix('\n').unwrap_or(text);
        let canonical = text
            .split('\n')
            .map(|l| l.trim_end_matches([' ', '\t', '\r']))
            .collect::<Vec<_>>()
            .join("\r\n");
        let signature = self.signature(SIGNATURE_TEXT, created, canonical.as_bytes(), None);
        let mut out = String::from("-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA512\n\n");
        for line in text.split('\n') {
            if line.starts_with('-') {
                out.push_str("- ");
            }
            out.push_str(line);
            out.push('\n');
        }
        out.push_str(&armor("SIGNATURE", &signature));
        out
    }
}

/// What a key's hash starts with: `0x99` and the public key body's length.
fn key_hash_prefix(body: &[u8]) -> Vec<u8> {
    let mut prefix = vec![0x99];
    prefix.extend_from_slice(&(body.len() as u16).to_be_bytes());
    prefix
}

/// A multiprecision integer: its length in bits, then its bytes without leading zeros.
fn mpi(out: &mut Vec<u8>, bytes: &[u8]) {
    let first = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
    let bytes = &bytes[first..];
    let bits = match bytes.first() {
        Some(b) => (bytes.len() - 1) * 8 + (8 - b.leading_zeros() as usize),
        None => 0,
    };
    out.extend_from_slice(&(bits as u16).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn subpacket(out: &mut Vec<u8>, kind: u8, data: &[u8]) {
    debug_assert!(data.len() + 1 < 192);
    out.push(data.len() as u8 + 1);
    out.push(kind);
    out.extend_from_slice(data);
}

/// A packet with a new-format header.
fn packet(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![0xc0 | tag];
    match body.len() {
        n if n < 192 => out.push(n as u8),
        n if n < 8384 => {
            let n = n - 192;
            out.push((n >> 8) as u8 + 192);
            out.push(n as u8);
        }
        n => {
            out.push(0xff);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
    }
    out.extend_from_slice(body);
    out
}

/// The packets of `bytes` as (tag, body), old- and new-format headers alike (no partial lengths).
fn packets(mut bytes: &[u8]) -> io::Result<Vec<(u8, &[u8])>> {
    let mut out = Vec::new();
    while let Some(&first) = bytes.first() {
        if first & 0x80 == 0 {
            return Err(invalid("not an OpenPGP packet header"));
        }
        let mut r = Reader(&bytes[1..]);
        let (tag, len) = if first & 0x40 != 0 {
            let tag = first & 0x3f;
            let len = match r.byte()? as usize {
                n if n < 192 => n,
                n if n < 224 => ((n - 192) << 8) + r.byte()? as usize + 192,
                255 => u32::from_be_bytes(r.take(4)?.try_into().unwrap()) as usize,
                _ => return Err(invalid("partial packet lengths are not read")),
            };
            (tag, len)
        } else {
            let tag = (first >> 2) & 0x0f;
            let len = match first & 0x03 {
                0 => r.byte()? as usize,
                1 => u16::from_be_bytes(r.take(2)?.try_into().unwrap()) as usize,
                2 => u32::from_be_bytes(r.take(4)?.try_into().unwrap()) as usize,
                _ => return Err(invalid("indeterminate packet lengths are not read")),
            };
            (tag, len)
        };
        let body = r.take(len)?;
        out.push((tag, body));
        bytes = r.0;
    }
    Ok(out)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> io::Result<&'a [u8]> {
        if self.0.len() < n {
            return Err(invalid("an OpenPGP packet ends early"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn byte(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }

    fn mpi(&mut self) -> io::Result<&'a [u8]> {
        let bits = u16::from_be_bytes(self.take(2)?.try_into().unwrap()) as usize;
        self.take(bits.div_ceil(8))
    }
}

/// ASCII armor: base64 in lines of 64, and the CRC-24 checksum older verifiers want.
fn armor(kind: &str, data: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut out = format!("-----BEGIN PGP {kind}-----\n\n");
    for chunk in data.chunks(48) {
        out.push_str(&b64.encode(chunk));
        out.push('\n');
    }
    out.push('=');
    out.push_str(&b64.encode(&crc24(data).to_be_bytes()[1..]));
    out.push_str(&format!("\n-----END PGP {kind}-----\n"));
    out
}

fn crc24(data: &[u8]) -> u32 {
    let mut crc: u32 = 0x00b7_04ce;
    for b in data {
        crc ^= (*b as u32) << 16;
        for _ in 0..8 {
            crc <<= 1;
            if crc & 0x0100_0000 != 0 {
                crc ^= 0x0186_4cfb;
            }
        }
    }
    crc & 0x00ff_ffff
}

#[cfg(test)]
pub(crate) mod tests;
