//! Embeds the repository's `rootfs/` (Foothold's units and scripts laid over every image) into
//! `foothold-build`, so an installed builder makes the same images as one run from the source tree.

use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn walk(root: &Path, rel: &Path, out: &mut Vec<(String, u32, bool)>) {
    let dir = root.join(rel);
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").file_name())
        .collect();
    names.sort();
    for name in names {
        let rel = rel.join(name);
        let path = root.join(&rel);
        let md = std::fs::symlink_metadata(&path).expect("metadata");
        // Git keeps only the executable bit: the modes are normalised so that a checkout's umask cannot
        // change the image.
        let mode = if md.is_dir() || md.permissions().mode() & 0o111 != 0 {
            0o755
        } else {
            0o644
        };
        let rel_s = rel.to_str().expect("UTF-8 path").to_owned();
        if md.is_dir() {
            out.push((rel_s, mode, true));
            walk(root, &rel, out);
        } else if md.is_file() {
            println!("cargo:rerun-if-changed={}", path.display());
            out.push((rel_s, mode, false));
        } else {
            panic!(
                "{}: the overlay holds only files and directories",
                path.display()
            );
        }
    }
}

fn main() {
    // Read when the script runs, not baked in when it is compiled: cargo reuses a compiled build script for
    // the same sources in another checkout sharing the target directory.
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest_dir)
        .join("../rootfs")
        .canonicalize()
        .expect("the repository's rootfs/ beside image-builder/");
    let mut entries = Vec::new();
    walk(&root, Path::new(""), &mut entries);
    let mut code = String::from("pub static ENTRIES: &[Entry] = &[\n");
    for (rel, mode, dir) in entries {
        let content = if dir {
            "None".to_owned()
        } else {
            format!(
                "Some(include_bytes!({:?}))",
                root.join(&rel).display().to_string()
            )
        };
        writeln!(
            code,
            "    Entry {{ path: {rel:?}, mode: 0o{mode:o}, content: {content} }},"
        )
        .unwrap();
    }
    code.push_str("];\n");
    let out = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("overlay.rs");
    std::fs::write(out, code).expect("writing overlay.rs");
}
