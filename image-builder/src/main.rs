//! `foothold-build`: argument parsing; the work is in the library.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::{CommandFactory as _, Parser, Subcommand};
use foothold_image_builder::{build, cache_lock, progress::Progress, qemu, spec};

#[derive(Parser)]
#[command(
    name = "foothold-build",
    version,
    about = "Build Foothold bootable media from an appliance spec, and boot them in qemu"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build the spec's outputs into --out: <name>.raw always, and as the spec asks .raw.zst or .raw.xz, .qcow2
    /// and .iso; or for a ramdisk .kernel and .initramfs only. Each with a .manifest.json and a .sha256sum.
    /// Needs root (mmdebstrap).
    Build {
        /// The appliance spec (or --bundle).
        #[arg(required_unless_present = "bundle", conflicts_with = "bundle")]
        spec: Option<PathBuf>,
        /// Build from a bundle made by `fetch --bundle` (unpacked under --out).
        #[arg(long)]
        bundle: Option<PathBuf>,
        /// Use no network: everything must be in the cache or the bundle.
        #[arg(long)]
        offline: bool,
        #[arg(long, default_value = "out")]
        out: PathBuf,
        /// Cache of root file systems and Debian packages (default ~/.cache/foothold).
        #[arg(long, env = "FOOTHOLD_CACHE")]
        cache: Option<PathBuf>,
        /// The foothold-agent binary to install, instead of the spec's components.agent.path.
        #[arg(long)]
        agent: Option<PathBuf>,
        /// Timestamp for everything in the image (default: SOURCE_DATE_EPOCH, else 2026-01-01).
        #[arg(long, env = "SOURCE_DATE_EPOCH")]
        source_date_epoch: Option<u64>,
        /// Progress as JSON events on standard output.
        #[arg(long)]
        json: bool,
        /// Build only these of the spec's formats, comma separated (the raw image is always made: the others
        /// derive from it).
        #[arg(long, value_delimiter = ',', value_parser = parse_format)]
        formats: Option<Vec<spec::Format>>,
        #[command(flatten)]
        pull: PullArgs,
    },
    /// Download the spec's url inputs and container images into the cache, verifying their digests (a cache hit
    /// makes no request).
    Fetch {
        spec: PathBuf,
        /// Cache directory (default ~/.cache/foothold).
        #[arg(long, env = "FOOTHOLD_CACHE")]
        cache: Option<PathBuf>,
        /// Also write a self-contained bundle (spec, root file system, inputs) for `build --bundle --offline`.
        /// Builds the root file system if it is not cached (needs root).
        #[arg(long)]
        bundle: Option<PathBuf>,
        /// The foothold-agent binary to bundle, instead of the spec's components.agent.path.
        #[arg(long)]
        agent: Option<PathBuf>,
        /// As for build: the root file system in the bundle is made with it.
        #[arg(long, env = "SOURCE_DATE_EPOCH")]
        source_date_epoch: Option<u64>,
        /// Downloads at a time.
        #[arg(long, default_value_t = 4)]
        parallel: usize,
        /// Only this input, by its field (`components.kubernetes.kubeApiserver`; repeatable): no images, no
        /// bundle. Each is then printed as `<field> <path in the cache>`.
        #[arg(long, conflicts_with = "bundle")]
        only: Vec<String>,
        /// Progress as JSON events on standard output (each input fetched or built, with its origin).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        pull: PullArgs,
    },
    /// Fill in the spec's missing pins, in place: the sha256 of each url input (downloaded, and kept in the
    /// cache) and the digest each image's tag resolves to. Comments and layout are kept. Review the change
    /// before you commit it: the pins are what every later build verifies against.
    Pin {
        spec: PathBuf,
        /// Resolve every url and tag again, and rewrite the pins that changed.
        #[arg(long)]
        update: bool,
        /// Cache directory (default ~/.cache/foothold).
        #[arg(long, env = "FOOTHOLD_CACHE")]
        cache: Option<PathBuf>,
        /// Progress as JSON events on standard output (each input downloaded, built or resolved).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        pull: PullArgs,
    },
    /// Check a spec and print it normalised (text: as JSON).
    Check {
        spec: PathBuf,
        /// Accept url inputs and images that are not pinned yet (what `pin` fills in).
        #[arg(long)]
        allow_unpinned: bool,
        #[command(flatten)]
        output: foothold_names::cli::OutputArg,
    },
    /// Print the spec format's JSON Schema (committed as packages/spec.schema.json, for editors).
    Schema,
    /// Write the spec format's apiVersion and kind into a spec written before them (which still loads, with a
    /// warning), in place; the rest of the file stays as it is.
    Migrate { spec: PathBuf },
    /// Boot an image in qemu: UEFI by default, serial console here, agent ports forwarded.
    Run {
        image: PathBuf,
        /// Boot with SeaBIOS instead of UEFI.
        #[arg(long)]
        bios: bool,
        /// Attach the image as a USB stick (xHCI mass storage), as it boots once written to one. By default an
        /// .iso goes in a CD drive and any other image on a virtio disk.
        #[arg(long)]
        usb: bool,
        /// host:guest TCP port forward on 127.0.0.1 (repeatable). Default 5000:5000 (the agent) and 6443:6443
        /// (the Kubernetes API of an appliance, for kubectl on this host).
        #[arg(long = "forward", value_parser = parse_forward)]
        forwards: Vec<(u16, u16)>,
        /// guest:host TCP port forward the other way (repeatable): the guest's connections to
        /// 10.0.2.100:<guest> reach 127.0.0.1:<host> here (a BMC emulator on this host, for an appliance under
        /// --isolated), each relayed by `foothold-build relay`.
        #[arg(long = "guest-forward", value_parser = parse_forward)]
        guest_forwards: Vec<(u16, u16)>,
        #[arg(long, default_value_t = 2048)]
        memory: u32,
        #[arg(long, default_value_t = 2)]
        cpus: u32,
        /// Write the console to this file and wait for the ready marker instead of attaching the terminal.
        #[arg(long)]
        serial_log: Option<PathBuf>,
        /// With --serial-log: how long the boot may take to its ready marker (seconds) before qemu is stopped
        /// and the run fails. An appliance's first boot under TCG on a slow 2-core host takes 10 minutes and
        /// more (Kubernetes comes up in it).
        #[arg(
            long,
            default_value_t = 1800,
            value_name = "SECONDS",
            requires = "serial_log"
        )]
        ready_timeout: u64,
        /// With --serial-log: stop the VM once the ready marker is on its console and exit 0, a boot check
        /// (scripts/boot-reliability.sh counts boots and guest panics with it).
        #[arg(long, requires = "serial_log")]
        stop_when_ready: bool,
        /// Keep the image unchanged (writes go to a temporary overlay).
        #[arg(long)]
        snapshot: bool,
        /// Nothing outside is reachable from the guest, only the forwards (an offline site, as the tests boot).
        #[arg(long)]
        isolated: bool,
        /// auto: KVM where a probe with the boot's firmware passes, and the boot again under TCG if KVM then
        /// fails it (a KVM internal error, qemu exiting, or a silent console for 30 s); kvm or tcg: that one only.
        #[arg(long, env = "FOOTHOLD_ACCEL", default_value = "auto")]
        accel: qemu::AccelChoice,
        /// The qemu binary.
        #[arg(long, env = "FOOTHOLD_QEMU", default_value = qemu::QEMU)]
        qemu: PathBuf,
        /// Where a KVM that failed a boot is remembered (kvm-failures.json), so that the next auto boot goes
        /// straight to TCG. Default ~/.cache/foothold.
        #[arg(long, env = "FOOTHOLD_CACHE")]
        cache: Option<PathBuf>,
        /// A second NIC on this existing tap device (on your provisioning bridge, or moved into a network
        /// namespace once qemu holds it): the appliance's provisioning network. It sits in PCIe slot 4, so the
        /// guest names it ens4, as packages/appliance.yaml expects.
        #[arg(long, value_name = "TAP")]
        provisioning_tap: Option<String>,
        /// The provisioning NIC's MAC address (default: qemu's).
        #[arg(long, value_name = "MAC", requires = "provisioning_tap")]
        provisioning_mac: Option<String>,
        /// A raw image plugged in as one more USB stick, read-only (repeatable): e.g. the site CA's key on a file
        /// system labelled FOOTHOLD-CA, for an appliance built with components.siteCa.
        #[arg(long = "stick", value_name = "FILE")]
        sticks: Vec<PathBuf>,
    },
    /// Write a virtual site for a lab into a new directory: compute nodes as libvirt domains (<name>-node-<i>.xml,
    /// UEFI, a qcow2 disk the script makes, their NIC on the tap fhnode<i> of the provisioning network's bridge),
    /// their BMCs on that network at 172.22.0.2 (sushy-tools' Redfish for even nodes: sushy.conf, bmc.htpasswd;
    /// virtualbmc's IPMI for odd ones, port 6230 up; user admin, the password in bmc-password), and the Secret and
    /// BareMetalHosts (hosts.yaml: inspected, cleaned, UEFI). Prints each node: domain, UUID, MAC, tap, BMC.
    /// scripts/virtual-site.sh starts it all beside an appliance.
    Site {
        /// The new directory (libvirt's QEMU user must be able to read it), e.g. /var/lib/libvirt/images/site.
        dir: PathBuf,
        #[arg(long, default_value_t = 1)]
        nodes: u16,
        /// Each node's memory (MiB); the deploy ramdisk runs in it, so 2048 or more.
        #[arg(long, default_value_t = 3072)]
        memory: u32,
        /// Each node's vCPUs.
        #[arg(long, default_value_t = 1)]
        cpus: u32,
        /// The BareMetalHosts' namespace.
        #[arg(long, default_value = "default")]
        namespace: String,
        #[command(flatten)]
        output: foothold_names::cli::OutputArg,
    },
    /// What an agent needs to let the BPA's installer make workload clusters of the spec's Kubernetes, for an
    /// agent that is not the spec's own (a lab, a test): the images kubeadm names (an OCI layout for
    /// `foothold-agent import`), the node binaries, and kubernetes-release.json naming their URLs under
    /// ENDPOINT. Inputs come from the cache (`foothold-build fetch` first).
    Workload {
        spec: PathBuf,
        #[arg(long)]
        out: PathBuf,
        /// The agent's URL as the workload cluster's hosts reach it, e.g. https://172.22.0.1:5000.
        #[arg(long)]
        endpoint: String,
        /// Cache directory (default ~/.cache/foothold).
        #[arg(long, env = "FOOTHOLD_CACHE")]
        cache: Option<PathBuf>,
        #[arg(long, env = "SOURCE_DATE_EPOCH")]
        source_date_epoch: Option<u64>,
    },
    /// Relay stdin and stdout to a TCP address (what qemu runs for each connection of a --guest-forward).
    #[command(hide = true)]
    Relay { addr: String },
    /// Print the completion script of this command for a shell, e.g. `source <(foothold-build completion bash)`.
    Completion { shell: foothold_names::cli::Shell },
    /// Write the man pages of this command and each subcommand (foothold-build-build.1, ...) into a directory.
    Man {
        dir: PathBuf,
        /// One Markdown page of every command instead (foothold-build.md: docs/reference/ holds it).
        #[arg(long)]
        markdown: bool,
    },
}

