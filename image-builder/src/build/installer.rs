//! The installer image an appliance serves for the BPA's Jobs ([`foothold_names::INSTALLER_IMAGE`]): the
//! appliance's own agent binary, entrypoint `foothold-agent install`; the shared libraries it links against,
//! taken from the appliance's root file system, so the Job's agent runs on the libraries the appliance's agent
//! runs on; and the appliance's `kubernetes-release.json` at [`foothold_names::INSTALLER_RELEASE`], so a Job
//! installs the release the appliance serves with no file of the appliance's mounted into it.

use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::path::{Component, Path, PathBuf};

use anyhow::{bail, Context as _, Result};

use crate::built_images::{cached_layout, BuiltImage, ImageFile};

/// Where the agent is in the image (the entrypoint).
const AGENT: &str = "/usr/local/bin/foothold-agent";
/// Where the libraries go in the image: a directory the dynamic loader of Debian's glibc searches by default.
const LIB_DIR: &str = "/usr/lib/x86_64-linux-gnu";
/// Where a library named in `DT_NEEDED` is looked for in the root file system, in order.
const SEARCH: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib",
    "/lib",
];

/// What an ELF file asks of the dynamic loader: its interpreter (`PT_INTERP`), if any, and the libraries it
/// names (`DT_NEEDED`), in order.
pub fn dynamic_needs(path: &Path) -> Result<(Option<String>, Vec<String>)> {
    use object::read::elf::{Dyn as _, FileHeader as _, ProgramHeader as _};
    let data = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let data = &data[..];
    let what = || format!("{}: not an x86-64 ELF file", path.display());
    let elf = object::elf::FileHeader64::<object::Endianness>::parse(data).with_context(what)?;
    let endian = elf.endian().with_context(what)?;
    let mut interpreter = None;
    for ph in elf.program_headers(endian, data).with_context(what)? {
        if let Some(i) = ph.interpreter(endian, data).with_context(what)? {
            interpreter = Some(String::from_utf8_lossy(i).into_owned());
        }
    }
    let sections = elf.sections(endian, data).with_context(what)?;
    let mut needed = Vec::new();
    // The dynamic section, and the index of the string table its entries name strings in.
    if let Some((dynamic, strtab)) = sections.dynamic(endian, data).with_context(what)? {
        let strings = sections.strings(endian, data, strtab).with_context(what)?;
        for d in dynamic {
            if d.tag32(endian) == Some(object::elf::DT_NEEDED as i32) {
                let name = d.string(endian, strings).with_context(what)?;
                needed.push(String::from_utf8_lossy(name).into_owned());
            }
        }
    }
    Ok((interpreter, needed))
}

/// `path` (absolute) inside the tree `root`, every symbolic link on the way resolved inside it (an absolute
/// target is taken from `root`), as the loader would find it were `root` the root file system.
pub fn in_root(root: &Path, path: &str) -> Result<PathBuf> {
    let mut todo: VecDeque<String> = components(Path::new(path));
    let mut at = PathBuf::new();
    let mut links = 0;
    while let Some(c) = todo.pop_front() {
        if c == ".." {
            at.pop();
            continue;
        }
        let next = at.join(&c);
        let full = root.join(&next);
        let meta = fs::symlink_metadata(&full).with_context(|| {
            format!("{path}: {} is not in the root file system", next.display())
        })?;
        if !meta.file_type().is_symlink() {
            at = next;
            continue;
        }
        links += 1;
        if links > 40 {
            bail!("{path}: too many symbolic links in the root file system");
        }
        let target = fs::read_link(&full)?;
        if target.is_absolute() {
            at = PathBuf::new();
        }
        let mut rest = components(&target);
        rest.extend(todo);
        todo = rest;
    }
    Ok(root.join(at))
}

fn components(p: &Path) -> VecDeque<String> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect()
}

/// Every file `binary` needs to run from a tree holding nothing else, found in `root`: (path in the image,
/// file in `root`), the interpreter at its own path and each library (and each library's libraries) under
/// [`LIB_DIR`].
pub fn runtime_files(binary: &Path, root: &Path) -> Result<BTreeMap<String, PathBuf>> {
    let mut files = BTreeMap::new();
    let (interpreter, needed) = dynamic_needs(binary)?;
    if let Some(i) = interpreter {
        let source =
            in_root(root, &i).with_context(|| format!("{}'s interpreter", binary.display()))?;
        files.insert(i, source);
    }
    let mut todo: VecDeque<(String, String)> = needed
        .into_iter()
        .map(|n| (n, binary.display().to_string()))
        .collect();
    while let Some((name, by)) = todo.pop_front() {
        let at = format!("{LIB_DIR}/{name}");
        // Also the interpreter, which libc names too, already in at its own path.
        if files.keys().any(|k| k.ends_with(&format!("/{name}"))) {
            continue;
        }
        let source = SEARCH
            .iter()
            .find_map(|d| in_root(root, &format!("{d}/{name}")).ok())
            .with_context(|| {
                format!(
                    "{name} (needed by {by}): not in the root file system's {}",
                    SEARCH.join(", ")
                )
            })?;
        let (_, more) = dynamic_needs(&source)?;
        todo.extend(more.into_iter().map(|n| (n, name.clone())));
        files.insert(at, source);
    }
    Ok(files)
}

