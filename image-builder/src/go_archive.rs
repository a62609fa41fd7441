//! Go packages built from source archives: for modules the Go module proxy does not serve (Metal3's
//! baremetal-operator), the tree comes as a pinned `.tar.gz`, other archives replace the modules it requires
//! that the proxy refuses too, and everything else resolves through the proxy as the tree's `go.sum` says.
//!
//! Built as upstream's Dockerfile builds it (cgo on, `-ldflags "-s -w"`), plus `-trimpath` and no VCS stamp, so
//! the bytes do not depend on the directory or the checkout: a manager and its plugins built by one toolchain
//! from one tree load together.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _, Result};

use crate::cmd::CommandExt as _;
use crate::source::{go, go_version, ArchiveRecipe, ArchiveSource};

/// Builds `recipe`'s package into `out` (a new file) in `work`, which is emptied first. Returns a line for the
/// manifest saying what was built from which archive with which toolchain.
pub fn build(recipe: &ArchiveRecipe, work: &Path, out: &Path) -> Result<String> {
    let toolchain = go_version()?;
    let (root, replaced) = prepare(recipe, work)?;
    let module = module_path(&root)?;
    let mut build = go(&root);
    build
        .env("CGO_ENABLED", "1")
        .args(["build", "-trimpath", "-ldflags=-s -w"]);
    if recipe.plugin {
        build.arg("-buildmode=plugin");
    }
    build
        .arg("-o")
        .arg(out)
        .arg(&recipe.package)
        .run_bytes()
        .with_context(|| format!("building {}", recipe.reference()))?;
    let cc = Command::new("cc")
        .arg("--version")
        .run_bytes()
        .context("cc --version (cgo needs a C compiler)")?;
    let cc = String::from_utf8_lossy(&cc)
        .lines()
        .next()
        .unwrap_or_default()
        .to_owned();
    let mut with = String::new();
    if !replaced.is_empty() {
        with += &format!(", with {}", replaced.join(", "));
    }
    if !recipe.patches.is_empty() {
        let patches: Vec<String> = recipe
            .patches
            .iter()
            .map(|p| format!("{} {}", p.name, short(&p.sha256)))
            .collect();
        with += &format!(", patched with {}", patches.join(", "));
    }
    Ok(format!(
        "built from {module} {} {}{with} ({toolchain}, {cc})",
        recipe.source.name,
        short(&recipe.source.sha256),
    ))
}

/// The module's tree of `recipe` in `work` (emptied first), ready to build or test: unpacked, patched, and its
/// replacements in place. Returns its root and, for the manifest, what replaced which module.
pub fn prepare(recipe: &ArchiveRecipe, work: &Path) -> Result<(PathBuf, Vec<String>)> {
    if work.exists() {
        std::fs::remove_dir_all(work).with_context(|| format!("emptying {}", work.display()))?;
    }
    let root = module_root(&unpack(&recipe.source, &work.join("src"))?)?;
    apply_patches(&recipe.patches, &root, &recipe.source.name)?;
    let mut replaced = Vec::new();
    for (i, (path, archive)) in recipe.replace.iter().enumerate() {
        let tree = unpack(archive, &work.join(format!("replace-{i}")))?;
        let dir = find_module(&tree, path)?
            .with_context(|| format!("{}: no go.mod of module {path} in it", archive.name))?;
        // Relative: the build info the binary embeds names the replacement as written, so an absolute path
        // would make the bytes depend on where the cache is (a plugin built in /root and one built in /home
        // differed only there).
        let relative = relative_to(&dir, &root, work)?;
        go(&root)
            .args(["mod", "edit"])
            .arg(format!("-replace={path}={relative}"))
            .run_bytes()
            .with_context(|| format!("replacing {path} with {}", archive.name))?;
        replaced.push(format!(
            "{path} from {} {}",
            archive.name,
            short(&archive.sha256)
        ));
    }
    Ok((root, replaced))
}

