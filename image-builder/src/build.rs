//! `foothold-build build`: spec → root file system (mmdebstrap, cached) → staged tree with the overlay, the agent
//! and generated configuration → data partition (the agent's store) → a GPT disk with BIOS boot (GRUB only),
//! ESP, root and data partitions, written without loop devices or mounts → qcow2, ISO → manifest.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _, Result};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::gpt::{self, Partition, SECTOR};
use crate::progress::Progress;
use crate::spec::{Bootloader, Compression, Format, Loaded};

const MIB: u64 = 1 << 20;
/// Packages every image needs to boot and report readiness.
const BOOT_PACKAGES: &[&str] = &[
    "linux-image-amd64",
    "systemd-sysv",
    "udev",
    "e2fsprogs",
    "iproute2",
    "curl",
    "kmod",
    "ca-certificates",
    "openssl",
    // The ISO boots its squashfs root with live-boot's initramfs scripts (inert without boot=live).
    "live-boot",
];
const ESP_SIZE: u64 = 64 * MIB;
/// systemd-boot reads the kernel and initrd from the ESP itself.
const SYSTEMD_BOOT_ESP_SIZE: u64 = 256 * MIB;
const SYSTEMD_BOOT_EFI: &str = "/usr/lib/systemd/boot/efi/systemd-bootx64.efi";
const BIOS_BOOT_SIZE: u64 = MIB;
/// Where the ISO's El Torito images are, in the ISO.
const ISO_ELTORITO: &str = "boot/grub/i386-pc/eltorito.img";
const ISO_EFI_IMAGE: &str = "boot/grub/efi.img";
/// GRUB modules every image of ours embeds: its menu, the serial console, Linux.
const GRUB_MODULES: &[&str] = &[
    "search",
    "normal",
    "linux",
    "configfile",
    "echo",
    "serial",
    "terminal",
    "test",
    "boot",
    "gzio",
    "sleep",
    "minicmd",
];
/// The disk's GRUB finds its ext4 root by UUID; the ISO's finds the ISO by a marker file.
const GRUB_DISK_MODULES: &[&str] = &["part_gpt", "ext2", "search_fs_uuid"];
const GRUB_ISO_MODULES: &[&str] = &["iso9660", "search_fs_file"];

/// Where things go and come from.
pub struct Settings {
    pub out: PathBuf,
    pub cache: PathBuf,
    /// Overrides the spec's agent binary.
    pub agent: Option<PathBuf>,
    /// Seconds since the epoch for every timestamp in the image.
    pub source_date_epoch: u64,
    /// Build only these of the spec's formats (None: all of them).
    pub formats: Option<Vec<Format>>,
    /// Never use the network: everything must be in the cache (or the bundle).
    pub offline: bool,
    /// How container images are pulled.
    pub pull: crate::images::PullSettings,
}

/// The agent binary to install: `--agent`, else the spec's `components.agent.path`; it must be a file.
pub fn agent_path(loaded: &Loaded, settings: &Settings) -> Result<PathBuf> {
    let agent = settings
        .agent
        .clone()
        .or_else(|| {
            loaded
                .spec
                .components
                .agent
                .as_ref()
                .map(|a| loaded.resolve(&a.path))
        })
        .context("no agent binary: set components.agent.path in the spec or pass --agent")?;
    if !agent.is_file() {
        bail!(
            "{}: components.agent.path: {} is not a file (build it with cargo build --release -p foothold-agent)",
            loaded.path.display(),
            agent.display()
        );
    }
    Ok(agent)
}

/// The overlay laid over the root file system: the spec's, else the repository's `rootfs/`.
pub fn overlay_dir(loaded: &Loaded) -> PathBuf {
    match &loaded.spec.components.overlay {
        Some(o) => loaded.resolve(o),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../rootfs"),
    }
}

