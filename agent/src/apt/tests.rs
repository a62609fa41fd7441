//! Publishing from files (the HTTP side and apt itself run in `tests/http/apt.rs`): snapshots are made only
//! when the packages change, swapped whole, and the one before is kept with its `Packages`.

use super::openpgp::tests::gpgv;
use super::*;

/// A `.deb` of `name` `version` written into `dir`: (record, digest, size, path) as `publish` takes them.
fn deb_file(dir: &Path, name: &str, version: &str) -> (String, Digest, u64, PathBuf) {
    let control =
        format!("Package: {name}\nVersion: {version}\nArchitecture: all\nDescription: test\n");
    let bytes = deb::tests::deb(&control, ".gz");
    let digest = Digest::of_bytes(&bytes);
    let path = dir.join(digest.hex());
    fs::write(&path, &bytes).unwrap();
    let record = format!("acme/edge-1/{name}_{version}_all.deb");
    (record, digest, bytes.len() as u64, path)
}

fn now() -> std::time::SystemTime {
    std::time::SystemTime::now()
}

fn read(repo: &Repo, rel: &str) -> String {
    fs::read_to_string(repo.dists_file(rel).unwrap().0).unwrap()
}

#[test]
fn a_change_makes_a_signed_snapshot_and_the_one_before_stays() {
    let data = tempfile::tempdir().unwrap();
    let content = tempfile::tempdir().unwrap();
    let repo = Repo::open(data.path()).unwrap();
    let ring = repo.key.public_bytes();
    let work = tempfile::tempdir().unwrap();

    // Empty: an index with no packages, signed.
    let p = repo.publish(&[], now()).unwrap();
    assert_eq!((p.packages, p.changed), (0, true));
    assert_eq!(read(&repo, "main/binary-amd64/Packages"), "");

    let v1 = deb_file(content.path(), "hello-foothold", "1.0");
    let p = repo.publish(std::slice::from_ref(&v1), now()).unwrap();
    assert_eq!((p.packages, p.changed), (1, true));
    let first = read(&repo, "main/binary-amd64/Packages");
    assert!(
        first.contains("Package: hello-foothold\nVersion: 1.0\n"),
        "{first}"
    );
    let filename = format!("{}/hello-foothold_1.0_all.deb", v1.1.hex());
    assert!(
        first.contains(&format!("Filename: pool/{filename}\n")),
        "{first}"
    );
    assert_eq!(repo.pool_file(&filename), Some((v1.1.clone(), v1.2)));
    let in_release = read(&repo, "InRelease");
    let status = gpgv(&ring, work.path(), &[("InRelease", in_release.as_bytes())]).unwrap();
    assert!(
        status.contains(&format!("VALIDSIG {} ", repo.fingerprint())),
        "{status}"
    );
    let release = read(&repo, "Release");
    let signed = in_release
        .split_once("\n\n")
        .and_then(|(_, rest)| rest.split_once("-----BEGIN PGP SIGNATURE-----\n"))
        .map(|(text, _)| text);
    assert_eq!(signed, Some(release.as_str()), "{in_release}");
    assert!(!in_release.contains('\r'));
    let named = index::release_files(&release);
    assert_eq!(named[0].sha256, sha256_hex(first.as_bytes()));
    let by_hash = format!("main/binary-amd64/by-hash/SHA256/{}", named[0].sha256);
    assert_eq!(read(&repo, &by_hash), first);

    // The same packages again: nothing new.
    let p = repo.publish(std::slice::from_ref(&v1), now()).unwrap();
    assert!(!p.changed);

    // A second version: a new snapshot; the first Packages is still there by hash.
    let v2 = deb_file(content.path(), "hello-foothold", "2.0");
    repo.publish(&[v1.clone(), v2.clone()], now()).unwrap();
    let second = read(&repo, "main/binary-amd64/Packages");
    assert!(second.contains("Version: 1.0\n") && second.contains("Version: 2.0\n"));
    assert_eq!(read(&repo, &by_hash), first);
    // One more: the first is two releases old and goes, with its Packages.
    repo.publish(std::slice::from_ref(&v2), now()).unwrap();
    assert!(repo.dists_file(&by_hash).is_none());
    let snapshots = fs::read_dir(data.path().join("apt/snapshots"))
        .unwrap()
        .count();
    assert_eq!(snapshots, 2);
    assert_eq!(repo.pool_file(&filename), None);

    // A record named .deb that is not one is left out, with the reason.
    let junk = content.path().join("junk");
    fs::write(&junk, b"not a deb").unwrap();
    let bad = (
        "acme/edge-1/junk.deb".to_string(),
        Digest::of_bytes(b"not a deb"),
        9,
        junk,
    );
    let p = repo.publish(&[v2, bad], now()).unwrap();
    assert_eq!(p.packages, 1);
    assert_eq!(p.skipped.len(), 1);
    assert!(p.skipped[0].1.contains("not a .deb"), "{:?}", p.skipped);

    // Reopened, the key is the same.
    let again = Repo::open(data.path()).unwrap();
    assert_eq!(again.fingerprint(), repo.fingerprint());
}

#[test]
fn only_index_paths_resolve() {
    let data = tempfile::tempdir().unwrap();
    let repo = Repo::open(data.path()).unwrap();
    repo.publish(&[], now()).unwrap();
    for rel in [
        "InRelease",
        "Release",
        "Release.gpg",
        "main/binary-amd64/Packages",
    ] {
        assert!(repo.dists_file(rel).is_some(), "{rel}");
    }
    for rel in [
        "../apt/signing-key.pgp",
        "signing-key.pgp",
        "main/binary-../Packages",
        "main/binary-amd64/by-hash/SHA256/..",
        "main/binary-arm64/Packages",
        "",
    ] {
        assert!(repo.dists_file(rel).is_none(), "{rel}");
    }
}

#[test]
fn the_sources_entry_carries_the_key_inline() {
    let key = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nxjMEabc\n=AbCd\n-----END PGP PUBLIC KEY BLOCK-----\n";
    let entry = sources_entry("http://10.0.0.1:5000/", key);
    assert_eq!(
        entry,
        "Types: deb\nURIs: http://10.0.0.1:5000/apt\nSuites: foothold\nComponents: main\nSigned-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n xjMEabc\n =AbCd\n -----END PGP PUBLIC KEY BLOCK-----\n"
    );
}
