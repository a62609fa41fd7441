//! Fuzzing entry points: every parser that takes bytes from the network or from disk, as a function of
//! arbitrary bytes that must neither panic nor break the invariant it checks. `fuzz/` runs them under
//! cargo-fuzz (`scripts/fuzz.sh`); `tests/fuzz_corpus.rs` replays the saved corpus and every crash ever found
//! through the same functions on stable, so a fixed crash stays fixed.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::digest::Digest;
pub use crate::http::fuzz::{range, rest_bodies, tus_headers};
use crate::store::Store;

/// A fuzzing entry point.
pub type Target = fn(&[u8]);

/// Every target by name, as `fuzz/fuzz_targets/<name>.rs` and the corpus directories name them.
pub const TARGETS: &[(&str, Target)] = &[
    ("manifest", manifest),
    ("names", names),
    ("range", range),
    ("tus_headers", tus_headers),
    ("rest_bodies", rest_bodies),
    ("archive", archive),
    ("layout", layout),
    ("deb", deb),
    ("gotmpl", gotmpl),
];

/// A manifest or index under each media type a client may claim (the first byte picks one, or none): what
/// parses names only digests that print and parse back the same.
pub fn manifest(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let media_type = crate::manifest::SUPPORTED
        .get(pick as usize % (crate::manifest::SUPPORTED.len() + 1))
        .copied();
    if let Ok(parsed) = crate::manifest::parse(media_type, body) {
        for (digest, _, _) in &parsed.references {
            assert_eq!(digest.to_string().parse::<Digest>().as_ref(), Ok(digest));
        }
    }
}

/// A networkData template as a Vino's Secret may hold it, rendered over values like ViNO's: an error or a
/// text, never a panic, a hang or unbounded output.
pub fn gotmpl(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = crate::gotmpl::is_go_template(&text);
    let values = serde_json::json!({
        "BMHName": "site-v-n1-worker-0", "Generated": {"IPAddresses": {"oam": "10.0.0.5"}},
        "Networks": [{"Name": "oam", "DNSServers": ["10.0.0.1"], "Routes": [], "MTU": 1500}],
        "BuilderDomain": {"Interfaces": [{"Name": "enp1s0", "NetworkName": "oam", "Options": {"k": "v"}}]},
    });
    if let Ok(out) = crate::gotmpl::render(&text, &values) {
        assert!(out.len() <= 2 << 20, "{} bytes of output", out.len());
    }
}

/// Repository names, tags, references, digests and registry paths, as they arrive in URLs.
pub fn names(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(d) = text.parse::<Digest>() {
        assert_eq!(d.to_string(), text);
    }
    if crate::names::validate_name(&text).is_ok() {
        assert!(!text.contains("..") && !text.starts_with('/'), "{text:?}");
    }
    let _ = crate::names::validate_tag(&text);
    let _ = crate::names::normalize_reference(&text);
    let _ = crate::http::registry::routes::parse(&text);
    let segment = crate::names::url_segment(&text);
    assert!(segment.is_ascii() && !segment.contains('/'));
}

/// Where the importing targets keep their store: `<tmp>/foothold-fuzz-<pid>`.
pub fn scratch_dir() -> PathBuf {
    std::env::temp_dir().join(format!("foothold-fuzz-{}", std::process::id()))
}

/// A store shared by the targets that import (opening one per input would dominate the run).
fn scratch() -> &'static (PathBuf, Store) {
    static SCRATCH: OnceLock<(PathBuf, Store)> = OnceLock::new();
    SCRATCH.get_or_init(|| {
        let dir = scratch_dir();
        let _ = std::fs::remove_dir_all(&dir);
        let store = Store::open(&dir.join("data")).expect("opening the fuzz store");
        (dir, store)
    })
}

/// A `container_images` upload: the bytes as a docker-archive or oci-archive.
pub fn archive(data: &[u8]) {
    let (dir, store) = scratch();
    let path = dir.join("upload.tar");
    std::fs::write(&path, data).expect("writing the fuzz input");
    let _ = crate::archive::import_archive(store, &path);
}

/// An OCI image layout's `index.json` (the bytes) over a layout that holds one small image.
pub fn layout(data: &[u8]) {
    let (dir, store) = scratch();
    let layout = dir.join("layout");
    if !layout.join("oci-layout").exists() {
        write_small_layout(&layout);
    }
    std::fs::write(layout.join("index.json"), data).expect("writing the fuzz input");
    for children in [
        crate::import::Children::All,
        crate::import::Children::Present,
    ] {
        let _ = crate::import::import_layout(store, &layout, Some("fuzz/layout"), children);
    }
}

/// A layout with a config, a layer and a manifest (sha256), for `layout` to point its index at.
fn write_small_layout(dir: &Path) {
    let blobs = dir.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).expect("creating the fuzz layout");
    let put = |bytes: &[u8]| {
        let d = Digest::of_bytes(bytes);
        std::fs::write(blobs.join(d.hex()), bytes).expect("writing a fuzz blob");
        (d, bytes.len())
    };
    let (config, config_len) =
        put(br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#);
    let (layer, layer_len) = put(b"layer");
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"{}","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{config}","size":{config_len}}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"{layer}","size":{layer_len}}}]}}"#,
        crate::manifest::OCI_MANIFEST
    );
    put(manifest.as_bytes());
    std::fs::write(dir.join("oci-layout"), br#"{"imageLayoutVersion":"1.0.0"}"#)
        .expect("writing the fuzz layout");
}

/// A `binary_images` upload named `*.deb`: the apt repository reads its control paragraph. What parses
/// renders back to a paragraph that parses to the same package.
pub fn deb(data: &[u8]) {
    if let Ok(control) = crate::apt::deb::read_control(data) {
        let again =
            crate::apt::deb::Control::parse(&control.render()).expect("a rendered control parses");
        assert_eq!(again, control);
    }
}