/// Runs `cmd`, failing with its output when it fails.
pub fn run(cmd: &mut Command) -> Result<String> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().with_context(|| format!("running {shown}"))?;
    if !out.status.success() {
        bail!(
            "{shown} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A UUID derived from the spec's hash and a label: the same spec, the same UUIDs.
pub fn derived_uuid(spec_sha256: &str, label: &str) -> uuid::Uuid {
    let mut b: [u8; 16] =
        Sha256::digest(format!("foothold-build\n{spec_sha256}\n{label}").as_bytes())[..16]
            .try_into()
            .expect("16 bytes");
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    uuid::Uuid::from_bytes(b)
}

/// A file's sha256 (its holes are not read).
pub(crate) fn sha256_file(path: &Path) -> Result<String> {
    crate::sparse::sha256(path)
}

/// Makes `tmp` visible as `dest` only once it is whole: its data on disk, renamed, the rename on disk.
pub(crate) fn publish(tmp: &Path, dest: &Path) -> Result<()> {
    File::open(tmp)
        .and_then(|f| f.sync_all())
        .with_context(|| format!("syncing {}", tmp.display()))?;
    fs::rename(tmp, dest)
        .with_context(|| format!("renaming {} to {}", tmp.display(), dest.display()))?;
    let dir = dest
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing the directory {}", dir.display()))
}

/// The first line a tool prints for `arg` (on stdout, or stderr as mke2fs does).
fn tool_version(cmd: &str, arg: &str) -> String {
    Command::new(cmd)
        .arg(arg)
        .output()
        .ok()
        .and_then(|o| {
            [o.stdout, o.stderr].iter().find_map(|out| {
                String::from_utf8_lossy(out)
                    .lines()
                    .next()
                    .map(str::to_owned)
            })
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The root file system for the spec's base, from the cache or built by mmdebstrap (then cached under the hash
/// of its inputs).
pub fn rootfs(
    loaded: &Loaded,
    settings: &Settings,
    progress: &Progress,
) -> Result<(PathBuf, String)> {
    let base = &loaded.spec.base;
    let mut packages: Vec<String> = BOOT_PACKAGES.iter().map(|s| s.to_string()).collect();
    // systemd-repart (which grows the data partition) is a package of its own from trixie on.
    if !matches!(base.suite.as_str(), "bookworm" | "bullseye") {
        packages.push("systemd-repart".into());
    }
    if loaded.spec.users.iter().any(|u| u.sudo) {
        packages.push("sudo".into());
    }
    if loaded.spec.components.kubernetes.is_some() {
        packages.extend(crate::kube::PACKAGES.iter().map(|s| s.to_string()));
    }
    packages.extend(base.packages.iter().cloned());
    packages.sort();
    packages.dedup();
    let key = hex::encode(Sha256::digest(
        format!(
            "rootfs v1\n{}\n{}\n{}\n{}",
            base.suite,
            base.mirror,
            packages.join(","),
            settings.source_date_epoch
        )
        .as_bytes(),
    ));
    let dir = settings.cache.join("rootfs").join(&key);
    if dir.join(".complete").exists() {
        progress.step("rootfs", &format!("cached {}", &key[..12]));
        return Ok((dir, key));
    }
    if settings.offline {
        bail!(
            "offline: the root file system for {} ({}) is not in the cache or bundle; build it (or fetch --bundle) on a connected machine",
            base.suite,
            &key[..12]
        );
    }
    progress.step(
        "rootfs",
        &format!("mmdebstrap {} ({} packages)", base.suite, packages.len()),
    );
    let debs = settings.cache.join("debs");
    fs::create_dir_all(&debs)?;
    let tmp = settings.cache.join("rootfs").join(format!("{key}.tmp"));
    if tmp.exists() {
        fs::remove_dir_all(&tmp)?;
    }
    fs::create_dir_all(tmp.parent().expect("has parent"))?;
    run(Command::new("mmdebstrap")
        .env("SOURCE_DATE_EPOCH", settings.source_date_epoch.to_string())
        .args([
            "--variant=apt",
            "--dpkgopt=force-unsafe-io",
            "--skip=essential/unlink",
            "--quiet",
        ])
        .arg(format!("--include={}", packages.join(",")))
        .arg("--setup-hook=mkdir -p \"$1\"/var/cache/apt/archives/")
        .arg(format!(
            "--setup-hook=sync-in {} /var/cache/apt/archives/",
            debs.display()
        ))
        .arg(format!(
            "--customize-hook=sync-out /var/cache/apt/archives {}",
            debs.display()
        ))
        .arg(&base.suite)
        .arg(&tmp)
        .arg(&base.mirror))
    .context("building the root file system with mmdebstrap (needs root)")?;
    File::create(tmp.join(".complete"))?.sync_all()?;
    fs::rename(&tmp, &dir)?;
    Ok((dir, key))
}

fn write_file(path: &Path, text: &str, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(p) = path.parent() {
        fs::create_dir_all(p)?;
    }
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    run(Command::new("cp")
        .arg("-a")
        .arg("--reflink=auto")
        .arg(format!("{}/.", from.display()))
        .arg(to))?;
    Ok(())
}

/// Everything generated from the spec into the staged root.
/// The kernel command line of the disk images (GRUB's menu entry and systemd-boot's loader entry).
fn kernel_cmdline(ids: &Ids) -> String {
    format!(
        "root=UUID={} ro console=tty0 console=ttyS0,115200n8",
        ids.root
    )
}

/// systemd-boot's configuration on the ESP (Boot Loader Specification type 1): the loader settings and one
/// entry booting `/foothold/vmlinuz` with `/foothold/initrd.img`, both copied from the root file system.
fn systemd_boot_config(name: &str, cmdline: &str) -> [(&'static str, String); 2] {
    [
        (
            "loader/loader.conf",
            "timeout 1\ndefault foothold.conf\nconsole-mode keep\n".to_owned(),
        ),
        (
            "loader/entries/foothold.conf",
            format!(
                "title Foothold {name}\nlinux /foothold/vmlinuz\ninitrd /foothold/initrd.img\noptions {cmdline}\n"
            ),
        ),
    ]
}

/// The file a symlink in the root file system points at (`vmlinuz` → `boot/vmlinuz-6.1.0-…`), inside `root`.
fn resolve_in_root(root: &Path, link: &str) -> Result<PathBuf> {
    let target = fs::read_link(root.join(link))
        .with_context(|| format!("/{link} in the root file system (linux-image-amd64)"))?;
    let rel = target.strip_prefix("/").unwrap_or(&target);
    Ok(root.join(rel))
}

/// The version systemd-boot's EFI binary reports as LoaderInfo (`systemd-boot 252.39-1~deb12u2`).
fn systemd_boot_version(efi: &[u8]) -> Option<String> {
    let marker = b"LoaderInfo: ";
    let at = efi.windows(marker.len()).position(|w| w == marker)? + marker.len();
    let rest = &efi[at..];
    let end = rest.iter().position(|&b| b == b'#' || b == 0)?;
    Some(String::from_utf8_lossy(&rest[..end]).trim().to_owned())
}

fn configure(root: &Path, loaded: &Loaded, ids: &Ids, agent_args: &[String]) -> Result<()> {
    let spec = &loaded.spec;
    write_file(
        &root.join("etc/hostname"),
        &format!("{}\n", spec.hostname),
        0o644,
    )?;
    write_file(
        &root.join("etc/hosts"),
        &format!(
            "127.0.0.1 localhost\n127.0.1.1 {h}\n::1 localhost ip6-localhost ip6-loopback\n",
            h = spec.hostname
        ),
        0o644,
    )?;
    write_file(
        &root.join("etc/fstab"),
        &format!(
            "UUID={} / ext4 defaults,noatime 0 1\nUUID={} /var/lib/foothold ext4 defaults,noatime,x-systemd.growfs 0 2\n",
            ids.root, ids.data
        ),
        0o644,
    )?;
    fs::create_dir_all(root.join("var/lib/foothold"))?;
    let cmdline = kernel_cmdline(ids);
    write_file(
        &root.join("boot/grub/grub.cfg"),
        &format!(
            "serial --unit=0 --speed=115200\nterminal_input serial console\nterminal_output serial console\nset timeout=1\nmenuentry 'Foothold {name}' {{\n  linux /vmlinuz {cmdline}\n  initrd /initrd.img\n}}\n",
            name = spec.name
        ),
        0o644,
    )?;
    // Network: the provisioning interface static, the external one (or every other en*) by DHCP.
    let matcher = |iface: &str| {
        if iface.len() == 17 && iface.matches(':').count() == 5 {
            format!("MACAddress={iface}")
        } else {
            format!("Name={iface}")
        }
    };
    // The provisioning network may have no carrier (its compute nodes off) or no NIC yet: boot does not wait
    // for it, and the address is configured regardless.
    if let Some(p) = &spec.network.provisioning {
        write_file(
            &root.join("etc/systemd/network/10-provisioning.network"),
            &format!(
                "[Match]\n{}\n\n[Link]\nRequiredForOnline=no\n\n[Network]\nAddress={}\nConfigureWithoutCarrier=yes\nLinkLocalAddressing=ipv6\nIPv6AcceptRA=no\n",
                matcher(&p.interface),
                p.address
            ),
            0o644,
        )?;
    }
    let external = spec
        .network
        .external
        .as_ref()
        .map(|e| matcher(&e.interface))
        .unwrap_or_else(|| "Name=en* eth*".into());
    write_file(
        &root.join("etc/systemd/network/20-external.network"),
        &format!("[Match]\n{external}\n\n[Network]\nDHCP=yes\n"),
        0o644,
    )?;
    // The agent: writes need the token made at first boot; HTTPS with the first boot's certificate if asked.
    let mut args = vec!["--token-file".to_owned(), "/etc/foothold/token".to_owned()];
    if spec.components.agent_tls {
        args.extend(
            [
                "--tls-cert",
                "/etc/foothold/tls/cert.pem",
                "--tls-key",
                "/etc/foothold/tls/key.pem",
            ]
            .map(String::from),
        );
    }
    args.extend(agent_args.iter().cloned());
    write_file(
        &root.join("etc/foothold/agent.env"),
        &format!(
            "FOOTHOLD_LISTEN=0.0.0.0:5000\nFOOTHOLD_AGENT_ARGS={}\n",
            args.join(" ")
        ),
        0o644,
    )?;
    if let Some(k) = &spec.components.kubernetes {
        // containerd pulls through the agent for the usual registries and those of the image's containers.
        let mut registries: Vec<String> = spec
            .components
            .images
            .iter()
            .map(crate::images::registry_of)
            .chain(
                [&k.pause.reference, &k.coredns.reference]
                    .map(|r| r.split('/').next().unwrap_or_default().to_owned()),
            )
            .collect();
        registries.sort();
        registries.dedup();
        for (path, text, mode) in
            crate::kube::render(spec, k, &registries, spec.components.agent_tls)
        {
            write_file(&root.join(path.trim_start_matches('/')), &text, mode)?;
        }
        run(Command::new("chroot")
            .arg(root)
            .arg("systemctl")
            .arg("enable")
            .args(crate::kube::UNITS))?;
    }
    let mut names = Vec::new();
    if let Some(p) = &spec.network.provisioning {
        names.push(format!(
            "IP:{}",
            p.address.split('/').next().unwrap_or_default()
        ));
    }
    write_file(
        &root.join("etc/foothold/tls-names"),
        &(names.join(",") + "\n"),
        0o644,
    )?;
    // Users: a locked password, SSH keys.
    for u in &spec.users {
        let groups = if u.sudo {
            vec!["--groups", "sudo"]
        } else {
            vec![]
        };
        run(Command::new("chroot")
            .arg(root)
            .args(["useradd", "--create-home", "--shell", "/bin/bash"])
            .args(groups)
            .arg(&u.name))
        .with_context(|| format!("adding user {}", u.name))?;
        // Users log in with keys only (their password is locked): sudo must not ask for one.
        if u.sudo {
            write_file(
                &root
                    .join("etc/sudoers.d")
                    .join(format!("foothold-{}", u.name)),
                &format!("{} ALL=(ALL:ALL) NOPASSWD: ALL\n", u.name),
                0o440,
            )?;
        }
        if !u.authorized_keys.is_empty() {
            let home = root.join("home").join(&u.name);
            write_file(
                &home.join(".ssh/authorized_keys"),
                &(u.authorized_keys.join("\n") + "\n"),
                0o600,
            )?;
            run(Command::new("chroot")
                .arg(root)
                .args(["chown", "-R"])
                .arg(format!("{0}:{0}", u.name))
                .arg(format!("/home/{}/.ssh", u.name)))?;
        }
    }
    run(Command::new("chroot").arg(root).args([
        "systemctl",
        "enable",
        "systemd-networkd.service",
        "foothold-agent.service",
        "foothold-ready.service",
        "foothold-ssh-host-keys.service",
        "foothold-firstboot.service",
        "foothold-grow-data.service",
    ]))?;
    // Each machine booted from the image is a new one: its own machine-id and SSH host keys, made at first boot.
    write_file(&root.join("etc/machine-id"), "", 0o444)?;
    let _ = fs::remove_file(root.join("var/lib/dbus/machine-id"));
    if let Ok(entries) = fs::read_dir(root.join("etc/ssh")) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with("ssh_host_") {
                fs::remove_file(e.path())?;
            }
        }
    }
    Ok(())
}

/// Sets every mtime after `epoch` to `epoch` (symlinks themselves included).
fn clamp_mtimes(dir: &Path, epoch: u64) -> Result<()> {
    let t = filetime::FileTime::from_unix_time(epoch as i64, 0);
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d)? {
            let e = e?;
            let md = e.path().symlink_metadata()?;
            if md.is_dir() {
                stack.push(e.path());
            }
            if filetime::FileTime::from_last_modification_time(&md) > t {
                filetime::set_symlink_file_times(e.path(), t, t)?;
            }
        }
    }
    let md = dir.symlink_metadata()?;
    if filetime::FileTime::from_last_modification_time(&md) > t {
        filetime::set_symlink_file_times(dir, t, t)?;
    }
    Ok(())
}

struct Ids {
    disk: uuid::Uuid,
    root: uuid::Uuid,
    data: uuid::Uuid,
}

/// A cached root partition's entry (`<cache>/root/<key>/`): the ext4 image of the root partition without the
/// agent, its kernel and initrd, and the squashfs of the same tree for the ISO.
const ROOT_EXT4: &str = "root.ext4";
const LIVE_SQUASHFS: &str = "filesystem.squashfs";
const VMLINUZ: &str = "vmlinuz";
const INITRD: &str = "initrd.img";
/// How many root partitions the cache keeps (the most recently used); each takes about 1 GiB.
const ROOT_CACHE_KEEP: usize = 3;
/// Where the agent binary lives in the root file system.
const AGENT_DIR: &str = "/usr/local/bin";

/// One of the spec's file inputs, found and checked against its pin.
struct FileInput {
    field: String,
    component: crate::spec::FileComponent,
    src: PathBuf,
    /// Where it came from: the spec's path or URL.
    origin: String,
    sha256: String,
}

/// Every file input of the spec with its source (the spec's path, or the cache for a URL) and its sha256,
/// which must match the pin where there is one.
fn resolve_file_inputs(loaded: &Loaded, settings: &Settings) -> Result<Vec<FileInput>> {
    let mut out = Vec::new();
    for (field, f) in loaded.spec.sources() {
        let (src, origin) = match (&f.path, &f.url) {
            (Some(p), _) => (loaded.resolve(p), p.display().to_string()),
            (None, url) => {
                let hex = f
                    .sha256
                    .as_deref()
                    .expect("validated: remote and built inputs are pinned");
                let cached = crate::fetch::cached(&settings.cache, hex);
                let what = url
                    .clone()
                    .or_else(|| f.source_ref().map(|(_, r)| r.to_owned()))
                    .unwrap_or_default();
                if !cached.is_file() {
                    bail!(
                        "{}: {field}: {what} is not in the cache; run `foothold-build fetch` first",
                        loaded.path.display()
                    );
                }
                let origin = match crate::fetch::provenance(&settings.cache, hex) {
                    Some(p) if url.is_none() => p,
                    _ => what,
                };
                (cached, origin)
            }
        };
        let digest = sha256_file(&src).with_context(|| format!("{field}: {}", src.display()))?;
        if let Some(want) = &f.sha256 {
            if *want != digest {
                bail!(
                    "{}: {field}: {} has sha256 {digest}, the spec pins {want}",
                    loaded.path.display(),
                    src.display()
                );
            }
        }
        out.push(FileInput {
            field,
            component: f,
            src,
            origin,
            sha256: digest,
        });
    }
    Ok(out)
}

/// The hash of everything in the root partition but the agent: this builder (its code writes the
/// configuration), the Debian tree, the spec, the overlay's content, the files placed in the root, the
/// partition's size, the epoch and the formatting tools.
fn root_key(
    loaded: &Loaded,
    base_key: &str,
    files: &[FileInput],
    size: u64,
    epoch: u64,
) -> Result<String> {
    let exe = std::env::current_exe().context("finding this program's own binary")?;
    let overlay = overlay_dir(loaded);
    let overlay = if overlay.is_dir() {
        tree_digest(&overlay)?
    } else {
        String::new()
    };
    let placed: Vec<_> = files
        .iter()
        .filter(|f| f.component.dest.is_some())
        .map(|f| json!([f.field, f.sha256, f.component.dest, f.component.mode]))
        .collect();
    let key = json!({
        "v": 1,
        "builder": sha256_file(&exe)?,
        "rootfs": base_key,
        "spec": loaded.sha256,
        "overlay": overlay,
        "files": placed,
        "size": size,
        "sourceDateEpoch": epoch,
        "mke2fs": tool_version("mkfs.ext4", "-V"),
        "mksquashfs": tool_version("mksquashfs", "-version"),
    });
    Ok(hex::encode(Sha256::digest(key.to_string().as_bytes())))
}

/// The sha256 of a directory tree: every entry's relative path, type, permission bits, owner and content (a
/// file's sha256, a link's target), in sorted order.
fn tree_digest(dir: &Path) -> Result<String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mut h = Sha256::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let mut entries: Vec<_> = fs::read_dir(dir.join(&rel))
            .with_context(|| format!("reading {}", dir.join(&rel).display()))?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<std::io::Result<_>>()?;
        entries.sort();
        // Depth first in sorted order: push in reverse so the smallest name comes off the stack first.
        for name in entries.into_iter().rev() {
            let rel = rel.join(name);
            let path = dir.join(&rel);
            let md = path.symlink_metadata()?;
            // `cp -a` carries the owner into the root too.
            let mode = format!(
                "{:o} {}:{}",
                md.permissions().mode() & 0o7777,
                md.uid(),
                md.gid()
            );
            let line = if md.is_dir() {
                stack.push(rel.clone());
                format!("d {mode} {}\n", rel.display())
            } else if md.file_type().is_symlink() {
                format!("l {} {}\n", rel.display(), fs::read_link(&path)?.display())
            } else {
                format!("f {mode} {} {}\n", rel.display(), sha256_file(&path)?)
            };
            h.update(line.as_bytes());
        }
    }
    Ok(hex::encode(h.finalize()))
}

