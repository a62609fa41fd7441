use super::*;
use axum::http::HeaderValue;

fn with(v: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
    h
}

fn bearer(t: &str) -> HeaderMap {
    with(&format!("Bearer {t}"))
}

fn basic(user: &str, password: &str) -> HeaderMap {
    let b = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    with(&format!("Basic {b}"))
}

/// Whether the request carries an admin credential (always without authorisation).
fn admin(a: &Auth, headers: &HeaderMap) -> bool {
    a.identify(headers).is_admin()
}

fn forbidden(r: Result<(), Denied>) -> String {
    match r {
        Err(Denied::Forbidden(m)) => m,
        other => panic!("expected Forbidden, got {other:?}"),
    }
}

fn unauthenticated(r: Result<(), Denied>) -> String {
    match r {
        Err(Denied::Unauthenticated(m)) => m,
        other => panic!("expected Unauthenticated, got {other:?}"),
    }
}

#[test]
fn tokens() {
    let a = Auth::from_token("s3cret");
    assert!(admin(&a, &bearer("s3cret")));
    assert!(admin(&a, &basic("anyone", "s3cret")));
    assert!(!admin(&a, &bearer("s3cre")));
    assert!(!admin(&a, &with("Basic !!!")));
    assert!(!admin(&a, &with("Digest x")));
    assert!(!admin(&a, &HeaderMap::new()));
    assert!(admin(&Auth::none(), &HeaderMap::new()));
    assert_eq!(a.identify(&bearer("s3cret")).name(), "admin");
    // No credential, as clients answer a challenge they have nothing for: anonymous, not unknown.
    assert_eq!(a.identify(&basic("", "")).name(), "-");
    assert_eq!(a.identify(&with("Basic Og==")).name(), "-");
    assert_eq!(a.identify(&with("Bearer ")).name(), "-");
    assert_eq!(a.identify(&basic("x", "y")).name(), "?");
}

#[test]
fn a_wrong_token_of_the_right_length_is_refused_whichever_byte_differs() {
    let token = "k3yQ9zT0bLw8";
    let a = Auth::from_token(token);
    for i in 0..token.len() {
        let mut wrong = token.as_bytes().to_vec();
        wrong[i] ^= 0x01;
        let wrong = String::from_utf8(wrong).unwrap();
        assert_eq!(wrong.len(), token.len());
        assert!(!admin(&a, &bearer(&wrong)), "{wrong}");
        assert!(!admin(&a, &basic("foothold", &wrong)), "{wrong}");
    }
    // Its prefix and an extension of it are no better.
    assert!(!admin(&a, &bearer(&format!("{token}x"))));
    assert!(!admin(&a, &with("Bearer ")));
}

fn site(reads: Reads) -> Auth {
    Auth::fixed(
        vec![
            Credential::new("root", Scope::Admin, "admin-token"),
            Credential::new(
                "ci",
                Scope::Write {
                    repositories: vec!["apps/".into(), "tools/builder".into()],
                    owners: vec!["site-a".into()],
                },
                "ci-token",
            ),
            Credential::new("nodes", Scope::Read, "read-token"),
        ],
        reads,
        vec!["foothold/".into(), "registry.k8s.io/pause".into()],
    )
}

#[test]
fn each_scope_does_what_it_lists_and_no_more() {
    let a = site(Reads::Anonymous);
    let root = a.identify(&bearer("admin-token"));
    let ci = a.identify(&basic("whoever", "ci-token"));
    let nodes = a.identify(&bearer("read-token"));
    let anonymous = a.identify(&HeaderMap::new());
    let stranger = a.identify(&bearer("ci-token-but-not"));
    assert_eq!(
        (
            root.name(),
            ci.name(),
            nodes.name(),
            anonymous.name(),
            stranger.name()
        ),
        ("root", "ci", "nodes", "-", "?")
    );

    // Admin: everything, protected repositories included.
    for repo in [
        "apps/x",
        "foothold/installer",
        "registry.k8s.io/pause",
        "other",
    ] {
        root.may_write_repository(repo).unwrap();
    }
    root.may_write_owner("anyone").unwrap();

    // A writer: its patterns, by whole prefix or exact name; its owners.
    ci.may_write_repository("apps/web").unwrap();
    ci.may_write_repository("apps/team/web").unwrap();
    ci.may_write_repository("tools/builder").unwrap();
    let m = forbidden(ci.may_write_repository("tools/builder-2"));
    assert!(
        m.contains("credential ci does not write repository tools/builder-2"),
        "{m}"
    );
    assert!(m.contains("apps/, tools/builder"), "{m}");
    forbidden(ci.may_write_repository("apps"));
    forbidden(ci.may_write_repository("appsx/web"));
    ci.may_write_owner("site-a").unwrap();
    let m = forbidden(ci.may_write_owner("site-b"));
    assert!(m.contains("owner site-b"), "{m}");
    ci.may_upload().unwrap();
    assert!(!ci.is_admin());

    // Read-only: no writes of any kind.
    let m = forbidden(nodes.may_write_repository("apps/web"));
    assert!(m.contains("credential nodes is read-only"), "{m}");
    forbidden(nodes.may_write_owner("site-a"));
    forbidden(nodes.may_upload());

    // Anonymous and unknown: asked to authenticate.
    unauthenticated(anonymous.may_write_repository("apps/web"));
    unauthenticated(anonymous.may_upload());
    let m = unauthenticated(stranger.may_write_repository("apps/web"));
    assert!(m.contains("not known"), "{m}");
    // Reads anonymous: anyone reads, but a credential that is none is refused rather than ignored.
    for c in [&root, &ci, &nodes, &anonymous] {
        c.may_read().unwrap();
    }
    unauthenticated(stranger.may_read());
}

