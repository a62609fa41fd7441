//! Inputs built from source, refused with a clear error: a Kubernetes release the module proxy does not serve,
//! and no Go toolchain. Each names the spec field and the reason, and caches nothing. The proxy here is an empty
//! directory (`GOPROXY=file://…`), so nothing leaves the machine.

use std::path::{Path, PathBuf};
use std::process::Command;

fn builder() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_foothold-build"))
}

/// `packages/appliance.yaml` at another Kubernetes release, its paths made absolute.
fn appliance_at(dir: &Path, version: &str) -> PathBuf {
    let packages = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packages");
    let text = std::fs::read_to_string(packages.join("appliance.yaml"))
        .unwrap()
        .replace("v1.35.4", version)
        .replace("path: ../", &format!("path: {}/../", packages.display()));
    let spec = dir.join("appliance.yaml");
    std::fs::write(&spec, text).unwrap();
    spec
}

fn fetch(spec: &Path, cache: &Path, env: &[(&str, String)]) -> (bool, String) {
    let out = Command::new(builder())
        .arg("fetch")
        .arg(spec)
        .arg("--cache")
        .arg(cache)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_release_the_module_proxy_does_not_serve_fails_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let spec = appliance_at(dir.path(), "v1.35.99");
    let proxy = dir.path().join("proxy");
    std::fs::create_dir_all(&proxy).unwrap();
    let cache = dir.path().join("cache");
    let (ok, err) = fetch(
        &spec,
        &cache,
        &[
            ("GOPROXY", format!("file://{}", proxy.display())),
            (
                "GOMODCACHE",
                dir.path().join("modcache").display().to_string(),
            ),
            ("GOFLAGS", String::new()),
        ],
    );
    assert!(!ok, "fetch succeeded");
    for want in [
        "appliance.yaml: components.kubernetes.kubelet.go",
        "the module proxy serves no module holding k8s.io/kubernetes/cmd/kubelet at v1.35.99",
    ] {
        assert!(err.contains(want), "{want:?} in {err}");
    }
    let cached: Vec<_> = std::fs::read_dir(cache.join("files/sha256"))
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(cached.is_empty(), "cached {cached:?}");
}

#[test]
fn no_go_toolchain_fails_naming_the_field_and_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let spec = appliance_at(dir.path(), "v1.35.4");
    // A PATH without go (an empty directory: the system's may hold Debian's golang-go, which the test tools
    // install where no Go is), in a fresh cache (a cache hit would need no toolchain).
    let empty = dir.path().join("bin");
    std::fs::create_dir(&empty).unwrap();
    let (ok, err) = fetch(
        &spec,
        &dir.path().join("cache"),
        &[("PATH", empty.display().to_string())],
    );
    assert!(!ok, "fetch succeeded");
    for want in [
        "components.kubernetes.kubelet.go",
        "the Go toolchain is needed to build it and `go` cannot be run",
        "build --bundle --offline",
    ] {
        assert!(err.contains(want), "{want:?} in {err}");
    }
}

/// `fetch --only` takes the named inputs alone and prints where each is. An input built from source that is in
/// the cache with no record of its build (placed there by hand) is said to be so; one whose record names another
/// machine is said to come from it. Nothing is built or asked for: a cache hit makes no request, and the module
/// proxy is an empty directory. A field the spec does not have is refused, naming the ones it has.
#[test]
fn fetch_only_says_where_an_input_built_from_source_in_the_cache_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let spec = appliance_at(dir.path(), "v1.35.4");
    let text = std::fs::read_to_string(&spec).unwrap();
    let pin = text
        .lines()
        .find(|l| l.trim_start().starts_with("kubeApiserver:"))
        .and_then(|l| l.split("sha256: ").nth(1))
        .map(|s| s.trim_end_matches('}').trim().to_owned())
        .unwrap();
    let cache = dir.path().join("cache");
    std::fs::create_dir_all(cache.join("files/sha256")).unwrap();
    std::fs::write(cache.join("files/sha256").join(&pin), b"placed by hand").unwrap();
    let proxy = dir.path().join("proxy");
    std::fs::create_dir_all(&proxy).unwrap();
    let only = |extra: &[&str]| {
        Command::new(builder())
            .arg("fetch")
            .arg(&spec)
            .arg("--cache")
            .arg(&cache)
            .args(["--only", "components.kubernetes.kubeApiserver"])
            .args(extra)
            .env("GOPROXY", format!("file://{}", proxy.display()))
            .output()
            .unwrap()
    };
    let out = only(&[]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stdout,
        format!(
            "components.kubernetes.kubeApiserver {}\n",
            cache.join("files/sha256").join(&pin).display()
        )
    );
    assert!(
        stderr.contains("(components.kubernetes.kubeApiserver): taken from the cache with no record of its build"),
        "{stderr}"
    );
    assert!(!stderr.contains("kubelet"), "{stderr}");

    // A record another machine's build left.
    std::fs::create_dir_all(cache.join("files/built")).unwrap();
    std::fs::write(
        cache.join(format!("files/built/{pin}.json")),
        r#"{"reference": "k8s.io/kubernetes/cmd/kube-apiserver@v1.35.4", "made": "built from k8s.io/kubernetes v1.35.4 (go version go1.26.8 linux/amd64)", "machine": "elsewhere", "finished": "2026-11-20T10:00:00Z", "seconds": 301}"#,
    )
    .unwrap();
    let out = only(&["--json"]);
    assert!(out.status.success());
    let event: serde_json::Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["event"] == "input")
        .unwrap();
    assert_eq!(event["field"], "components.kubernetes.kubeApiserver");
    assert_eq!(event["outcome"], "cached");
    assert_eq!(event["record"]["machine"], "elsewhere");
    assert!(
        event["message"]
            .as_str()
            .unwrap()
            .starts_with("taken from the cache, built 2026-11-20T10:00:00Z on another machine (elsewhere) in 301 s"),
        "{event}"
    );

    let out = Command::new(builder())
        .arg("fetch")
        .arg(&spec)
        .arg("--cache")
        .arg(&cache)
        .args(["--only", "components.kubernetes.kubeletz"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("no input \"components.kubernetes.kubeletz\"; the spec's inputs are ")
            && err.contains("components.kubernetes.kubelet, "),
        "{err}"
    );
}