/// Marks `used` as just used and removes all but the `ROOT_CACHE_KEEP` most recently used entries of `dir`.
fn prune_root_cache(dir: &Path, used: &Path) -> Result<()> {
    filetime::set_file_mtime(used, filetime::FileTime::now())?;
    let mut entries: Vec<(filetime::FileTime, PathBuf)> = fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| {
            let md = e.metadata().ok()?;
            Some((
                filetime::FileTime::from_last_modification_time(&md),
                e.path(),
            ))
        })
        .collect();
    entries.sort_by(|a, b| b.cmp(a));
    for (_, old) in entries.into_iter().skip(ROOT_CACHE_KEEP) {
        if old != used {
            fs::remove_dir_all(&old)
                .with_context(|| format!("removing the old cache entry {}", old.display()))?;
        }
    }
    Ok(())
}

/// A reproducible squashfs of `dir` (zstd, every time `epoch`).
fn mksquashfs(dir: &Path, out: &Path, epoch: u64, extra: &[&str]) -> Result<()> {
    let _ = fs::remove_file(out);
    run(Command::new("mksquashfs")
        .arg(dir)
        .arg(out)
        .args([
            "-noappend",
            "-no-progress",
            "-quiet",
            "-comp",
            "zstd",
            "-Xcompression-level",
            "6",
            "-mkfs-time",
            &epoch.to_string(),
            "-all-time",
            &epoch.to_string(),
        ])
        .args(extra))
    .context("mksquashfs (Debian squashfs-tools)")?;
    Ok(())
}