#[test]
fn a_writer_never_writes_a_protected_repository_even_one_its_patterns_match() {
    let a = Auth::fixed(
        vec![Credential::new(
            "greedy",
            Scope::Write {
                repositories: vec!["foothold/".into(), "registry.k8s.io/".into()],
                owners: vec![],
            },
            "t",
        )],
        Reads::Anonymous,
        vec!["foothold/installer".into(), "registry.k8s.io/".into()],
    );
    let greedy = a.identify(&bearer("t"));
    greedy.may_write_repository("foothold/other").unwrap();
    for repo in [
        "foothold/installer",
        "registry.k8s.io/pause",
        "registry.k8s.io/coredns/coredns",
    ] {
        let m = forbidden(greedy.may_write_repository(repo));
        assert!(
            m.contains(&format!("repository {repo} is protected")),
            "{m}"
        );
    }
}

#[test]
fn reads_that_need_a_credential_take_any_scope_and_refuse_anonymous() {
    let a = site(Reads::Credential);
    for t in ["admin-token", "ci-token", "read-token"] {
        a.identify(&bearer(t)).may_read().unwrap();
    }
    let m = unauthenticated(a.identify(&HeaderMap::new()).may_read());
    assert!(m.contains("reads need a credential"), "{m}");
    // Without authorisation configured, everything is open.
    let open = Auth::none().identify(&HeaderMap::new());
    open.may_read().unwrap();
    open.may_write_repository("foothold/installer").unwrap();
    assert!(open.is_admin());
}

#[test]
fn the_file_names_the_credential_field_and_reason_of_what_is_wrong() {
    let hash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    let ok = format!(
        "reads: credential\ncredentials:\n  - name: ci\n    scope: write\n    repositories: [apps/]\n    sha256: {hash}\n"
    );
    let f = CredentialsFile::parse(&ok).unwrap();
    assert_eq!(f.reads, Reads::Credential);
    assert_eq!(f.credentials[0].repositories, vec!["apps/".to_string()]);
    assert_eq!(
        CredentialsFile::parse("").unwrap(),
        CredentialsFile::default()
    );

    let cases = [
        (ok.replace("scope: write", "scope: writer"), "writer"),
        (
            ok.replace("name: ci", "name: CI"),
            "credentials[0] (CI): name:",
        ),
        (
            ok.replace(hash, "abc"),
            "credentials[0] (ci): sha256: is not 64",
        ),
        (
            ok.replace("[apps/]", "[\"Apps/\"]"),
            "credentials[0] (ci): repositories:",
        ),
        (
            ok.replace("    repositories: [apps/]\n", ""),
            "a write credential needs repositories or owners",
        ),
        (
            ok.replace("scope: write", "scope: read"),
            "only write credentials have repositories",
        ),
        (
            ok.replace("name: ci", "name: admin"),
            "--token-file credential's name",
        ),
        (
            ok.replace("reads: credential", "reads: sometimes"),
            "sometimes",
        ),
        (format!("{ok}    owner: x\n"), "owner"),
        (
            format!("{ok}  - name: ci\n    scope: admin\n    sha256: {hash}\n"),
            "credentials[1] (ci): name: another credential has this name",
        ),
    ];
    for (text, want) in cases {
        let e = CredentialsFile::parse(&text).unwrap_err();
        assert!(e.contains(want), "{want:?} not in {e:?} for\n{text}");
    }
}

#[test]
fn a_credential_added_to_the_file_works_with_the_token_shown_once_and_stops_when_removed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("credentials.yaml");
    let mut f = CredentialsFile::load_or_empty(&path).unwrap();
    let token = f
        .add(
            "ci",
            ScopeName::Write,
            vec!["apps/".into()],
            vec![],
            std::time::SystemTime::now(),
        )
        .unwrap();
    assert_eq!(token.len(), 43);
    let e = f
        .add(
            "ci",
            ScopeName::Read,
            vec![],
            vec![],
            std::time::SystemTime::now(),
        )
        .unwrap_err();
    assert!(e.contains("exists already"), "{e}");
    let e = f
        .add(
            "x",
            ScopeName::Write,
            vec![],
            vec![],
            std::time::SystemTime::now(),
        )
        .unwrap_err();
    assert!(e.contains("scope: a write credential needs"), "{e}");
    f.save(&path).unwrap();

    use std::os::unix::fs::PermissionsExt as _;
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains(&token), "the token itself is never written");
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let auth = Auth::configure(&Sources {
        credentials_file: Some(path.clone()),
        ..Sources::default()
    })
    .unwrap();
    let ci = auth.identify(&bearer(&token));
    assert_eq!(ci.name(), "ci");
    ci.may_write_repository("apps/web").unwrap();

    let mut f = CredentialsFile::load_or_empty(&path).unwrap();
    f.remove("ci").unwrap();
    assert!(f
        .remove("ci")
        .unwrap_err()
        .contains("no credential is named ci"));
    f.save(&path).unwrap();
    auth.reload().unwrap();
    assert_eq!(auth.identify(&bearer(&token)).name(), "?");

    // A file broken by hand keeps the credentials before it in force.
    std::fs::write(&path, "credentials: [{name: x}]").unwrap();
    let e = auth.reload().unwrap_err();
    assert!(
        e.to_string().starts_with(&path.display().to_string()),
        "{e}"
    );
    assert_eq!(auth.policy().credentials.len(), 0);
}

#[test]
fn the_protected_file_lists_patterns_and_rejects_what_is_no_repository() {
    let p =
        file::parse_protected("# system images\nfoothold/installer\n\nregistry.k8s.io/  # all\n")
            .unwrap();
    assert_eq!(p, vec!["foothold/installer", "registry.k8s.io/"]);
    let e = file::parse_protected("ok\nNot Valid\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("line 2:"), "{e}");
}
