//! `packages/lab.yaml` built by the real `foothold-build` (as root: mmdebstrap) twice, bit-identical, and once
//! more from a bundle in a network namespace with no network (bit-identical too), then booted in qemu: the qcow2
//! (the raw's disk, `qemu-img compare` says) grown to 6 GiB from a virtio disk under UEFI with KVM failing
//! first, the raw image from a USB stick under BIOS, the ISO (both
//! builds' ISOs bit-identical too) from a USB stick under UEFI (and from a CD under either firmware and a stick
//! under BIOS until the live kernel starts), and the spec
//! built with systemd-boot and zstd compression from a USB stick under UEFI (the raw decompressed from its .zst).
//! Each boot must print the ready marker on its serial console, naming the firmware;
//! then, through a port forward, skopeo pulls the image that was baked into the data partition and gets the
//! input layout's digests, and the agent answers /readyz. qemu is killed when each boot's checks end; every wait
//! is bounded. The boots run in two lines side by side (each VM keeps one of two cores busy).

use std::path::Path;
use std::process::Command;

use foothold_e2e::{
    boot_options, boot_until_ready, build_binaries, free_port, http_code, qemu_with_broken_kvm,
    run, sha256_file, target, workspace, Deadline,
};
use foothold_image_builder::qemu::{AccelChoice, Media, RunOptions};
use sha2::{Digest, Sha256};

/// Boots `o`, waits for the ready marker, and checks what the agent serves against the input layout. Returns
/// the marker line.
fn boot_and_check(mut o: RunOptions, dir: &Path, layout: &Path, manifest_digest: &str) -> String {
    let port = free_port();
    let what = format!(
        "{} ({:?}) under {}",
        o.image.display(),
        o.media,
        if o.bios { "BIOS" } else { "UEFI" }
    );
    o.forwards = vec![(port, 5000)];
    let bios = o.bios;
    let (vm, line) = boot_until_ready(&what, o);
    assert!(line.contains("host=foothold-lab"), "{what}: {line}");
    let firmware = if bios {
        "firmware=bios"
    } else {
        "firmware=uefi"
    };
    assert!(line.contains(firmware), "{what}: {line}");
    // The lab serves its provisioning network's DHCP: dnsmasq runs under its unit's sandbox and holds port 67.
    assert!(line.contains(" dhcp=serving"), "{what}: {line}");
    // The agent runs as its own user (its unit's sandbox), serving the data partition it was given.
    assert!(
        line.contains(" agent-user=foothold-agent "),
        "{what}: {line}"
    );
    let host = format!("127.0.0.1:{port}");
    run(Command::new("curl").args(["-fsS", "--max-time", "30", &format!("http://{host}/readyz")]));
    // Writes need the token made at first boot.
    let status = http_code(&[
        "-X",
        "POST",
        &format!("http://{host}/v2/lab/pushed/blobs/uploads/"),
    ]);
    assert_eq!(status, "401", "{what}: an anonymous push was not refused");
    // The manifest as served has the input's digest; a full pull verifies every blob against its digest.
    let raw = Command::new("skopeo")
        .args([
            "inspect",
            "--raw",
            "--tls-verify=false",
            &format!("docker://{host}/docker.io/lab/hello:1"),
        ])
        .output()
        .unwrap();
    assert!(
        raw.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&raw.stderr)
    );
    assert_eq!(
        format!("sha256:{}", hex::encode(Sha256::digest(&raw.stdout))),
        manifest_digest,
        "{what}"
    );
    // The file baked into the store, and a ranged read of it.
    let input = layout.parent().unwrap().join("files/node-tool");
    let url = format!("http://{host}/files/foothold/lab/binary_images/node-tool");
    let served = dir.join(format!("node-tool-{port}"));
    run(Command::new("curl")
        .args(["-fsS", "--max-time", "60", "-o"])
        .arg(&served)
        .arg(&url));
    assert_eq!(
        sha256_file(&served),
        sha256_file(&input),
        "{what}: /files content"
    );
    let part = run(Command::new("curl").args(["-fsS", "--max-time", "30", "-r", "100-122", &url]));
    assert_eq!(
        part.as_bytes(),
        &std::fs::read(&input).unwrap()[100..123],
        "{what}: ranged read"
    );
    // README's walk-through, as written there, against this boot.
    let said = readme_walkthrough(&host, &dir.join(format!("walkthrough-{port}")));
    for want in [
        "\"http\":\"ok\"".to_owned(),
        format!("{}  node-tool", sha256_file(&input)),
        "foothold_build_info{version=".to_owned(),
        manifest_digest.to_owned(),
    ] {
        assert!(
            said.contains(&want),
            "{what}: README's walk-through: no {want:?} in\n{said}"
        );
    }
    let pulled = dir.join(format!("pulled-{port}"));
    run(Command::new("skopeo").args([
        "copy",
        "-q",
        "--src-tls-verify=false",
        &format!("docker://{host}/docker.io/lab/hello:1"),
        &format!("oci:{}:pulled", pulled.display()),
    ]));
    for blob in std::fs::read_dir(layout.join("blobs/sha256")).unwrap() {
        let name = blob.unwrap().file_name();
        let got = pulled.join("blobs/sha256").join(&name);
        assert_eq!(
            sha256_file(&got),
            name.to_string_lossy(),
            "{what}: blob {name:?}"
        );
    }
    // Through qemu's forward the guest sees its clients come from another address (its gateway's), so it serves
    // them as it serves compute nodes, by sendfile, and nothing through the buffer kept for clients on its host.
    let metrics = run(Command::new("curl").args([
        "-fsS",
        "--max-time",
        "30",
        &format!("http://{host}/metrics"),
    ]));
    let served = |path: &str| -> u64 {
        let prefix = format!("foothold_bytes_served_total{{path=\"{path}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("{what}: no {prefix:?} in\n{metrics}"))
    };
    assert!(
        served("sendfile") > 0 && served("buffered") == 0,
        "{what}: forwarded clients not served by sendfile:\n{metrics}"
    );
    drop(vm);
    line
}

