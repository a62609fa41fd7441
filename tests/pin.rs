//! `foothold-build pin`: the missing pins of a spec resolved from a registry's tags and a file server's urls.

use super::*;

/// A directory served over HTTP by Python's http.server, which logs each request on stderr (into `log`).
fn file_server(dir: &Path, log: &Path) -> Server {
    let host = format!("127.0.0.1:{}", free_port());
    let port = host.rsplit(':').next().unwrap().to_owned();
    Server::start(
        "python3 -m http.server",
        Command::new("python3")
            .args(["-m", "http.server", "--bind", "127.0.0.1", "--directory"])
            .arg(dir)
            .arg(port)
            .stderr(std::fs::File::create(log).unwrap()),
        host,
        |host| http_code(&[&format!("http://{host}/")]) == "200",
    )
}

/// The GET requests for `path` in an http.server log.
fn gets(log: &Path, path: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap()
        .matches(&format!("\"GET {path} "))
        .count()
}

#[test]
fn pin_writes_the_missing_pins_into_the_spec_and_keeps_the_rest_of_it() {
    build_binaries();
    let tmp = tempfile::tempdir_in(target()).unwrap();
    let dir = tmp.path();
    let src = source_layout(&dir.join("layout"));
    run(Command::new(target().join("debug/foothold-agent"))
        .arg("import")
        .arg(dir.join("layout"))
        .arg("--data")
        .arg(dir.join("registry")));
    let registry = Server::agent(&dir.join("registry"));
    let files = dir.join("files");
    std::fs::create_dir_all(&files).unwrap();
    let put = |name: &str, seed: u64| {
        let bytes = seeded(seed, 200_000 + seed as usize);
        std::fs::write(files.join(name), &bytes).unwrap();
        hex::encode(Sha256::digest(&bytes))
    };
    let (k3s, airgap, tool) = (put("k3s", 7), put("airgap.tar.zst", 8), put("node-tool", 9));
    let log = dir.join("http.log");
    let web = file_server(&files, &log);

    // Comments, flow and block mappings, quoting: all of it must survive.
    let unpinned = format!(
        "# Pins are written by `foothold-build pin` — this comment stays.\n\
         name: pin-test\n\
         base: {{suite: bookworm}}\n\
         hostname: pin-test\n\
         components:\n  \
           files:\n    \
             - {{url: 'http://{web}/k3s', dest: /usr/local/bin/k3s}}  # flow\n    \
             - url: http://{web}/airgap.tar.zst\n      \
               dest: /var/lib/images/airgap-images.tar.zst\n    \
             - url: \"http://{web}/node-tool\"\n      \
               sha256: {tool}  # pinned already: left alone\n      \
               dest: /usr/local/bin/node-tool\n  \
           images:\n    \
             - reference: quay.io/lab/multi:2\n      \
               source: {host}/docker.io/lab/multi\n    \
             - reference: registry.example/lab/single:1\n      \
               source: {host}/docker.io/lab/single\n\
         outputs: {{formats: [raw], diskSize: 3GiB}}\n",
        web = web.host,
        host = registry.host,
    );
    let spec = dir.join("spec.yaml");
    std::fs::write(&spec, &unpinned).unwrap();
    let cache = dir.join("cache");
    let build = |args: &[&str]| {
        let out = Command::new(target().join("debug/foothold-build"))
            .args(args)
            .arg(&spec)
            .arg("--cache")
            .arg(&cache)
            .args(["--insecure-registry", &registry.host])
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let check = |args: &[&str]| {
        let out = Command::new(target().join("debug/foothold-build"))
            .arg("check")
            .arg(&spec)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let read = || std::fs::read_to_string(&spec).unwrap();

    // Unpinned: no build or fetch, and the error says what to run.
    let (ok, err) = check(&[]);
    assert!(!ok, "an unpinned spec passed the check");
    assert!(
        err.contains("components.files[0].sha256: required") && err.contains("foothold-build pin"),
        "{err}"
    );
    let (ok, text) = build(&["fetch"]);
    assert!(!ok && text.contains("foothold-build pin"), "{text}");
    assert!(check(&["--allow-unpinned"]).0);

    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&spec, std::fs::Permissions::from_mode(0o640)).unwrap();
    let (ok, text) = build(&["pin"]);
    assert!(ok, "{text}");
    assert!(text.contains("4 pins written"), "{text}");
    let mode = std::fs::metadata(&spec).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o640, "pin changed the spec's mode");
    let index = src.index["digest"].as_str().unwrap();
    let single = src.single["digest"].as_str().unwrap();
    let pinned = unpinned
        .replace("/k3s',", &format!("/k3s', sha256: {k3s},"))
        .replace(
            "/airgap.tar.zst\n",
            &format!("/airgap.tar.zst\n      sha256: {airgap}\n"),
        )
        .replace("multi:2\n", &format!("multi:2\n      digest: {index}\n"))
        .replace("single:1\n", &format!("single:1\n      digest: {single}\n"));
    assert_eq!(read(), pinned);
    assert!(check(&[]).0, "the pinned spec fails the check");
    assert_eq!(gets(&log, "/k3s"), 1);
    assert_eq!(gets(&log, "/node-tool"), 0, "a pinned input was downloaded");

    // The downloads were kept: the fetch that follows asks the file server nothing.
    let (ok, text) = build(&["fetch"]);
    assert!(ok, "{text}");
    assert_eq!(
        (
            gets(&log, "/k3s"),
            gets(&log, "/airgap.tar.zst"),
            gets(&log, "/node-tool")
        ),
        (1, 1, 1),
        "only the input pinned by hand is fetched"
    );

    // Pinned: nothing to do, nothing asked, the file untouched.
    let before = std::fs::metadata(&spec).unwrap().modified().unwrap();
    let (ok, text) = build(&["pin"]);
    assert!(ok && text.contains("nothing to pin"), "{text}");
    assert_eq!(gets(&log, "/k3s"), 1);
    assert_eq!(
        std::fs::metadata(&spec).unwrap().modified().unwrap(),
        before
    );

    // A new k3s at the same URL: --update rewrites its pin and only its pin.
    let k3s2 = put("k3s", 10);
    let (ok, text) = build(&["pin", "--update"]);
    assert!(ok, "{text}");
    assert!(
        text.contains(&format!("components.files[0].sha256: {k3s2} (was {k3s})"))
            && text.contains("1 pins written"),
        "{text}"
    );
    assert_eq!(read(), pinned.replace(&k3s, &k3s2));

    // What cannot be pinned leaves the spec as it was, and says which input.
    let broken = |from: &str, to: &str| {
        let text = pinned.replace(&k3s, &k3s2).replace(from, to);
        std::fs::write(&spec, &text).unwrap();
        let (ok, out) = build(&["pin"]);
        assert!(!ok, "pinning succeeded with {to:?}");
        assert_eq!(read(), text, "a failed pin changed the spec");
        out
    };
    std::fs::remove_file(files.join("airgap.tar.zst")).unwrap();
    let other_platform = "the image is for linux/amd64, not one of the platforms linux/arm64";
    for (from, to, says) in [
        (
            format!("      sha256: {airgap}\n"),
            "",
            ["components.files[1].url", "HTTP 404"],
        ),
        (
            format!("multi:2\n      digest: {index}\n"),
            "multi:9\n",
            ["components.images[0]", "docker.io/lab/multi:9"],
        ),
        (
            format!("multi:2\n      digest: {index}\n"),
            "multi:2\n      platforms: [linux/s390x]\n",
            ["components.images[0]", "none of the platforms linux/s390x"],
        ),
        (
            format!("single:1\n      digest: {single}\n"),
            "single:1\n      platforms: [linux/arm64]\n",
            ["components.images[1]", other_platform],
        ),
    ] {
        let out = broken(&from, to);
        assert!(
            says.iter().all(|s| out.contains(s)),
            "{says:?} not in {out}"
        );
    }
    // A digest pinned by hand is checked too: fetch refuses a single image for another platform.
    std::fs::write(
        &spec,
        pinned.replace("single:1\n", "single:1\n      platforms: [linux/arm64]\n"),
    )
    .unwrap();
    let (ok, out) = build(&["fetch"]);
    assert!(!ok, "fetched an amd64 image for linux/arm64");
    assert!(
        out.contains("components.images[1]") && out.contains(other_platform),
        "{out}"
    );
}
