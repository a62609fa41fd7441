//! Inputs built here from upstream sources: a Go package (`go: k8s.io/kubernetes/cmd/kubelet@v1.35.4`) or a C
//! file of a Go module (`cc: k8s.io/kubernetes/build/pause/linux/pause.c@v1.35.4`), fetched through the Go module
//! proxy and compiled reproducibly (`-trimpath`, no VCS stamp, fixed link flags, static). The result lands in the
//! content-addressed cache like a download, so a bundle carries it and an air-gapped build needs no toolchain.
//!
//! This module never decides whether a result is trusted: the caller compares it with the spec's pin.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _, Result};
use serde::Deserialize;

use crate::cmd::CommandExt as _;

/// The module whose packages get Kubernetes' version stamp (`kubectl version`, `/version`).
pub const KUBERNETES_MODULE: &str = "k8s.io/kubernetes";

/// What to build: a package or a C file, `<module path>[/<path in it>]@<version>`, or a package of a module's
/// source archive (a module the proxy does not serve; built by [`crate::go_archive`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recipe {
    Go(String),
    Cc(String),
    Archive(ArchiveRecipe),
}

impl Recipe {
    /// What is built, for messages and the cache's work directory.
    pub fn reference(&self) -> String {
        match self {
            Recipe::Go(r) | Recipe::Cc(r) => r.clone(),
            Recipe::Archive(a) => a.reference(),
        }
    }

    /// The recipe with its archives' paths made absolute: a spec path is relative to `spec_dir`, an archive
    /// given by URL is where `cached` says its pin is.
    pub fn located(self, spec_dir: &Path, cached: impl Fn(&str) -> PathBuf) -> Recipe {
        match self {
            Recipe::Archive(mut a) => {
                for s in std::iter::once(&mut a.source)
                    .chain(a.replace.iter_mut().map(|r| &mut r.1))
                    .chain(a.patches.iter_mut())
                {
                    s.path = Some(match &s.path {
                        Some(p) if p.is_absolute() => p.clone(),
                        Some(p) => spec_dir.join(p),
                        None => cached(&s.sha256),
                    });
                }
                Recipe::Archive(a)
            }
            r => r,
        }
    }
}

/// A Go package built from a module's source archive, with other archives replacing modules it requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveRecipe {
    pub source: ArchiveSource,
    /// (module path, the archive that holds it).
    pub replace: Vec<(String, ArchiveSource)>,
    /// Unified diffs applied in order to the module's tree (`patch -p1`) before it is built.
    pub patches: Vec<ArchiveSource>,
    /// The package, relative to the module's root (`.`, `./pkg/provisioner/ironic/plugin`).
    pub package: String,
    /// Built with `-buildmode=plugin`.
    pub plugin: bool,
}

impl ArchiveRecipe {
    pub fn reference(&self) -> String {
        let mode = if self.plugin { " (plugin)" } else { "" };
        format!("{}:{}{mode}", self.source.name, self.package)
    }
}

/// A source archive or a patch: its path (relative to the spec until [`Recipe::located`]) and its pinned sha256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveSource {
    pub path: Option<PathBuf>,
    pub sha256: String,
    /// Its file name, for messages.
    pub name: String,
}

/// Splits `path@version`, checking both halves; the error says what is wrong with `reference`.
pub fn parse_reference(reference: &str) -> Result<(&str, &str), String> {
    let (path, version) = reference.rsplit_once('@').ok_or_else(|| {
        format!("{reference:?} needs @<version>, e.g. k8s.io/kubernetes/cmd/kubelet@v1.35.4")
    })?;
    let first = path.split('/').next().unwrap_or_default();
    if !first.contains('.')
        || path.contains(['\\', ' ', '\n'])
        || path
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return Err(format!(
            "{path:?} is not a Go import path (a host name first, then path segments)"
        ));
    }
    if !version.starts_with('v') || version.contains(['/', ' ', '\n']) || version.len() < 2 {
        return Err(format!("{version:?} is not a module version like v1.35.4"));
    }
    Ok((path, version))
}

/// A module as `go mod download -json` describes it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Module {
    path: String,
    version: String,
    #[serde(default)]
    dir: String,
    #[serde(default)]
    go_mod: String,
    #[serde(default)]
    time: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

