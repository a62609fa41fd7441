use std::os::unix::fs::PermissionsExt as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rustls::client::danger::ServerCertVerifier as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use x509_parser::prelude::{FromDer, X509Certificate};

use super::*;

const DAY: Duration = Duration::from_secs(86_400);

fn names() -> Vec<String> {
    vec!["appliance".into(), "localhost".into(), "127.0.0.1".into()]
}

fn certs(path: &Path) -> Vec<Vec<u8>> {
    pem_certs(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Verifies `cert.pem`'s chain for `name` at `now` as a rustls client trusting only `ca.pem` would.
fn verify(paths: &Paths, name: &str, now: SystemTime) -> Result<(), rustls::Error> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(certs(&paths.ca).remove(0)))
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .unwrap();
    let chain: Vec<CertificateDer<'static>> = certs(&paths.cert)
        .into_iter()
        .map(CertificateDer::from)
        .collect();
    let now = UnixTime::since_unix_epoch(now.duration_since(UNIX_EPOCH).unwrap());
    verifier
        .verify_server_cert(
            &chain[0],
            &chain[1..],
            &ServerName::try_from(name.to_string()).unwrap(),
            &[],
            now,
        )
        .map(|_| ())
}

#[test]
fn a_new_site_gets_a_ca_that_signs_a_serving_certificate_a_rustls_client_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::new(dir.path());
    let now = SystemTime::now();
    let report = ensure(&paths, &names(), 90 * DAY, now).unwrap();
    assert!(report.ca_made);
    assert_eq!(report.issued.as_deref(), Some("the site CA is new"));

    // The CA: CA:TRUE, pathlen 0, keyCertSign, ten years.
    let ca_der = certs(&paths.ca).remove(0);
    let (_, ca) = X509Certificate::from_der(&ca_der).unwrap();
    let bc = ca.basic_constraints().unwrap().unwrap().value;
    assert!(bc.ca);
    assert_eq!(bc.path_len_constraint, Some(0));
    let ku = ca.key_usage().unwrap().unwrap().value;
    assert!(ku.key_cert_sign() && ku.crl_sign() && !ku.digital_signature());
    let ca_info = read_cert(&paths.ca).unwrap();
    assert!(ca_info.not_after >= now + CA_LIFETIME - Duration::from_secs(1));

    // The leaf, followed by the CA: CA:FALSE, serverAuth only, the names, 90 days.
    let chain = certs(&paths.cert);
    assert_eq!(chain.len(), 2);
    assert_eq!(chain[1], ca_der);
    let (_, leaf) = X509Certificate::from_der(&chain[0]).unwrap();
    assert!(!leaf.basic_constraints().unwrap().unwrap().value.ca);
    let eku = leaf.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.server_auth && !eku.client_auth && !eku.any);
    let info = read_cert(&paths.cert).unwrap();
    assert_eq!(
        Vec::from_iter(info.names.iter().cloned()),
        ["127.0.0.1", "appliance", "localhost"]
    );
    assert_eq!(report.expires, info.not_after);
    let life = info.not_after.duration_since(now).unwrap();
    assert!(
        life > 90 * DAY - Duration::from_secs(2) && life <= 90 * DAY,
        "{life:?}"
    );
    assert_eq!(report.renew_after, info.renew_after());

    // Keys are root's alone; certificates are for everyone.
    assert_eq!(mode(&paths.ca_key), 0o600);
    assert_eq!(mode(&paths.key), 0o600);
    assert_eq!(mode(&paths.ca), 0o644);
    assert_eq!(mode(&paths.cert), 0o644);

    // What webpki refused of the old self-signed certificate (CaUsedAsEndEntity) it now accepts, by name and
    // by address, and not for a name the certificate lacks.
    verify(&paths, "appliance", now).unwrap();
    verify(&paths, "127.0.0.1", now).unwrap();
    assert!(verify(&paths, "elsewhere", now).is_err());
}

