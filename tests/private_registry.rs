//! Images from a registry that wants credentials: pulled with what `skopeo login` wrote, refused without.

use super::*;

/// CNCF distribution (Debian's docker-registry) with htpasswd auth; up when /v2/ asks for credentials.
fn private_registry(dir: &Path, user: &str, password: &str) -> Server {
    let host = format!("127.0.0.1:{}", free_port());
    let htpasswd = run(Command::new("htpasswd").args(["-Bbn", user, password]));
    std::fs::write(dir.join("htpasswd"), htpasswd).unwrap();
    std::fs::write(
        dir.join("config.yml"),
        format!(
            "version: 0.1\nlog: {{level: warn}}\nstorage: {{filesystem: {{rootdirectory: {}}}}}\n\
             http: {{addr: \"{host}\"}}\nauth: {{htpasswd: {{realm: foothold-test, path: {}}}}}\n",
            dir.join("storage").display(),
            dir.join("htpasswd").display()
        ),
    )
    .unwrap();
    Server::start(
        "docker-registry",
        Command::new("docker-registry")
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stderr(Stdio::null()),
        host,
        |host| http_code(&[&format!("http://{host}/v2/")]) == "401",
    )
}

#[test]
fn private_images_are_pulled_with_the_credentials_skopeo_login_wrote() {
    build_binaries();
    let tmp = tempfile::tempdir_in(target()).unwrap();
    let dir = tmp.path();
    let registry = private_registry(dir, "foothold", "s3cret");

    // One image, pushed with credentials.
    let layout = dir.join("layout");
    std::fs::create_dir_all(layout.join("blobs/sha256")).unwrap();
    let (manifest, layers) = image(&layout, "amd64", 7);
    let mut named = manifest.clone();
    named["annotations"] = json!({"org.opencontainers.image.ref.name": "1"});
    write_index(&layout, &[named]);
    let pushed = dir.join("pushed-digest");
    run(Command::new("skopeo").args([
        "copy",
        "-q",
        // Pushed as it is: skopeo would otherwise gzip the uncompressed layers for a registry.
        "--preserve-digests",
        "--dest-tls-verify=false",
        "--dest-creds",
        "foothold:s3cret",
        "--digestfile",
        pushed.to_str().unwrap(),
        &format!("oci:{}:1", layout.display()),
        &format!("docker://{}/lab/private:1", registry.host),
    ]));
    let pushed = std::fs::read_to_string(&pushed).unwrap();
    assert_eq!(pushed.trim(), manifest["digest"].as_str().unwrap());

    let spec = dir.join("private.yaml");
    std::fs::write(
        &spec,
        format!(
            "name: private\nbase: {{suite: bookworm}}\nhostname: private\ncomponents:\n  images:\n    \
             - reference: registry.example/lab/private:1\n      digest: {}\n      source: {}/lab/private\n\
             outputs: {{formats: [raw], diskSize: 2GiB}}\n",
            pushed.trim(),
            registry.host
        ),
    )
    .unwrap();
    // HOME, XDG_RUNTIME_DIR and REGISTRY_AUTH_FILE are set per run: no credentials but the ones given.
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let fetch = |cache: &str, auth_env: Option<&Path>, args: &[&str]| {
        let mut cmd = Command::new(target().join("debug/foothold-build"));
        cmd.arg("fetch")
            .arg(&spec)
            .arg("--cache")
            .arg(dir.join(cache))
            .args(["--insecure-registry", &registry.host])
            .args(args)
            .env("HOME", &home)
            .env_remove("XDG_RUNTIME_DIR")
            .env_remove("REGISTRY_AUTH_FILE");
        if let Some(f) = auth_env {
            cmd.env("REGISTRY_AUTH_FILE", f);
        }
        cmd.output().unwrap()
    };

    // Anonymous: refused, and the error says what to do.
    let out = fetch("cache-a", None, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("components.images[0]") && err.contains("the registry wants credentials"),
        "{err}"
    );
    assert!(!dir
        .join("cache-a/oci/blobs/sha256")
        .join(&pushed.trim()[7..])
        .exists());

    // Writes the auth file `skopeo login` makes for the registry.
    let login = |file: &Path| {
        run(Command::new("skopeo")
            .args(["login", "--tls-verify=false", "--authfile"])
            .arg(file)
            .args(["-u", "foothold", "-p", "s3cret", &registry.host]));
    };

    // A wrong password from $REGISTRY_AUTH_FILE: refused.
    let wrong = dir.join("wrong.json");
    login(&wrong);
    let text = std::fs::read_to_string(&wrong).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let good_auth = v["auths"][&registry.host]["auth"]
        .as_str()
        .unwrap()
        .to_owned();
    use base64::Engine as _;
    let bad_auth = base64::engine::general_purpose::STANDARD.encode("foothold:wrong");
    std::fs::write(&wrong, text.replace(&good_auth, &bad_auth)).unwrap();
    let out = fetch("cache-b", Some(&wrong), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("the registry refused the credentials"),
        "{err}"
    );

    // The file `skopeo login` wrote, given with --authfile: pulled and verified.
    let good = dir.join("auth.json");
    login(&good);
    let out = fetch(
        "cache-c",
        Some(&wrong),
        &["--authfile", good.to_str().unwrap()],
    );
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains(&format!("as foothold (credentials for {}", registry.host)),
        "{log}"
    );
    assert!(log.contains("4 of 4 blobs downloaded"), "{log}");
    // The cache holds exactly the image's blobs (manifest, config, layers), each under its digest.
    let names = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let got = dir.join("cache-c/oci/blobs/sha256");
    assert_eq!(names(&got), names(&layout.join("blobs/sha256")));
    for name in names(&got) {
        assert_eq!(sha256_file(&got.join(&name)), name);
    }
    assert!(layers
        .iter()
        .all(|l| cached(&dir.join("cache-c"), l).is_file()));

    // With no --authfile and no $REGISTRY_AUTH_FILE, the login under $HOME is found.
    let home_auth = home.join(".config/containers/auth.json");
    std::fs::create_dir_all(home_auth.parent().unwrap()).unwrap();
    std::fs::copy(&good, &home_auth).unwrap();
    let out = fetch("cache-d", None, &[]);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains(&format!(
            "as foothold (credentials for {} in {})",
            registry.host,
            home_auth.display()
        )),
        "{log}"
    );
    assert_eq!(names(&dir.join("cache-d/oci/blobs/sha256")), names(&got));
}
