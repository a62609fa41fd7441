//! Helpers shared by the end-to-end tests (`image.rs`, `images.rs`).
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

pub fn target() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"))
}

pub fn run(cmd: &mut Command) -> String {
    let shown = format!("{cmd:?}");
    let out = cmd.output().unwrap_or_else(|e| panic!("{shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn sha256_file(p: &Path) -> String {
    let mut h = Sha256::new();
    std::io::copy(&mut std::fs::File::open(p).unwrap(), &mut h).unwrap();
    hex::encode(h.finalize())
}

/// The HTTP status curl gets for `args` (the URL and any options); "000" when nothing answers.
pub fn http_code(args: &[&str]) -> String {
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "30",
        ])
        .args(args)
        .output()
        .expect("running curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Builds the debug foothold-agent and foothold-build the tests run (`target/debug/`).
pub fn build_binaries() {
    run(Command::new(env!("CARGO")).current_dir(workspace()).args([
        "build",
        "-q",
        "-p",
        "foothold-agent",
        "-p",
        "foothold-image-builder",
    ]));
}