#[test]
fn the_serving_certificate_is_kept_until_two_thirds_of_its_life_then_renewed_by_the_same_ca() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::new(dir.path());
    let start = SystemTime::now();
    ensure(&paths, &names(), 90 * DAY, start).unwrap();
    let first = std::fs::read(&paths.cert).unwrap();
    let ca = std::fs::read(&paths.ca).unwrap();
    let renew_after = read_cert(&paths.cert).unwrap().renew_after();
    // Two-thirds of 90 days and the hour it is backdated: 60 days 40 minutes after its notBefore.
    assert_eq!(
        renew_after,
        read_cert(&paths.cert).unwrap().not_before + 60 * DAY + Duration::from_secs(3600) * 2 / 3
    );

    let kept = ensure(
        &paths,
        &names(),
        90 * DAY,
        renew_after - Duration::from_secs(1),
    )
    .unwrap();
    assert_eq!(kept.issued, None);
    assert!(!kept.ca_made);
    assert_eq!(std::fs::read(&paths.cert).unwrap(), first);

    let later = renew_after + Duration::from_secs(1);
    let renewed = ensure(&paths, &names(), 90 * DAY, later).unwrap();
    assert_eq!(
        renewed.issued.as_deref(),
        Some("it is past two-thirds of its life")
    );
    assert_ne!(std::fs::read(&paths.cert).unwrap(), first);
    assert_eq!(std::fs::read(&paths.ca).unwrap(), ca, "the CA stays");
    assert!(renewed.expires > later + 89 * DAY);
    verify(&paths, "appliance", later).unwrap();

    // Left alone past its end, it is issued again too.
    let expired = ensure(&paths, &names(), 90 * DAY, later + 100 * DAY).unwrap();
    assert_eq!(expired.issued.as_deref(), Some("it expired"));
}

#[test]
fn new_names_an_old_self_signed_certificate_or_a_foreign_key_make_a_new_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::new(dir.path());
    let now = SystemTime::now();
    ensure(&paths, &names(), 90 * DAY, now).unwrap();

    let mut more = names();
    more.push("172.22.0.1".into());
    let report = ensure(&paths, &more, 90 * DAY, now).unwrap();
    assert_eq!(
        report.issued.as_deref(),
        Some("its names changed (127.0.0.1,appliance,localhost → 127.0.0.1,172.22.0.1,appliance,localhost)")
    );
    assert!(read_cert(&paths.cert).unwrap().names.contains("172.22.0.1"));

    // An appliance from before the site CA: its certificate was its own CA (firstboot's openssl req -x509).
    let old = rcgen::generate_simple_self_signed(more.clone()).unwrap();
    std::fs::write(&paths.cert, old.cert.pem()).unwrap();
    std::fs::write(&paths.key, old.signing_key.serialize_pem()).unwrap();
    let report = ensure(&paths, &more, 90 * DAY, now).unwrap();
    assert_eq!(
        report.issued.as_deref(),
        Some("it is not the site CA's (an older self-signed one)")
    );
    verify(&paths, "172.22.0.1", now).unwrap();

    // A key that is not the certificate's.
    std::fs::write(&paths.key, KeyPair::generate().unwrap().serialize_pem()).unwrap();
    let report = ensure(&paths, &more, 90 * DAY, now).unwrap();
    assert_eq!(
        report.issued,
        Some(format!("{} is not its key", paths.key.display()))
    );
}

#[test]
fn a_half_present_ca_and_bad_arguments_are_refused_naming_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::new(dir.path());
    let now = SystemTime::now();
    ensure(&paths, &names(), 90 * DAY, now).unwrap();
    let ca = std::fs::read(&paths.ca).unwrap();

    std::fs::remove_file(&paths.ca_key).unwrap();
    let err = format!("{:#}", ensure(&paths, &names(), 90 * DAY, now).unwrap_err());
    assert!(
        err.contains(&format!(
            "{} exists but {} does not",
            paths.ca.display(),
            paths.ca_key.display()
        )),
        "{err}"
    );
    assert_eq!(std::fs::read(&paths.ca).unwrap(), ca, "nothing replaced");

    // A CA key that is not the CA's.
    std::fs::write(&paths.ca_key, KeyPair::generate().unwrap().serialize_pem()).unwrap();
    let err = format!("{:#}", ensure(&paths, &names(), 90 * DAY, now).unwrap_err());
    assert!(err.contains("is not the key of"), "{err}");

    let err = format!(
        "{:#}",
        ensure(&paths, &names(), 398 * DAY, now).unwrap_err()
    );
    assert!(
        err.contains("between 1 s and 397 days, not 34387200 s"),
        "{err}"
    );
    let err = format!("{:#}", ensure(&paths, &[], 90 * DAY, now).unwrap_err());
    assert!(err.contains("at least one name"), "{err}");
}

