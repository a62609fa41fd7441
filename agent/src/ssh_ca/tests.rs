use std::os::unix::fs::PermissionsExt as _;

use super::*;

const DAY: Duration = Duration::from_secs(86_400);

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn principals() -> Vec<String> {
    vec!["node-00".into(), "172.22.0.10".into()]
}

#[test]
fn the_ca_is_made_once_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let ca_dir = dir.path().join("ssh-ca");
    let (made, first) = ensure(&ca_dir).unwrap();
    assert!(first);
    let paths = Paths::new(&ca_dir);
    assert_eq!(mode(&paths.key), 0o600);
    assert_eq!(mode(&paths.public), 0o644);
    let (kept, again) = ensure(&ca_dir).unwrap();
    assert!(!again);
    assert_eq!(made.public_key(), kept.public_key());
    // ca.pub is what the installer is given.
    let ca = HostCa::parse(&std::fs::read_to_string(&paths.public).unwrap()).unwrap();
    assert_eq!(
        ca.fingerprint(),
        made.public_key().fingerprint(HashAlg::Sha256).to_string()
    );
}

#[test]
fn half_a_ca_or_a_mismatched_pair_is_refused_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    ensure(dir.path()).unwrap();
    let paths = Paths::new(dir.path());
    let public = std::fs::read(&paths.public).unwrap();
    std::fs::remove_file(&paths.public).unwrap();
    let e = ensure(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains("ca.pub is not") && e.contains("never replaced"),
        "{e}"
    );
    assert!(paths.key.exists());
    // Another key's public half beside the CA's key.
    let stranger = new_key("stranger").unwrap();
    std::fs::write(
        &paths.public,
        stranger.public_key().to_openssh().unwrap() + "\n",
    )
    .unwrap();
    let e = ensure(dir.path()).unwrap_err().to_string();
    assert!(e.contains("is not the public half"), "{e}");
    std::fs::write(&paths.public, public).unwrap();
    ensure(dir.path()).unwrap();
}

#[test]
fn a_certificate_is_accepted_for_its_names_only_while_valid_and_only_from_the_site_ca() {
    let ca_key = new_key("ca").unwrap();
    let ca = HostCa::parse(&ca_key.public_key().to_openssh().unwrap()).unwrap();
    let host = new_key("host").unwrap();
    let now = SystemTime::now();
    let cert = certify(
        &ca_key,
        host.public_key().key_data(),
        &principals(),
        30 * DAY,
        now,
    )
    .unwrap();
    assert_eq!(cert.public_key(), host.public_key().key_data());
    assert_eq!(cert.cert_type(), CertType::Host);
    assert_eq!(cert.valid_principals(), principals().as_slice());
    // By either of its names; a few minutes of clock skew backwards are allowed.
    ca.check(&cert, &["master-0", "172.22.0.10"], now).unwrap();
    ca.check(&cert, &["node-00"], now - Duration::from_secs(60))
        .unwrap();
    let e = ca
        .check(&cert, &["master-0", "172.22.0.11"], now)
        .unwrap_err();
    assert!(e.contains("not for master-0 or 172.22.0.11"), "{e}");
    let e = ca.check(&cert, &["node-00"], now + 31 * DAY).unwrap_err();
    assert!(e.contains("expired"), "{e}");
    let e = ca.check(&cert, &["node-00"], now - DAY).unwrap_err();
    assert!(e.contains("not valid before"), "{e}");
    // Another CA's certificate for the same key and names.
    let other = new_key("other").unwrap();
    let forged = certify(
        &other,
        host.public_key().key_data(),
        &principals(),
        30 * DAY,
        now,
    )
    .unwrap();
    let e = ca.check(&forged, &["node-00"], now).unwrap_err();
    assert!(
        e.contains(&other.public_key().fingerprint(HashAlg::Sha256).to_string())
            && e.contains("not by the site SSH CA"),
        "{e}"
    );
}

#[test]
fn a_user_certificate_does_not_vouch_for_a_host() {
    let ca_key = new_key("ca").unwrap();
    let ca = HostCa::parse(&ca_key.public_key().to_openssh().unwrap()).unwrap();
    let host = new_key("host").unwrap();
    let t = unix(SystemTime::now());
    let mut b = Builder::new(
        vec![7; 32],
        host.public_key().key_data().clone(),
        t - 60,
        t + 3600,
    )
    .unwrap();
    b.cert_type(CertType::User).unwrap();
    b.valid_principal("node-00").unwrap();
    let cert = b.sign(&ca_key).unwrap();
    let e = ca
        .check(&cert, &["node-00"], SystemTime::now())
        .unwrap_err();
    assert!(e.contains("user certificate"), "{e}");
}

#[test]
fn certify_refuses_no_names_and_long_lives() {
    let ca_key = new_key("ca").unwrap();
    let host = new_key("host").unwrap();
    let now = SystemTime::now();
    let e = certify(&ca_key, host.public_key().key_data(), &[], DAY, now).unwrap_err();
    assert!(e.to_string().contains("at least one principal"), "{e}");
    let e = certify(
        &ca_key,
        host.public_key().key_data(),
        &principals(),
        398 * DAY,
        now,
    )
    .unwrap_err();
    assert!(e.to_string().contains("at most 397 days"), "{e}");
}

#[test]
fn the_cloud_config_carries_the_key_its_public_half_and_the_certificate() {
    let ca_key = new_key("ca").unwrap();
    let host = new_key("node-00").unwrap();
    let cert = certify(
        &ca_key,
        host.public_key().key_data(),
        &principals(),
        DAY,
        SystemTime::now(),
    )
    .unwrap();
    let text = cloud_config(&host, &cert).unwrap();
    assert!(text.starts_with("#cloud-config\n"), "{text}");
    let doc: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(doc["ssh_deletekeys"], true);
    let keys = &doc["ssh_keys"];
    let private = PrivateKey::from_openssh(keys["ed25519_private"].as_str().unwrap()).unwrap();
    assert_eq!(
        private.public_key().key_data(),
        host.public_key().key_data()
    );
    assert_eq!(
        keys["ed25519_public"].as_str().unwrap(),
        host.public_key().to_openssh().unwrap()
    );
    let back = Certificate::from_openssh(keys["ed25519_certificate"].as_str().unwrap()).unwrap();
    assert_eq!(back, cert);
}