/// The toolchain that builds: `go version`'s output, which the manifest records. Fails with the reason when
/// there is none.
pub fn go_version() -> Result<String> {
    let out = Command::new("go").arg("version").output().map_err(|e| {
        anyhow::anyhow!(
            "the Go toolchain is needed to build it and `go` cannot be run ({e}); install Go (https://go.dev/dl), \
             or fetch on a machine that has it and build from the bundle (build --bundle --offline)"
        )
    })?;
    if !out.status.success() {
        bail!(
            "`go version` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A `go` command that asks nothing of the user's environment: the module proxy and checksum database as
/// configured, the local toolchain only, modules resolved as needed.
pub(crate) fn go(dir: &Path) -> Command {
    let mut c = Command::new("go");
    c.current_dir(dir)
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod -buildvcs=false")
        .env("GO111MODULE", "on")
        .env_remove("GOOS")
        .env_remove("GOARCH")
        .env_remove("GOWORK");
    c
}

/// Finds the module that holds `path` at `version`: the longest prefix of `path` the module proxy serves at that
/// version (as `go get` decides). The error says when the proxy serves none of them.
fn find_module(work: &Path, path: &str, version: &str) -> Result<Module> {
    let segments: Vec<&str> = path.split('/').collect();
    let mut last_error = String::new();
    for n in (1..=segments.len()).rev() {
        let candidate = segments[..n].join("/");
        let out = go(work)
            .args(["mod", "download", "-json"])
            .arg(format!("{candidate}@{version}"))
            .output()
            .context("running go mod download")?;
        let m: Option<Module> = serde_json::from_slice(&out.stdout).ok();
        match m {
            Some(m) if m.error.is_none() && out.status.success() => return Ok(m),
            Some(Module { error: Some(e), .. }) if n == 1 || last_error.is_empty() => {
                last_error = e
            }
            _ if last_error.is_empty() => {
                last_error = String::from_utf8_lossy(&out.stderr).trim().to_owned()
            }
            _ => {}
        }
    }
    bail!("the module proxy serves no module holding {path} at {version}: {last_error}")
}

/// The `replace` directives a wrapper module needs to build inside `m`: its own replacements, with those that
/// point into its repository (Kubernetes' `./staging/src/k8s.io/api`) replaced by the published module at the
/// matching version (Kubernetes publishes staging modules as v0.<minor>.<patch> of release v1.<minor>.<patch>).
fn replacements(m: &Module) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(&m.go_mod)
        .with_context(|| format!("reading {}'s go.mod ({})", m.path, m.go_mod))?;
    replacements_in(&text, &m.path, &m.version)
}

/// The directives of `go_mod` named `keyword` (`replace`, `require`), one line each, single or in a block,
/// comments stripped.
fn directives<'a>(go_mod: &'a str, keyword: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut in_block = false;
    for line in go_mod.lines() {
        let line = line.split("//").next().unwrap_or_default().trim();
        if in_block {
            if line == ")" {
                in_block = false;
            } else if !line.is_empty() {
                out.push(line);
            }
        } else if let Some(rest) = line.strip_prefix(keyword) {
            let rest = rest.trim();
            if rest == "(" {
                in_block = true;
            } else {
                out.push(rest);
            }
        }
    }
    out
}

fn replacements_in(go_mod: &str, module: &str, version: &str) -> Result<Vec<String>> {
    // The module paths of the `require` directives.
    let required: Vec<&str> = directives(go_mod, "require")
        .into_iter()
        .filter_map(|d| d.split_whitespace().next())
        .collect();
    let mut out = Vec::new();
    for directive in directives(go_mod, "replace") {
        let Some((from, to)) = directive.split_once("=>") else {
            continue;
        };
        let (from, to) = (from.trim(), to.trim());
        let from_path = from.split_whitespace().next().unwrap_or_default();
        if to.starts_with("./") || to.starts_with("../") {
            // A directory replacing a module the build does not require is a guard (etcd's
            // `go.etcd.io/etcd => ./FORBIDDEN_DEPENDENCY`): it changes nothing here. (Kubernetes' staging
            // modules are kept as they always were.)
            if module != KUBERNETES_MODULE && !required.contains(&from_path) {
                continue;
            }
            out.push(format!(
                "{from_path} => {from_path} {}",
                published(module, version, from_path, to)?
            ));
        } else {
            out.push(format!("{from} => {to}"));
        }
    }
    Ok(out)
}

/// The published version of the module `from` that `module@version` takes from its own repository's directory
/// `to`: for a Kubernetes release v1.x.y, its staging modules' v0.x.y; for a module of a repository that tags
/// its modules together (etcd's `server/v3` replacing `../api` with `api/v3`), a sibling of the same major
/// version at the same version. Anything else is refused, naming it.
fn published(module: &str, version: &str, from: &str, to: &str) -> Result<String> {
    if module == KUBERNETES_MODULE {
        if let Some(rest) = version.strip_prefix("v1.") {
            return Ok(format!("v0.{rest}"));
        }
    }
    let major = version.split('.').next().unwrap_or_default();
    let same_major = match from.rsplit_once('/') {
        Some((_, suffix)) if suffix.starts_with('v') && suffix[1..].parse::<u32>().is_ok() => {
            suffix == major
        }
        _ => major == "v0" || major == "v1",
    };
    if to.starts_with("../") && same_major {
        return Ok(version.to_owned());
    }
    bail!(
        "{module}@{version} replaces {from} with its own directory {to}: only Kubernetes' releases (v1.x.y) and \
         sibling modules of the same major version (../dir, tagged together) say which published version that is"
    )
}

/// The link flags of a Go build of `module@version`: no symbol table, and for Kubernetes the version stamp its
/// own release builds set, so the binaries report the release they are.
fn ldflags(module: &str, version: &str, time: Option<&str>) -> String {
    let mut flags = vec!["-s".to_owned(), "-w".to_owned()];
    if module == KUBERNETES_MODULE {
        let mut parts = version.trim_start_matches('v').split(['.', '-']);
        let major = parts.next().unwrap_or_default();
        let minor = parts.next().unwrap_or_default();
        for pkg in [
            "k8s.io/component-base/version",
            "k8s.io/client-go/pkg/version",
        ] {
            for (k, v) in [
                ("gitVersion", version),
                ("gitMajor", major),
                ("gitMinor", minor),
                // Built from the module archive, not a git checkout: what Kubernetes' own scripts say for that.
                ("gitTreeState", "archive"),
                ("buildDate", time.unwrap_or("1970-01-01T00:00:00Z")),
            ] {
                flags.push(format!("-X {pkg}.{k}={v}"));
            }
        }
    }
    flags.join(" ")
}

fn not_here(reference: &str) -> Result<String> {
    bail!("{reference}: a source archive's package is built by go_archive::build")
}

/// Builds `recipe` into `out` (a new file), using `work` as the wrapper module's directory. Returns a line for the
/// manifest saying what was built from which module version with which toolchain.
pub fn build(recipe: &Recipe, work: &Path, out: &Path) -> Result<String> {
    let reference = recipe.reference();
    let reference = reference.as_str();
    if let Recipe::Archive(_) = recipe {
        return not_here(reference);
    }
    let (path, version) = parse_reference(reference).map_err(|e| anyhow::anyhow!(e))?;
    let toolchain = go_version()?;
    std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    let module = find_module(work, path, version)?;
    let rest = path
        .strip_prefix(module.path.as_str())
        .unwrap_or_default()
        .trim_start_matches('/');
    match recipe {
        Recipe::Go(_) => {
            let mut go_mod = format!(
                "module foothold.local/build\n\ngo 1.22\n\nrequire {} {}\n",
                module.path, module.version
            );
            let replace = replacements(&module)?;
            if !replace.is_empty() {
                go_mod.push_str("\nreplace (\n");
                for r in &replace {
                    go_mod.push_str(&format!("\t{r}\n"));
                }
                go_mod.push_str(")\n");
            }
            std::fs::write(work.join("go.mod"), go_mod)?;
            let _ = std::fs::remove_file(work.join("go.sum"));
            go(work)
                .arg("get")
                .arg(format!("{path}@{version}"))
                .run_bytes()
                .with_context(|| format!("resolving {reference}"))?;
            go(work)
                .env("CGO_ENABLED", "0")
                .args(["build", "-trimpath"])
                .arg(format!(
                    "-ldflags={}",
                    ldflags(&module.path, &module.version, module.time.as_deref())
                ))
                .arg("-o")
                .arg(out)
                .arg(path)
                .run_bytes()
                .with_context(|| format!("building {reference}"))?;
        }
        Recipe::Archive(_) => return not_here(reference),
        Recipe::Cc(_) => {
            let src = PathBuf::from(&module.dir).join(rest);
            if rest.is_empty() || !src.is_file() {
                bail!("{reference}: {} has no file {rest:?}", module.path);
            }
            Command::new("cc")
                .current_dir(&module.dir)
                .args(["-Os", "-Wall", "-Werror", "-static", "-s"])
                .arg(format!("-ffile-prefix-map={}=.", module.dir))
                .arg(format!("-DVERSION={}@{}", module.path, module.version))
                .arg("-o")
                .arg(out)
                .arg(rest)
                .run_bytes()
                .with_context(|| format!("compiling {reference}"))?;
        }
    }
    let cc = match recipe {
        Recipe::Cc(_) => format!(
            ", {}",
            String::from_utf8_lossy(
                &Command::new("cc")
                    .arg("--version")
                    .run_bytes()
                    .with_context(|| "cc --version")?
            )
            .lines()
            .next()
            .unwrap_or_default()
        ),
        Recipe::Go(_) | Recipe::Archive(_) => String::new(),
    };
    Ok(format!(
        "built from {} {} ({toolchain}{cc})",
        module.path, module.version
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_name_path_and_version() {
        assert_eq!(
            parse_reference("k8s.io/kubernetes/cmd/kubelet@v1.35.4").unwrap(),
            ("k8s.io/kubernetes/cmd/kubelet", "v1.35.4")
        );
        for bad in [
            "k8s.io/kubernetes/cmd/kubelet",
            "kubernetes/cmd/kubelet@v1",
            "k8s.io//x@v1.0.0",
            "k8s.io/../x@v1.0.0",
            "k8s.io/x@1.0.0",
            "k8s.io/x@",
        ] {
            assert!(parse_reference(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn staging_replacements_become_published_modules() {
        let go_mod = "module k8s.io/kubernetes\n\nreplace (\n\tk8s.io/api => ./staging/src/k8s.io/api\n\tk8s.io/x v1.0.0 => example.org/x v1.0.1 // fork\n)\n\nreplace k8s.io/kubelet => ./staging/src/k8s.io/kubelet\n";
        assert_eq!(
            replacements_in(go_mod, "k8s.io/kubernetes", "v1.35.4").unwrap(),
            [
                "k8s.io/api => k8s.io/api v0.35.4",
                "k8s.io/x v1.0.0 => example.org/x v1.0.1",
                "k8s.io/kubelet => k8s.io/kubelet v0.35.4"
            ]
        );
        let required = format!("require k8s.io/api v0.0.0\n{go_mod}");
        let err = replacements_in(&required, "example.org/m", "v2.0.0").unwrap_err();
        assert!(
            format!("{err}").contains("./staging/src/k8s.io/api"),
            "{err}"
        );
        // etcd's modules are tagged together: server/v3 takes its siblings at its own version.
        let etcd = "module go.etcd.io/etcd/server/v3\nrequire (\n\tgo.etcd.io/etcd/api/v3 v3.6.6\n\tgo.etcd.io/etcd/client/pkg/v3 v3.6.6\n)\n\
                    replace (\n\tgo.etcd.io/etcd/api/v3 => ../api\n\tgo.etcd.io/etcd/client/pkg/v3 => ../client/pkg\n)\n\
                    replace go.etcd.io/etcd => ./FORBIDDEN_DEPENDENCY\n";
        assert_eq!(
            replacements_in(etcd, "go.etcd.io/etcd/server/v3", "v3.6.6").unwrap(),
            [
                "go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 v3.6.6",
                "go.etcd.io/etcd/client/pkg/v3 => go.etcd.io/etcd/client/pkg/v3 v3.6.6"
            ]
        );
        let other_major = "require example.org/a/v2 v2.0.0\nreplace example.org/a/v2 => ../a\n";
        assert!(replacements_in(other_major, "example.org/m/v3", "v3.0.0").is_err());
    }

    #[test]
    fn kubernetes_builds_carry_the_release_in_their_version_stamp() {
        let f = ldflags("k8s.io/kubernetes", "v1.35.4", Some("2026-04-15T18:01:22Z"));
        for want in [
            "-X k8s.io/component-base/version.gitVersion=v1.35.4",
            "-X k8s.io/component-base/version.gitMinor=35",
            "-X k8s.io/client-go/pkg/version.gitMajor=1",
            "-X k8s.io/client-go/pkg/version.buildDate=2026-04-15T18:01:22Z",
        ] {
            assert!(f.contains(want), "{want} in {f}");
        }
        assert_eq!(
            ldflags("github.com/coredns/coredns", "v1.13.1", None),
            "-s -w"
        );
    }
}