/// How container images are pulled (build and fetch).
#[derive(clap::Args, Default)]
struct PullArgs {
    /// A registry (`host:port`) to pull images from over plain HTTP (repeatable).
    #[arg(long = "insecure-registry")]
    insecure_registries: Vec<String>,
    /// Registry credentials in the file `skopeo login` writes (containers-auth.json). Default:
    /// $REGISTRY_AUTH_FILE, else $XDG_RUNTIME_DIR/containers/auth.json (or /run/containers/<uid>/auth.json),
    /// ~/.config/containers/auth.json or ~/.docker/config.json, the first that exists. Read only when an image
    /// is pulled.
    #[arg(long)]
    authfile: Option<PathBuf>,
}

impl From<PullArgs> for foothold_image_builder::images::PullSettings {
    fn from(a: PullArgs) -> Self {
        Self {
            insecure: a.insecure_registries,
            auth_file: a.authfile,
        }
    }
}

fn parse_format(s: &str) -> Result<spec::Format, String> {
    match s {
        "raw" => Ok(spec::Format::Raw),
        "qcow2" => Ok(spec::Format::Qcow2),
        "iso" => Ok(spec::Format::Iso),
        _ => Err(format!("{s:?} is not one of raw, qcow2, iso")),
    }
}

fn parse_forward(s: &str) -> Result<(u16, u16), String> {
    let (h, g) = s
        .split_once(':')
        .ok_or("expected host:guest, e.g. 5000:5000")?;
    Ok((
        h.parse().map_err(|_| format!("{h:?} is not a port"))?,
        g.parse().map_err(|_| format!("{g:?} is not a port"))?,
    ))
}