/// Builds every output of the spec into `settings.out`. Returns the paths written.
pub fn build(loaded: &Loaded, settings: &Settings, progress: &Progress) -> Result<Vec<PathBuf>> {
    let spec = &loaded.spec;
    let epoch = settings.source_date_epoch;
    let wanted = |f: Format| {
        spec.outputs.formats.contains(&f)
            && settings.formats.as_ref().is_none_or(|w| w.contains(&f))
    };
    fs::create_dir_all(&settings.out)
        .with_context(|| format!("creating {}", settings.out.display()))?;
    let work = settings.out.join(format!(".{}.work", spec.name));
    if work.exists() {
        fs::remove_dir_all(&work)?;
    }
    fs::create_dir_all(&work)?;
    let ids = Ids {
        disk: derived_uuid(&loaded.sha256, "disk"),
        root: derived_uuid(&loaded.sha256, "root"),
        data: derived_uuid(&loaded.sha256, "data"),
    };
    let mut inputs: BTreeMap<String, serde_json::Value> = BTreeMap::new();

    // 0. Inputs from the network that the cache lacks (none when it has them all).
    if !settings.offline {
        crate::fetch::fetch_all(loaded, &settings.cache, 4, progress)?;
        crate::images::fetch_all(loaded, &settings.cache, &settings.pull, progress)?;
    }

    // The disk's layout depends on the spec alone.
    let sd_boot = spec.outputs.bootloader == Bootloader::SystemdBoot;
    let size = spec.disk_size();
    let data_size = spec.data_size().map_err(anyhow::Error::msg)?;
    let sectors = size / SECTOR;
    let lba = |bytes: u64| bytes / SECTOR;
    let g = |s: &str| uuid::Uuid::parse_str(s).expect("constant GUID");
    // GRUB's BIOS core image lives in a BIOS boot partition; systemd-boot is UEFI-only and has none.
    let bios = (!sd_boot).then(|| Partition {
        type_guid: g(gpt::BIOS_BOOT),
        guid: derived_uuid(&loaded.sha256, "bios"),
        first_lba: lba(MIB),
        last_lba: lba(MIB + BIOS_BOOT_SIZE) - 1,
        name: "bios".into(),
    });
    let esp_start = MIB + bios.as_ref().map_or(0, |b| b.size());
    let esp_size = if sd_boot {
        SYSTEMD_BOOT_ESP_SIZE
    } else {
        ESP_SIZE
    };
    let esp = Partition {
        type_guid: g(gpt::EFI_SYSTEM),
        guid: derived_uuid(&loaded.sha256, "esp"),
        first_lba: lba(esp_start),
        last_lba: lba(esp_start + esp_size) - 1,
        name: "esp".into(),
    };
    let root_start = esp_start + esp_size;
    let data_start = size - MIB - data_size;
    let root_part = Partition {
        type_guid: g(gpt::LINUX_ROOT_X86_64),
        guid: derived_uuid(&loaded.sha256, "root-part"),
        first_lba: lba(root_start),
        last_lba: lba(data_start) - 1,
        name: "root".into(),
    };
    let data_part = Partition {
        type_guid: g(gpt::LINUX_FS),
        guid: derived_uuid(&loaded.sha256, "data-part"),
        first_lba: lba(data_start),
        last_lba: lba(data_start + data_size) - 1,
        name: "foothold-data".into(),
    };
    let partitions: Vec<Partition> = bios
        .iter()
        .chain([&esp, &root_part, &data_part])
        .cloned()
        .collect();

    // 1. The root file system: mmdebstrap's tree (cached), with the overlay, the file inputs and the generated
    //    configuration, formatted as the root partition and squashed for the ISO. Both are cached under the
    //    hash of everything in them, which leaves out the agent: a new agent reuses them and is written into the
    //    partition with debugfs and into an ISO layer of its own. Hit or miss, the bytes are the same.
    let (base, base_key) = rootfs(loaded, settings, progress)?;
    let files = resolve_file_inputs(loaded, settings)?;
    let agent = agent_path(loaded, settings)?;
    inputs.insert(
        "agent".into(),
        json!({"path": agent, "sha256": sha256_file(&agent)?}),
    );
    let root_key = root_key(loaded, &base_key, &files, root_part.size(), epoch)?;
    inputs.insert(
        "rootfs".into(),
        json!({"suite": spec.base.suite, "mirror": spec.base.mirror, "cacheKey": base_key, "partitionCacheKey": root_key}),
    );
    let cached = settings.cache.join("root").join(&root_key);
    let squash = wanted(Format::Iso);
    if cached.join(ROOT_EXT4).is_file() && (!squash || cached.join(LIVE_SQUASHFS).is_file()) {
        progress.step(
            "stage",
            &format!("root partition cached {}", &root_key[..12]),
        );
    } else {
        progress.step("stage", "root file system, overlay, files, configuration");
        let root = work.join("root");
        fs::create_dir_all(&root)?;
        copy_tree(&base, &root)?;
        let _ = fs::remove_file(root.join(".complete"));
        let overlay = overlay_dir(loaded);
        if overlay.is_dir() {
            copy_tree(&overlay, &root)?;
        }
        for f in &files {
            let Some(d) = &f.component.dest else { continue };
            let dest = root.join(d.trim_start_matches('/'));
            fs::create_dir_all(dest.parent().expect("absolute"))?;
            fs::copy(&f.src, &dest)?;
            let mode = f
                .component
                .mode
                .as_deref()
                .map(|m| u32::from_str_radix(m, 8).expect("validated"))
                .unwrap_or(0o644);
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&dest, fs::Permissions::from_mode(mode))?;
        }
        // Where the agent goes (see AGENT_DIR).
        fs::create_dir_all(root.join(AGENT_DIR.trim_start_matches('/')))?;
        configure(&root, loaded, &ids, &spec.components.agent_args)?;
        clamp_mtimes(&root, epoch)?;
        fs::create_dir_all(&cached)?;
        if !cached.join(ROOT_EXT4).is_file() {
            progress.step("stage", "formatting the root partition");
            // The kernel and initrd (for systemd-boot's ESP and the ISO) first: the partition marks the entry whole.
            for (link, name) in [("vmlinuz", VMLINUZ), ("initrd.img", INITRD)] {
                let from = resolve_in_root(&root, link)?;
                let tmp = cached.join(format!(".{name}.tmp"));
                fs::copy(&from, &tmp)
                    .with_context(|| format!("{} (linux-image-amd64)", from.display()))?;
                publish(&tmp, &cached.join(name))?;
            }
            let tmp = cached.join(format!(".{ROOT_EXT4}.tmp"));
            File::create(&tmp)?.set_len(root_part.size())?;
            crate::ext4::mkfs(
                &tmp,
                0,
                root_part.size(),
                &root,
                "foothold-root",
                ids.root,
                epoch,
            )?;
            publish(&tmp, &cached.join(ROOT_EXT4))?;
        }
        if squash && !cached.join(LIVE_SQUASHFS).is_file() {
            progress.step("stage", "squashing the root file system for the ISO");
            let tmp = cached.join(format!(".{LIVE_SQUASHFS}.tmp"));
            mksquashfs(&root, &tmp, epoch, &[])?;
            publish(&tmp, &cached.join(LIVE_SQUASHFS))?;
        }
        fs::remove_dir_all(&root)?;
    }
    prune_root_cache(&settings.cache.join("root"), &cached)?;
    let stripped = work.join("foothold-agent");
    run(Command::new("objcopy")
        .arg("--strip-debug")
        .arg(&agent)
        .arg(&stripped))
    .context("copying the agent binary without debug information")?;

    // 2. The data partition: the agent's store with the served files, and images imported at build time.
    let data = work.join("data");
    fs::create_dir_all(&data)?;
    for f in &files {
        if let Some(sv) = &f.component.serve {
            run(Command::new(&agent)
                .env("SOURCE_DATE_EPOCH", epoch.to_string())
                .arg("add-file")
                .arg(&f.src)
                .arg("--data")
                .arg(&data)
                .args(["--owner", &sv.owner, "--cluster", &sv.cluster])
                .args([
                    "--kind",
                    sv.kind.as_str(),
                    "--name",
                    &sv.name,
                    "--sha256",
                    &f.sha256,
                ]))
            .with_context(|| format!("{}: adding it to the agent's store", f.field))?;
        }
        inputs.insert(
            f.field.trim_start_matches("components.").to_owned(),
            json!({"from": f.origin, "sha256": f.sha256, "dest": f.component.dest, "serve": f.component.serve}),
        );
    }
    progress.step(
        "data",
        &format!(
            "{} image layouts into the agent's store",
            spec.components.image_layouts.len()
        ),
    );
    for (i, l) in spec.components.image_layouts.iter().enumerate() {
        let layout = loaded.resolve(&l.path);
        run(Command::new(&agent)
            .arg("import")
            .arg(&layout)
            .arg("--data")
            .arg(&data))
        .with_context(|| {
            format!(
                "components.imageLayouts[{i}]: importing {}",
                layout.display()
            )
        })?;
        let index = fs::read(layout.join("index.json"))
            .with_context(|| format!("components.imageLayouts[{i}]"))?;
        inputs.insert(
            format!("layout:{}", l.path.display()),
            json!({"indexSha256": hex::encode(Sha256::digest(&index))}),
        );
    }
    if !spec.components.images.is_empty() {
        progress.step(
            "data",
            &format!(
                "{} container images into the agent's store",
                spec.components.images.len()
            ),
        );
        let layout = work.join("images");
        let records = crate::images::write_layout(loaded, &settings.cache, &layout)?;
        run(Command::new(&agent)
            .arg("import")
            .arg(&layout)
            .arg("--present-platforms")
            .arg("--data")
            .arg(&data))
        .context("components.images: importing into the agent's store")?;
        for (i, r) in records.into_iter().enumerate() {
            inputs.insert(format!("images[{i}]"), r);
        }
    }
    if let Some(k) = &spec.components.kubernetes {
        progress.step(
            "data",
            "the pause and CoreDNS images, made from their binaries",
        );
        let src = |field: &str| {
            files
                .iter()
                .find(|f| f.field == field)
                .map(|f| f.src.clone())
                .expect("every image binary is an input")
        };
        let (pause, coredns) = (
            src("components.kubernetes.pause.binary"),
            src("components.kubernetes.coredns.binary"),
        );
        let built = [
            crate::built_images::BuiltImage {
                reference: &k.pause.reference,
                binary: &pause,
                entrypoint: "/pause",
                user: "65535:65535",
            },
            crate::built_images::BuiltImage {
                reference: &k.coredns.reference,
                binary: &coredns,
                entrypoint: "/coredns",
                user: "0:0",
            },
        ];
        let layout = work.join("built-images");
        let records = crate::built_images::write_layout(&built, &layout, epoch)?;
        run(Command::new(&agent)
            .arg("import")
            .arg(&layout)
            .arg("--data")
            .arg(&data))
        .context("components.kubernetes: importing the pause and CoreDNS images")?;
        for (name, r) in ["pause", "coredns"].into_iter().zip(records) {
            inputs.insert(format!("kubernetes.{name}.image"), r);
        }
    }
    clamp_mtimes(&data, epoch)?;

    // 3. The disk: the cached root partition copied in (its holes stay holes), the agent written into it, the
    //    data file system, then the ESP and the boot code.
    progress.step(
        "disk",
        if sd_boot {
            "GPT, systemd-boot (UEFI), ESP with the kernel, root and data file systems"
        } else {
            "GPT, GRUB (BIOS and UEFI), ESP, root and data file systems"
        },
    );
    let raw = settings.out.join(format!("{}.raw", spec.name));
    let tmp_raw = settings.out.join(format!(".{}.raw.tmp", spec.name));
    {
        let _ = fs::remove_file(&tmp_raw);
        let f = File::create(&tmp_raw)?;
        f.set_len(size)?;
        crate::sparse::copy_into(&cached.join(ROOT_EXT4), &f, root_part.offset())?;
    }
    crate::ext4::add_file(
        &tmp_raw,
        root_part.offset(),
        &stripped,
        AGENT_DIR,
        "foothold-agent",
        0o755,
        epoch,
    )
    .context("writing the agent into the root partition")?;
    crate::ext4::mkfs(
        &tmp_raw,
        data_part.offset(),
        data_part.size(),
        &data,
        "foothold-data",
        ids.data,
        epoch,
    )?;

    // The ESP's tree: GRUB's EFI image, or systemd-boot with its configuration, the kernel and the initrd.
    let esp_tree = work.join("esp");
    fs::create_dir_all(esp_tree.join("EFI/BOOT"))?;
    let mut tools = BTreeMap::new();
    let mut bios_core = None;
    if sd_boot {
        let efi = fs::read(SYSTEMD_BOOT_EFI)
            .with_context(|| format!("reading {SYSTEMD_BOOT_EFI} (Debian systemd-boot-efi)"))?;
        tools.insert(
            "systemd-boot",
            systemd_boot_version(&efi).unwrap_or_else(|| "unknown".into()),
        );
        fs::write(esp_tree.join("EFI/BOOT/BOOTX64.EFI"), &efi)?;
        for (path, text) in systemd_boot_config(&spec.name, &kernel_cmdline(&ids)) {
            write_file(&esp_tree.join(path), &text, 0o644)?;
        }
        fs::create_dir_all(esp_tree.join("foothold"))?;
        let mut needed = efi.len() as u64;
        for name in [VMLINUZ, INITRD] {
            let from = cached.join(name);
            needed += fs::metadata(&from)
                .with_context(|| format!("{}", from.display()))?
                .len();
            fs::copy(&from, esp_tree.join("foothold").join(name))?;
        }
        // FAT32's tables and directories take a few MiB of the partition.
        if needed + 8 * MIB > esp_size {
            bail!(
                "outputs.bootloader: systemd-boot needs the kernel and initrd on the ESP ({} MiB), which holds {} MiB",
                needed.div_ceil(MIB),
                esp_size / MIB - 8
            );
        }
    } else {
        // GRUB: both images find the root by its UUID and read /boot/grub/grub.cfg there.
        tools.insert("grub-mkimage", tool_version("grub-mkimage", "--version"));
        let early = work.join("early.cfg");
        fs::write(
            &early,
            format!(
                "search --no-floppy --fs-uuid --set=root {}\nset prefix=($root)/boot/grub\n",
                ids.root
            ),
        )?;
        grub_image(
            GrubImage::Efi,
            &early,
            GRUB_DISK_MODULES,
            &esp_tree.join("EFI/BOOT/BOOTX64.EFI"),
        )?;
        let core = work.join("core.img");
        grub_image(GrubImage::BiosDisk, &early, GRUB_DISK_MODULES, &core)?;
        let core_bytes = fs::read(&core)?;
        let part = bios
            .as_ref()
            .expect("GRUB disks have a BIOS boot partition");
        if core_bytes.len() as u64 > part.size() {
            bail!(
                "the BIOS core image ({} bytes) does not fit the BIOS boot partition",
                core_bytes.len()
            );
        }
        bios_core = Some((part, core_bytes));
    }

    // The ESP, formatted and filled in a file of its own, then copied in.
    let esp_img = work.join("esp.img");
    fat_image(
        &esp_img,
        &Fat {
            size: esp_size,
            fat32: true,
            label: "FOOTHOLDESP",
            id: ids.disk,
            epoch,
        },
        &esp_tree,
    )?;

    let mut f = fs::OpenOptions::new().write(true).open(&tmp_raw)?;
    crate::sparse::copy_into(&esp_img, &f, esp.offset())?;
    if let Some((part, core_bytes)) = bios_core {
        // BIOS: core.img in the BIOS boot partition, boot.img's code in the MBR (see `bios`).
        let boot_img = fs::read("/usr/lib/grub/i386-pc/boot.img")
            .context("reading GRUB's boot.img (Debian grub-pc-bin)")?;
        let (mbr, core_patched) = crate::bios::embed(&boot_img, &core_bytes, part.first_lba)
            .map_err(anyhow::Error::msg)?;
        f.seek(SeekFrom::Start(part.offset()))?;
        f.write_all(&core_patched)?;
        f.seek(SeekFrom::Start(0))?;
        f.write_all(&mbr)?;
    }
    gpt::write(&mut f, sectors, ids.disk, &partitions)?;
    drop(f);
    publish(&tmp_raw, &raw)?;
    // The raw image is hashed for its manifest while the conversions run.
    let raw_digest = {
        let raw = raw.clone();
        std::thread::spawn(move || -> Result<(String, u64)> {
            Ok((sha256_file(&raw)?, fs::metadata(&raw)?.len()))
        })
    };
    let mut outputs = vec![raw.clone()];

    // 4. Conversions.
    let compression = spec.outputs.compression;
    if compression != Compression::None && wanted(Format::Raw) {
        let tool = compressor(compression).expect("compression is not none").0;
        progress.step("compress", &format!("{tool} of the raw image"));
        outputs.push(compress_raw(&raw, compression)?);
        let version = match compression {
            // zstd's --version is a banner; -qV is the bare number.
            Compression::Zstd => format!("zstd {}", tool_version("zstd", "-qV")),
            _ => tool_version(tool, "--version"),
        };
        tools.insert(tool, version);
    }
    if wanted(Format::Qcow2) {
        progress.step("qcow2", "qemu-img convert");
        let q = settings.out.join(format!("{}.qcow2", spec.name));
        let tmp = settings.out.join(format!(".{}.qcow2.tmp", spec.name));
        let mut cmd = Command::new("qemu-img");
        cmd.args(["convert", "-q", "-f", "raw", "-O", "qcow2"]);
        match compression {
            Compression::None => {}
            // Compressed clusters: read as they are, written back uncompressed.
            Compression::Zstd => {
                cmd.args(["-c", "-o", "compression_type=zstd"]);
            }
            Compression::Xz => {
                cmd.arg("-c");
            }
        }
        run(cmd.arg(&raw).arg(&tmp)).context("qemu-img (Debian qemu-utils)")?;
        publish(&tmp, &q)?;
        outputs.push(q);
    }
    if wanted(Format::Iso) {
        progress.step(
            "iso",
            "the cached root's squashfs, a layer with the agent and its store, GRUB for BIOS and UEFI, hybrid for CD and USB",
        );
        outputs.push(iso(loaded, settings, &work, &cached, &stripped, &data)?);
        tools.insert("xorriso", tool_version("xorriso", "-version"));
        tools.insert("grub-mkimage", tool_version("grub-mkimage", "--version"));
    }

    // 5. Manifests.
    progress.step("manifest", "inputs, tools, output digests");
    tools.insert("foothold-build", crate::VERSION.to_owned());
    tools.insert("mmdebstrap", tool_version("mmdebstrap", "--version"));
    tools.insert("mke2fs", tool_version("mkfs.ext4", "-V"));
    tools.insert("qemu-img", tool_version("qemu-img", "--version"));
    let partitions: Vec<serde_json::Value> = partitions
        .iter()
        .map(|p| json!({"name": p.name, "guid": p.guid.to_string(), "offset": p.offset(), "size": p.size()}))
        .collect();
    // Each other output hashed on a thread of its own.
    let mut digests: BTreeMap<PathBuf, (String, u64)> = std::thread::scope(|s| {
        let hashing: Vec<_> = outputs
            .iter()
            .filter(|out| **out != raw)
            .map(|out| {
                s.spawn(move || -> Result<(PathBuf, (String, u64))> {
                    Ok((out.clone(), (sha256_file(out)?, fs::metadata(out)?.len())))
                })
            })
            .collect();
        hashing
            .into_iter()
            .map(|h| h.join().expect("hashing does not panic"))
            .collect::<Result<_>>()
    })?;
    digests.insert(
        raw.clone(),
        raw_digest.join().expect("hashing does not panic")?,
    );
    for out in &outputs {
        let (sha256, size) = &digests[out];
        let mut output = json!({
            "file": out.file_name().map(|n| n.to_string_lossy().into_owned()),
            "sha256": sha256,
            "size": size,
        });
        let compressed_raw =
            out != &raw && out.extension().is_some_and(|e| e == "zst" || e == "xz");
        let qcow2 = out.extension().is_some_and(|e| e == "qcow2");
        if compression != Compression::None && (compressed_raw || qcow2) {
            output["compression"] = json!(compression);
        }
        if compressed_raw {
            let (sha256, size) = &digests[&raw];
            output["uncompressed"] = json!({
                "file": raw.file_name().map(|n| n.to_string_lossy().into_owned()),
                "sha256": sha256,
                "size": size,
            });
        }
        let m = json!({
            "name": spec.name,
            "spec": {"path": loaded.path, "sha256": loaded.sha256},
            "sourceDateEpoch": epoch,
            "bootloader": spec.outputs.bootloader,
            "inputs": inputs,
            "tools": tools,
            "partitions": partitions,
            "filesystems": {"root": ids.root.to_string(), "data": ids.data.to_string()},
            "output": output,
        });
        let path = PathBuf::from(format!("{}.manifest.json", out.display()));
        let tmp = PathBuf::from(format!("{}.manifest.json.tmp", out.display()));
        fs::write(&tmp, serde_json::to_string_pretty(&m)? + "\n")?;
        publish(&tmp, &path)?;
    }
    progress.step("clean", "the staging directory");
    fs::remove_dir_all(&work)?;
    Ok(outputs)
}