/// A CA made before the appliance, as the operator makes one on another machine with `foothold-agent pki --dir`
/// (an OpenSSL-made one is the appliance test's): the image carries its certificate, the key comes later from the
/// operator's medium.
#[test]
fn a_ca_made_before_the_appliance_takes_its_key_from_the_operator_and_only_its_own() {
    let made = tempfile::tempdir().unwrap();
    let operator = Paths::new(made.path());
    ensure(&operator, &["site".into()], 90 * DAY, SystemTime::now()).unwrap();
    let (key, cert) = (operator.ca_key.clone(), operator.ca.clone());
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::new(dir.path());
    std::fs::copy(&cert, &paths.ca).unwrap();
    let now = SystemTime::now();

    // Without its key: the error says where the key comes from.
    let err = format!("{:#}", ensure(&paths, &names(), 90 * DAY, now).unwrap_err());
    assert!(
        err.contains("labelled FOOTHOLD-CA holding ca-key.pem"),
        "{err}"
    );
    assert!(err.contains("foothold-agent pki --ca-key FILE"), "{err}");
    // Another key is refused, naming the file and the CA, and nothing is written.
    let other = made.path().join("other.pem");
    std::fs::write(&other, KeyPair::generate().unwrap().serialize_pem()).unwrap();
    let err = format!("{:#}", import_ca_key(&paths, &other).unwrap_err());
    assert!(
        err.contains(&format!(
            "{} is not the key of the site CA {}",
            other.display(),
            paths.ca.display()
        )) && err.contains("Foothold site CA site "),
        "{err}"
    );
    assert!(!paths.ca_key.exists());
    let err = format!("{:#}", import_ca_key(&paths, &cert).unwrap_err());
    assert!(err.contains("not a private key"), "{err}");

    // Its own key is taken (0600), the CA kept as it was, and the leaf is the operator's CA's.
    assert!(import_ca_key(&paths, &key).unwrap());
    assert_eq!(mode(&paths.ca_key), 0o600);
    assert!(
        !import_ca_key(&paths, &other).unwrap(),
        "a key in place is kept"
    );
    let report = ensure(&paths, &names(), 90 * DAY, now).unwrap();
    assert!(!report.ca_made);
    assert_eq!(
        std::fs::read(&paths.ca).unwrap(),
        std::fs::read(&cert).unwrap()
    );
    verify(&paths, "appliance", now).unwrap();
}

#[test]
fn san_lists_and_lifetimes_parse_as_the_builder_and_operators_write_them() {
    assert_eq!(
        parse_san_list("DNS:appliance, IP:172.22.0.1,IP:fd00::0001\n").unwrap(),
        ["appliance", "172.22.0.1", "fd00::1"]
    );
    assert!(parse_san_list("DNS:a,URI:x")
        .unwrap_err()
        .to_string()
        .contains("\"URI:x\": expected DNS:<name> or IP:<address>"));
    assert!(parse_san_list("IP:300.1.1.1")
        .unwrap_err()
        .to_string()
        .contains("not an IP address"));
    assert_eq!(parse_lifetime("397d").unwrap(), 397 * DAY);
    assert_eq!(parse_lifetime("90s").unwrap(), Duration::from_secs(90));
    assert_eq!(parse_lifetime("2h").unwrap(), Duration::from_secs(7200));
    assert!(parse_lifetime("1y")
        .unwrap_err()
        .contains("expected a number and d, h, m or s"));
    assert!(parse_lifetime("").is_err());
}