/// 2026-01-01T00:00:00Z: every timestamp in an image unless SOURCE_DATE_EPOCH says otherwise.
const DEFAULT_EPOCH: u64 = 1_767_225_600;

fn cache_dir(given: Option<PathBuf>) -> Result<PathBuf> {
    match given {
        Some(c) => Ok(c),
        None => Ok(PathBuf::from(
            std::env::var_os("HOME").context("HOME is not set; pass --cache")?,
        )
        .join(".cache/foothold")),
    }
}

fn main() -> ExitCode {
    match real_main() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("foothold-build: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn real_main() -> Result<ExitCode> {
    match Cli::parse().command {
        Cmd::Completion { shell } => {
            foothold_names::cli::completion(Cli::command(), shell, &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Man { dir, markdown } => {
            std::fs::create_dir_all(&dir).with_context(|| format!("making {}", dir.display()))?;
            for (name, page) in foothold_names::cli::pages(Cli::command(), markdown)? {
                let path = dir.join(name);
                let tmp = dir.join(format!(
                    ".{}.tmp",
                    path.file_name().unwrap_or_default().to_string_lossy()
                ));
                std::fs::write(&tmp, page).with_context(|| format!("writing {}", tmp.display()))?;
                foothold_image_builder::files::publish(&tmp, &path)?;
                println!("{}", path.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Build {
            spec: path,
            bundle,
            offline,
            out,
            cache,
            agent,
            source_date_epoch,
            json,
            formats,
            pull,
        } => {
            // A bundle is unpacked into `<out>/.bundle`, the build's cache: its lock is taken first.
            let (loaded, cache, _lock) = match (path, bundle) {
                (Some(path), _) => {
                    let loaded = load_spec(&path, spec::Pins::Required)?;
                    let cache = cache_dir(cache)?;
                    let lock = cache_lock::lock(&cache)?;
                    (loaded, cache, lock)
                }
                (None, Some(b)) => {
                    let dir = out.join(".bundle");
                    let lock = cache_lock::lock(&dir)?;
                    let (loaded, cache) = foothold_image_builder::bundle::open(&b, &dir)?;
                    (loaded, cache, lock)
                }
                (None, None) => unreachable!("clap requires one"),
            };
            let settings = build::Settings {
                out,
                cache,
                agent,
                source_date_epoch: source_date_epoch.unwrap_or(DEFAULT_EPOCH),
                formats,
                offline,
                pull: pull.into(),
            };
            let progress = Progress::new(json);
            let outputs = build::build(&loaded, &settings, &progress)?;
            progress.done(&outputs);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Fetch {
            spec: path,
            cache,
            bundle,
            agent,
            source_date_epoch,
            parallel,
            only,
            json,
            pull,
        } => {
            let loaded = load_spec(&path, spec::Pins::Required)?;
            let cache = cache_dir(cache)?;
            let _lock = cache_lock::lock(&cache)?;
            let progress = Progress::new(json);
            let fetched = foothold_image_builder::fetch::fetch_only(
                &loaded, &cache, parallel, &progress, &only,
            )?;
            if !only.is_empty() {
                for (field, f) in loaded.spec.sources() {
                    if let (true, Some(hex)) = (only.contains(&field), f.sha256.as_deref()) {
                        if !json {
                            let path = foothold_image_builder::fetch::cached(&cache, hex);
                            println!("{field} {}", path.display());
                        }
                    }
                }
                return Ok(ExitCode::SUCCESS);
            }
            let pull = pull.into();
            let images =
                foothold_image_builder::images::fetch_all(&loaded, &cache, &pull, &progress)?;
            progress.step(
                "fetch",
                &format!(
                    "{} url inputs and {} images in {}",
                    fetched.len(),
                    images.len(),
                    cache.display()
                ),
            );
            if let Some(b) = bundle {
                let settings = build::Settings {
                    out: b.parent().map(PathBuf::from).unwrap_or_default(),
                    cache,
                    agent,
                    source_date_epoch: source_date_epoch.unwrap_or(DEFAULT_EPOCH),
                    formats: None,
                    offline: false,
                    pull,
                };
                foothold_image_builder::bundle::write(&loaded, &settings, &b, &progress)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Pin {
            spec: path,
            update,
            cache,
            json,
            pull,
        } => {
            let cache = cache_dir(cache)?;
            let _lock = cache_lock::lock(&cache)?;
            let progress = Progress::new(json);
            let changes =
                foothold_image_builder::pin::pin(&path, &cache, update, &pull.into(), &progress)?;
            progress.step(
                "pin",
                &match changes.len() {
                    0 => format!("{}: nothing to pin", path.display()),
                    n => format!("{}: {n} pins written", path.display()),
                },
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Workload {
            spec: path,
            out,
            endpoint,
            cache,
            source_date_epoch,
        } => {
            let loaded = load_spec(&path, spec::Pins::Required)?;
            let cache = cache_dir(cache)?;
            let _lock = cache_lock::lock(&cache)?;
            let settings = build::Settings {
                out,
                cache,
                agent: None,
                source_date_epoch: source_date_epoch.unwrap_or(DEFAULT_EPOCH),
                formats: None,
                offline: true,
                pull: PullArgs::default().into(),
            };
            for p in build::workload::export(&loaded, &settings, &endpoint)? {
                println!("{}", p.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Check {
            spec: path,
            allow_unpinned,
            output,
        } => {
            let pins = if allow_unpinned {
                spec::Pins::Optional
            } else {
                spec::Pins::Required
            };
            let loaded = load_spec(&path, pins)?;
            // Its text is its JSON.
            report(output, &loaded.spec, |out| {
                serde_json::to_writer_pretty(&mut *out, &loaded.spec)
                    .map_err(std::io::Error::other)?;
                writeln!(out)
            })
        }
        Cmd::Site {
            dir,
            nodes,
            memory,
            cpus,
            namespace,
            output,
        } => {
            use foothold_image_builder::virtual_site;
            let made = virtual_site::write(
                &dir,
                &virtual_site::SiteOptions {
                    nodes,
                    memory_mib: memory,
                    vcpus: cpus,
                    namespace,
                },
            )
            .with_context(|| format!("writing the site {}", dir.display()))?;
            let listed: Vec<_> = made.iter().map(virtual_site::BridgedNode::listed).collect();
            report(output, &listed, |out| {
                listed.iter().try_for_each(|l| writeln!(out, "{l}"))
            })
        }
        Cmd::Relay { addr } => {
            qemu::relay(&addr)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Schema => print_document(&serde_json::to_string_pretty(&spec::schema())?),
        Cmd::Migrate { spec: path } => {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let old = spec::load_text(&path, &text, spec::Pins::Optional)?;
            let (version, kind) = (
                spec::version::ApiVersion::CURRENT,
                spec::version::Kind::Image,
            );
            let done = format!("{} {kind:?}", version.as_str());
            if old.spec.api_version.is_some() && old.spec.kind.is_some() {
                println!("{}: already {done}", path.display());
                return Ok(ExitCode::SUCCESS);
            }
            let new_text = spec::version::migrate_text(
                &text,
                old.spec.api_version.is_some(),
                old.spec.kind.is_some(),
            );
            // The new text must say the same, with the two fields set: nothing else may change.
            let new = spec::load_text(&path, &new_text, spec::Pins::Optional)?;
            let mut want = old.spec;
            (want.api_version, want.kind) = (Some(version), Some(kind));
            anyhow::ensure!(
                new.spec == want && new.warnings.is_empty(),
                "{}: the migrated text would not read as the same spec; not written",
                path.display()
            );
            foothold_image_builder::pin::write_in_place(&path, new_text.as_bytes())?;
            println!("{}: now {done}", path.display());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run {
            image,
            bios,
            usb,
            mut forwards,
            guest_forwards,
            memory,
            cpus,
            serial_log,
            ready_timeout,
            stop_when_ready,
            snapshot,
            isolated,
            accel,
            qemu: qemu_binary,
            cache,
            provisioning_tap,
            provisioning_mac,
            sticks,
        } => {
            if !image.is_file() {
                anyhow::bail!("{}: no such image", image.display());
            }
            // qemu would boot the compressed bytes as a disk and find nothing.
            if let Some(tool) = image
                .extension()
                .and_then(|e| e.to_str())
                .and_then(|e| match e {
                    "zst" => Some("zstd"),
                    "xz" => Some("xz"),
                    _ => None,
                })
            {
                anyhow::bail!(
                    "{}: a compressed image; decompress it first ({tool} -dk {0}) and run the .raw",
                    image.display()
                );
            }
            // The manifest beside a built image says how it boots; a systemd-boot disk has nothing for BIOS.
            let manifest = PathBuf::from(format!("{}.manifest.json", image.display()));
            if bios {
                if let Ok(text) = std::fs::read_to_string(&manifest) {
                    let m: serde_json::Value = serde_json::from_str(&text)
                        .with_context(|| format!("{}: not JSON", manifest.display()))?;
                    if m["bootloader"] == "systemd-boot" {
                        anyhow::bail!(
                            "{}: built with outputs.bootloader systemd-boot, which boots under UEFI only \
                             (see {}); run it without --bios",
                            image.display(),
                            manifest.display()
                        );
                    }
                }
            }
            if forwards.is_empty() {
                forwards.extend([(5000, 5000), (6443, 6443)]);
            }
            let media = if usb {
                qemu::Media::Usb
            } else {
                qemu::Media::for_image(&image)
            };
            eprintln!(
                "foothold-build run: {} ({media:?}) under {}, accel {accel}",
                image.display(),
                if bios { "BIOS" } else { "UEFI" }
            );
            let waits = serial_log.is_some();
            let mut vm = qemu::Vm::start(qemu::RunOptions {
                image,
                media,
                bios,
                forwards,
                relay: Some(std::env::current_exe().context("finding this program, the relay")?),
                guest_forwards: guest_forwards
                    .into_iter()
                    .map(|(g, h)| qemu::GuestForward::at_host(g, h))
                    .collect(),
                memory_mib: memory,
                cpus,
                serial_log,
                snapshot,
                isolated,
                accel,
                qemu: qemu_binary,
                kvm_first_output: qemu::KVM_FIRST_OUTPUT,
                kvm_record: Some(cache_dir(cache)?.join("kvm-failures.json")),
                provisioning: provisioning_tap.map(|tap| qemu::ProvisioningNic {
                    tap,
                    mac: provisioning_mac,
                }),
                sticks,
            })?;
            eprintln!("foothold-build run: qemu under {}", vm.accel());
            if waits {
                let line = vm.wait_ready(Duration::from_secs(ready_timeout))?;
                eprintln!("{line} (under {})", vm.accel());
                if stop_when_ready {
                    // Dropping the VM stops qemu.
                    drop(vm);
                    return Ok(ExitCode::SUCCESS);
                }
            }
            Ok(if vm.wait()?.success() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

/// The spec at `path`, its warnings (an old format, say) printed on standard error.
fn load_spec(path: &Path, pins: spec::Pins) -> Result<spec::Loaded> {
    let loaded = spec::load_with(path, pins)?;
    for w in &loaded.warnings {
        eprintln!("foothold-build: {}: warning: {w}", path.display());
    }
    Ok(loaded)
}

/// `report` on standard output as `output` asks (`text` writes it). A reader that stops early (`| head`) is not
/// an error.
fn report<T: serde::Serialize>(
    output: foothold_names::cli::OutputArg,
    report: &T,
    text: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    match output
        .write(&mut out, report, text)
        .and_then(|()| out.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::Error::new(e).context("writing to standard output"))
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// Writes a document to standard output, as [`report`]'s text.
fn print_document(text: &str) -> Result<ExitCode> {
    report(Default::default(), &(), |out| writeln!(out, "{text}"))
}