/// The command and file extension of a compression, with its Debian package; `None` for none.
fn compressor(c: Compression) -> Option<(&'static str, &'static str, &'static str)> {
    match c {
        Compression::None => None,
        Compression::Zstd => Some(("zstd", "zst", "zstd")),
        Compression::Xz => Some(("xz", "xz", "xz-utils")),
    }
}

/// `<raw>.zst` or `<raw>.xz`, written under a temporary name, synced and renamed. Both compressors run on
/// every core and give the same bytes for any number of threads, so the output stays reproducible.
fn compress_raw(raw: &Path, c: Compression) -> Result<PathBuf> {
    let (tool, ext, package) = compressor(c).context("no compression")?;
    let name = raw
        .file_name()
        .context("raw image has no name")?
        .to_string_lossy();
    let out = raw.with_file_name(format!("{name}.{ext}"));
    let tmp = raw.with_file_name(format!(".{name}.{ext}.tmp"));
    let file = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let level = match c {
        Compression::Xz => "-6",
        _ => "-10",
    };
    run(Command::new(tool)
        .args(["-q", "-T0", level, "-c"])
        .arg(raw)
        .stdout(file.try_clone()?))
    .with_context(|| format!("{tool} (Debian {package})"))?;
    drop(file);
    publish(&tmp, &out)?;
    Ok(out)
}

