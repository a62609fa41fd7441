//! Foothold's OpenPGP checked by GnuPG's gpgv, the verifier apt runs on bookworm (apt depends on it): our
//! public key is its keyring, and it verifies every signature, clearsigned and detached, names our fingerprint
//! and the signature's time, and refuses tampered text. A key an earlier agent made with the `pgp` crate
//! (`earlier-agent-*.pgp`, made for this test only) loads with the fingerprint it had.

use super::*;
use std::path::{Path, PathBuf};
use std::process::Command;

const USER: &str = "Foothold test <apt@foothold.invalid>";

/// A signature's creation time: now, since gpgv refuses a signature older than its key.
fn now() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as u32
}

/// The fixture's fingerprint, as the `pgp` crate computed it when it made the key.
const EARLIER_FINGERPRINT: &str = "DFC7E9700DDCE473069BE07F38370B99DEB9E478";

fn fixture(name: &str) -> Vec<u8> {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "src/apt/openpgp", name]
        .iter()
        .collect();
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// gpgv with `keyring` (binary OpenPGP packets) on `files` in `dir`: its status and messages, `Err` when it
/// refused.
pub(crate) fn gpgv(keyring: &[u8], dir: &Path, files: &[(&str, &[u8])]) -> Result<String, String> {
    let home = dir.join("gnupg");
    std::fs::create_dir_all(&home).unwrap();
    let ring = home.join("keyring.gpg");
    std::fs::write(&ring, keyring).unwrap();
    let mut cmd = Command::new("gpgv");
    cmd.arg("--homedir")
        .arg(&home)
        .arg("--keyring")
        .arg(&ring)
        .args(["--status-fd", "1"]);
    for (name, bytes) in files {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        cmd.arg(path);
    }
    let out = cmd
        .output()
        .expect("gpgv (Debian's gpgv, which apt depends on)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(text)
    }
}

/// The armor's content, its CRC-24 checked.
fn dearmor(text: &str) -> Vec<u8> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let body: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.is_empty())
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    let (crc, data): (Vec<&str>, Vec<&str>) = body.iter().partition(|l| l.starts_with('='));
    let bytes = b64.decode(data.concat()).unwrap();
    let crc = b64.decode(&crc[0][1..]).unwrap();
    assert_eq!(crc, &crc24(&bytes).to_be_bytes()[1..], "the armor's CRC-24");
    bytes
}

#[test]
fn gpgv_verifies_clearsigned_and_detached_signatures_and_refuses_tampering() {
    let key = Key::generate(USER, now()).unwrap();
    let when = now();
    let dir = tempfile::tempdir().unwrap();
    let ring = dearmor(&key.public_armored());
    let valid = format!("VALIDSIG {} ", key.fingerprint_hex());

    // Dash-escaped lines, trailing blanks (not signed), and a text with and without its last line end.
    for text in [
        "Origin: Foothold\nSHA256:\n abc 1 main/binary-amd64/Packages\n",
        "- a line that begins with a dash  \n--\nlast, no line end\t",
    ] {
        let signed = key.clearsign(text, when);
        let status = gpgv(&ring, dir.path(), &[("InRelease", signed.as_bytes())])
            .unwrap_or_else(|e| panic!("{e}\n{signed}"));
        assert!(status.contains(&valid), "{status}");
        assert!(
            status.contains(&format!(" {when} ")),
            "the signature's time: {status}"
        );
        assert!(!signed.contains('\r'));
        let tampered = signed
            .replacen("Foothold", "Foothole", 1)
            .replacen("dash", "dish", 1);
        let refused = gpgv(&ring, dir.path(), &[("InRelease", tampered.as_bytes())]).unwrap_err();
        assert!(refused.contains("BADSIG"), "{refused}");
    }
    // No blank line before the signature, which apt's splitter refuses.
    let signed = key.clearsign("a\nb\n", when);
    assert!(
        signed.starts_with(
            "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA512\n\na\nb\n-----BEGIN PGP SIGNATURE-----\n"
        ),
        "{signed}"
    );

    let data = b"Origin: Foothold\n\x00binary";
    let sig = key.detached(data, when);
    let status = gpgv(
        &ring,
        dir.path(),
        &[("Release.gpg", sig.as_bytes()), ("Release", data)],
    )
    .unwrap();
    assert!(status.contains(&valid), "{status}");
    let refused = gpgv(
        &ring,
        dir.path(),
        &[("Release.gpg", sig.as_bytes()), ("Release", b"tampered")],
    )
    .unwrap_err();
    assert!(refused.contains("BADSIG"), "{refused}");
}