/// `dir` as a path relative to `from`, both inside `work` (`../../replace-0/…`).
fn relative_to(dir: &Path, from: &Path, work: &Path) -> Result<String> {
    let below = |p: &Path| {
        p.strip_prefix(work)
            .map(Path::to_owned)
            .with_context(|| format!("{} is not inside {}", p.display(), work.display()))
    };
    let (dir, from) = (below(dir)?, below(from)?);
    let up = "../".repeat(from.components().count());
    Ok(format!("{up}{}", dir.display()))
}

fn short(sha256: &str) -> String {
    format!("sha256:{}", &sha256[..sha256.len().min(12)])
}

/// The path of `input` (an archive or a patch), checked against its pin.
fn checked(input: &ArchiveSource) -> Result<&Path> {
    let path = input
        .path
        .as_deref()
        .with_context(|| format!("{}: not located (a bug: Recipe::located first)", input.name))?;
    let got = crate::sparse::sha256(path).with_context(|| format!("reading {}", path.display()))?;
    if got != input.sha256 {
        bail!(
            "{} has sha256 {got}, the spec pins {}",
            path.display(),
            input.sha256
        );
    }
    Ok(path)
}

/// Applies `patches` in order to the module tree at `root` (unpacked from `source`), each checked against its
/// pin. A hunk that does not apply exactly where its context is found fails the build (`--fuzz=0`), and so does
/// a patch that is already applied.
fn apply_patches(patches: &[ArchiveSource], root: &Path, source: &str) -> Result<()> {
    for patch in patches {
        // Absolute: `patch` opens its input after changing to `root`.
        let path = std::path::absolute(checked(patch)?)?;
        Command::new("patch")
            .args(["-p1", "--batch", "--forward", "--fuzz=0"])
            .args(["--no-backup-if-mismatch", "--reject-file=-"])
            .arg("--directory")
            .arg(root)
            .arg("--input")
            .arg(&path)
            .run_bytes()
            .with_context(|| format!("applying {} to {source}", patch.name))?;
    }
    Ok(())
}

/// Checks `archive` against its pin and unpacks it into `dir`.
fn unpack(archive: &ArchiveSource, dir: &Path) -> Result<PathBuf> {
    let path = checked(archive)?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    Command::new("tar")
        .arg("-xzf")
        .arg(path)
        .arg("-C")
        .arg(dir)
        .args(["--no-same-owner", "--no-same-permissions"])
        .run_bytes()
        .with_context(|| format!("unpacking {}", path.display()))?;
    Ok(dir.to_owned())
}

/// The module's root in an unpacked archive: the directory itself, or its only subdirectory (GitHub's archives
/// hold `<repo>-<ref>/`), whichever has a `go.mod`.
fn module_root(dir: &Path) -> Result<PathBuf> {
    if dir.join("go.mod").is_file() {
        return Ok(dir.to_owned());
    }
    let entries: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    match entries.as_slice() {
        [only] if only.join("go.mod").is_file() => Ok(only.clone()),
        _ => bail!(
            "{}: the archive holds no go.mod at its top, nor one directory with a go.mod",
            dir.display()
        ),
    }
}

/// The `module` line of `dir/go.mod`.
fn module_path(dir: &Path) -> Result<String> {
    let go_mod = dir.join("go.mod");
    let text = std::fs::read_to_string(&go_mod)
        .with_context(|| format!("reading {}", go_mod.display()))?;
    declared_module(&text).with_context(|| format!("{}: no module line", go_mod.display()))
}

fn declared_module(go_mod: &str) -> Option<String> {
    go_mod.lines().find_map(|l| {
        let rest = l.split("//").next()?.trim().strip_prefix("module")?;
        rest.starts_with([' ', '\t'])
            .then(|| rest.trim().trim_matches('"').to_owned())
    })
}

/// The directory under `dir` whose `go.mod` declares `module`, searching breadth first.
fn find_module(dir: &Path, module: &str) -> Result<Option<PathBuf>> {
    let mut queue = std::collections::VecDeque::from([dir.to_owned()]);
    while let Some(d) = queue.pop_front() {
        if d.join("go.mod").is_file() && module_path(&d)? == module {
            return Ok(Some(d));
        }
        let mut subdirs: Vec<PathBuf> = std::fs::read_dir(&d)
            .with_context(|| format!("reading {}", d.display()))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        subdirs.sort();
        queue.extend(subdirs);
    }
    Ok(None)
}