/// What a GRUB image boots from.
#[derive(Clone, Copy)]
enum GrubImage {
    /// `BOOTX64.EFI`.
    Efi,
    /// `core.img` for the BIOS boot partition.
    BiosDisk,
    /// The El Torito image a BIOS loads from a CD (and the hybrid MBR from a USB stick).
    BiosCdrom,
}

/// Makes a GRUB image at `out` with `early` as its embedded config and [`GRUB_MODULES`] plus `modules` built in.
fn grub_image(kind: GrubImage, early: &Path, modules: &[&str], out: &Path) -> Result<()> {
    let (format, firmware, package): (_, &[&str], _) = match kind {
        GrubImage::Efi => (
            "x86_64-efi",
            &["fat", "efi_gop", "all_video"],
            "grub-efi-amd64-bin",
        ),
        GrubImage::BiosDisk => ("i386-pc", &["biosdisk"], "grub-pc-bin"),
        GrubImage::BiosCdrom => ("i386-pc-eltorito", &["biosdisk"], "grub-pc-bin"),
    };
    run(Command::new("grub-mkimage")
        .args(["-O", format, "-p", "/boot/grub", "-c"])
        .arg(early)
        .arg("-o")
        .arg(out)
        .args(GRUB_MODULES)
        .args(modules)
        .args(firmware))
    .with_context(|| format!("grub-mkimage -O {format} (Debian {package})"))?;
    Ok(())
}

