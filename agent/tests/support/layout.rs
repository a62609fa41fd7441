//! Reproducible test images: an OCI image layout with seeded random files in real tar+gzip layers (podman and
//! containerd unpack them), a config whose diff_ids match, and an index.json naming the image.

use std::io::Write;
use std::path::Path;

use flate2::{write::GzEncoder, Compression};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;
use sha2::{Digest, Sha256, Sha512};

pub struct Image {
    pub manifest_digest: String,
    pub config_digest: String,
    pub layer_digests: Vec<String>,
}

fn sha(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The digest algorithm a layout names its blobs by.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Algo {
    Sha256,
    Sha512,
}

impl Algo {
    pub fn name(self) -> &'static str {
        match self {
            Algo::Sha256 => "sha256",
            Algo::Sha512 => "sha512",
        }
    }

    pub fn digest(self, bytes: &[u8]) -> String {
        match self {
            Algo::Sha256 => sha(bytes),
            Algo::Sha512 => format!("sha512:{}", hex::encode(Sha512::digest(bytes))),
        }
    }
}

fn put(layout: &Path, algo: Algo, bytes: &[u8]) -> String {
    let d = algo.digest(bytes);
    let (name, hex) = d.split_once(':').unwrap();
    let dir = layout.join("blobs").join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(hex), bytes).unwrap();
    d
}

/// One layer: `files` random files of `file_size` bytes each, deterministic for `seed`.
pub fn layer(seed: u64, files: usize, file_size: usize) -> (Vec<u8>, String) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut tar = tar::Builder::new(Vec::new());
    let mut buf = vec![0u8; file_size];
    for i in 0..files {
        rng.fill_bytes(&mut buf);
        let mut h = tar::Header::new_gnu();
        h.set_size(file_size as u64);
        h.set_mode(0o644);
        h.set_mtime(1_700_000_000);
        h.set_cksum();
        tar.append_data(&mut h, format!("layer{seed}/file{i}.bin"), &buf[..])
            .unwrap();
    }
    let raw = tar.into_inner().unwrap();
    let diff_id = sha(&raw);
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    gz.write_all(&raw).unwrap();
    (gz.finish().unwrap(), diff_id)
}

/// Writes an image with one layer per entry of `layer_sizes` (bytes of random content each) into `layout`,
/// named `ref_name` (a bare tag, as skopeo writes `oci:DIR:TAG`, or a full reference).
pub fn write_image(layout: &Path, seed: u64, layer_sizes: &[usize], ref_name: &str) -> Image {
    write_image_with(Algo::Sha256, layout, seed, layer_sizes, ref_name)
}

/// [`write_image`] with every blob named by `algo` (diff_ids stay sha256, as the image-spec's examples have
/// them).
pub fn write_image_with(
    algo: Algo,
    layout: &Path,
    seed: u64,
    layer_sizes: &[usize],
    ref_name: &str,
) -> Image {
    std::fs::create_dir_all(layout.join("blobs").join(algo.name())).unwrap();
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
    let mut layers = Vec::new();
    let mut diff_ids = Vec::new();
    for (i, &size) in layer_sizes.iter().enumerate() {
        let file_size = size.clamp(1, 1 << 20);
        let (gz, diff_id) = layer(seed * 1000 + i as u64, size.div_ceil(file_size), file_size);
        let digest = put(layout, algo, &gz);
        layers.push(json!({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": digest, "size": gz.len()}));
        diff_ids.push(diff_id);
    }
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64", "os": "linux", "created": "2023-11-14T22:13:20Z",
        "config": {"Cmd": ["/bin/true"], "Labels": {"seed": seed.to_string()}},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created": "2023-11-14T22:13:20Z", "created_by": "foothold test layout"}],
    }))
    .unwrap();
    let config_digest = put(layout, algo, &config);
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
        "layers": layers,
    }))
    .unwrap();
    let manifest_digest = put(layout, algo, &manifest);
    let index = json!({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest, "size": manifest.len(),
        "platform": {"architecture": "amd64", "os": "linux"},
        "annotations": {"org.opencontainers.image.ref.name": ref_name},
    }]});
    std::fs::write(
        layout.join("index.json"),
        serde_json::to_vec(&index).unwrap(),
    )
    .unwrap();
    Image {
        manifest_digest,
        config_digest,
        layer_digests: layers
            .iter()
            .map(|l| l["digest"].as_str().unwrap().to_owned())
            .collect(),
    }
}
