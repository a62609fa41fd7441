//! ext4 file systems written into image files at an offset, without loop devices or mounts: `mke2fs -d` for a
//! whole tree and `debugfs` to add one file to a formatted file system. Every timestamp is the build's epoch, so the bytes depend on the inputs
//! alone.

use std::fs;
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context as _, Result};

use crate::cmd::CommandExt as _;

/// Formats `size` bytes of `image` at `offset` as ext4 holding `dir`, owned by root, with every inode's
/// times set to `epoch`.
pub fn mkfs(
    image: &Path,
    offset: u64,
    size: u64,
    dir: &Path,
    label: &str,
    id: uuid::Uuid,
    epoch: u64,
) -> Result<()> {
    Command::new("mkfs.ext4")
        .env("E2FSPROGS_FAKE_TIME", epoch.to_string())
        .args([
            "-q",
            "-F",
            "-t",
            "ext4",
            "-b",
            "4096",
            "-L",
            label,
            "-U",
            &id.to_string(),
            "-d",
        ])
        .arg(dir)
        .arg("-E")
        .arg(format!(
            "offset={offset},hash_seed={id},root_owner=0:0,nodiscard"
        ))
        .arg(image)
        .arg(format!("{}k", size / 1024))
        .run()
        .with_context(|| format!("formatting the {label} partition"))?;
    // mke2fs copies each source file's ctime, which no one can set, and atime, which reading changes: make both
    // `epoch` on every in-use inode.
    // `mke2fs -d` allocates inodes in order, so the in-use ones are 1 ..= count - free.
    let device = device(image, offset);
    let stats = Command::new("debugfs")
        .args(["-R", "stats", &device])
        .run()?;
    let field = |name: &str| -> Result<u64> {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().parse::<u64>()))
            .with_context(|| format!("debugfs stats of the {label} partition: no {name}"))?
            .with_context(|| format!("debugfs stats of the {label} partition: {name}"))
    };
    let used = field("Inode count:")? - field("Free inodes:")?;
    let script: String = (1..=used)
        .map(|i| format!("sif <{i}> ctime @{epoch}\nsif <{i}> atime @{epoch}\n"))
        .collect();
    debugfs(image, offset, label, &script, epoch)
        .with_context(|| format!("setting ctimes on the {label} partition"))
}

/// Adds the regular file `from` to the ext4 file system at `offset` in `image` as `dir/name` (`dir` absolute
/// and present, `name` absent), owned by root, with `mode` and every time `epoch`. The same file system and
/// file give the same bytes: debugfs allocates deterministically.
pub fn add_file(
    image: &Path,
    offset: u64,
    from: &Path,
    dir: &str,
    name: &str,
    mode: u32,
    epoch: u64,
) -> Result<()> {
    let from_str = from.to_str().context("a file name that is not UTF-8")?;
    if from_str.contains(['"', '\n'])
        || name.contains(['"', '\n', '/', ' '])
        || dir.contains(['"', '\n', ' '])
    {
        bail!("debugfs cannot take the file name {from_str:?} -> {dir}/{name}");
    }
    let device = device(image, offset);
    let stat = |path: &str| {
        Command::new("debugfs")
            .args(["-R", &format!("stat {path}"), &device])
            .run()
    };
    let path = format!("{dir}/{name}");
    if stat(&path)?.contains("Inode:") {
        bail!(
            "{path} already exists in the file system in {}",
            image.display()
        );
    }
    let mut script = format!("cd {dir}\nwrite \"{from_str}\" {name}\n");
    for (field, value) in [
        ("mode", format!("0{:o}", 0o100000 | (mode & 0o7777))),
        ("uid", "0".into()),
        ("gid", "0".into()),
        ("mtime", format!("@{epoch}")),
        ("ctime", format!("@{epoch}")),
        ("atime", format!("@{epoch}")),
        ("crtime", format!("@{epoch}")),
    ] {
        script.push_str(&format!("sif {name} {field} {value}\n"));
    }
    debugfs(image, offset, name, &script, epoch)?;
    // debugfs reports a failed command on stderr and still exits 0: check the result.
    let written = stat(&path)?;
    let size = fs::metadata(from)?.len();
    if !written.contains(&format!("Size: {size}")) {
        bail!(
            "debugfs did not write {path} ({size} bytes) into {}: {written}",
            image.display()
        );
    }
    Ok(())
}

/// debugfs's name for the file system at `offset` in `image`.
fn device(image: &Path, offset: u64) -> String {
    format!("{}?offset={offset}", image.display())
}

/// Runs a debugfs script read-write on the file system at `offset` in `image`.
fn debugfs(image: &Path, offset: u64, what: &str, script: &str, epoch: u64) -> Result<()> {
    let dir = tempfile::tempdir().context("a scratch directory for a debugfs script")?;
    let path = dir.path().join(format!("{what}.debugfs"));
    fs::write(&path, script)?;
    Command::new("debugfs")
        .env("E2FSPROGS_FAKE_TIME", epoch.to_string())
        .arg("-w")
        .arg("-f")
        .arg(&path)
        .arg(device(image, offset))
        .run()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Needs e2fsprogs (scripts/install-build-tools.sh).
    #[test]
    fn a_file_added_with_debugfs_reads_back_and_gives_the_same_bytes_twice() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("tree");
        fs::create_dir_all(tree.join("usr/local/bin")).unwrap();
        fs::write(tree.join("usr/local/bin/other"), b"other").unwrap();
        let payload = dir.path().join("agent");
        let bytes: Vec<u8> = (0..3_000_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        fs::write(&payload, &bytes).unwrap();
        let id = uuid::Uuid::parse_str("6e1f0c2a-0000-4000-8000-000000000001").unwrap();
        let add = |image: &Path| {
            add_file(
                image,
                1 << 20,
                &payload,
                "/usr/local/bin",
                "foothold-agent",
                0o755,
                1_700_000_000,
            )
        };
        let mut digests = Vec::new();
        for n in 0..2 {
            let image = dir.path().join(format!("disk{n}.img"));
            fs::File::create(&image).unwrap().set_len(80 << 20).unwrap();
            mkfs(&image, 1 << 20, 64 << 20, &tree, "t", id, 1_700_000_000).unwrap();
            add(&image).unwrap();
            Command::new("e2fsck")
                .arg("-fn")
                .arg(device(&image, 1 << 20))
                .run()
                .unwrap();
            let out = dir.path().join(format!("out{n}"));
            Command::new("debugfs")
                .args([
                    "-R",
                    &format!("dump -p /usr/local/bin/foothold-agent {}", out.display()),
                    &device(&image, 1 << 20),
                ])
                .run()
                .unwrap();
            assert_eq!(fs::read(&out).unwrap(), bytes);
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                fs::metadata(&out).unwrap().permissions().mode() & 0o7777,
                0o755
            );
            digests.push(crate::sparse::sha256(&image).unwrap());
        }
        assert_eq!(digests[0], digests[1]);
        let e = add(&dir.path().join("disk0.img")).unwrap_err();
        assert!(
            format!("{e:#}").contains("/usr/local/bin/foothold-agent already exists"),
            "{e:#}"
        );
    }
}