#[test]
fn the_secret_key_round_trips() {
    let key = Key::generate(USER, now()).unwrap();
    let again = Key::from_secret_bytes(&key.secret_bytes()).unwrap();
    assert_eq!(again.fingerprint(), key.fingerprint());
    assert_eq!(again.public_armored(), key.public_armored());
}

#[test]
fn a_key_an_earlier_agent_made_keeps_its_fingerprint() {
    let key = Key::from_secret_bytes(&fixture("earlier-agent-secret.pgp")).unwrap();
    assert_eq!(key.fingerprint_hex(), EARLIER_FINGERPRINT);
    // Signed with the key as loaded, verified with the public key the `pgp` crate wrote.
    let dir = tempfile::tempdir().unwrap();
    let signed = key.clearsign("x\n", now());
    let status = gpgv(
        &fixture("earlier-agent-public.pgp"),
        dir.path(),
        &[("InRelease", signed.as_bytes())],
    )
    .unwrap();
    assert!(
        status.contains(&format!("VALIDSIG {EARLIER_FINGERPRINT} ")),
        "{status}"
    );
}

#[test]
fn damaged_or_foreign_secret_keys_are_refused_with_the_reason() {
    let key = Key::generate(USER, now()).unwrap();
    let bytes = key.secret_bytes();
    let why = |b: &[u8]| Key::from_secret_bytes(b).err().unwrap().to_string();
    assert_eq!(why(&bytes[..20]), "an OpenPGP packet ends early");
    assert_eq!(why(b"not a key"), "not an OpenPGP packet header");
    assert_eq!(
        why(&key.public_armored().into_bytes()),
        "not an OpenPGP packet header"
    );
    // The checksum's last byte changed.
    let mut bad = bytes.clone();
    let body_end = 2 + bytes[1] as usize;
    bad[body_end - 1] ^= 1;
    assert_eq!(why(&bad), "the secret key's checksum does not match");
    // Marked as encrypted (the S2K usage octet after the public part).
    let mut encrypted = bytes.clone();
    let usage = 2 + key.public_body().len();
    encrypted[usage] = 254;
    assert_eq!(why(&encrypted), "the secret key is encrypted");
    // The public-key packet of a transferable public key, not a secret key.
    assert_eq!(
        why(&key.public_bytes()),
        "not an OpenPGP secret key: no secret-key packet first"
    );
}

#[test]
fn multiprecision_integers_and_the_armor_checksum() {
    let mut out = Vec::new();
    mpi(&mut out, &[0, 0, 0x01, 0xff]);
    assert_eq!(out, [0, 9, 0x01, 0xff]);
    out.clear();
    mpi(&mut out, &[0x40; 33]);
    assert_eq!(&out[..2], &[1, 7]); // 263 bits: an Ed25519 point with its 0x40 prefix
                                    // RFC 9580's CRC-24 of nothing is its initial value.
    assert_eq!(crc24(b""), 0x00b7_04ce);
    // Packet lengths on each side of the one- and two-octet forms, read back.
    for n in [0, 191, 192, 8383, 8384, 70_000] {
        let body = vec![7u8; n];
        let p = packet(TAG_USER_ID, &body);
        assert_eq!(packets(&p).unwrap(), vec![(TAG_USER_ID, &body[..])], "{n}");
    }
}
