//! Crash safety: SIGKILL the agent at random moments during 20 pushes of a multi-layer image. After every
//! kill the store must pass fsck; at the end re-pushing completes and pulls back identical digests.

use crate::support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{assert_fsck_clean, layout, run, tool, wait_for, Agent};
use rand::{Rng, SeedableRng};

const TOKEN: &str = "crash-token";

fn push_cmd(agent: &Agent, src: &std::path::Path, tag: &str) -> Command {
    let mut c = Command::new(tool("skopeo"));
    c.args([
        "--insecure-policy",
        "copy",
        "--dest-tls-verify=false",
        "--dest-creds",
        &agent.creds().unwrap(),
    ])
    .arg(format!("oci:{}:v1", src.display()))
    .arg(format!("docker://{}/test/crash:{tag}", agent.host()))
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    c
}

#[test]
fn sigkill_during_pushes_leaves_a_consistent_store() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    // A distinct image per push, so every push uploads new blobs (an existing blob is skipped by clients).
    let sizes = [3_000_000, 3_000_000, 2_000_000, 1_000_000, 500_000];
    let images: Vec<_> = (0..21u64)
        .map(|i| {
            let dir = tmp.path().join(format!("src{i}"));
            let image = layout::write_image(&dir, 100 + i, &sizes, "v1");
            (dir, image)
        })
        .collect();

    // How long one undisturbed push takes, to spread the kills over its whole duration.
    let full = {
        let agent = Agent::start(&data, Some(TOKEN));
        let started = Instant::now();
        run(&mut push_cmd(&agent, &images[20].0, "baseline"));
        started.elapsed()
    };
    std::fs::remove_dir_all(&data).unwrap();

    let seed: u64 = std::env::var("FOOTHOLD_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    println!("crash test seed {seed}, undisturbed push {full:?}");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut completed = 0;
    for (i, (src, _)) in images.iter().take(20).enumerate() {
        let mut agent = Agent::start(&data, Some(TOKEN));
        let mut push = push_cmd(&agent, src, &format!("t{i}")).spawn().unwrap();
        // The random moment is what is under test, so this is a deliberate delay, not synchronisation.
        let delay = full.mul_f64(rng.random_range(0.0..1.2));
        std::thread::sleep(delay);
        agent.kill(); // SIGKILL
        let status = wait_for(
            "skopeo to exit after the kill",
            Duration::from_secs(60),
            || push.try_wait().unwrap(),
        );
        if status.success() {
            completed += 1;
        }
        drop(agent);
        assert_fsck_clean(&data);
    }
    println!("{completed} of 20 pushes completed before their kill");
    assert!(
        completed < 20,
        "no push was interrupted: the kills never landed mid-push, so nothing was tested"
    );

    // Restart: re-push every tag; every one pulls back the source digests.
    let agent = Agent::start(&data, Some(TOKEN));
    for (i, (src, _)) in images.iter().take(20).enumerate() {
        run(&mut push_cmd(&agent, src, &format!("t{i}")));
    }
    for (i, (_, image)) in images.iter().take(20).enumerate() {
        let reference = format!("{}/test/crash:t{i}", agent.host());
        assert_eq!(
            support::remote_manifest_digest(&["--tls-verify=false"], &reference),
            image.manifest_digest
        );
    }
    let (src, image) = &images[19];
    let dst = tmp.path().join("dst");
    run(Command::new(tool("skopeo"))
        .args(["--insecure-policy", "copy", "--src-tls-verify=false"])
        .arg(format!("docker://{}/test/crash:t19", agent.host()))
        .arg(format!("oci:{}:back", dst.display())));
    for d in &image.layer_digests {
        let a = std::fs::read(src.join("blobs/sha256").join(&d[7..])).unwrap();
        let b = std::fs::read(dst.join("blobs/sha256").join(&d[7..])).unwrap();
        assert!(a == b, "layer {d} differs");
    }
    drop(agent);
    assert_fsck_clean(&data);
}
