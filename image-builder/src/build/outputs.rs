//! The outputs made from the raw disk (the raw compressed for shipping, the qcow2) and every output's manifest:
//! the spec, the inputs with their digests and origins, the tools' versions, the partitions and the output's
//! own digest.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result};
use serde_json::json;

use super::context::{Build, Record};
use crate::cmd::{tool_version, CommandExt as _};
use crate::files::publish;
use crate::progress::Progress;
use crate::spec::Compression;

/// `<raw>.zst` or `<raw>.xz` when the spec compresses, for shipping; with the compressor's name and version for
/// the manifest.
pub fn compressed(
    raw: &Path,
    c: Compression,
    level: u8,
    progress: &Progress,
) -> Result<(PathBuf, (&'static str, String))> {
    let tool = compressor(c).expect("compression is not none").0;
    progress.step("compress", &format!("{tool} -{level} of the raw image"));
    let out = compress_raw(raw, c, level)?;
    let version = match c {
        // zstd's --version is a banner; -qV is the bare number.
        Compression::Zstd => format!("zstd {}", tool_version("zstd", "-qV")),
        _ => tool_version(tool, "--version"),
    };
    Ok((out, (tool, version)))
}

/// `<out>/<name>.qcow2`, its clusters compressed when the spec compresses.
pub fn qcow2(b: &Build, raw: &Path) -> Result<PathBuf> {
    let Build {
        loaded,
        settings,
        progress,
        ..
    } = b;
    let name = &loaded.spec.name;
    progress.step("qcow2", "qemu-img convert");
    let q = settings.out.join(format!("{name}.qcow2"));
    let tmp = settings.out.join(format!(".{name}.qcow2.tmp"));
    let mut cmd = Command::new("qemu-img");
    cmd.args(["convert", "-q", "-f", "raw", "-O", "qcow2"]);
    match loaded.spec.outputs.compression {
        Compression::None => {}
        // Compressed clusters: read as they are, written back uncompressed.
        Compression::Zstd => {
            cmd.args(["-c", "-o", "compression_type=zstd"]);
        }
        Compression::Xz => {
            cmd.arg("-c");
        }
    }
    cmd.arg(raw)
        .arg(&tmp)
        .run()
        .context("qemu-img (Debian qemu-utils)")?;
    publish(&tmp, &q)?;
    Ok(q)
}

/// Writes `<output>.manifest.json` beside each of `outputs`, whose sha256 and size are in `digests`.
pub fn manifests(
    b: &Build,
    raw: &Path,
    outputs: &[PathBuf],
    digests: &BTreeMap<PathBuf, (String, u64)>,
    mut record: Record,
) -> Result<()> {
    let Build {
        loaded,
        settings,
        progress,
        layout,
        ..
    } = b;
    let spec = &loaded.spec;
    let compression = spec.outputs.compression;
    progress.step("manifest", "inputs, tools, output digests");
    let tools = &mut record.tools;
    tools.insert("foothold-build", crate::VERSION.to_owned());
    tools.insert("mmdebstrap", tool_version("mmdebstrap", "--version"));
    tools.insert("mke2fs", tool_version("mkfs.ext4", "-V"));
    tools.insert("qemu-img", tool_version("qemu-img", "--version"));
    let partitions: Vec<serde_json::Value> = layout
        .partitions()
        .iter()
        .map(|p| json!({"name": p.name, "guid": p.guid.to_string(), "offset": p.offset(), "size": p.size()}))
        .collect();
    for out in outputs {
        let (sha256, size) = &digests[out];
        let mut output = json!({
            "file": out.file_name().map(|n| n.to_string_lossy().into_owned()),
            "sha256": sha256,
            "size": size,
        });
        let compressed_raw = out != raw && out.extension().is_some_and(|e| e == "zst" || e == "xz");
        let qcow2 = out.extension().is_some_and(|e| e == "qcow2");
        if compression != Compression::None && (compressed_raw || qcow2) {
            output["compression"] = json!(compression);
        }
        if compressed_raw {
            output["compressionLevel"] = json!(spec.compression_level());
            let (sha256, size) = &digests[raw];
            output["uncompressed"] = json!({
                "file": raw.file_name().map(|n| n.to_string_lossy().into_owned()),
                "sha256": sha256,
                "size": size,
            });
        }
        let m = json!({
            "name": spec.name,
            "spec": {"path": loaded.path, "sha256": loaded.sha256},
            "sourceDateEpoch": settings.source_date_epoch,
            "bootloader": spec.outputs.bootloader,
            "inputs": record.inputs,
            "tools": record.tools,
            "partitions": partitions,
            "filesystems": {"root": layout.ids.root.to_string(), "data": layout.ids.data.to_string()},
            "output": output,
        });
        let path = PathBuf::from(format!("{}.manifest.json", out.display()));
        let tmp = PathBuf::from(format!("{}.manifest.json.tmp", out.display()));
        fs::write(&tmp, serde_json::to_string_pretty(&m)? + "\n")?;
        publish(&tmp, &path)?;
        write_checksum_file(out, sha256)?;
    }
    Ok(())
}

/// The manifest and checksum file of each output that is not a disk (a ramdisk's kernel and initramfs): the same
/// fields as a disk's but its partitions and file systems.
pub fn file_manifests(b: &Build, outputs: &[PathBuf], mut record: Record) -> Result<()> {
    let Build {
        loaded,
        settings,
        progress,
        ..
    } = b;
    progress.step("manifest", "inputs, tools, output digests");
    record
        .tools
        .insert("foothold-build", crate::VERSION.to_owned());
    record
        .tools
        .insert("mmdebstrap", tool_version("mmdebstrap", "--version"));
    for out in outputs {
        let sha256 = crate::sparse::sha256(out)?;
        let m = json!({
            "name": loaded.spec.name,
            "spec": {"path": loaded.path, "sha256": loaded.sha256},
            "sourceDateEpoch": settings.source_date_epoch,
            "inputs": record.inputs,
            "tools": record.tools,
            "output": {
                "file": out.file_name().map(|n| n.to_string_lossy().into_owned()),
                "sha256": sha256,
                "size": fs::metadata(out)?.len(),
            },
        });
        let path = PathBuf::from(format!("{}.manifest.json", out.display()));
        let tmp = PathBuf::from(format!("{}.manifest.json.tmp", out.display()));
        fs::write(&tmp, serde_json::to_string_pretty(&m)? + "\n")?;
        publish(&tmp, &path)?;
        write_checksum_file(out, &sha256)?;
    }
    Ok(())
}

/// `<output>.sha256sum`: the output's digest as `sha256sum` writes it (`<hex>  <file name>`), which `sha256sum
/// -c` checks and Ironic takes by URL as a BareMetalHost's `image.checksum` (it picks the line naming the image's
/// file). Written whole, then renamed.
pub fn write_checksum_file(out: &Path, sha256: &str) -> Result<PathBuf> {
    let name = out
        .file_name()
        .context("an output has no file name")?
        .to_string_lossy();
    let path = out.with_file_name(format!("{name}.sha256sum"));
    let tmp = out.with_file_name(format!(".{name}.sha256sum.tmp"));
    fs::write(&tmp, checksum_line(sha256, &name))
        .with_context(|| format!("writing {}", tmp.display()))?;
    publish(&tmp, &path)?;
    Ok(path)
}

/// One line of `sha256sum`'s output (text mode: two spaces).
fn checksum_line(sha256: &str, name: &str) -> String {
    format!("{sha256}  {name}\n")
}

/// The command and file extension of a compression, with its Debian package; `None` for none.
fn compressor(c: Compression) -> Option<(&'static str, &'static str, &'static str)> {
    match c {
        Compression::None => None,
        Compression::Zstd => Some(("zstd", "zst", "zstd")),
        Compression::Xz => Some(("xz", "xz", "xz-utils")),
    }
}

/// `<raw>.zst` or `<raw>.xz` at `level`, written under a temporary name, synced and renamed. Both compressors
/// run on every core and give the same bytes for any number of threads, so the output stays reproducible.
fn compress_raw(raw: &Path, c: Compression, level: u8) -> Result<PathBuf> {
    let (tool, ext, package) = compressor(c).context("no compression")?;
    let name = raw
        .file_name()
        .context("raw image has no name")?
        .to_string_lossy();
    let out = raw.with_file_name(format!("{name}.{ext}"));
    let tmp = raw.with_file_name(format!(".{name}.{ext}.tmp"));
    let file = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    Command::new(tool)
        .args(["-q", "-T0", &format!("-{level}"), "-c"])
        .arg(raw)
        .stdout(file.try_clone()?)
        .run()
        .with_context(|| format!("{tool} (Debian {package})"))?;
    drop(file);
    publish(&tmp, &out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest as _, Sha256};
    use std::io::{Seek as _, SeekFrom, Write as _};

    /// Needs Debian's zstd and xz-utils (scripts/install-build-tools.sh).
    #[test]
    fn compressed_raw_images_give_back_the_raw_and_the_same_bytes_on_one_thread() {
        let dir = tempfile::tempdir().unwrap();
        // 30 MiB, mostly a hole, with seeded data at both ends: more than one xz block (24 MiB at -6).
        let raw = dir.path().join("disk.raw");
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let data: Vec<u8> = (0..1 << 20)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let mut f = File::create(&raw).unwrap();
        f.write_all(&data).unwrap();
        f.seek(SeekFrom::Start((29 << 20) as u64)).unwrap();
        f.write_all(&data).unwrap();
        drop(f);
        let raw_sha256 = crate::sparse::sha256(&raw).unwrap();
        for (c, level, one_thread) in [
            (Compression::Zstd, 10, "-T1"),
            (Compression::Xz, 6, "-T+1"),
            (Compression::Xz, 1, "-T+1"),
        ] {
            let (tool, ext, _) = compressor(c).unwrap();
            let out = compress_raw(&raw, c, level).unwrap();
            assert_eq!(out, dir.path().join(format!("disk.raw.{ext}")));
            assert!(!dir.path().join(format!(".disk.raw.{ext}.tmp")).exists());
            let back = Command::new(tool)
                .args(["-d", "-c"])
                .arg(&out)
                .output()
                .unwrap();
            assert!(back.status.success(), "{tool} -d");
            assert_eq!(
                hex::encode(Sha256::digest(&back.stdout)),
                raw_sha256,
                "{tool}"
            );
            let single = Command::new(tool)
                .args(["-q", one_thread, &format!("-{level}"), "-c"])
                .arg(&raw)
                .output()
                .unwrap();
            assert_eq!(
                crate::sparse::sha256(&out).unwrap(),
                hex::encode(Sha256::digest(&single.stdout)),
                "{tool}: output depends on the thread count"
            );
        }
        assert_eq!(compressor(Compression::None), None);
    }

    #[test]
    fn the_checksum_file_is_what_sha256sum_checks_and_names_the_output() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("foothold-node.raw");
        std::fs::write(&out, b"a disk").unwrap();
        let digest = crate::sparse::sha256(&out).unwrap();
        let file = write_checksum_file(&out, &digest).unwrap();
        assert_eq!(file, dir.path().join("foothold-node.raw.sha256sum"));
        assert!(!dir.path().join(".foothold-node.raw.sha256sum.tmp").exists());
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            format!("{digest}  foothold-node.raw\n")
        );
        let check = |dir: &Path| {
            Command::new("sha256sum")
                .args(["--check", "--strict", "foothold-node.raw.sha256sum"])
                .current_dir(dir)
                .output()
                .unwrap()
        };
        let ok = check(dir.path());
        assert!(ok.status.success(), "{ok:?}");
        // Other bytes under that name fail the check.
        std::fs::write(&out, b"another disk").unwrap();
        assert!(!check(dir.path()).status.success());
    }
}