/// The installer image of `agent` (the binary the appliance runs), its libraries from the root file system
/// `root`, with `release` (the appliance's release file) in it, as a cached OCI layout: its directory and
/// record.
pub fn image(
    agent: &Path,
    root: &Path,
    release: &Path,
    cache: &Path,
    epoch: u64,
) -> Result<(PathBuf, serde_json::Value)> {
    let sha = |p: &Path| crate::sparse::sha256(p);
    let libraries = runtime_files(agent, root)?;
    let mut extra = Vec::new();
    for (path, source) in &libraries {
        extra.push(ImageFile {
            path: path.clone(),
            source,
            sha256: sha(source)?,
            mode: 0o755,
        });
    }
    extra.push(ImageFile {
        path: foothold_names::INSTALLER_RELEASE.into(),
        source: release,
        sha256: sha(release)?,
        mode: 0o644,
    });
    let agent_sha256 = sha(agent)?;
    let image = BuiltImage {
        reference: foothold_names::INSTALLER_IMAGE,
        binary: agent,
        binary_sha256: &agent_sha256,
        entrypoint: AGENT,
        user: "0:0",
        cmd: &["install"],
        extra: &extra,
    };
    let (layout, mut records) = cached_layout(std::slice::from_ref(&image), cache, epoch)?;
    Ok((layout, records.remove(0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A merged-/usr tree like Debian's: /lib64 and /lib links into /usr.
    fn tree(root: &Path) {
        fs::create_dir_all(root.join("usr/lib/x86_64-linux-gnu")).unwrap();
        fs::create_dir_all(root.join("usr/lib64")).unwrap();
        symlink("usr/lib", root.join("lib")).unwrap();
        symlink("usr/lib64", root.join("lib64")).unwrap();
        fs::write(
            root.join("usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"),
            "ld",
        )
        .unwrap();
        symlink(
            "../lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
            root.join("usr/lib64/ld-linux-x86-64.so.2"),
        )
        .unwrap();
    }

    #[test]
    fn links_resolve_inside_the_root_relative_and_absolute() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        tree(root);
        symlink("/usr/lib64/ld-linux-x86-64.so.2", root.join("ld")).unwrap();
        let want = root.join("usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2");
        assert_eq!(in_root(root, "/lib64/ld-linux-x86-64.so.2").unwrap(), want);
        assert_eq!(in_root(root, "/ld").unwrap(), want);
        assert_eq!(
            in_root(root, "/lib/../lib64/ld-linux-x86-64.so.2").unwrap(),
            want
        );
        symlink("loop", root.join("loop")).unwrap();
        assert!(in_root(root, "/loop")
            .unwrap_err()
            .to_string()
            .contains("too many"));
        let missing = in_root(root, "/lib/libnothing.so").unwrap_err().to_string();
        assert!(missing.contains("usr/lib/libnothing.so"), "{missing}");
    }

    #[test]
    fn this_test_binary_needs_its_loader_and_libc() {
        let me = std::env::current_exe().unwrap();
        let (interpreter, needed) = dynamic_needs(&me).unwrap();
        assert_eq!(interpreter.as_deref(), Some("/lib64/ld-linux-x86-64.so.2"));
        assert!(needed.iter().any(|n| n == "libc.so.6"), "{needed:?}");
        // Found in this machine's own root, with libc's own needs (the loader) followed.
        let files = runtime_files(&me, Path::new("/")).unwrap();
        assert!(
            files.contains_key("/lib64/ld-linux-x86-64.so.2"),
            "{files:?}"
        );
        assert!(
            files.contains_key("/usr/lib/x86_64-linux-gnu/libc.so.6"),
            "{files:?}"
        );
        let not_elf = tempfile::NamedTempFile::new().unwrap();
        fs::write(not_elf.path(), "#!/bin/sh\n").unwrap();
        assert!(dynamic_needs(not_elf.path())
            .unwrap_err()
            .to_string()
            .contains("not an x86-64 ELF file"));
    }

    #[test]
    fn a_library_missing_from_the_root_is_named_with_who_needs_it() {
        let dir = tempfile::tempdir().unwrap();
        tree(dir.path());
        let me = std::env::current_exe().unwrap();
        let e = format!("{:#}", runtime_files(&me, dir.path()).unwrap_err());
        assert!(e.contains("(needed by "), "{e}");
        assert!(
            e.contains("not in the root file system's /usr/lib/x86_64-linux-gnu"),
            "{e}"
        );
    }
}