/// Files read from an archive: (file name, content), sorted by name.
pub type Files = Vec<(String, Vec<u8>)>;

/// Reads the files of `archive`, with `patches` applied, under `<its root>/<dir>/` whose names end in `suffix`,
/// sorted by name, after checking each against its pin.
pub fn read_dir(
    archive: &ArchiveSource,
    patches: &[ArchiveSource],
    dir: &str,
    suffix: &str,
) -> Result<Files> {
    Ok(read_dirs(archive, patches, &[(dir, suffix)])?.remove(0))
}

/// [`read_dir`] for each (directory, suffix) of `wanted`, from one unpacking of the archive.
pub fn read_dirs(
    archive: &ArchiveSource,
    patches: &[ArchiveSource],
    wanted: &[(&str, &str)],
) -> Result<Vec<Files>> {
    let tmp = tempfile::tempdir().context("creating a temporary directory")?;
    let root = module_root(&unpack(archive, tmp.path())?)?;
    apply_patches(patches, &root, &archive.name)?;
    let mut all = Vec::new();
    for &(dir, suffix) in wanted {
        let from = root.join(dir);
        let mut out = Vec::new();
        for e in std::fs::read_dir(&from)
            .with_context(|| format!("{}: no {dir}/ in it", archive.name))?
        {
            let e = e?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(suffix) && e.file_type()?.is_file() {
                out.push((name, std::fs::read(e.path())?));
            }
        }
        out.sort();
        if out.is_empty() {
            bail!("{}: no {suffix} files in {dir}/", archive.name);
        }
        all.push(out);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {

    #[test]
    fn replacements_are_named_relative_to_the_module() {
        let work = Path::new("/cache/go/work/x");
        assert_eq!(
            relative_to(
                &work.join("replace-0/api-abc/api"),
                &work.join("src/bmo-123"),
                work
            )
            .unwrap(),
            "../../replace-0/api-abc/api"
        );
        assert!(relative_to(Path::new("/elsewhere"), &work.join("src"), work).is_err());
    }
    use super::*;

    #[test]
    fn the_module_line_names_the_module() {
        assert_eq!(
            declared_module("// x\nmodule github.com/metal3-io/baremetal-operator\n\ngo 1.26.0\n")
                .as_deref(),
            Some("github.com/metal3-io/baremetal-operator")
        );
        assert_eq!(
            declared_module("module \"example.org/m\" // quoted\n").as_deref(),
            Some("example.org/m")
        );
        assert_eq!(declared_module("modules x\ngo 1.22\n"), None);
    }

    fn archive(dir: &Path, files: &[(&str, &str)]) -> ArchiveSource {
        let tree = dir.join("tree");
        for (name, text) in files {
            let p = tree.join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let path = dir.join("a.tar.gz");
        Command::new("tar")
            .arg("-czf")
            .arg(&path)
            .arg("-C")
            .arg(&tree)
            .arg(".")
            .run_bytes()
            .unwrap();
        ArchiveSource {
            sha256: crate::sparse::sha256(&path).unwrap(),
            path: Some(path),
            name: "a.tar.gz".into(),
        }
    }

    #[test]
    fn a_replacement_module_is_found_under_its_archive_root() {
        let dir = tempfile::tempdir().unwrap();
        let a = archive(
            dir.path(),
            &[
                ("op/go.mod", "module example.org/op\n"),
                ("op/api/go.mod", "module example.org/op/api\n"),
            ],
        );
        let tree = unpack(&a, &dir.path().join("out")).unwrap();
        assert_eq!(
            module_path(&module_root(&tree).unwrap()).unwrap(),
            "example.org/op"
        );
        assert_eq!(
            find_module(&tree, "example.org/op/api").unwrap(),
            Some(tree.join("op/api"))
        );
        assert_eq!(find_module(&tree, "example.org/other").unwrap(), None);
    }

    #[test]
    fn an_archive_that_is_not_the_pinned_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = archive(dir.path(), &[("go.mod", "module example.org/m\n")]);
        a.sha256 = "0".repeat(64);
        let e = format!("{:#}", unpack(&a, &dir.path().join("out")).unwrap_err());
        assert!(
            e.contains(&format!("the spec pins {}", "0".repeat(64))),
            "{e}"
        );
        assert!(!dir.path().join("out").exists());
    }

    /// A pinned patch file in `dir` holding `text`.
    fn patch_file(dir: &Path, name: &str, text: &str) -> ArchiveSource {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        ArchiveSource {
            sha256: crate::sparse::sha256(&path).unwrap(),
            path: Some(path),
            name: name.into(),
        }
    }

    /// A module with one CRD, `kind: A`, which `CRD_PATCH` changes.
    fn crd_archive(dir: &Path) -> ArchiveSource {
        archive(
            dir,
            &[
                ("bmo/go.mod", "module example.org/bmo\n"),
                ("bmo/config/crds/a.yaml", "kind: A\n"),
            ],
        )
    }

    const CRD_PATCH: &str = "Subject: the kind renamed\n\n---\n\
        --- a/config/crds/a.yaml\n+++ b/config/crds/a.yaml\n@@ -1 +1 @@\n-kind: A\n+kind: Patched\n";

    #[test]
    fn patches_apply_in_order_to_what_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let a = crd_archive(dir.path());
        let mut first = patch_file(dir.path(), "1.patch", CRD_PATCH);
        // Relative to the working directory (the crate's, which has src/), as a spec's path is when the spec's
        // is: `patch` runs in the tree.
        let cwd = std::env::current_dir().unwrap();
        let up = format!("src/../{}", "../".repeat(cwd.components().count() - 1));
        let absolute = first.path.take().unwrap();
        first.path = Some(PathBuf::from(up).join(absolute.strip_prefix("/").unwrap()));
        let second = patch_file(
            dir.path(),
            "2.patch",
            "--- a/config/crds/a.yaml\n+++ b/config/crds/a.yaml\n@@ -1 +1,2 @@\n kind: Patched\n+again: true\n",
        );
        let files = read_dir(&a, &[first.clone(), second.clone()], "config/crds", ".yaml").unwrap();
        assert_eq!(
            files,
            [(
                "a.yaml".to_owned(),
                b"kind: Patched\nagain: true\n".to_vec()
            )]
        );
        // Out of order, the second's context is not there: the error names the patch and the archive.
        let e = format!(
            "{:#}",
            read_dir(&a, &[second, first], "config/crds", ".yaml").unwrap_err()
        );
        assert!(e.contains("applying 2.patch to a.tar.gz"), "{e}");
        assert!(e.contains("FAILED"), "{e}");
    }

    #[test]
    fn a_patch_applied_twice_or_not_the_pinned_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let a = crd_archive(dir.path());
        let p = patch_file(dir.path(), "1.patch", CRD_PATCH);
        let e = format!(
            "{:#}",
            read_dir(&a, &[p.clone(), p.clone()], "config/crds", ".yaml").unwrap_err()
        );
        assert!(e.contains("applying 1.patch to a.tar.gz"), "{e}");
        let mut wrong = p;
        wrong.sha256 = "0".repeat(64);
        let e = format!(
            "{:#}",
            read_dir(&a, &[wrong], "config/crds", ".yaml").unwrap_err()
        );
        assert!(
            e.contains(&format!("the spec pins {}", "0".repeat(64))),
            "{e}"
        );
    }

    #[test]
    fn the_crds_are_read_sorted_from_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        let a = archive(
            dir.path(),
            &[
                ("bmo/go.mod", "module example.org/bmo\n"),
                ("bmo/config/crds/b.yaml", "kind: B\n"),
                ("bmo/config/crds/a.yaml", "kind: A\n"),
                ("bmo/config/crds/kustomization.txt", "x"),
            ],
        );
        let files = read_dir(&a, &[], "config/crds", ".yaml").unwrap();
        assert_eq!(
            files,
            [
                ("a.yaml".to_owned(), b"kind: A\n".to_vec()),
                ("b.yaml".to_owned(), b"kind: B\n".to_vec())
            ]
        );
        let e = format!(
            "{:#}",
            read_dir(&a, &[], "config/other", ".yaml").unwrap_err()
        );
        assert!(e.contains("no config/other/ in it"), "{e}");
    }
}