/// README's walk-through (the `sh` block after `<!-- walkthrough -->`), run as written there against the agent
/// at `host` instead of 127.0.0.1:5000, in a new directory `dir`; what it printed.
fn readme_walkthrough(host: &str, dir: &Path) -> String {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let (_, after) = readme
        .split_once("<!-- walkthrough -->\n```sh\n")
        .expect("README has its walk-through block");
    let (script, _) = after.split_once("```").unwrap();
    std::fs::create_dir_all(dir).unwrap();
    run(Command::new("bash")
        .args([
            "-euo",
            "pipefail",
            "-c",
            &script.replace("127.0.0.1:5000", host),
        ])
        .current_dir(dir))
}

/// The data partition's size from the ready marker (`data-bytes=N`).
fn data_bytes(line: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("data-bytes="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no data-bytes in {line:?}"))
}

#[test]
fn lab_image_builds_reproducibly_and_boots_under_uefi_and_bios() {
    let ws = workspace();
    if !foothold_e2e::deadline::budget_allows("lab_media", std::time::Duration::from_secs(1800)) {
        return;
    }
    let deadline = Deadline::start("lab_media", std::time::Duration::from_secs(3000));
    deadline.phase("build the binaries");
    build_binaries();
    deadline.phase("two builds");
    // Where packages/lab.yaml names its layout and file: the clone's target/, which is not cargo's when
    // CARGO_TARGET_DIR is set (CI keeps compiled crates elsewhere).
    let layout = ws.join("target/foothold-lab/layout");
    let manifest_digest = run(Command::new(ws.join("scripts/lab-image-layout.sh"))
        .current_dir(&ws)
        .arg(&layout));
    let manifest_digest = manifest_digest.trim().to_owned();
    let tmp = tempfile::tempdir_in(target()).unwrap();
    deadline.diagnose_consoles_in(tmp.path());
    // Progress events (`--json`) on stdout.
    let build = |out: &Path, formats: &str| -> String {
        run(Command::new(target().join("debug/foothold-build"))
            .current_dir(&ws)
            .args([
                "build",
                "--json",
                "packages/lab.yaml",
                "--formats",
                formats,
                "--out",
            ])
            .arg(out)
            .arg("--agent")
            .arg(target().join("debug/foothold-agent")))
    };
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    build(&a, "raw,qcow2,iso");
    // The second build finds the root partition in the cache; the offline build below formats it, and all
    // three raw images must be the same.
    let events = build(&b, "raw,iso");
    assert!(events.contains("root partition cached"), "{events}");
    assert!(
        !b.join("foothold-lab.qcow2").exists(),
        "--formats raw,iso made a qcow2"
    );
    let raw = a.join("foothold-lab.raw");
    let digest = sha256_file(&raw);
    assert_eq!(
        digest,
        sha256_file(&b.join("foothold-lab.raw")),
        "two builds of one spec differ"
    );
    assert_eq!(
        sha256_file(&a.join("foothold-lab.iso")),
        sha256_file(&b.join("foothold-lab.iso")),
        "two builds of one spec made different ISOs"
    );
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(a.join("foothold-lab.raw.manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["output"]["sha256"], digest.as_str());
    assert_eq!(manifest["name"], "foothold-lab");
    assert_eq!(manifest["bootloader"], "grub");
    for (tool, starts) in [
        ("mke2fs", "mke2fs 1."),
        ("grub-mkimage", "grub-mkimage (GRUB)"),
    ] {
        assert!(
            manifest["tools"][tool]
                .as_str()
                .is_some_and(|v| v.starts_with(starts)),
            "{tool}: {}",
            manifest["tools"]
        );
    }
    assert!(manifest["inputs"]["agent"]["sha256"]
        .as_str()
        .is_some_and(|s| s.len() == 64));
    assert_eq!(manifest["partitions"].as_array().unwrap().len(), 4);
    // Both ext4 file systems check clean (their ctimes and atimes were rewritten for reproducibility).
    for p in manifest["partitions"].as_array().unwrap() {
        if p["name"] == "root" || p["name"] == "foothold-data" {
            run(Command::new("e2fsck").arg("-fn").arg(format!(
                "{}?offset={}",
                raw.display(),
                p["offset"]
            )));
        }
    }
    let qcow2 = a.join("foothold-lab.qcow2");
    assert!(run(Command::new("qemu-img").arg("info").arg(&qcow2)).contains("file format: qcow2"));
    std::fs::remove_dir_all(&b).unwrap();

    // A bundle builds the same image on a machine with no network (a network namespace of its own).
    deadline.phase("bundle and offline build");
    let bundle = tmp.path().join("lab.tar");
    run(Command::new(target().join("debug/foothold-build"))
        .current_dir(&ws)
        .args(["fetch", "packages/lab.yaml", "--bundle"])
        .arg(&bundle)
        .arg("--agent")
        .arg(target().join("debug/foothold-agent")));
    let offline = tmp.path().join("offline");
    let events = run(Command::new("unshare")
        .arg("--net")
        .arg(target().join("debug/foothold-build"))
        .args([
            "build",
            "--json",
            "--offline",
            "--formats",
            "raw",
            "--bundle",
        ])
        .arg(&bundle)
        .arg("--out")
        .arg(&offline));
    assert!(events.contains("formatting the root partition"), "{events}");
    assert_eq!(
        digest,
        sha256_file(&offline.join("foothold-lab.raw")),
        "the offline build from the bundle differs"
    );
    std::fs::remove_dir_all(&offline).unwrap();
    std::fs::remove_file(&bundle).unwrap();

    // The boots, two at a time: under TCG a VM keeps one of the machine's two cores busy (it has one CPU), so
    // two lines side by side take about the longer one's time instead of the sum. Each step says its seconds.
    deadline.phase("seven boots in two lines side by side, and the systemd-boot and zstd build");
    let tmp = tmp.path();
    let boot = |image: &Path, media: Media, bios: bool| {
        let console = tmp.join(format!("console-{}.log", free_port()));
        let o = RunOptions {
            media,
            bios,
            ..boot_options(image, console)
        };
        boot_and_check(o, tmp, &layout, &manifest_digest)
    };
    // The qcow2 holds the raw image's disk, so its boot from a virtio disk under UEFI is the raw's too; a 6 GiB
    // qcow2 over it is a bigger disk, where the data partition grows to the end at first boot. Where KVM
    // half-works (its probe passes, then OVMF dies with "KVM internal error" and qemu stalls) the boot starts
    // again under TCG: a qemu that fails KVM so stands in for this boot.
    run(Command::new("qemu-img")
        .args(["compare", "-q", "-f", "raw", "-F", "qcow2"])
        .arg(&raw)
        .arg(&qcow2));
    let bigger = tmp.join("bigger.qcow2");
    run(Command::new("qemu-img")
        .args(["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b"])
        .arg(&qcow2)
        .arg(&bigger)
        .arg("6G"));
    let iso = a.join("foothold-lab.iso");
    // Written before the two lines start: an executable written while the other line forks can be refused
    // at its exec with ETXTBSY (the fork's child holds the write descriptor until its own exec).
    let broken = tmp.join("broken-kvm");
    let broken_qemu = qemu_with_broken_kvm(&broken);
    let sd_raw = std::thread::scope(|s| {
        let (built, systemd_boot) = std::sync::mpsc::channel();
        let second = s.spawn(|| {
            // The raw image is what is written to a USB stick: under BIOS it boots from one, whose size is the
            // image's, so the data partition stays as built.
            let line = timed("boot foothold-lab.raw (Usb, BIOS)", || {
                boot(&raw, Media::Usb, true)
            });
            let built_bytes = data_bytes(&line);
            assert!(
                built_bytes < 300 << 20,
                "the 256 MiB data partition of a 3 GiB image reports {built_bytes} bytes"
            );
            // The hybrid ISO's three ways in that are booted until GRUB has started the live kernel with its
            // entry's command line: El Torito's EFI and BIOS images from a CD, the hybrid MBR from a stick under
            // BIOS (from a stick under UEFI it boots to the ready marker, in the other line).
            for (media, bios) in [
                (Media::Cdrom, false),
                (Media::Cdrom, true),
                (Media::Usb, true),
            ] {
                let firmware = if bios { "BIOS" } else { "UEFI" };
                timed(
                    &format!("boot foothold-lab.iso ({media:?}, {firmware}) to the kernel"),
                    || boots_to_the_live_kernel(&iso, tmp, media, bios),
                );
            }
            let sd_raw = timed("systemd-boot and zstd build", || {
                systemd_boot_build(&ws, tmp)
            });
            // Taken by value (this line makes the closure own it), the sender goes if this line panics, and the
            // other line's wait ends.
            let built = built;
            built.send(sd_raw).unwrap();
        });
        let line = timed("boot bigger.qcow2 (Disk, UEFI, KVM failing first)", || {
            let line = boot_and_check(
                RunOptions {
                    qemu: broken_qemu.clone(),
                    accel: AccelChoice::Auto,
                    ..boot_options(&bigger, tmp.join("console-broken-kvm.log"))
                },
                tmp,
                &layout,
                &manifest_digest,
            );
            assert_eq!(
                std::fs::read_to_string(broken.join("calls.log")).unwrap(),
                "kvm probe\nkvm boot\ntcg boot\n",
                "the probe passed, the KVM boot failed, and TCG booted it"
            );
            line
        });
        assert!(
            data_bytes(&line) > 2 << 30,
            "the data partition did not grow: {line}"
        );
        // The hybrid ISO written to a USB stick, under UEFI, to the ready marker: the live system with the store in
        // its squashfs. What differs past the kernel's start is the medium, where the initramfs must find the
        // live root, and a CD's live root is found in `node_image.rs`, whose live ISO boots from a virtual CD to
        // its marker.
        timed("boot foothold-lab.iso (Usb, UEFI)", || {
            boot(&iso, Media::Usb, false)
        });
        // The other line's panic, if it had one, is its own failure: the channel's error says only that it ended.
        match systemd_boot.recv() {
            Ok(raw) => raw,
            Err(_) => std::panic::resume_unwind(second.join().unwrap_err()),
        }
    });
    std::fs::remove_dir_all(&a).unwrap();
    // A UEFI-only disk is for a USB stick too: it boots from one.
    let line = timed("boot foothold-lab.raw (systemd-boot, Usb, UEFI)", || {
        boot(&sd_raw, Media::Usb, false)
    });
    assert!(line.contains("loader=systemd-boot-"), "{line}");
}

/// `step`, its seconds said (`lab_media: <what>: N s`): the boots run two at a time, so the test's phases
/// cannot time them.
fn timed<T>(what: &str, step: impl FnOnce() -> T) -> T {
    let started = std::time::Instant::now();
    let done = step();
    foothold_e2e::say!("lab_media: {what}: {} s", started.elapsed().as_secs());
    done
}

/// Boots the hybrid ISO `iso` from `media` under BIOS or UEFI until GRUB has started the live kernel with its
/// entry's command line (`boot=live`), its console in `dir`.
fn boots_to_the_live_kernel(iso: &Path, dir: &Path, media: Media, bios: bool) {
    let firmware = if bios { "BIOS" } else { "UEFI" };
    let console = dir.join(format!("console-{}.log", free_port()));
    let mut vm = foothold_image_builder::qemu::Vm::start(RunOptions {
        media,
        bios,
        ..boot_options(iso, console.clone())
    })
    .unwrap();
    let limit = std::time::Instant::now() + std::time::Duration::from_secs(600);
    loop {
        let status = vm.poll().unwrap();
        let text =
            String::from_utf8_lossy(&std::fs::read(&console).unwrap_or_default()).into_owned();
        if text.contains("Linux version ")
            && text
                .lines()
                .any(|l| l.contains("Command line: ") && l.contains("boot=live"))
        {
            return;
        }
        assert!(
            status.is_none() && std::time::Instant::now() < limit,
            "the ISO ({media:?}, {firmware}) did not start the live kernel within 600 s ({status:?}); \
             the console ends:\n{}",
            foothold_e2e::deadline::tail_file(&console, 30)
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// The same spec as `packages/lab.yaml` with systemd-boot (UEFI only, no BIOS boot partition, the kernel and
/// initrd on the ESP) and zstd compression, built in `tmp`: the raw image also as .raw.zst, the qcow2's clusters
/// compressed. Returns the raw image, the one decompressed from the .zst, to boot.
fn systemd_boot_build(ws: &Path, tmp: &Path) -> std::path::PathBuf {
    let spec = std::fs::read_to_string(ws.join("packages/lab.yaml"))
        .unwrap()
        .replace("../target/", &format!("{}/", ws.join("target").display()))
        .replace(
            "outputs:\n",
            "outputs:\n  bootloader: systemd-boot\n  compression: zstd\n",
        );
    let sd_spec = tmp.join("lab-systemd-boot.yaml");
    std::fs::write(&sd_spec, spec).unwrap();
    let sd = tmp.join("systemd-boot");
    run(Command::new(target().join("debug/foothold-build"))
        .args(["build", "--formats", "raw,qcow2"])
        .arg(&sd_spec)
        .arg("--out")
        .arg(&sd)
        .arg("--agent")
        .arg(target().join("debug/foothold-agent")));
    let raw = sd.join("foothold-lab.raw");
    let read_manifest = |file: &str| -> serde_json::Value {
        serde_json::from_str(
            &std::fs::read_to_string(sd.join(format!("{file}.manifest.json"))).unwrap(),
        )
        .unwrap()
    };
    let manifest = read_manifest("foothold-lab.raw");
    let raw_sha256 = sha256_file(&raw);
    assert_eq!(manifest["output"]["sha256"], raw_sha256.as_str());
    let zst = sd.join("foothold-lab.raw.zst");
    let zst_manifest = read_manifest("foothold-lab.raw.zst");
    assert_eq!(zst_manifest["output"]["compression"], "zstd");
    assert_eq!(zst_manifest["output"]["sha256"], sha256_file(&zst).as_str());
    assert_eq!(
        zst_manifest["output"]["uncompressed"],
        serde_json::json!({"file": "foothold-lab.raw", "sha256": raw_sha256, "size": std::fs::metadata(&raw).unwrap().len()})
    );
    assert!(zst_manifest["tools"]["zstd"]
        .as_str()
        .is_some_and(|v| v.starts_with("zstd 1.")));
    let refused = Command::new(target().join("debug/foothold-build"))
        .arg("run")
        .arg(&zst)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && err.contains("decompress it first (zstd -dk"),
        "{err}"
    );
    // The qcow2 holds the same disk in compressed clusters.
    let qcow2 = sd.join("foothold-lab.qcow2");
    assert_eq!(
        read_manifest("foothold-lab.qcow2")["output"]["compression"],
        "zstd"
    );
    run(Command::new("qemu-img")
        .args(["compare", "-q", "-f", "raw", "-F", "qcow2"])
        .arg(&raw)
        .arg(&qcow2));
    let info = |image: &Path| -> serde_json::Value {
        serde_json::from_str(&run(Command::new("qemu-img")
            .args(["info", "--output=json"])
            .arg(image)))
        .unwrap()
    };
    assert_eq!(
        info(&qcow2)["format-specific"]["data"]["compression-type"],
        "zstd"
    );
    let allocated = info(&raw)["actual-size"].as_u64().unwrap();
    let qcow2_size = std::fs::metadata(&qcow2).unwrap().len();
    assert!(
        qcow2_size * 10 < allocated * 8,
        "a compressed qcow2 of {qcow2_size} bytes for {allocated} bytes allocated in the raw image"
    );
    std::fs::remove_file(&raw).unwrap();
    run(Command::new("zstd")
        .args(["-q", "-d", "--sparse", "-o"])
        .arg(&raw)
        .arg(&zst));
    assert_eq!(sha256_file(&raw), raw_sha256);
    assert_eq!(manifest["bootloader"], "systemd-boot");
    assert!(manifest["tools"]["systemd-boot"]
        .as_str()
        .is_some_and(|v| v.starts_with("systemd-boot ")));
    let names: Vec<&str> = manifest["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["esp", "root", "foothold-data"]);
    let esp = format!("{}@@{}", raw.display(), manifest["partitions"][0]["offset"]);
    let entry = run(Command::new("mtype").env("MTOOLS_SKIP_CHECK", "1").args([
        "-i",
        &esp,
        "::/loader/entries/foothold.conf",
    ]));
    let root_uuid = manifest["filesystems"]["root"].as_str().unwrap();
    assert!(
        entry.contains(&format!("options root=UUID={root_uuid} ")),
        "{entry}"
    );
    let refused = Command::new(target().join("debug/foothold-build"))
        .args(["run", "--bios"])
        .arg(&raw)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && err.contains("boots under UEFI only"),
        "{err}"
    );
    raw
}
