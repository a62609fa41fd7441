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
    // A PATH without go, in a fresh cache (a cache hit would need no toolchain).
    let (ok, err) = fetch(
        &spec,
        &dir.path().join("cache"),
        &[("PATH", "/usr/sbin:/usr/bin:/sbin:/bin".into())],
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
