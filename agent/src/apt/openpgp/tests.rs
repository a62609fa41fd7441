//! Foothold's OpenPGP checked by an independent implementation, the `pgp` crate (the agent's before this one):
//! it reads the keys, verifies every signature and the keys' self-signatures, and made the keys earlier agents
//! kept, which must still load with the same fingerprint.

use super::*;
use pgp::composed::{
    CleartextSignedMessage, Deserializable as _, DetachedSignature, EncryptionCaps, KeyType,
    SecretKeyParamsBuilder, SignedPublicKey, SignedSecretKey,
};
use pgp::ser::Serialize as _;
use pgp::types::KeyDetails as _;

const USER: &str = "Foothold test <apt@foothold.invalid>";
const WHEN: u32 = 1_795_000_000;

fn theirs(key: &Key) -> SignedPublicKey {
    let (public, _) = SignedPublicKey::from_string(&key.public_armored()).unwrap();
    public.verify_bindings().unwrap();
    public
}

#[test]
fn another_implementation_reads_the_key_and_verifies_its_signatures() {
    let key = Key::generate(USER).unwrap();
    let public = theirs(&key);
    assert_eq!(
        hex::encode_upper(public.fingerprint().as_bytes()),
        key.fingerprint_hex()
    );
    assert_eq!(public.details.users[0].id.id(), USER.as_bytes());

    // Dash-escaped lines, trailing blanks (not signed), and a text with and without its last line end.
    for text in [
        "Origin: Foothold\nSHA256:\n abc 1 main/binary-amd64/Packages\n",
        "- a line that begins with a dash  \n--\nlast, no line end\t",
    ] {
        let signed = key.clearsign(text, WHEN);
        let (msg, _) = CleartextSignedMessage::from_string(&signed).unwrap();
        msg.verify(&public)
            .unwrap_or_else(|e| panic!("{e}: {signed}"));
        let body = text.strip_suffix('\n').unwrap_or(text);
        let canonical: Vec<&str> = body
            .split('\n')
            .map(|l| l.trim_end_matches([' ', '\t']))
            .collect();
        assert_eq!(msg.signed_text(), canonical.join("\r\n"), "{signed}");
        assert!(!signed.contains('\r'));
    }
    let signed = key.clearsign("a\nb\n", WHEN);
    // No blank line before the signature, which apt's splitter refuses.
    assert!(
        signed.starts_with("-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA512\n\na\nb\n-----BEGIN PGP SIGNATURE-----\n"),
        "{signed}"
    );

    let data = b"Origin: Foothold\n\x00binary";
    let (sig, _) = DetachedSignature::from_string(&key.detached(data, WHEN)).unwrap();
    sig.verify(&public, data).unwrap();
    assert!(sig.verify(&public, b"tampered").is_err());
    assert_eq!(
        sig.signature.created().map(|t| t.as_secs()),
        Some(WHEN),
        "the signature's creation time"
    );
}

#[test]
fn the_secret_key_round_trips_and_the_other_implementation_reads_it() {
    let key = Key::generate(USER).unwrap();
    let bytes = key.secret_bytes();
    let again = Key::from_secret_bytes(&bytes).unwrap();
    assert_eq!(again.fingerprint(), key.fingerprint());
    assert_eq!(again.public_armored(), key.public_armored());
    let secret = SignedSecretKey::from_bytes(&bytes[..]).unwrap();
    assert_eq!(
        hex::encode_upper(secret.fingerprint().as_bytes()),
        key.fingerprint_hex()
    );
}

#[test]
fn a_key_an_earlier_agent_made_keeps_its_fingerprint() {
    // As the agent made its key with the `pgp` crate until this module replaced it.
    let params = SecretKeyParamsBuilder::default()
        .key_type(KeyType::Ed25519Legacy)
        .can_certify(true)
        .can_sign(true)
        .can_encrypt(EncryptionCaps::None)
        .primary_user_id(USER.to_owned())
        .build()
        .unwrap();
    let old = params.generate(rand_08::thread_rng()).unwrap();
    let key = Key::from_secret_bytes(&old.to_bytes().unwrap()).unwrap();
    assert_eq!(
        key.fingerprint_hex(),
        hex::encode_upper(old.fingerprint().as_bytes())
    );
    let public = SignedPublicKey::from(old);
    let (msg, _) = CleartextSignedMessage::from_string(&key.clearsign("x\n", WHEN)).unwrap();
    msg.verify(&public).unwrap();
}

#[test]
fn damaged_or_foreign_secret_keys_are_refused_with_the_reason() {
    let key = Key::generate(USER).unwrap();
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
    let mut public = packet(TAG_PUBLIC_KEY, &key.public_body());
    public.extend(key.user_id_and_certification());
    assert_eq!(
        why(&public),
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