/// A FAT file system made reproducibly: its serial from `id`, every date `epoch`.
struct Fat {
    /// Bytes, a multiple of 1 KiB.
    size: u64,
    fat32: bool,
    label: &'static str,
    id: uuid::Uuid,
    epoch: u64,
}

/// Formats a FAT image file at `img` and copies `tree`'s entries into its root, in name order.
fn fat_image(img: &Path, fat: &Fat, tree: &Path) -> Result<()> {
    let _ = fs::remove_file(img);
    let serial = format!(
        "{:08X}",
        u32::from_le_bytes(fat.id.as_bytes()[..4].try_into().expect("4 bytes"))
    );
    let epoch = fat.epoch.to_string();
    let mut mkfs = Command::new("mkfs.vfat");
    mkfs.env("SOURCE_DATE_EPOCH", &epoch).args([
        "-C",
        "--invariant",
        "-n",
        fat.label,
        "-i",
        &serial,
    ]);
    if fat.fat32 {
        mkfs.args(["-F", "32"]);
    }
    run(mkfs.arg(img).arg((fat.size / 1024).to_string()))
        .context("mkfs.vfat (Debian dosfstools)")?;
    clamp_mtimes(tree, fat.epoch)?;
    let mut top: Vec<PathBuf> = fs::read_dir(tree)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    top.sort();
    run(Command::new("mcopy")
        .env("SOURCE_DATE_EPOCH", &epoch)
        .env("MTOOLS_SKIP_CHECK", "1")
        .args(["-s", "-m", "-i"])
        .arg(img)
        .args(&top)
        .arg("::"))
    .context("mcopy (Debian mtools)")?;
    Ok(())
}

/// The hybrid ISO: live-boot's squashfs root (the agent's store inside it; writes go to memory), booted by GRUB
/// from CD (El Torito, BIOS and UEFI) or USB (the MBR and GPT xorriso writes). live-boot stacks
/// `live/*.squashfs` in name order, so the cached squashfs of the root (`filesystem.squashfs`) is the bottom
/// layer and `foothold.squashfs` above it holds what changes from build to build: the agent, the store (no data
/// partition is mounted) and the live system's fstab.
///
/// GRUB's images and the EFI boot image are made here and xorriso is run directly, not through grub-mkrescue:
/// grub-mkrescue stamps the ISO with the time of the build (`--modification-date`, which also makes the GPT's
/// GUIDs) and formats its EFI image with a random FAT serial, so two builds of one spec differed. Here every
/// date is `SOURCE_DATE_EPOCH` and the serial derives from the spec.
fn iso(
    loaded: &Loaded,
    settings: &Settings,
    work: &Path,
    cached: &Path,
    agent: &Path,
    data: &Path,
) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let spec = &loaded.spec;
    let epoch = settings.source_date_epoch;
    let tree = work.join("iso");
    fs::create_dir_all(tree.join("live"))?;
    fs::create_dir_all(tree.join("boot/grub"))?;
    let base = tree.join("live").join(LIVE_SQUASHFS);
    if fs::hard_link(cached.join(LIVE_SQUASHFS), &base).is_err() {
        fs::copy(cached.join(LIVE_SQUASHFS), &base)?;
    }
    for name in [VMLINUZ, INITRD] {
        fs::copy(cached.join(name), tree.join("live").join(name))
            .with_context(|| format!("copying {name} into the ISO"))?;
    }
    let layer = work.join("iso-layer");
    fs::create_dir_all(layer.join("var/lib/foothold"))?;
    copy_tree(data, &layer.join("var/lib/foothold"))?;
    // The layer's directories are the merged ones the live system sees: the root's modes.
    for d in [
        "",
        "etc",
        "usr",
        "usr/local",
        "usr/local/bin",
        "var",
        "var/lib",
        "var/lib/foothold",
    ] {
        fs::create_dir_all(layer.join(d))?;
        fs::set_permissions(layer.join(d), fs::Permissions::from_mode(0o755))?;
    }
    write_file(
        &layer.join("etc/fstab"),
        "# live system: the root is live-boot's overlay\n",
        0o644,
    )?;
    fs::copy(agent, layer.join("usr/local/bin/foothold-agent"))?;
    fs::set_permissions(
        layer.join("usr/local/bin/foothold-agent"),
        fs::Permissions::from_mode(0o755),
    )?;
    clamp_mtimes(&layer, epoch)?;
    mksquashfs(
        &layer,
        &tree.join("live/foothold.squashfs"),
        epoch,
        &["-all-root"],
    )?;
    fs::write(
        tree.join("boot/grub/grub.cfg"),
        format!(
            "serial --unit=0 --speed=115200\nterminal_input serial console\nterminal_output serial console\nset timeout=1\nmenuentry 'Foothold {name} (live)' {{\n  linux /live/vmlinuz boot=live console=tty0 console=ttyS0,115200n8\n  initrd /live/initrd.img\n}}\n",
            name = spec.name
        ),
    )?;
    // GRUB for both firmwares finds the ISO by a marker file named after the spec (on a CD drive or, written
    // to a USB stick, on the whole disk), then reads /boot/grub/grub.cfg there.
    let id = derived_uuid(&loaded.sha256, "iso");
    let marker = format!(".disk/foothold-{}", id.simple());
    write_file(&tree.join(&marker), "", 0o644)?;
    let early = work.join("iso-early.cfg");
    fs::write(
        &early,
        format!("search --no-floppy --file --set=root /{marker}\nset prefix=($root)/boot/grub\n"),
    )?;
    fs::create_dir_all(tree.join("boot/grub/i386-pc"))?;
    grub_image(
        GrubImage::BiosCdrom,
        &early,
        GRUB_ISO_MODULES,
        &tree.join(ISO_ELTORITO),
    )?;
    let efi_tree = work.join("iso-efi");
    fs::create_dir_all(efi_tree.join("EFI/BOOT"))?;
    let bootx64 = efi_tree.join("EFI/BOOT/BOOTX64.EFI");
    grub_image(GrubImage::Efi, &early, GRUB_ISO_MODULES, &bootx64)?;
    // The El Torito EFI image: a small FAT holding BOOTX64.EFI, with room for its tables.
    fat_image(
        &tree.join(ISO_EFI_IMAGE),
        &Fat {
            size: (fs::metadata(&bootx64)?.len() + MIB).next_multiple_of(MIB),
            fat32: false,
            label: "FOOTHOLDEFI",
            id,
            epoch,
        },
        &efi_tree,
    )?;
    clamp_mtimes(&tree, epoch)?;
    let out = settings.out.join(format!("{}.iso", spec.name));
    let tmp = settings.out.join(format!(".{}.iso.tmp", spec.name));
    let _ = fs::remove_file(&tmp);
    let volid: String = format!("FOOTHOLD_{}", spec.name.to_uppercase().replace('-', "_"))
        .chars()
        .take(32)
        .collect();
    // With SOURCE_DATE_EPOCH, xorriso takes the volume's dates, its UUID and the GPT's GUIDs from it and gives
    // every file its (clamped) mtime.
    run(Command::new("xorriso")
        .env("SOURCE_DATE_EPOCH", epoch.to_string())
        .args(["-as", "mkisofs", "-quiet", "-r", "-V", &volid, "-o"])
        .arg(&tmp)
        .args(["-b", ISO_ELTORITO, "-no-emul-boot", "-boot-load-size", "4"])
        .args(["-boot-info-table", "--grub2-boot-info"])
        .args(["--grub2-mbr", "/usr/lib/grub/i386-pc/boot_hybrid.img"])
        .args([
            "--efi-boot",
            ISO_EFI_IMAGE,
            "-efi-boot-part",
            "--efi-boot-image",
        ])
        .arg("--protective-msdos-label")
        .arg(&tree))
    .context("xorriso (Debian xorriso)")?;
    publish(&tmp, &out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let raw_sha256 = sha256_file(&raw).unwrap();
        for (c, one_thread) in [(Compression::Zstd, "-T1"), (Compression::Xz, "-T+1")] {
            let (tool, ext, _) = compressor(c).unwrap();
            let out = compress_raw(&raw, c).unwrap();
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
            let level = if c == Compression::Xz { "-6" } else { "-10" };
            let single = Command::new(tool)
                .args(["-q", one_thread, level, "-c"])
                .arg(&raw)
                .output()
                .unwrap();
            assert_eq!(
                sha256_file(&out).unwrap(),
                hex::encode(Sha256::digest(&single.stdout)),
                "{tool}: output depends on the thread count"
            );
        }
        assert_eq!(compressor(Compression::None), None);
    }

    #[test]
    fn systemd_boot_boots_the_kernel_it_finds_on_the_esp_with_the_disk_cmdline() {
        let ids = Ids {
            disk: uuid::Uuid::nil(),
            root: uuid::Uuid::parse_str("6e1f0c2a-0000-4000-8000-000000000001").unwrap(),
            data: uuid::Uuid::nil(),
        };
        let [loader, entry] = systemd_boot_config("foothold-lab", &kernel_cmdline(&ids));
        assert_eq!(loader.0, "loader/loader.conf");
        assert!(loader.1.contains("default foothold.conf\n"), "{}", loader.1);
        assert_eq!(entry.0, "loader/entries/foothold.conf");
        assert_eq!(
            entry.1,
            "title Foothold foothold-lab\nlinux /foothold/vmlinuz\ninitrd /foothold/initrd.img\n\
             options root=UUID=6e1f0c2a-0000-4000-8000-000000000001 ro console=tty0 console=ttyS0,115200n8\n"
        );
    }

    #[test]
    fn systemd_boot_version_is_read_from_the_loader_info_string() {
        let mut efi = vec![0u8; 64];
        efi.extend_from_slice(b"#### LoaderInfo: systemd-boot 252.39-1~deb12u2 ####\0rest");
        assert_eq!(
            systemd_boot_version(&efi).as_deref(),
            Some("systemd-boot 252.39-1~deb12u2")
        );
        assert_eq!(systemd_boot_version(b"no marker here"), None);
        if let Ok(real) = fs::read(SYSTEMD_BOOT_EFI) {
            assert!(systemd_boot_version(&real).is_some_and(|v| v.starts_with("systemd-boot ")));
        }
    }

    /// The overlay's digest is part of the root partition's cache key: whatever `cp -a` would carry into the
    /// root must change it, and nothing else.
    #[test]
    fn the_tree_digest_follows_content_modes_owners_and_links() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path();
        fs::create_dir_all(t.join("etc/foothold")).unwrap();
        fs::write(t.join("etc/foothold/a.conf"), b"a=1\n").unwrap();
        fs::write(t.join("b"), b"b").unwrap();
        std::os::unix::fs::symlink("b", t.join("link")).unwrap();
        let first = tree_digest(t).unwrap();
        assert_eq!(tree_digest(t).unwrap(), first);
        let mut seen = vec![first];
        let mut changed = |what: &str| {
            let d = tree_digest(t).unwrap();
            assert!(!seen.contains(&d), "{what} did not change the digest");
            seen.push(d);
        };
        fs::write(t.join("etc/foothold/a.conf"), b"a=2\n").unwrap();
        changed("content");
        fs::set_permissions(t.join("b"), fs::Permissions::from_mode(0o755)).unwrap();
        changed("a file's mode");
        fs::set_permissions(t.join("etc"), fs::Permissions::from_mode(0o700)).unwrap();
        changed("a directory's mode");
        fs::remove_file(t.join("link")).unwrap();
        std::os::unix::fs::symlink("etc", t.join("link")).unwrap();
        changed("a link's target");
        fs::create_dir(t.join("empty")).unwrap();
        changed("an empty directory");
        std::os::unix::fs::lchown(t.join("b"), Some(1), Some(1)).unwrap();
        changed("an owner");
        // Times are clamped in the root; they do not count.
        filetime::set_file_mtime(t.join("b"), filetime::FileTime::from_unix_time(1, 0)).unwrap();
        assert_eq!(tree_digest(t).unwrap(), *seen.last().unwrap());
    }

    #[test]
    fn links_in_the_root_resolve_inside_it() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("boot")).unwrap();
        fs::write(dir.path().join("boot/vmlinuz-6.1.0-1-amd64"), b"kernel").unwrap();
        std::os::unix::fs::symlink("boot/vmlinuz-6.1.0-1-amd64", dir.path().join("vmlinuz"))
            .unwrap();
        std::os::unix::fs::symlink("/boot/vmlinuz-6.1.0-1-amd64", dir.path().join("abs")).unwrap();
        for link in ["vmlinuz", "abs"] {
            let got = resolve_in_root(dir.path(), link).unwrap();
            assert_eq!(got, dir.path().join("boot/vmlinuz-6.1.0-1-amd64"));
        }
        let e = resolve_in_root(dir.path(), "initrd.img").unwrap_err();
        assert!(
            format!("{e:#}").contains("/initrd.img in the root file system"),
            "{e:#}"
        );
    }
}
